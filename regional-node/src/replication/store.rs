//! The replicated state of one regional node: a record per replicated key, kept in memory and in sled,
//! with a digest per key range for anti-entropy and the acknowledgements that let tombstones go.
//!
//! # Key ranges
//! A key's range is the top byte of its SHA-256, so the 256 ranges split any key space evenly. A range's
//! digest is the XOR of its records' digests: updated in O(1) on every change, independent of order.
//!
//! # Tombstones
//! An invalidation stays as a tombstone until every configured peer has acknowledged a batch carrying it
//! (peers merge and flush before they acknowledge). Then it is collected: the record leaves, and its
//! clock is remembered for [`COLLECTED_GRACE_MS`], so that a stale version still in flight from before a
//! peer's acknowledgement (anti-entropy replies travel apart from acknowledgements) is dropped instead of
//! bringing the entry back. Every node writes with a counter of its own that only grows (persisted, and
//! never below the wall clock in milliseconds), so a new write is never mistaken for a stale one.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use sha2::{Digest as _, Sha256};
use shared::completion::CachedCompletion;

use super::record::{Clock, Record, Resolved, Value};
use crate::RegionalError;

/// Key ranges of the anti-entropy digests.
pub const RANGES: usize = 256;
/// How long a collected tombstone's clock still filters stale versions.
pub const COLLECTED_GRACE_MS: i64 = 10 * 60 * 1000;
/// Most peers whose acknowledgements a tombstone tracks.
pub const MAX_PEERS: usize = 64;

/// The key of the node's own write counter in the metadata tree.
const COUNTER_KEY: &[u8] = b"counter";

/// The range a key belongs to.
pub fn range_of(key: &str) -> usize {
    usize::from(Sha256::digest(key.as_bytes())[0])
}

/// A node's replicated records.
pub struct ReplicaStore {
    node_id: String,
    /// Acknowledgements a tombstone needs: one bit per peer.
    full_mask: u64,
    trees: Option<(sled::Tree, sled::Tree)>,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    records: HashMap<String, Stored>,
    ranges: Vec<u64>,
    /// Keys whose tombstone was collected: the clock it had and when to forget it.
    collected: HashMap<String, (Clock, i64)>,
    /// Tombstones waiting for acknowledgements: their digest and the peers that have acknowledged it.
    pending: HashMap<String, (u64, u64)>,
    /// The last counter this node wrote with.
    counter: u64,
}

struct Stored {
    record: Record,
    digest: u64,
    /// [`range_of`] the key, computed once.
    range: usize,
}

/// Counts for metrics and the status route.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReplicaStats {
    /// Records held.
    pub records: usize,
    /// Records that read as an answer.
    pub live: usize,
    /// Records that read as invalidated.
    pub tombstones: usize,
    /// Collected tombstones still filtering stale versions.
    pub collected: usize,
    /// A digest of every range digest: equal on two nodes when their states are.
    pub root: u64,
}

/// What a sweep removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Tombstones every peer had acknowledged.
    pub collected: usize,
    /// Records whose every answer had expired.
    pub expired: usize,
}

impl ReplicaStore {
    /// Opens the store of `node_id` with `peers` peers, persisted in `db` when given (records it holds
    /// are loaded; unreadable ones are dropped).
    pub fn open(node_id: &str, peers: usize, db: Option<&sled::Db>) -> Result<Self, RegionalError> {
        if peers > MAX_PEERS {
            return Err(RegionalError::Config(format!("at most {MAX_PEERS} replication peers, not {peers}")));
        }
        let full_mask = if peers == MAX_PEERS { u64::MAX } else { (1u64 << peers) - 1 };
        let mut inner = Inner { ranges: vec![0; RANGES], ..Inner::default() };
        let trees = match db {
            Some(db) => {
                let open = |name: &str| {
                    db.open_tree(name).map_err(|e| RegionalError::Config(format!("opening {name}: {e}")))
                };
                let (records, meta) = (open("replica")?, open("replica_meta")?);
                load(&records, &meta, &mut inner);
                Some((records, meta))
            }
            None => None,
        };
        Ok(Self { node_id: node_id.to_owned(), full_mask, trees, inner: Mutex::new(inner) })
    }

    /// This node's id: its actor in every clock.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The record under `key`.
    pub fn get(&self, key: &str) -> Option<Record> {
        self.lock().records.get(key).map(|s| s.record.clone())
    }

    /// `f` of the record under `key`, without copying it.
    pub fn inspect<R>(&self, key: &str, f: impl FnOnce(Option<&Record>) -> R) -> R {
        f(self.lock().records.get(key).map(|s| &s.record))
    }

    /// Writes `value` under `key` at this node at `now_ms`, superseding everything the node has seen of
    /// the key.
    pub fn write_local(&self, key: &str, value: Value, now_ms: i64) -> Record {
        let mut inner = self.lock();
        let mut record = inner.records.get(key).map(|s| s.record.clone()).unwrap_or_default();
        let counter = next_counter(inner.counter, record.clock().get(&self.node_id), now_ms);
        inner.counter = counter;
        if let Some((_, meta)) = &self.trees {
            let _ = meta.insert(COUNTER_KEY, &counter.to_be_bytes());
        }
        record.write_at(&self.node_id, counter, value);
        self.put(&mut inner, key, record.clone());
        record
    }

    /// Merges a peer's record in; returns the merged record when anything changed.
    pub fn merge(&self, key: &str, incoming: &Record) -> Option<Record> {
        let mut inner = self.lock();
        let mut incoming = incoming.clone();
        if let Some((floor, _)) = inner.collected.get(key) {
            incoming.forget_seen_by(floor);
        }
        if incoming.is_empty() {
            return None;
        }
        let mut record = inner.records.get(key).map(|s| s.record.clone()).unwrap_or_default();
        let before = record.clone();
        record.merge(&incoming);
        if record == before {
            return None;
        }
        self.put(&mut inner, key, record.clone());
        Some(record)
    }

    /// Every record that reads as an answer, for loading the exact tier at start-up.
    pub fn live_answers(&self) -> Vec<CachedCompletion> {
        let inner = self.lock();
        inner
            .records
            .values()
            .filter_map(|s| match s.record.resolve() {
                Some(Resolved::Live(entry)) => Some(entry.clone()),
                _ => None,
            })
            .collect()
    }

    /// The digest of every key range, in range order.
    pub fn range_digests(&self) -> Vec<u64> {
        self.lock().ranges.clone()
    }

    /// `(key, record digest)` of every record in the given ranges.
    pub fn summaries(&self, ranges: &[u32]) -> Vec<(String, u64)> {
        let wanted: std::collections::HashSet<usize> = ranges.iter().map(|&r| r as usize).collect();
        let inner = self.lock();
        let mut out: Vec<(String, u64)> = inner
            .records
            .iter()
            .filter(|(_, stored)| wanted.contains(&stored.range))
            .map(|(key, stored)| (key.clone(), stored.digest))
            .collect();
        out.sort_unstable();
        out
    }

    /// The records under `keys` that are held.
    pub fn records(&self, keys: &[String]) -> Vec<(String, Record)> {
        let inner = self.lock();
        keys.iter().filter_map(|k| inner.records.get(k).map(|s| (k.clone(), s.record.clone()))).collect()
    }

    /// The record's digest, if held.
    pub fn digest_of(&self, key: &str) -> Option<u64> {
        self.lock().records.get(key).map(|s| s.digest)
    }

    /// Peer `peer` acknowledged a batch that carried `key`'s record with `digest`.
    pub fn acknowledged(&self, key: &str, digest: u64, peer: usize) {
        let mut inner = self.lock();
        if let Some((pending_digest, mask)) = inner.pending.get_mut(key) {
            if *pending_digest == digest && peer < MAX_PEERS {
                *mask |= 1 << peer;
            }
        }
    }

    /// Peer `peer` was seen holding what its digests say: every pending tombstone in a range whose digest
    /// equals the peer's, or whose key the peer summarized with the same digest, counts as acknowledged
    /// (the peer flushes before it answers with digests).
    pub fn acknowledged_by_digests(
        &self,
        peer: usize,
        their_ranges: &[u64],
        their_keys: &HashMap<String, u64>,
    ) {
        if peer >= MAX_PEERS {
            return;
        }
        let mut inner = self.lock();
        let Inner { ranges, pending, .. } = &mut *inner;
        for (key, (digest, mask)) in pending.iter_mut() {
            let range = range_of(key);
            let same_range = their_ranges.len() == ranges.len() && their_ranges[range] == ranges[range];
            if same_range || their_keys.get(key) == Some(digest) {
                *mask |= 1 << peer;
            }
        }
    }

    /// Collects the tombstones every peer has acknowledged, drops records whose answers all expired and
    /// forgets collected clocks past their grace.
    pub fn sweep(&self, now_ms: i64) -> Sweep {
        let mut inner = self.lock();
        let mut sweep = Sweep::default();
        let done: Vec<String> = inner
            .pending
            .iter()
            .filter(|(_, (_, mask))| *mask & self.full_mask == self.full_mask)
            .map(|(key, _)| key.clone())
            .collect();
        for key in done {
            if let Some(stored) = self.remove(&mut inner, &key) {
                inner.collected.insert(key, (stored.record.clock(), now_ms + COLLECTED_GRACE_MS));
                sweep.collected += 1;
            }
        }
        let expired: Vec<String> = inner
            .records
            .iter()
            .filter(|(_, s)| s.record.is_expired(now_ms))
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            self.remove(&mut inner, &key);
            sweep.expired += 1;
        }
        inner.collected.retain(|_, (_, until)| *until > now_ms);
        sweep
    }

    /// Waits until every change so far is on disk.
    pub async fn flush(&self) {
        if let Some((records, meta)) = &self.trees {
            let _ = records.flush_async().await;
            let _ = meta.flush_async().await;
        }
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts of what is held (scans every record).
    pub fn stats(&self) -> ReplicaStats {
        let inner = self.lock();
        let tombstones = inner.records.values().filter(|s| s.record.is_tombstone()).count();
        let mut root = Sha256::new();
        for digest in &inner.ranges {
            root.update(digest.to_le_bytes());
        }
        let root = root.finalize();
        let mut head = [0u8; 8];
        head.copy_from_slice(&root[..8]);
        ReplicaStats {
            records: inner.records.len(),
            live: inner.records.len() - tombstones,
            tombstones,
            collected: inner.collected.len(),
            root: u64::from_le_bytes(head),
        }
    }

    fn put(&self, inner: &mut Inner, key: &str, record: Record) {
        let digest = record.digest(key);
        let range = inner.records.get(key).map_or_else(|| range_of(key), |old| old.range);
        if let Some(old) = inner.records.get(key) {
            inner.ranges[range] ^= old.digest;
        }
        inner.ranges[range] ^= digest;
        if record.is_tombstone() {
            inner.pending.insert(key.to_owned(), (digest, 0));
        } else {
            inner.pending.remove(key);
        }
        if let Some((records, _)) = &self.trees {
            if let Ok(bytes) = serde_json::to_vec(&record) {
                let _ = records.insert(key.as_bytes(), bytes);
            }
        }
        inner.records.insert(key.to_owned(), Stored { record, digest, range });
    }

    fn remove(&self, inner: &mut Inner, key: &str) -> Option<Stored> {
        let stored = inner.records.remove(key)?;
        inner.ranges[stored.range] ^= stored.digest;
        inner.pending.remove(key);
        if let Some((records, _)) = &self.trees {
            let _ = records.remove(key.as_bytes());
        }
        Some(stored)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for ReplicaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaStore").field("node_id", &self.node_id).finish_non_exhaustive()
    }
}

/// The counter of a node's next write: above every counter it has written with (the persisted one and the
/// record's), and at least the wall clock in milliseconds, so that a node that lost its disk still writes
/// above the dots it used before (a hybrid logical clock).
fn next_counter(last: u64, in_record: u64, now_ms: i64) -> u64 {
    (last.max(in_record) + 1).max(u64::try_from(now_ms).unwrap_or(0))
}

/// Reads the persisted records and counter into `inner`, deleting what does not parse.
fn load(records: &sled::Tree, meta: &sled::Tree, inner: &mut Inner) {
    if let Ok(Some(bytes)) = meta.get(COUNTER_KEY) {
        if let Ok(counter) = <[u8; 8]>::try_from(&bytes[..]) {
            inner.counter = u64::from_be_bytes(counter);
        }
    }
    let mut doomed = Vec::new();
    for item in records.iter() {
        let Ok((key, value)) = item else { continue };
        let parsed = std::str::from_utf8(&key)
            .ok()
            .zip(serde_json::from_slice::<Record>(&value).ok())
            .filter(|(_, record)| !record.is_empty());
        match parsed {
            Some((key, record)) => {
                // Re-reduce: a record written by an older build is brought to canonical form.
                let record = Record::from_versions(record.versions().to_vec());
                let digest = record.digest(key);
                let range = range_of(key);
                inner.ranges[range] ^= digest;
                if record.is_tombstone() {
                    inner.pending.insert(key.to_owned(), (digest, 0));
                }
                inner.records.insert(key.to_owned(), Stored { record, digest, range });
            }
            None => doomed.push(key),
        }
    }
    for key in doomed {
        let _ = records.remove(key);
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
