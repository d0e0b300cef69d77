//! How often each key was looked up, approximately: the count-min sketch W-TinyLFU admits by.
//!
//! Four rows of small saturating counters (at most 15, as in Caffeine's 4-bit sketch, held one per byte
//! here for simplicity); a key's estimate is the smallest of its four counters, so collisions can only
//! overstate it. Increments are conservative (only the counters at the key's current minimum grow), which
//! keeps that collision noise low. Each row has four counters per key the cache holds (sixteen in all, as
//! in Caffeine): with fewer, the tail of keys seen once lifts every estimate and hot keys stop standing out.
//! After ten increments per key held, every counter is halved ("aging"), so the estimate follows
//! popularity as it shifts instead of remembering old hot keys forever.
//!
//! The sketch never stores keys, only their 64-bit hashes; the cache seeds those hashes per process so that
//! nobody can pick keys that collide on purpose.

/// Rows of counters; each row is indexed by a differently mixed hash.
const ROWS: usize = 4;
/// Counters saturate here: "seen often" is all admission needs to know.
const MAX_COUNT: u8 = 15;
/// Counters per row for each key the cache holds.
const COUNTERS_PER_KEY: usize = 4;
/// Increments per key held between two agings (Caffeine's and the TinyLFU paper's choice).
const SAMPLES_PER_KEY: usize = 10;
/// Fewest keys a sketch is sized for, so that a tiny cache still tells its few keys apart.
const MIN_KEYS: usize = 16;
/// Most keys a sketch is sized for: 64 MiB of counters, far beyond any cache this daemon holds.
const MAX_KEYS: usize = 1 << 22;
/// Per-row seeds (odd 64-bit constants) mixed into the key hash.
const ROW_SEEDS: [u64; ROWS] =
    [0xc3a5_c85c_97cb_3127, 0xb492_b66f_be98_f273, 0x9ae1_6a3b_2f90_404f, 0xcbf2_9ce4_8422_2325];

/// A count-min sketch of key frequencies with periodic halving.
pub(crate) struct FrequencySketch {
    /// `ROWS` rows of `width` counters, row after row.
    counters: Vec<u8>,
    /// Keys the cache may hold before the sketch widens (a power of two).
    keys: usize,
    /// `width - 1`; the width is a power of two.
    width_mask: usize,
    /// Increments since the last aging (halved by it, as the counts are).
    additions: usize,
    /// Increments between two agings.
    sample_size: usize,
}

impl FrequencySketch {
    /// A sketch sized for a cache of about `keys` entries.
    pub(crate) fn with_capacity(keys: usize) -> Self {
        let keys = keys.clamp(MIN_KEYS, MAX_KEYS).next_power_of_two();
        let width = COUNTERS_PER_KEY * keys;
        Self {
            counters: vec![0; ROWS * width],
            keys,
            width_mask: width - 1,
            additions: 0,
            sample_size: SAMPLES_PER_KEY * keys,
        }
    }

    /// Counters per row.
    pub(super) fn width(&self) -> usize {
        self.width_mask + 1
    }

    /// Widens the sketch once the cache holds more keys than it was sized for. The counts start over
    /// (they cannot be rehashed without the keys), as in Caffeine; sizes double, so this happens rarely.
    pub(super) fn ensure_capacity(&mut self, keys: usize) {
        if keys > self.keys && self.keys < MAX_KEYS {
            *self = Self::with_capacity(keys);
        }
    }

    /// The estimated number of recent increments of `hash` (at most 15).
    pub(crate) fn frequency(&self, hash: u64) -> u8 {
        (0..ROWS).map(|row| self.counters[self.slot(hash, row)]).min().unwrap_or(0)
    }

    /// Counts one occurrence of `hash`, and ages the sketch when a sample is complete.
    pub(crate) fn increment(&mut self, hash: u64) {
        let slots: [usize; ROWS] = std::array::from_fn(|row| self.slot(hash, row));
        let min = slots.iter().map(|&slot| self.counters[slot]).min().unwrap_or(MAX_COUNT);
        if min >= MAX_COUNT {
            return;
        }
        for slot in slots {
            if self.counters[slot] == min {
                self.counters[slot] += 1;
            }
        }
        self.additions += 1;
        if self.additions >= self.sample_size {
            self.age();
        }
    }

    /// Halves every counter, so that what was popular long ago weighs half as much as what is popular now.
    fn age(&mut self) {
        for counter in &mut self.counters {
            *counter >>= 1;
        }
        self.additions /= 2;
    }

    fn slot(&self, hash: u64, row: usize) -> usize {
        row * self.width() + (mix(hash ^ ROW_SEEDS[row]) as usize & self.width_mask)
    }
}

/// SplitMix64's finalizer: every input bit affects every output bit, so each row indexes independently.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> u64 {
        mix(i.wrapping_mul(0x2545_f491_4f6c_dd1d))
    }

    #[test]
    fn counts_each_key_and_saturates_at_fifteen() {
        let mut sketch = FrequencySketch::with_capacity(1024);
        for i in 0..100 {
            for _ in 0..(i % 8) {
                sketch.increment(key(i));
            }
        }
        // Conservative count-min with 100 keys in 4096-wide rows: exact in practice, never below the truth.
        for i in 0..100 {
            assert_eq!(sketch.frequency(key(i)), (i % 8) as u8, "key {i}");
        }
        assert_eq!(sketch.frequency(key(10_000)), 0);
        for _ in 0..40 {
            sketch.increment(key(1));
        }
        assert_eq!(sketch.frequency(key(1)), MAX_COUNT);
    }

    #[test]
    fn estimates_never_undercount_under_heavy_collisions() {
        let mut sketch = FrequencySketch::with_capacity(MIN_KEYS);
        // 200 keys in 64-wide rows, 300 increments: more than a sample (160), so disable aging here.
        sketch.sample_size = usize::MAX;
        assert_eq!(sketch.width(), 64);
        let truth = |i: u64| (i % 4) as u8;
        for i in 0..200 {
            for _ in 0..truth(i) {
                sketch.increment(key(i));
            }
        }
        assert!(sketch.additions <= 300);
        let mut overstated = 0;
        for i in 0..200 {
            let estimate = sketch.frequency(key(i));
            assert!(estimate >= truth(i), "key {i}: {estimate} < {}", truth(i));
            overstated += usize::from(estimate > truth(i));
        }
        assert!(overstated > 0, "200 keys in 64 counters must collide somewhere");
    }

    #[test]
    fn aging_halves_every_count() {
        let mut sketch = FrequencySketch::with_capacity(1024);
        for _ in 0..9 {
            sketch.increment(key(1));
        }
        for _ in 0..3 {
            sketch.increment(key(2));
        }
        sketch.age();
        assert_eq!((sketch.frequency(key(1)), sketch.frequency(key(2))), (4, 1));
        assert_eq!(sketch.additions, 6);
    }

    #[test]
    fn ages_by_itself_after_ten_increments_per_key_held() {
        let mut sketch = FrequencySketch::with_capacity(1024);
        assert_eq!((sketch.width(), sketch.sample_size), (4 * 1024, 10 * 1024));
        for _ in 0..MAX_COUNT {
            sketch.increment(key(0));
        }
        let mut other = 1;
        while sketch.additions < sketch.sample_size - 1 {
            sketch.increment(key(other));
            other += 1;
        }
        assert_eq!(sketch.frequency(key(0)), MAX_COUNT, "saturated until the sample is complete");
        // The next increment that counts completes the sample (one of a saturated key would not).
        while sketch.additions == sketch.sample_size - 1 {
            sketch.increment(key(other));
            other += 1;
        }
        // Every counter was halved, the saturated key's included.
        assert_eq!(sketch.frequency(key(0)), MAX_COUNT / 2);
        assert_eq!(sketch.additions, sketch.sample_size / 2);
    }

    #[test]
    fn widening_starts_the_counts_over() {
        let mut sketch = FrequencySketch::with_capacity(10);
        assert_eq!((sketch.keys, sketch.width()), (MIN_KEYS, 4 * MIN_KEYS));
        sketch.increment(key(1));
        sketch.ensure_capacity(MIN_KEYS);
        assert_eq!((sketch.width(), sketch.frequency(key(1))), (4 * MIN_KEYS, 1));
        sketch.ensure_capacity(MIN_KEYS + 1);
        assert_eq!((sketch.width(), sketch.frequency(key(1))), (8 * MIN_KEYS, 0));
        assert_eq!(FrequencySketch::with_capacity(usize::MAX).keys, MAX_KEYS);
    }
}
