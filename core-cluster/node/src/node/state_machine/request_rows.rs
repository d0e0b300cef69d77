//! Applied request ids, stored one row per proposal instead of one key per id.
//!
//! Every put carries a request id, and a key per id doubled the keys a put adds to sled, whose every
//! insert copies a leaf and whose tree splits run inside later reads: without request ids the cluster took
//! about a quarter more puts a second. So a proposal's ids become one row, under the proposal's log index
//! (big-endian), holding a JSON map from id to [`AppliedRequest`]; the row's content depends only on the
//! log, so replicas that applied the same prefix hold the same rows however their batches fell.
//!
//! Finding an id's row is an in-memory [`RequestIndex`] from a 128-bit hash of the id to the row's
//! revision, built from the rows when the store opens and after a snapshot is installed, and kept by every
//! applied batch. A new id (nearly every put) is then known absent without touching sled; a retry reads its
//! row and finds the id in it exactly.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;

use sha2::{Digest, Sha256};

use super::super::records::AppliedRequest;

/// The ids of one proposal with what they did.
pub type RequestRow = BTreeMap<String, AppliedRequest>;

/// Row writes of a batch: the key, and the encoded row or `None` for a row removed.
pub type RowWrites = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// The key of the row of the proposal at log index `revision`.
pub fn row_key(revision: u64) -> [u8; 8] {
    revision.to_be_bytes()
}

fn revision_of(key: &[u8]) -> io::Result<u64> {
    key.try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| invalid(format!("a request row's key is {} bytes, not 8", key.len())))
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

/// Decodes a stored row.
pub fn decode_row(bytes: &[u8]) -> io::Result<RequestRow> {
    serde_json::from_slice(bytes).map_err(|e| invalid(format!("a request row: {e}")))
}

fn encode_row(row: &RequestRow) -> io::Result<Vec<u8>> {
    serde_json::to_vec(row).map_err(io::Error::other)
}

/// Which row holds each applied request id, by a hash of the id.
#[derive(Debug, Default)]
pub struct RequestIndex {
    rows: HashMap<u128, u64>,
}

fn id_hash(id: &str) -> u128 {
    let digest = Sha256::digest(id.as_bytes());
    u128::from_le_bytes(digest[..16].try_into().expect("a SHA-256 digest has 32 bytes"))
}

impl RequestIndex {
    /// The index of every row in `tree`.
    pub fn build(tree: &sled::Tree) -> io::Result<Self> {
        let mut index = Self::default();
        for item in tree.iter() {
            let (key, bytes) = item.map_err(|e| io::Error::other(e.to_string()))?;
            let revision = revision_of(&key)?;
            for id in decode_row(&bytes)?.keys() {
                index.rows.insert(id_hash(id), revision);
            }
        }
        Ok(index)
    }

    /// How many ids it knows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }
}

/// One batch's reads and writes of the rows, through the index as it stood before the batch.
pub struct BatchRows<'a> {
    index: &'a RequestIndex,
    tree: &'a sled::Tree,
    /// The proposal being applied: new ids go to its row.
    revision: u64,
    /// Rows this batch read or changed, decoded; `changed` says which to write back.
    rows: BTreeMap<u64, RequestRow>,
    changed: BTreeSet<u64>,
    /// The batch's changes to the index: the id's row, or `None` when it was removed.
    moved: HashMap<u128, Option<u64>>,
}

impl<'a> BatchRows<'a> {
    /// A batch over `tree` with no reads or writes yet.
    pub fn new(index: &'a RequestIndex, tree: &'a sled::Tree) -> Self {
        Self {
            index,
            tree,
            revision: 0,
            rows: BTreeMap::new(),
            changed: BTreeSet::new(),
            moved: HashMap::new(),
        }
    }

    /// Ids put from now on belong to the proposal at log index `revision`.
    pub fn begin_proposal(&mut self, revision: u64) {
        self.revision = revision;
    }

    fn row_of(&self, hash: u128) -> Option<u64> {
        match self.moved.get(&hash) {
            Some(moved) => *moved,
            None => self.index.rows.get(&hash).copied(),
        }
    }

    fn row(&mut self, revision: u64) -> io::Result<&mut RequestRow> {
        if !self.rows.contains_key(&revision) {
            let stored = self.tree.get(row_key(revision)).map_err(|e| io::Error::other(e.to_string()))?;
            let row = stored.map(|bytes| decode_row(&bytes)).transpose()?.unwrap_or_default();
            self.rows.insert(revision, row);
        }
        Ok(self.rows.get_mut(&revision).expect("inserted above"))
    }

    /// The applied request `id`, if it is remembered.
    pub fn get(&mut self, id: &str) -> io::Result<Option<AppliedRequest>> {
        let Some(revision) = self.row_of(id_hash(id)) else { return Ok(None) };
        Ok(self.row(revision)?.get(id).cloned())
    }

    /// Records the applied request `id` in the current proposal's row.
    pub fn put(&mut self, id: &str, request: &AppliedRequest) -> io::Result<()> {
        let revision = self.revision;
        self.row(revision)?.insert(id.to_owned(), request.clone());
        self.changed.insert(revision);
        self.moved.insert(id_hash(id), Some(revision));
        Ok(())
    }

    /// Forgets the applied request `id`.
    pub fn remove(&mut self, id: &str) -> io::Result<()> {
        let hash = id_hash(id);
        let Some(revision) = self.row_of(hash) else { return Ok(()) };
        if self.row(revision)?.remove(id).is_some() {
            self.changed.insert(revision);
            self.moved.insert(hash, None);
        }
        Ok(())
    }

    /// The rows to write (`None`: an emptied row, removed) and the index's changes, for
    /// [`RequestIndex::apply`] once the writes are stored.
    pub fn finish(mut self) -> io::Result<(RowWrites, IndexChanges)> {
        let mut writes = Vec::with_capacity(self.changed.len());
        for revision in &self.changed {
            let row = self.rows.remove(revision).unwrap_or_default();
            let value = if row.is_empty() { None } else { Some(encode_row(&row)?) };
            writes.push((row_key(*revision).to_vec(), value));
        }
        Ok((writes, IndexChanges(self.moved)))
    }
}

/// A batch's changes to the index.
#[derive(Debug, Default)]
pub struct IndexChanges(HashMap<u128, Option<u64>>);

impl RequestIndex {
    /// Takes in a stored batch's changes.
    pub fn apply(&mut self, changes: IndexChanges) {
        for (hash, row) in changes.0 {
            match row {
                Some(revision) => self.rows.insert(hash, revision),
                None => self.rows.remove(&hash),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::types::Outcome;

    fn applied(at: i64) -> AppliedRequest {
        AppliedRequest { issued_ms: at, outcome: Outcome::Swept { entries: 0, requests: 0, feed: 0 } }
    }

    type Finished = (RowWrites, IndexChanges);

    fn store(tree: &sled::Tree, index: &mut RequestIndex, (writes, changes): Finished) {
        for (key, value) in writes {
            match value {
                Some(v) => tree.insert(key, v).map(drop),
                None => tree.remove(key).map(drop),
            }
            .expect("store");
        }
        index.apply(changes);
    }

    #[test]
    fn ids_are_found_in_their_proposal_row_and_forgotten_when_removed() {
        let db = sled::Config::new().temporary(true).open().expect("db");
        let tree = db.open_tree("rows").expect("tree");
        let mut index = RequestIndex::default();

        let mut batch = BatchRows::new(&index, &tree);
        batch.begin_proposal(7);
        batch.put("a", &applied(1)).expect("put");
        batch.put("b", &applied(1)).expect("put");
        batch.begin_proposal(8);
        assert_eq!(batch.get("a").expect("get"), Some(applied(1)), "seen within its batch");
        batch.put("c", &applied(2)).expect("put");
        let finished = batch.finish().expect("finish");
        store(&tree, &mut index, finished);
        assert_eq!(tree.len(), 2, "one row per proposal");
        assert_eq!(index.len(), 3);

        let mut batch = BatchRows::new(&index, &tree);
        batch.begin_proposal(9);
        assert_eq!(batch.get("b").expect("get"), Some(applied(1)));
        assert_eq!(batch.get("nope").expect("get"), None);
        batch.remove("a").expect("remove");
        batch.remove("c").expect("remove");
        assert_eq!(batch.get("a").expect("get"), None, "removed within its batch");
        let finished = batch.finish().expect("finish");
        store(&tree, &mut index, finished);
        assert_eq!(tree.len(), 1, "an emptied row is removed");
        assert_eq!(index.len(), 1);

        let rebuilt = RequestIndex::build(&tree).expect("build");
        assert_eq!(rebuilt.rows, index.rows, "the index built from the rows is the one kept");
    }
}
