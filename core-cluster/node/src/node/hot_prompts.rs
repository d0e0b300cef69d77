//! A bounded, replicated frequency summary of a model's hottest cache keys (Space-Saving with aging).
//!
//! At most [`HOT_CAPACITY`] keys are tracked. A key that is not tracked when the summary is full replaces
//! the least frequent one and inherits its count (the Space-Saving rule, which over-estimates but never
//! misses a key whose true count is above total / capacity). Counts halve whenever
//! [`AGING_PERIOD`] hits have been added since the last halving, so old popularity fades. The summary lives
//! in the replicated state machine and changes only through log entries, so every replica holds the same one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Keys tracked per model.
pub const HOT_CAPACITY: usize = 64;
/// Hits added between two halvings of every count.
pub const AGING_PERIOD: u64 = 4096;

/// The hottest keys of one model version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotPrompts {
    /// Estimated hits per key.
    counts: BTreeMap<String, u64>,
    /// Hits added since the last halving.
    since_aging: u64,
}

impl HotPrompts {
    /// Adds `hits` to `key`'s count.
    pub fn record(&mut self, key: &str, hits: u64) {
        if hits == 0 {
            return;
        }
        if let Some(count) = self.counts.get_mut(key) {
            *count = count.saturating_add(hits);
        } else if self.counts.len() < HOT_CAPACITY {
            self.counts.insert(key.to_owned(), hits);
        } else if let Some((coldest, floor)) = self.coldest() {
            self.counts.remove(&coldest);
            self.counts.insert(key.to_owned(), floor.saturating_add(hits));
        }
        self.since_aging = self.since_aging.saturating_add(hits);
        if self.since_aging >= AGING_PERIOD {
            self.since_aging = 0;
            self.counts.retain(|_, count| {
                *count /= 2;
                *count > 0
            });
        }
    }

    /// Forgets `key` (its entry is gone).
    pub fn forget(&mut self, key: &str) {
        self.counts.remove(key);
    }

    /// Up to `n` keys, hottest first (ties in key order, so every replica agrees).
    pub fn hottest(&self, n: usize) -> Vec<(String, u64)> {
        let mut all: Vec<(String, u64)> = self.counts.iter().map(|(k, c)| (k.clone(), *c)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }

    /// Number of keys tracked.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Every tracked key and its count, in key order, and the hits added since the last halving: what a
    /// stored row holds.
    pub fn parts(&self) -> (impl Iterator<Item = (&str, u64)>, u64) {
        (self.counts.iter().map(|(k, c)| (k.as_str(), *c)), self.since_aging)
    }

    /// The summary a stored row describes ([`HotPrompts::parts`]).
    pub fn from_parts(counts: impl IntoIterator<Item = (String, u64)>, since_aging: u64) -> Self {
        Self { counts: counts.into_iter().collect(), since_aging }
    }

    /// The least frequent key (the last in key order among equals) and its count.
    fn coldest(&self) -> Option<(String, u64)> {
        self.counts
            .iter()
            .min_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(k, c)| (k.clone(), *c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_heavy_hitters_within_capacity() {
        let mut summary = HotPrompts::default();
        for round in 0..50u64 {
            for key in 0..200u64 {
                summary.record(&format!("cold-{key}"), 1);
            }
            summary.record("hot-a", 30);
            summary.record("hot-b", 20 + round % 2);
        }
        assert!(summary.len() <= HOT_CAPACITY);
        let top: Vec<String> = summary.hottest(2).into_iter().map(|(k, _)| k).collect();
        assert_eq!(top, vec!["hot-a".to_owned(), "hot-b".to_owned()]);
    }

    #[test]
    fn ages_counts_and_is_deterministic() {
        let mut a = HotPrompts::default();
        let mut b = HotPrompts::default();
        for i in 0..AGING_PERIOD {
            a.record(&format!("k{}", i % 7), 1);
            b.record(&format!("k{}", i % 7), 1);
        }
        assert_eq!(a, b);
        let total: u64 = a.hottest(HOT_CAPACITY).iter().map(|(_, c)| c).sum();
        assert!(total <= AGING_PERIOD / 2 + 7, "counts halved: {total}");
        a.forget("k0");
        assert!(a.hottest(10).iter().all(|(k, _)| k != "k0"));
    }
}
