//! The regional exact-match cache: entries by cache key, in memory, bounded by bytes, with W-TinyLFU
//! admission and eviction.
//!
//! # Why W-TinyLFU
//! LLM prompt traffic is skewed and repetitive: a small set of prompts (templated questions, retries, the
//! same system prompt and question from many users) makes most of the requests, behind a long tail of
//! prompts seen once. Plain LRU stores every one of those one-hit wonders and lets a burst of them (a
//! batch job, a crawler, a user pasting new documents) push the whole hot set out. W-TinyLFU (Einziger,
//! Friedman and Manes, as in Caffeine) admits by frequency instead: a new entry only displaces an old one
//! if a count-min sketch of recent lookups has seen it more often, so one-hit wonders cannot evict the hot
//! set, and periodic halving of the sketch lets yesterday's hot prompts go. The small LRU window in front
//! gives new entries a moment to collect the hits that earn them admission (bursty, recency-heavy traffic
//! still hits), and the segmented LRU behind it keeps entries hit more than once in its protected part.
//! Chosen over S3-FIFO, which also resists scans (its ghost queue remembers recently evicted keys), because
//! the sketch remembers how often any key was asked for over the last ten cache-fulls of lookups, misses
//! included, in a few bytes per entry: exactly the signal a repeated prompt gives. S3-FIFO's advantage, no
//! list moves on a hit, matters little here: a lookup's O(1) update under a shard lock is nothing next to
//! the network and generation work of a request.
//!
//! # Bytes, not entries
//! Answers range from a few bytes to many kilobytes, so every bound is in [`CachedCompletion::size_bytes`]:
//! the window, probation and protected shares, and the duel itself (a large candidate duels victims one at
//! a time, least recently used first, until it fits or loses). An entry larger than a shard is refused.
//!
//! # Expiry
//! An entry lives `ttl_s` from its creation (set from its content class upstream, see
//! [`CachedCompletion::is_expired`]); one found expired by a lookup is removed, one never asked for again
//! leaves through the LRU order like any cold entry.
//!
//! # Concurrency
//! The cache is split into up to 16 shards by a seeded hash of the key, each a [`std::sync::Mutex`] around
//! its own W-TinyLFU (`shard.rs`) with an equal share of the bytes and its own sketch, so concurrent requests
//! for different keys rarely wait on each other. Small caches (under 1 MiB a shard) use fewer shards, down
//! to one, so that shares stay large enough to hold real answers.
//!
//! # Frequency
//! The sketch counts lookups ([`ExactCache::get`], hits and misses), not stores: the request path looks a key
//! up before it stores it, so each request counts once.
//!
//! # Layout
//! - `sketch.rs`: the count-min frequency sketch with aging.
//! - `lru_list.rs`: index-linked LRU lists in one arena.
//! - `shard.rs`: the W-TinyLFU policy over one byte budget.

mod lru_list;
mod shard;
pub(crate) mod sketch;
#[cfg(test)]
mod test_support;

use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use shared::completion::CachedCompletion;

use shard::Shard;

/// Most shards a cache is split into.
const MAX_SHARDS: usize = 16;
/// Fewest bytes a shard gets while there is more than one.
const MIN_SHARD_BYTES: usize = 1 << 20;

/// A byte-bounded W-TinyLFU map from cache key to entry, sharded by key; see the module docs.
pub struct ExactCache {
    /// The bound given at creation; the shards share it equally.
    capacity_bytes: usize,
    /// Mixed into every key hash, so that nobody outside can aim keys at one shard or sketch counter.
    seed: u64,
    /// A power of two of them, picked by the key hash.
    shards: Box<[Mutex<Shard>]>,
    /// How long past its TTL an entry is kept for [`ExactCache::get_stale`].
    stale_grace_ms: i64,
}

/// Counts describing the cache, for metrics; the counters only grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Entries held.
    pub entries: usize,
    /// Bytes held (the sum of [`CachedCompletion::size_bytes`]).
    pub bytes: usize,
    /// Entries that left the admission window for the main space.
    pub admitted: u64,
    /// Entries dropped on leaving the window: the main space's victim was seen at least as often.
    pub rejected: u64,
    /// Entries of the main space evicted to make room.
    pub evicted: u64,
    /// Entries removed because they were read after their TTL.
    pub expired: u64,
    /// Entries refused because they are larger than a shard.
    pub oversized: u64,
    /// Entries refused because their tenant was over its quota of a full shard.
    pub over_quota: u64,
}

impl CacheStats {
    fn plus(self, other: Self) -> Self {
        Self {
            entries: self.entries + other.entries,
            bytes: self.bytes + other.bytes,
            admitted: self.admitted + other.admitted,
            rejected: self.rejected + other.rejected,
            evicted: self.evicted + other.evicted,
            expired: self.expired + other.expired,
            oversized: self.oversized + other.oversized,
            over_quota: self.over_quota + other.over_quota,
        }
    }
}

impl ExactCache {
    /// An empty cache that holds at most `capacity_bytes`.
    pub fn new(capacity_bytes: usize) -> Self {
        let shards = (capacity_bytes / MIN_SHARD_BYTES).clamp(1, MAX_SHARDS);
        // A power of two, so that a shard is picked by masking the hash.
        let shards = 1 << shards.ilog2();
        Self::with_shards(capacity_bytes, shards, RandomState::new().hash_one(0x5eed_u64))
    }

    /// An empty cache of `shards` (a power of two) equal shares of `capacity_bytes`, hashing with `seed`.
    fn with_shards(capacity_bytes: usize, shards: usize, seed: u64) -> Self {
        let share = capacity_bytes / shards;
        Self {
            capacity_bytes,
            seed,
            shards: (0..shards).map(|_| Mutex::new(Shard::new(share))).collect(),
            stale_grace_ms: 0,
        }
    }

    /// The same cache, where no tenant displaces others' entries past `share` (0..=1) of the bytes.
    pub fn with_tenant_share(self, share: f64) -> Self {
        for shard in self.shards.iter() {
            shard.lock().unwrap_or_else(PoisonError::into_inner).set_tenant_share(share);
        }
        self
    }

    /// The same cache, keeping entries `grace_s` past their TTL for [`ExactCache::get_stale`] (they are
    /// never served by [`ExactCache::get`] once expired).
    pub fn with_stale_grace(self, grace_s: u64) -> Self {
        Self { stale_grace_ms: i64::try_from(grace_s.saturating_mul(1000)).unwrap_or(i64::MAX), ..self }
    }

    /// The entry under `key` if it is fresh or expired less than the stale grace ago, without counting a
    /// lookup: what may be served, marked stale, while the core is out of reach.
    pub fn get_stale(&self, key: &str, now_ms: i64) -> Option<Arc<CachedCompletion>> {
        let entry = self.peek(key)?;
        (!entry.is_expired(now_ms.saturating_sub(self.stale_grace_ms))).then_some(entry)
    }

    /// The entry under `key`, expired or not, without counting a lookup or touching recency.
    pub fn peek(&self, key: &str) -> Option<Arc<CachedCompletion>> {
        let hash = self.hash(key);
        lock(self.shard(hash)).peek(key)
    }

    /// The bound given at creation.
    pub fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }

    /// The fresh entry under `key` at `now_ms`, counting the lookup as an access; expired entries are
    /// removed.
    pub fn get(&self, key: &str, now_ms: i64) -> Option<Arc<CachedCompletion>> {
        let hash = self.hash(key);
        lock(self.shard(hash)).get(key, hash, now_ms, self.stale_grace_ms)
    }

    /// Offers an entry to the cache. It enters the admission window and later stays only if it wins the
    /// frequency duel against the main space's victims (see the module docs); one larger than a shard is
    /// refused. An entry already under the same key is replaced where it is.
    pub fn insert(&self, entry: CachedCompletion) {
        let hash = self.hash(&entry.key);
        lock(self.shard(hash)).insert(entry, hash);
    }

    /// Removes the entry under `key`; true if there was one.
    pub fn remove(&self, key: &str) -> bool {
        let hash = self.hash(key);
        lock(self.shard(hash)).remove_key(key)
    }

    /// Whether `key` is held (fresh or not), without counting a lookup or touching recency.
    pub fn contains(&self, key: &str) -> bool {
        let hash = self.hash(key);
        lock(self.shard(hash)).contains(key)
    }

    /// Entries, bytes and admission counters, summed over the shards (each locked in turn, so the sum is
    /// not one instant's).
    pub fn stats(&self) -> CacheStats {
        self.shards.iter().map(|shard| lock(shard).stats()).fold(CacheStats::default(), CacheStats::plus)
    }

    fn hash(&self, key: &str) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.seed.hash(&mut hasher);
        key.hash(&mut hasher);
        hasher.finish()
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        // The high half picks the shard; the sketch mixes all 64 bits, so the two stay independent.
        &self.shards[(hash >> 32) as usize & (self.shards.len() - 1)]
    }
}

impl std::fmt::Debug for ExactCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExactCache")
            .field("capacity_bytes", &self.capacity_bytes)
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A panic inside a shard would be a bug here; the entries it holds are still valid answers, so serving
    // on beats failing every request whose key hashes to that shard.
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
