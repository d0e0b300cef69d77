//! sled persistence of the exact tier, so that a restarted node starts with its hot set instead of
//! asking the core for every key again.
//!
//! Every entry the exact tier takes in is written through (key -> JSON of the entry). At start-up
//! the entries are read back, the expired and unreadable ones deleted, and the rest offered to the
//! exact tier in the order they were created, so its W-TinyLFU admission decides again what stays.
//! The file is bounded: once it holds more than twice the memory budget, the entries the exact tier
//! no longer holds are deleted.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use shared::completion::CachedCompletion;

use crate::exact_cache::ExactCache;
use crate::RegionalError;

/// The on-disk copy of the exact tier.
#[derive(Debug)]
pub struct ExactStore {
    db: sled::Db,
    /// Bytes of values written since the last prune (an estimate of the file's live size).
    bytes: AtomicUsize,
    /// Bytes past which entries that left memory are deleted.
    limit: usize,
}

/// What a start-up load found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Entries offered to the exact tier.
    pub loaded: usize,
    /// Entries past their TTL, deleted.
    pub expired: usize,
    /// Entries that did not parse (or whose key did not match), deleted.
    pub unreadable: usize,
}

impl ExactStore {
    /// Opens (or creates) the store in `dir`; it prunes past `limit` bytes.
    pub fn open(dir: &Path, limit: usize) -> Result<Self, RegionalError> {
        let db = sled::open(dir).map_err(|e| {
            RegionalError::Config(format!("opening the hot-set store {}: {e}", dir.display()))
        })?;
        Ok(Self { db, bytes: AtomicUsize::new(0), limit: limit.max(1) })
    }

    /// Reads every stored entry into `cache`, oldest first; deletes what is expired or unreadable.
    pub fn load_into(&self, cache: &ExactCache, now_ms: i64) -> LoadReport {
        let mut report = LoadReport::default();
        let mut entries = Vec::new();
        let mut doomed = Vec::new();
        for item in self.db.iter() {
            let Ok((key, value)) = item else {
                report.unreadable += 1;
                continue;
            };
            match serde_json::from_slice::<CachedCompletion>(&value) {
                Ok(entry) if entry.key.as_bytes() != &key[..] => {
                    report.unreadable += 1;
                    doomed.push(key);
                }
                Ok(entry) if entry.is_expired(now_ms) => {
                    report.expired += 1;
                    doomed.push(key);
                }
                Ok(entry) => {
                    self.bytes.fetch_add(value.len(), Ordering::Relaxed);
                    entries.push(entry);
                }
                Err(_) => {
                    report.unreadable += 1;
                    doomed.push(key);
                }
            }
        }
        for key in doomed {
            let _ = self.db.remove(key);
        }
        entries.sort_by_key(|e| e.created_ms);
        report.loaded = entries.len();
        for entry in entries {
            cache.insert(entry);
        }
        report
    }

    /// Writes `entry` through; a failure is logged, never returned (the memory tier still has it).
    pub fn put(&self, entry: &CachedCompletion, cache: &ExactCache) {
        let value = match serde_json::to_vec(entry) {
            Ok(value) => value,
            Err(error) => return tracing::warn!(%error, "entry not persisted"),
        };
        let size = value.len();
        if let Err(error) = self.db.insert(entry.key.as_bytes(), value) {
            return tracing::warn!(%error, "entry not persisted");
        }
        if self.bytes.fetch_add(size, Ordering::Relaxed) + size > 2 * self.limit {
            self.prune(cache);
        }
    }

    /// Deletes the entry under `key` (an invalidation).
    pub fn remove(&self, key: &str) {
        if let Err(error) = self.db.remove(key.as_bytes()) {
            tracing::warn!(%error, "invalidated entry not deleted from disk");
        }
    }

    /// Deletes the entries `cache` no longer holds.
    pub fn prune(&self, cache: &ExactCache) {
        let mut kept = 0usize;
        for (key, value) in self.db.iter().flatten() {
            let held = std::str::from_utf8(&key).is_ok_and(|k| cache.contains(k));
            if held {
                kept += value.len();
            } else {
                let _ = self.db.remove(key);
            }
        }
        self.bytes.store(kept, Ordering::Relaxed);
    }

    /// Entries stored.
    pub fn len(&self) -> usize {
        self.db.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.db.is_empty()
    }

    /// Flushes the store to disk (sled also flushes on its own every half second).
    pub fn flush(&self) {
        if let Err(error) = self.db.flush() {
            tracing::warn!(%error, "hot-set store not flushed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, created_ms: i64, ttl_s: u64) -> CachedCompletion {
        CachedCompletion {
            tenant: "t".into(),
            prompt_tokens: 3,
            completion_tokens: 4,
            etag: CachedCompletion::etag_of("x", "stop"),
            created_ms,
            ttl_s,
            ..CachedCompletion::example(key, format!("answer of {key}"))
        }
    }

    /// Opens the store at `dir` again. sled's flusher thread holds the file lock for a moment after the
    /// last handle is dropped, so a reopen in the same process may have to wait for it.
    fn reopen(dir: &std::path::Path) -> ExactStore {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match ExactStore::open(dir, 1 << 20) {
                Ok(store) => return store,
                Err(error) if std::time::Instant::now() < deadline => {
                    assert!(error.to_string().contains("lock"), "{error}");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(error) => panic!("reopen: {error}"),
            }
        }
    }

    #[test]
    fn a_reopened_store_refills_the_cache_and_drops_expired_and_unreadable_entries() {
        let dir = std::env::temp_dir().join(format!("hot-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let now = 1_000_000;
        {
            let cache = ExactCache::new(1 << 20);
            let store = ExactStore::open(&dir, 1 << 20).expect("open");
            store.put(&entry("fresh", now - 1_000, 3_600), &cache);
            store.put(&entry("forever", now - 5_000, 0), &cache);
            store.put(&entry("stale", now - 10_000_000, 60), &cache);
            store.db.insert(b"truncated", &b"{\"key\":\"trunc"[..]).expect("raw insert");
            store.flush();
        }
        let cache = ExactCache::new(1 << 20);
        let store = reopen(&dir);
        let report = store.load_into(&cache, now);
        assert_eq!(report, LoadReport { loaded: 2, expired: 1, unreadable: 1 });
        assert_eq!(cache.get("fresh", now).map(|e| e.content.clone()), Some("answer of fresh".into()));
        assert!(cache.get("forever", now).is_some());
        assert_eq!(store.len(), 2, "the expired and unreadable entries are deleted");
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn past_twice_the_budget_entries_that_left_memory_are_deleted() {
        let dir = std::env::temp_dir().join(format!("hot-store-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = ExactCache::new(1 << 20);
        let store = ExactStore::open(&dir, 1).expect("open");
        let kept = entry("kept", 1, 0);
        cache.insert(kept.clone());
        store.put(&kept, &cache);
        store.put(&entry("gone", 1, 0), &cache);
        assert_eq!(store.len(), 1, "only what memory holds stays");
        assert!(store.db.contains_key(b"kept").expect("read"));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
