//! The regional exact-match cache: entries by cache key, in memory, bounded by bytes.
//!
//! Eviction is least-recently-used for now (a tick per access, a `BTreeMap` from tick to key); the admission
//! policy and persistence that the regional tier needs come with the regional-node issue. Expired entries
//! are dropped when they are read.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use shared::completion::CachedCompletion;

/// A byte-bounded LRU map from cache key to entry.
#[derive(Debug)]
pub struct ExactCache {
    capacity_bytes: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    slots: HashMap<String, Slot>,
    /// Access tick -> key; the first entry is the least recently used.
    recency: BTreeMap<u64, String>,
    next_tick: u64,
    bytes: usize,
}

#[derive(Debug)]
struct Slot {
    entry: Arc<CachedCompletion>,
    tick: u64,
    size: usize,
}

/// Counts describing the cache, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Entries held.
    pub entries: usize,
    /// Bytes held.
    pub bytes: usize,
}

impl ExactCache {
    /// An empty cache that holds at most `capacity_bytes`.
    pub fn new(capacity_bytes: usize) -> Self {
        Self { capacity_bytes, inner: Mutex::new(Inner::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The map stays consistent even if a holder panicked: every mutation completes before unlocking.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The fresh entry under `key` at `now_ms`, marking it recently used; expired entries are removed.
    pub fn get(&self, key: &str, now_ms: i64) -> Option<Arc<CachedCompletion>> {
        let mut inner = self.lock();
        let expired = inner.slots.get(key)?.entry.is_expired(now_ms);
        if expired {
            inner.remove(key);
            return None;
        }
        let tick = inner.bump();
        let slot = inner.slots.get_mut(key)?;
        let old = std::mem::replace(&mut slot.tick, tick);
        let entry = Arc::clone(&slot.entry);
        inner.recency.remove(&old);
        inner.recency.insert(tick, key.to_owned());
        Some(entry)
    }

    /// Stores an entry, evicting the least recently used ones to stay within the byte bound. An entry
    /// larger than the whole cache is not stored.
    pub fn insert(&self, entry: CachedCompletion) {
        let size = entry.size_bytes();
        if size > self.capacity_bytes {
            return;
        }
        let mut inner = self.lock();
        inner.remove(&entry.key);
        while inner.bytes + size > self.capacity_bytes {
            let Some((_, victim)) = inner.recency.pop_first() else { break };
            if let Some(slot) = inner.slots.remove(&victim) {
                inner.bytes -= slot.size;
            }
        }
        let tick = inner.bump();
        inner.recency.insert(tick, entry.key.clone());
        inner.bytes += size;
        inner.slots.insert(entry.key.clone(), Slot { entry: Arc::new(entry), tick, size });
    }

    /// Entries and bytes held.
    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats { entries: inner.slots.len(), bytes: inner.bytes }
    }
}

impl Inner {
    fn bump(&mut self) -> u64 {
        self.next_tick += 1;
        self.next_tick
    }

    fn remove(&mut self, key: &str) {
        if let Some(slot) = self.slots.remove(key) {
            self.recency.remove(&slot.tick);
            self.bytes -= slot.size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, content_len: usize, ttl_s: u64) -> CachedCompletion {
        CachedCompletion {
            key: key.to_owned(),
            tenant: "t".into(),
            model: "m".into(),
            model_version: 1,
            content: "x".repeat(content_len),
            finish_reason: "stop".into(),
            prompt_tokens: 1,
            completion_tokens: 1,
            etag: "\"e\"".into(),
            created_ms: 0,
            ttl_s,
        }
    }

    #[test]
    fn evicts_least_recently_used_within_the_byte_bound() {
        let one = entry("a", 1000, 0).size_bytes();
        let cache = ExactCache::new(one * 2 + 10);
        cache.insert(entry("a", 1000, 0));
        cache.insert(entry("b", 1000, 0));
        assert!(cache.get("a", 0).is_some()); // a is now more recent than b
        cache.insert(entry("c", 1000, 0));
        assert!(cache.get("b", 0).is_none());
        assert!(cache.get("a", 0).is_some() && cache.get("c", 0).is_some());
        assert_eq!(cache.stats(), CacheStats { entries: 2, bytes: one * 2 });
        assert!(cache.stats().bytes <= one * 2 + 10);
    }

    #[test]
    fn replaces_expires_and_refuses_oversized_entries() {
        let cache = ExactCache::new(10_000);
        cache.insert(entry("a", 10, 1));
        cache.insert(entry("a", 20, 1));
        assert_eq!(cache.stats().entries, 1);
        assert_eq!(cache.get("a", 500).map(|e| e.content.len()), Some(20));
        assert!(cache.get("a", 1000).is_none());
        assert_eq!(cache.stats(), CacheStats::default());
        cache.insert(entry("big", 20_000, 0));
        assert!(cache.get("big", 0).is_none());
    }
}
