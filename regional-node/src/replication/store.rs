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
//!
//! # Hot-set sequence
//! Every change (a record written, merged or removed) takes the next number of an in-memory sequence,
//! under an epoch drawn at start-up, so the edge can ask for the changes since the version it holds
//! ([`ReplicaStore::hot_changes`], served as `GET /v1/hotset`). Removed keys are remembered for the last
//! [`REMOVALS_KEPT`] removals; a version older than that gets a snapshot.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use sha2::{Digest as _, Sha256};
use shared::completion::CachedCompletion;
use shared::hot_set::HotSetVersion;

use super::live_answer;
use super::record::{Clock, Record, Resolved, Value};
use crate::RegionalError;

/// Key ranges of the anti-entropy digests.
pub const RANGES: usize = 256;
/// How long a collected tombstone's clock still filters stale versions.
pub const COLLECTED_GRACE_MS: i64 = 10 * 60 * 1000;
/// Most peers whose acknowledgements a tombstone tracks.
pub const MAX_PEERS: usize = 64;

/// Removals the hot-set sequence remembers for deltas.
pub const REMOVALS_KEPT: usize = 64 * 1024;

/// The key of the node's own write counter in the metadata tree.
const COUNTER_KEY: &[u8] = b"counter";

/// The range a key belongs to.
pub fn range_of(key: &str) -> usize {
    usize::from(Sha256::digest(key.as_bytes())[0])
}

/// A node's replicated records.
pub struct ReplicaStore {
    node_id: String,
    /// The epoch of this process's hot-set sequence.
    epoch: u64,
    /// Acknowledgements a tombstone needs: one bit per peer.
    full_mask: u64,
    trees: Option<(sled::Tree, sled::Tree)>,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    records: HashMap<String, Stored>,
    ranges: Vec<u64>,
    /// The keys held in each range, so that anti-entropy summarizes the ranges it asks for without a
    /// walk of every record under the lock the request path takes.
    range_keys: Vec<BTreeSet<String>>,
    /// Keys whose tombstone was collected: the clock it had and when to forget it.
    collected: HashMap<String, (Clock, i64)>,
    /// Tombstones waiting for acknowledgements: their digest and the peers that have acknowledged it.
    pending: HashMap<String, (u64, u64)>,
    /// The last counter this node wrote with.
    counter: u64,
    /// The hot-set sequence: the number of the last change.
    sequence: u64,
    /// Every held key by the sequence number of its last change.
    by_sequence: BTreeMap<u64, String>,
    /// Keys removed (collected or expired), by the sequence number of their removal.
    removals: BTreeMap<u64, String>,
    /// Changes up to this number are no longer all known (removals were forgotten).
    forgotten_through: u64,
    /// Bytes of live answers each tenant has here.
    tenant_bytes: HashMap<String, usize>,
}

/// The tenant and size of the answer a record reads as, if it reads as one.
fn live_size(record: &Record) -> Option<(&str, usize)> {
    match record.resolve() {
        Some(Resolved::Live(entry)) => Some((entry.tenant.as_str(), entry.size_bytes())),
        _ => None,
    }
}

impl Inner {
    fn count(&mut self, record: &Record, sign: i8) {
        let Some((tenant, size)) = live_size(record) else { return };
        let bytes = self.tenant_bytes.entry(tenant.to_owned()).or_default();
        *bytes = if sign > 0 { *bytes + size } else { bytes.saturating_sub(size) };
        if *bytes == 0 {
            self.tenant_bytes.remove(tenant);
        }
    }
}

struct Stored {
    record: Record,
    digest: u64,
    /// [`range_of`] the key, computed once.
    range: usize,
    /// The hot-set sequence number of the record's last change.
    sequence: u64,
}

/// What changed in the hot set (the live records) since a version.
#[derive(Clone, Debug, PartialEq)]
pub struct HotChanges {
    /// The version these changes bring the set to.
    pub version: HotSetVersion,
    /// Whether `live` is the whole set.
    pub snapshot: bool,
    /// Live answers new or changed since the version (the whole set in a snapshot), oldest change first.
    pub live: Vec<CachedCompletion>,
    /// Keys that left the set since the version (empty in a snapshot).
    pub removed: Vec<String>,
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
        let mut inner =
            Inner { ranges: vec![0; RANGES], range_keys: vec![BTreeSet::new(); RANGES], ..Inner::default() };
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
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_micros() as u64);
        Ok(Self { node_id: node_id.to_owned(), epoch, full_mask, trees, inner: Mutex::new(inner) })
    }

    /// This node's id: its actor in every clock.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Bytes of live answers `tenant` has here.
    pub fn tenant_bytes(&self, tenant: &str) -> usize {
        self.lock().tenant_bytes.get(tenant).copied().unwrap_or(0)
    }

    /// Whether a record is held under `key`.
    pub fn contains(&self, key: &str) -> bool {
        self.lock().records.contains_key(key)
    }

    /// The record under `key`.
    pub fn get(&self, key: &str) -> Option<Record> {
        self.lock().records.get(key).map(|s| s.record.clone())
    }

    /// Writes `value` under `key` at this node at `now_ms`, superseding everything the node has seen of
    /// the key.
    pub fn write_local(&self, key: &str, value: Value, now_ms: i64) -> Record {
        let mut inner = self.lock();
        self.write_locked(&mut inner, key, value, now_ms)
    }

    /// Decides on the record under `key` and writes the value `decide` returns (if any) at this node,
    /// under one lock: no merge can land between the decision and the write (a tombstone merged in
    /// between would otherwise be superseded by a write that never saw it). Returns `decide`'s verdict.
    pub fn write_local_if<R>(
        &self,
        key: &str,
        now_ms: i64,
        decide: impl FnOnce(Option<&Record>) -> (R, Option<Value>),
    ) -> R {
        let mut inner = self.lock();
        let (verdict, value) = decide(inner.records.get(key).map(|s| &s.record));
        if let Some(value) = value {
            self.write_locked(&mut inner, key, value, now_ms);
        }
        verdict
    }

    fn write_locked(&self, inner: &mut Inner, key: &str, value: Value, now_ms: i64) -> Record {
        let mut record = inner.records.get(key).map(|s| s.record.clone()).unwrap_or_default();
        let counter = next_counter(inner.counter, record.clock().get(&self.node_id), now_ms);
        inner.counter = counter;
        if let Some((_, meta)) = &self.trees {
            let _ = meta.insert(COUNTER_KEY, &counter.to_be_bytes());
        }
        record.write_at(&self.node_id, counter, value);
        self.put(inner, key, record.clone());
        record
    }

    /// Merges a peer's record in; returns the merged record when anything changed. A merge whose result
    /// reads as an answer `admits` refuses is dropped whole: versions a collected floor saw are forgotten
    /// first, so an incoming record that read as invalidated (an old answer beside a collected tombstone)
    /// can read as that old answer once merged.
    pub fn merge(
        &self,
        key: &str,
        incoming: &Record,
        admits: &dyn Fn(&CachedCompletion) -> bool,
    ) -> Option<Record> {
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
        if record == before || live_answer(&record).is_some_and(|answer| !admits(answer)) {
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

    /// The hot set's changes since `since` (a snapshot when `since` is `None`, from another epoch, or
    /// older than the removals remembered), at most `per_tenant` live answers of each tenant in a
    /// snapshot (the most recently changed). Expired answers count as removed.
    pub fn hot_changes(&self, since: Option<HotSetVersion>, per_tenant: usize, now_ms: i64) -> HotChanges {
        let inner = self.lock();
        let version = HotSetVersion { epoch: self.epoch, sequence: inner.sequence };
        let delta_from = since.filter(|s| {
            s.epoch == self.epoch && s.sequence >= inner.forgotten_through && s.sequence <= inner.sequence
        });
        let live_of = |key: &str| match inner.records.get(key).and_then(|s| s.record.resolve()) {
            Some(Resolved::Live(entry)) if !entry.is_expired(now_ms) => Some(entry),
            _ => None,
        };
        let Some(from) = delta_from else {
            let mut per = HashMap::<&str, usize>::new();
            let mut live: Vec<CachedCompletion> = inner
                .by_sequence
                .values()
                .rev()
                .filter_map(|key| live_of(key))
                .filter(|entry| {
                    let count = per.entry(entry.tenant.as_str()).or_default();
                    *count += 1;
                    *count <= per_tenant
                })
                .cloned()
                .collect();
            live.reverse();
            return HotChanges { version, snapshot: true, live, removed: Vec::new() };
        };
        let mut live = Vec::new();
        let mut removed = HashSet::new();
        for key in inner.by_sequence.range(from.sequence + 1..).map(|(_, k)| k) {
            match live_of(key) {
                Some(entry) => live.push(entry.clone()),
                None => {
                    removed.insert(key.clone());
                }
            }
        }
        for key in inner.removals.range(from.sequence + 1..).map(|(_, k)| k) {
            if live_of(key).is_none() {
                removed.insert(key.clone());
            }
        }
        let mut removed: Vec<String> = removed.into_iter().collect();
        removed.sort_unstable();
        HotChanges { version, snapshot: false, live, removed }
    }

    /// The digest of every key range, in range order.
    pub fn range_digests(&self) -> Vec<u64> {
        self.lock().ranges.clone()
    }

    /// `(key, record digest)` of every record in the given ranges.
    pub fn summaries(&self, ranges: &[u32]) -> Vec<(String, u64)> {
        let wanted: BTreeSet<usize> = ranges.iter().map(|&r| r as usize).filter(|r| *r < RANGES).collect();
        let inner = self.lock();
        let mut out: Vec<(String, u64)> = wanted
            .into_iter()
            .flat_map(|range| &inner.range_keys[range])
            .filter_map(|key| inner.records.get(key).map(|stored| (key.clone(), stored.digest)))
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
        inner.sequence += 1;
        let sequence = inner.sequence;
        inner.count(&record, 1);
        if let Some(old) = inner.records.insert(key.to_owned(), Stored { record, digest, range, sequence }) {
            inner.by_sequence.remove(&old.sequence);
            inner.count(&old.record, -1);
        }
        inner.by_sequence.insert(sequence, key.to_owned());
        if !inner.range_keys[range].contains(key) {
            inner.range_keys[range].insert(key.to_owned());
        }
    }

    fn remove(&self, inner: &mut Inner, key: &str) -> Option<Stored> {
        let stored = inner.records.remove(key)?;
        inner.range_keys[stored.range].remove(key);
        inner.count(&stored.record, -1);
        inner.ranges[stored.range] ^= stored.digest;
        inner.pending.remove(key);
        inner.by_sequence.remove(&stored.sequence);
        inner.sequence += 1;
        let sequence = inner.sequence;
        inner.removals.insert(sequence, key.to_owned());
        if inner.removals.len() > REMOVALS_KEPT {
            if let Some((oldest, _)) = inner.removals.pop_first() {
                inner.forgotten_through = oldest;
            }
        }
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
    last.max(in_record).saturating_add(1).max(u64::try_from(now_ms).unwrap_or(0))
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
                inner.sequence += 1;
                let sequence = inner.sequence;
                inner.by_sequence.insert(sequence, key.to_owned());
                inner.count(&record, 1);
                inner.range_keys[range].insert(key.to_owned());
                inner.records.insert(key.to_owned(), Stored { record, digest, range, sequence });
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
