//! Every cache entry's head row ([`super::entry_heads`]) by key, held in memory; sled's entries tree gets
//! the changed ones at a clean stop, and gives them back at the next start.
//!
//! With heads in sled, each put read its key's head and wrote it again: two tree walks, and sled's log
//! and page churn for each, were most of applying a put. The trees are trusted only after a clean stop
//! (`clean_stop.rs`), and after any other stop the state is rebuilt from the snapshot and the log, so the
//! heads need to reach sled only when the node stops cleanly, as the models do (`models.rs`). A head is
//! about 80 bytes and its key, with a flag for whether it changed since it was last in sled (removed keys
//! are kept apart until then); the row itself stays in the content log.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Key and head row.
pub type Head = (Box<[u8]>, Box<[u8]>);

/// How many heads an iteration copies out under one read lock.
const CHUNK: usize = 1024;

/// One key's head row, and whether it changed since the heads were loaded or written back.
#[derive(Debug)]
struct Indexed {
    row: Box<[u8]>,
    changed: bool,
}

#[derive(Debug, Default)]
struct Heads {
    by_key: BTreeMap<Box<[u8]>, Indexed>,
    /// Keys removed since the heads were loaded or written back (and not stored again).
    removed: BTreeSet<Box<[u8]>>,
    /// The whole set was replaced (a snapshot's install): sled's tree is to be rewritten whole.
    replaced: bool,
}

/// The heads of every entry, as applied.
#[derive(Debug, Default)]
pub struct EntryIndex(RwLock<Heads>);

fn sled_err(e: sled::Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl EntryIndex {
    fn read(&self) -> RwLockReadGuard<'_, Heads> {
        self.0.read().expect("the entry index's lock is never poisoned")
    }

    fn write(&self) -> RwLockWriteGuard<'_, Heads> {
        self.0.write().expect("the entry index's lock is never poisoned")
    }

    /// The heads stored in `tree`.
    pub fn load(tree: &sled::Tree) -> io::Result<Self> {
        let mut by_key = BTreeMap::new();
        for item in tree.iter() {
            let (key, row) = item.map_err(sled_err)?;
            by_key.insert(Box::from(&key[..]), Indexed { row: Box::from(&row[..]), changed: false });
        }
        Ok(Self(RwLock::new(Heads { by_key, ..Default::default() })))
    }

    /// The head row under `key`.
    pub fn get(&self, key: &[u8]) -> Option<Box<[u8]>> {
        self.read().by_key.get(key).map(|indexed| indexed.row.clone())
    }

    /// Sets (or, with `None`, removes) the head row of each key, in order; returns each key's previous one.
    pub fn update(&self, changes: Vec<(&[u8], Option<Vec<u8>>)>) -> Vec<Option<Box<[u8]>>> {
        let mut heads = self.write();
        let mut previous = Vec::with_capacity(changes.len());
        for (key, row) in changes {
            let indexed = match row {
                Some(row) => {
                    if !heads.removed.is_empty() {
                        heads.removed.remove(key);
                    }
                    let row = row.into_boxed_slice();
                    match heads.by_key.get_mut(key) {
                        Some(indexed) => Some(std::mem::replace(indexed, Indexed { row, changed: true })),
                        None => heads.by_key.insert(Box::from(key), Indexed { row, changed: true }),
                    }
                }
                None => {
                    let indexed = heads.by_key.remove(key);
                    if indexed.is_some() && !heads.replaced {
                        heads.removed.insert(Box::from(key));
                    }
                    indexed
                }
            };
            previous.push(indexed.map(|indexed| indexed.row));
        }
        previous
    }

    /// Replaces every head with `all`.
    pub fn replace(&self, all: Vec<(Vec<u8>, Vec<u8>)>) {
        let by_key = all
            .into_iter()
            .map(|(k, v)| (k.into_boxed_slice(), Indexed { row: v.into_boxed_slice(), changed: false }))
            .collect();
        *self.write() = Heads { by_key, removed: BTreeSet::new(), replaced: true };
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.read().by_key.len()
    }

    /// Every key and head row in key order, copied out [`CHUNK`] at a time: a change applied meanwhile
    /// shows or not, as in a scan of a sled tree.
    pub fn iter(&self) -> impl Iterator<Item = Head> + '_ {
        self.iter_after(None)
    }

    /// [`iter`](Self::iter) from the first key after `after` (from the first key when `None`).
    pub fn iter_after(&self, after: Option<Box<[u8]>>) -> impl Iterator<Item = Head> + '_ {
        let mut after = after;
        let mut chunk = Vec::new().into_iter();
        let mut done = false;
        std::iter::from_fn(move || loop {
            if let Some(head) = chunk.next() {
                return Some(head);
            }
            if done {
                return None;
            }
            let heads = self.read();
            let range = match &after {
                Some(key) => heads
                    .by_key
                    .range::<[u8], _>((std::ops::Bound::Excluded(&key[..]), std::ops::Bound::Unbounded)),
                None => heads.by_key.range::<[u8], _>(..),
            };
            let next: Vec<Head> = range.take(CHUNK).map(|(k, v)| (k.clone(), v.row.clone())).collect();
            drop(heads);
            done = next.len() < CHUNK;
            after = next.last().map(|(k, _)| k.clone());
            chunk = next.into_iter();
        })
    }

    /// Writes the heads changed since they were loaded (or last written back) to `tree`, as they are now.
    pub fn write_back(&self, tree: &sled::Tree) -> io::Result<()> {
        let mut guard = self.write();
        let heads = &mut *guard;
        if heads.replaced {
            tree.clear().map_err(sled_err)?;
        }
        for key in &heads.removed {
            tree.remove(&key[..]).map_err(sled_err)?;
        }
        for (key, indexed) in heads.by_key.iter_mut().filter(|(_, i)| i.changed || heads.replaced) {
            tree.insert(&key[..], &indexed.row[..]).map_err(sled_err)?;
            indexed.changed = false;
        }
        heads.removed.clear();
        heads.replaced = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_and_a_replacement_reach_the_tree_only_when_written_back() {
        let db = sled::Config::new().temporary(true).open().expect("sled");
        let tree = db.open_tree("entries").expect("tree");
        tree.insert("kept", "k").expect("insert");
        tree.insert("gone", "g").expect("insert");
        let index = EntryIndex::load(&tree).expect("load");
        let previous = index.update(vec![(b"gone", None), (b"new", Some(b"n".to_vec()))]);
        assert_eq!(previous, vec![Some(Box::from(&b"g"[..])), None]);
        assert_eq!(tree.get("gone").expect("get").as_deref(), Some(&b"g"[..]), "not yet written back");
        index.write_back(&tree).expect("write back");
        let stored: Vec<_> = tree.iter().map(|i| i.expect("row").0.to_vec()).collect();
        assert_eq!(stored, vec![b"kept".to_vec(), b"new".to_vec()]);
        index.update(vec![(b"kept", None)]);
        index.update(vec![(b"kept", Some(b"again".to_vec())), (b"new", None)]);
        index.write_back(&tree).expect("write back");
        assert_eq!(
            tree.get("kept").expect("get").as_deref(),
            Some(&b"again"[..]),
            "removed, then stored again"
        );
        assert_eq!(tree.get("new").expect("get"), None);
        index.replace(vec![(b"only".to_vec(), b"o".to_vec())]);
        index.write_back(&tree).expect("write back");
        assert_eq!(
            EntryIndex::load(&tree).expect("load").iter().collect::<Vec<_>>(),
            index.iter().collect::<Vec<_>>()
        );
        assert_eq!(tree.len(), 1);
    }

    #[test]
    fn an_iteration_walks_every_head_in_key_order_across_chunks() {
        let index = EntryIndex::default();
        let rows: Vec<_> =
            (0..CHUNK * 2 + 5).map(|i| (format!("{i:06}").into_bytes(), Some(vec![1]))).collect();
        index.update(rows.iter().map(|(k, v)| (k.as_slice(), v.clone())).collect());
        let keys: Vec<_> = index.iter().map(|(k, _)| k.to_vec()).collect();
        assert_eq!(keys, rows.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>());
        assert_eq!(index.len(), CHUNK * 2 + 5);
    }
}
