//! Applying a batch of log entries: its commands run against an [`Overlay`], where reads see the batch's
//! own writes and writes are collected as the final value (or removal) of each key; then [`commit`] writes
//! them to their trees, one key at a time, without a sled transaction (cache entries: their rows to the
//! content log in one append, their heads to the tree, [`super::entry_heads`]).
//!
//! sled 0.34 rolls its log buffer twice for every transaction (and every `apply_batch`), and its I/O
//! threads write each rolled buffer and wait for it with `sync_file_range`: two small disk writes per
//! applied batch on every node, all of it on the same disk as the write-ahead log's `fdatasync`.
//!
//! A batch is not atomic across a crash, and needs not be: the trees are trusted only after a clean stop
//! ([`super::super::clean_stop`]). After any other stop the state machine starts again from its durable
//! snapshot and openraft applies the log after it again. Nor is a batch atomic for readers meanwhile: a
//! read may see some of a batch's writes and not others, as a read of two keys could between two
//! transactions. Reads that need one applied index wait for it (`read_barrier`). The meta tree's writes go
//! first, so the change feed's floor rises before the rows under it go (the feed checks its floor again
//! after a scan), and the last applied log id goes last of all.

use std::collections::BTreeMap;
use std::io;

use super::super::apply::Tables;
use super::super::records::{AppliedRequest, EntryHead, FeedRow, ModelState, StoredEntry, TenantState};
use super::contents::Contents;
use super::entry_heads::{self, EntryWrites};
use super::entry_index::EntryIndex;
use super::models::Models;
use super::request_rows::{BatchRows, IndexChanges, RequestIndex};
use super::rows::Row;
use super::FEED_FLOOR;

/// The state machine's trees, in the order a write names them by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Table {
    /// Cache entries' heads by key; a batch writes them as [`EntryWrites`].
    Entries = 0,
    /// Tenants by name.
    Tenants = 1,
    /// Models by name; a batch never writes it (they are held in [`Models`] and written back).
    Models = 2,
    /// Applied request ids, a row per proposal ([`super::request_rows`]).
    Requests = 3,
    /// Change-feed rows by revision (big-endian).
    Feed = 4,
    /// The meta tree; written after the others.
    Meta = 5,
}

impl Table {
    const ALL: [Table; 6] =
        [Table::Entries, Table::Tenants, Table::Models, Table::Requests, Table::Feed, Table::Meta];
}

/// The trees a batch reads and writes, indexed by [`Table`].
pub type Trees<'a> = [&'a sled::Tree; 6];

/// The meta key whose write ends a batch (the last applied log id).
pub type LastKey = &'static [u8];

/// Final values (`None`: removed) by key, one map per table (indexed by [`Table`]).
pub type Writes = [BTreeMap<Vec<u8>, Option<Vec<u8>>>; 6];

/// What applying a batch wrote.
pub struct BatchWrites {
    /// The rows, for [`commit`].
    pub rows: Writes,
    /// The cache entries, for [`commit`].
    pub entries: EntryWrites,
    /// The changes to the request index, to make once the rows are stored.
    pub request_index: IndexChanges,
    /// The models, for [`Models::set`].
    pub models: BTreeMap<String, ModelState>,
}

/// Every write of a batch, table by table.
fn each(writes: &Writes) -> impl Iterator<Item = (Table, &Vec<u8>, &Option<Vec<u8>>)> {
    Table::ALL
        .into_iter()
        .flat_map(move |table| writes[table as usize].iter().map(move |(k, v)| (table, k, v)))
}

fn sled_err(e: sled::Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// A row's error, naming its key.
fn keyed(key: &[u8], e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{:?}: {e}", String::from_utf8_lossy(key)))
}

/// The trees as a batch sees them: sled's values under the batch's own writes.
pub struct Overlay<'a> {
    trees: Trees<'a>,
    writes: Writes,
    requests: BatchRows<'a>,
    /// The models as applied before the batch ([`Models`]: they are not read from their tree).
    models: &'a Models,
    /// The batch's own writes of models.
    model_writes: BTreeMap<String, ModelState>,
    /// The entries' heads.
    index: &'a EntryIndex,
    /// Where the entries' rows lie.
    contents: &'a Contents,
    /// The batch's own writes of entries.
    entry_writes: EntryWrites,
}

impl<'a> Overlay<'a> {
    /// An overlay with no writes yet, finding request ids through `requests`, models in `models` and
    /// entries through `entries` (heads and rows).
    pub fn new(
        trees: Trees<'a>,
        requests: &'a RequestIndex,
        models: &'a Models,
        (index, contents): (&'a EntryIndex, &'a Contents),
    ) -> Self {
        let requests = BatchRows::new(requests, trees[Table::Requests as usize]);
        Self {
            trees,
            writes: Writes::default(),
            requests,
            models,
            model_writes: BTreeMap::new(),
            index,
            contents,
            entry_writes: EntryWrites::new(),
        }
    }

    /// The requests applied from now on are the proposal at log index `revision`.
    pub fn begin_proposal(&mut self, revision: u64) {
        self.requests.begin_proposal(revision);
    }

    /// The value under `key`, the batch's own write first.
    pub fn get_raw(&self, table: Table, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        if let Some(value) = self.writes[table as usize].get(key) {
            return Ok(value.clone());
        }
        Ok(self.trees[table as usize].get(key).map_err(sled_err)?.map(|v| v.to_vec()))
    }

    /// Sets (or, with `None`, removes) the value under `key`.
    pub fn set_raw(&mut self, table: Table, key: &[u8], value: Option<Vec<u8>>) {
        self.writes[table as usize].insert(key.to_vec(), value);
    }

    fn get<T: Row>(&self, table: Table, key: &[u8]) -> io::Result<Option<T>> {
        self.get_raw(table, key)?.map(|bytes| T::from_row(&bytes).map_err(|e| keyed(key, e))).transpose()
    }

    fn put<T: Row>(&mut self, table: Table, key: &[u8], value: &T) -> io::Result<()> {
        let bytes = value.to_row().map_err(|e| keyed(key, e))?;
        self.set_raw(table, key, Some(bytes));
        Ok(())
    }

    /// The batch's writes, the changes to the request index to make once they are stored, and the models
    /// it wrote (for [`Models::set`]).
    pub fn into_writes(mut self) -> io::Result<BatchWrites> {
        let (rows, changes) = self.requests.finish()?;
        self.writes[Table::Requests as usize].extend(rows);
        Ok(BatchWrites {
            rows: self.writes,
            entries: self.entry_writes,
            request_index: changes,
            models: self.model_writes,
        })
    }
}

impl Tables for Overlay<'_> {
    type Error = io::Error;

    fn entry(&mut self, key: &str) -> io::Result<Option<StoredEntry>> {
        let keyed = |e| keyed(key.as_bytes(), e);
        match self.entry_writes.get(key.as_bytes()) {
            Some(written) => {
                written.as_ref().map(|(row, _)| StoredEntry::from_row(row).map_err(keyed)).transpose()
            }
            None => entry_heads::entry(self.index, self.contents, key.as_bytes()).map_err(keyed),
        }
    }
    fn entry_head(&mut self, key: &str) -> io::Result<Option<EntryHead>> {
        match self.entry_writes.get(key.as_bytes()) {
            Some(written) => Ok(written.as_ref().map(|(_, head)| head.clone())),
            None => entry_heads::head(self.index, key.as_bytes()).map_err(|e| keyed(key.as_bytes(), e)),
        }
    }
    fn put_entry(&mut self, key: &str, entry: &StoredEntry) -> io::Result<()> {
        let row = entry.to_row().map_err(|e| keyed(key.as_bytes(), e))?;
        self.entry_writes.insert(key.as_bytes().to_vec(), Some((row, EntryHead::of(entry))));
        Ok(())
    }
    fn remove_entry(&mut self, key: &str) -> io::Result<()> {
        self.entry_writes.insert(key.as_bytes().to_vec(), None);
        Ok(())
    }
    fn tenant(&mut self, name: &str) -> io::Result<Option<TenantState>> {
        self.get(Table::Tenants, name.as_bytes())
    }
    fn put_tenant(&mut self, name: &str, tenant: &TenantState) -> io::Result<()> {
        self.put(Table::Tenants, name.as_bytes(), tenant)
    }
    fn model(&mut self, name: &str) -> io::Result<Option<ModelState>> {
        Ok(self.model_writes.get(name).cloned().or_else(|| self.models.get(name)))
    }
    fn model_names(&mut self) -> io::Result<Vec<String>> {
        let mut names: std::collections::BTreeSet<String> = self.models.all().into_keys().collect();
        names.extend(self.model_writes.keys().cloned());
        Ok(names.into_iter().collect())
    }
    fn put_model(&mut self, name: &str, model: &ModelState) -> io::Result<()> {
        self.model_writes.insert(name.to_owned(), model.clone());
        Ok(())
    }
    fn request(&mut self, id: &str) -> io::Result<Option<AppliedRequest>> {
        self.requests.get(id)
    }
    fn put_request(&mut self, id: &str, request: &AppliedRequest) -> io::Result<()> {
        self.requests.put(id, request)
    }
    fn remove_request(&mut self, id: &str) -> io::Result<()> {
        self.requests.remove(id)
    }
    fn feed_row(&mut self, revision: u64) -> io::Result<Option<FeedRow>> {
        self.get(Table::Feed, &revision.to_be_bytes())
    }
    fn put_feed_row(&mut self, revision: u64, row: &FeedRow) -> io::Result<()> {
        self.put(Table::Feed, &revision.to_be_bytes(), row)
    }
    fn remove_feed_row(&mut self, revision: u64) -> io::Result<()> {
        self.set_raw(Table::Feed, &revision.to_be_bytes(), None);
        Ok(())
    }
    fn feed_floor(&mut self) -> io::Result<u64> {
        Ok(self.get(Table::Meta, FEED_FLOOR)?.unwrap_or(0))
    }
    fn set_feed_floor(&mut self, revision: u64) -> io::Result<()> {
        self.put(Table::Meta, FEED_FLOOR, &revision)
    }
}

/// Writes a batch to its trees: the meta tree's rows first (so the change feed's floor rises before the
/// rows under it go), then the entries (rows to the content log, heads to the index), then the other
/// trees', then the meta tree's `last` key.
pub fn commit(
    trees: Trees<'_>,
    (index, contents): (&EntryIndex, &Contents),
    writes: &BatchWrites,
    last: LastKey,
) -> io::Result<()> {
    let rows = &writes.rows;
    let is_last = |table: Table, key: &[u8]| table == Table::Meta && key == last;
    let put = |(table, key, value): (Table, &Vec<u8>, &Option<Vec<u8>>)| {
        let tree = trees[table as usize];
        match value {
            Some(value) => tree.insert(key.as_slice(), value.as_slice()).map(drop),
            None => tree.remove(key.as_slice()).map(drop),
        }
        .map_err(sled_err)
    };
    each(rows).filter(|&(t, k, _)| t == Table::Meta && !is_last(t, k)).try_for_each(put)?;
    entry_heads::write(index, contents, &writes.entries)?;
    each(rows).filter(|&(t, _, _)| t != Table::Meta).try_for_each(put)?;
    each(rows).filter(|&(t, k, _)| is_last(t, k)).try_for_each(put)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAST: &[u8] = b"last_applied";

    fn open() -> (sled::Db, Vec<sled::Tree>) {
        let db = sled::Config::new().temporary(true).open().expect("sled");
        let trees = (0..6).map(|i| db.open_tree(format!("t{i}")).expect("tree")).collect();
        (db, trees)
    }

    fn contents(name: &str) -> (std::path::PathBuf, Contents) {
        let dir = std::env::temp_dir().join(format!("overlay-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let contents = Contents::open(&dir).expect("content log");
        (dir, contents)
    }

    fn trees(t: &[sled::Tree]) -> Trees<'_> {
        [&t[0], &t[1], &t[2], &t[3], &t[4], &t[5]]
    }

    #[test]
    fn reads_see_the_batch_own_writes_over_the_trees() {
        let (_db, t) = open();
        t[0].insert(b"k", b"old".to_vec()).expect("insert");
        t[0].insert(b"x", b"kept".to_vec()).expect("insert");
        let requests = RequestIndex::default();
        let models = Models::default();
        let index = EntryIndex::default();
        let (dir, contents) = contents("reads");
        let mut overlay = Overlay::new(trees(&t), &requests, &models, (&index, &contents));
        overlay.set_raw(Table::Entries, b"k", Some(b"new".to_vec()));
        overlay.set_raw(Table::Entries, b"x", None);
        assert_eq!(overlay.get_raw(Table::Entries, b"k").expect("get"), Some(b"new".to_vec()));
        assert_eq!(overlay.get_raw(Table::Entries, b"x").expect("get"), None);
        assert_eq!(overlay.get_raw(Table::Tenants, b"k").expect("get"), None);
        assert_eq!(
            t[0].get(b"k").expect("get").as_deref(),
            Some(&b"old"[..]),
            "nothing written before commit"
        );
        std::fs::remove_dir_all(dir).expect("cleanup");
    }

    #[test]
    fn a_commit_writes_each_key_final_value_and_removes_what_the_batch_removed() {
        let (_db, t) = open();
        t[0].insert(b"gone", b"x".to_vec()).expect("insert");
        t[4].insert(7u64.to_be_bytes(), b"row".to_vec()).expect("insert");
        let requests = RequestIndex::default();
        let models = Models::default();
        let index = EntryIndex::default();
        let (dir, contents) = contents("commit");
        let mut overlay = Overlay::new(trees(&t), &requests, &models, (&index, &contents));
        overlay.set_raw(Table::Entries, b"a", Some(b"first".to_vec()));
        overlay.set_raw(Table::Entries, b"a", Some(b"second".to_vec()));
        overlay.set_raw(Table::Entries, b"gone", None);
        overlay.set_raw(Table::Feed, &7u64.to_be_bytes(), None);
        overlay.set_raw(Table::Meta, FEED_FLOOR, Some(b"7".to_vec()));
        overlay.set_raw(Table::Meta, LAST, Some(5u64.to_le_bytes().to_vec()));
        let writes = overlay.into_writes().expect("writes");
        commit(trees(&t), (&index, &contents), &writes, LAST).expect("commit");
        assert_eq!(t[0].get(b"a").expect("get").as_deref(), Some(&b"second"[..]));
        assert_eq!(t[0].get(b"gone").expect("get"), None);
        assert_eq!(t[4].get(7u64.to_be_bytes()).expect("get"), None);
        assert_eq!(t[5].get(FEED_FLOOR).expect("get").as_deref(), Some(&b"7"[..]));
        assert_eq!(t[5].get(LAST).expect("get").as_deref(), Some(&5u64.to_le_bytes()[..]));
        std::fs::remove_dir_all(dir).expect("cleanup");
    }

    #[test]
    fn an_entry_is_read_whole_and_by_its_head_before_and_after_commit_and_a_removal_counts_its_row_dead() {
        let (_db, t) = open();
        let requests = RequestIndex::default();
        let models = Models::default();
        let index = EntryIndex::default();
        let (dir, contents) = contents("entries");
        let mut overlay = Overlay::new(trees(&t), &requests, &models, (&index, &contents));
        overlay.put_entry("k", &StoredEntry::sample("k", "acme", "first")).expect("put");
        overlay.put_entry("k", &StoredEntry::sample("k", "acme", "second")).expect("put");
        overlay.put_entry("gone", &StoredEntry::sample("k", "acme", "x")).expect("put");
        overlay.remove_entry("gone").expect("remove");
        assert_eq!(overlay.entry("k").expect("entry"), Some(StoredEntry::sample("k", "acme", "second")));
        assert_eq!(overlay.entry_head("gone").expect("head"), None);
        let writes = overlay.into_writes().expect("writes");
        commit(trees(&t), (&index, &contents), &writes, LAST).expect("commit");
        let mut overlay = Overlay::new(trees(&t), &requests, &models, (&index, &contents));
        assert_eq!(overlay.entry("k").expect("entry"), Some(StoredEntry::sample("k", "acme", "second")));
        assert_eq!(
            overlay.entry_head("k").expect("head"),
            Some(EntryHead::of(&StoredEntry::sample("k", "acme", "second")))
        );
        assert_eq!(overlay.entry("gone").expect("entry"), None);
        let (size, live) = contents.sizes();
        assert_eq!(size, live, "one row written, and live");
        overlay.remove_entry("k").expect("remove");
        let writes = overlay.into_writes().expect("writes");
        commit(trees(&t), (&index, &contents), &writes, LAST).expect("commit");
        assert_eq!(contents.sizes(), (size, 0), "the removed entry's row is dead");
        std::fs::remove_dir_all(dir).expect("cleanup");
    }
}
