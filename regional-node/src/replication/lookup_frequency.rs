//! Which keys are hot enough to replicate eagerly: a count-min sketch of lookups with aging (the same
//! sketch the exact tier admits by), so a key counts as hot while it is asked for often lately, and a
//! burst of one-off prompts never floods the peers.

use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Mutex, PoisonError};

use crate::exact_cache::sketch::FrequencySketch;

/// Keys tracked by the sketch before estimates blur (it ages after ten lookups per key).
const TRACKED_KEYS: usize = 1 << 16;

/// Lookup frequencies of keys, and the count that makes a key hot.
pub struct LookupFrequency {
    sketch: Mutex<FrequencySketch>,
    seed: u64,
    threshold: u8,
}

impl LookupFrequency {
    /// A sketch where a key looked up `threshold` times lately is hot (1: every key).
    pub fn new(threshold: u8) -> Self {
        Self {
            sketch: Mutex::new(FrequencySketch::with_capacity(TRACKED_KEYS)),
            seed: RandomState::new().hash_one(0x4077_u64),
            threshold: threshold.max(1),
        }
    }

    /// Counts one lookup of `key`; true when the key is now hot.
    pub fn touch(&self, key: &str) -> bool {
        let hash = self.hash(key);
        let mut sketch = self.sketch.lock().unwrap_or_else(PoisonError::into_inner);
        sketch.increment(hash);
        sketch.frequency(hash) >= self.threshold
    }

    /// Whether `key` is hot, without counting a lookup.
    pub fn is_hot(&self, key: &str) -> bool {
        let hash = self.hash(key);
        self.sketch.lock().unwrap_or_else(PoisonError::into_inner).frequency(hash) >= self.threshold
    }

    fn hash(&self, key: &str) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.seed.hash(&mut hasher);
        key.hash(&mut hasher);
        hasher.finish()
    }
}

impl std::fmt::Debug for LookupFrequency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LookupFrequency").field("threshold", &self.threshold).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_turns_hot_after_enough_lookups() {
        let hot = LookupFrequency::new(3);
        assert!(!hot.touch("k"));
        assert!(!hot.touch("k"));
        assert!(hot.touch("k"));
        assert!(hot.is_hot("k"));
        assert!(!hot.is_hot("cold"));
        assert!(LookupFrequency::new(1).touch("any"), "threshold 1 replicates every key");
    }
}
