//! Answers this isolate stored in L1 lately, kept in memory too: the next identical request in the same
//! isolate is answered without a Cache API round trip, and the L1 store itself can run after the
//! response (`wait_until`) instead of before it. Bounded by count; the oldest go first.

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use shared::completion::CachedCompletion;

/// Entries an isolate keeps.
pub const RECENT_ENTRIES: usize = 1024;

/// The isolate's recent fills.
#[derive(Debug, Default)]
pub struct RecentFills {
    entries: HashMap<String, Rc<CachedCompletion>>,
    order: VecDeque<String>,
}

impl RecentFills {
    /// Keeps `entry` (replacing an older answer under its key).
    pub fn put(&mut self, entry: CachedCompletion) {
        self.put_under(entry.key.clone(), entry);
    }

    /// Keeps `entry` under `key`: its own key, or the key of a paraphrase the regional tier matched
    /// to it.
    pub fn put_under(&mut self, key: String, entry: CachedCompletion) {
        if self.entries.insert(key.clone(), Rc::new(entry)).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > RECENT_ENTRIES {
            if let Some(oldest) = self.order.pop_front() {
                self.entries.remove(&oldest);
            }
        }
    }

    /// The live entry under `key`, if it belongs to `tenant`.
    pub fn get(&self, key: &str, tenant: &str, now_ms: i64) -> Option<Rc<CachedCompletion>> {
        let entry = self.entries.get(key)?;
        (entry.tenant == tenant && !entry.is_expired(now_ms)).then(|| Rc::clone(entry))
    }

    /// Forgets `key` when it holds `tenant`'s answer (the core invalidated it for that tenant; another
    /// tenant's answer under the key stays). The order keeps its slot until it comes up.
    pub fn remove(&mut self, key: &str, tenant: &str) {
        if self.entries.get(key).is_some_and(|entry| entry.tenant == tenant) {
            self.entries.remove(key);
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, tenant: &str, ttl_s: u64) -> CachedCompletion {
        CachedCompletion {
            tenant: tenant.into(),
            etag: "\"e\"".into(),
            ttl_s,
            ..CachedCompletion::example(key, "c")
        }
    }

    #[test]
    fn keeps_live_entries_of_their_tenant_and_forgets_the_oldest() {
        let mut recent = RecentFills::default();
        recent.put(entry("k", "t", 10));
        assert!(recent.get("k", "t", 9_999).is_some());
        assert!(recent.get("k", "other", 0).is_none());
        assert!(recent.get("k", "t", 10_000).is_none());
        for i in 0..RECENT_ENTRIES {
            recent.put(entry(&format!("k{i}"), "t", 0));
        }
        recent.put(entry("k0", "t", 0));
        assert_eq!(recent.len(), RECENT_ENTRIES);
        assert!(recent.get("k", "t", 0).is_none() && recent.get("k0", "t", 0).is_some());
    }
}
