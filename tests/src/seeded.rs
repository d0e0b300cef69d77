//! A small seeded random number generator (SplitMix64), so that a test's or a soak's choices are the same
//! on every run with the same seed.

/// SplitMix64: a seed in, a reproducible stream of numbers out.
#[derive(Clone, Debug)]
pub struct SeededRng(u64);

impl SeededRng {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_gives_one_stream_and_numbers_stay_in_range() {
        let (mut a, mut b) = (SeededRng::new(7), SeededRng::new(7));
        let first: Vec<usize> = (0..100).map(|_| a.below(10)).collect();
        assert_eq!(first, (0..100).map(|_| b.below(10)).collect::<Vec<_>>());
        assert!(first.iter().all(|&n| n < 10));
        assert!((0..10).all(|n| first.contains(&n)), "every value comes up in 100 draws: {first:?}");
        assert_ne!(SeededRng::new(8).next_u64(), SeededRng::new(7).next_u64());
    }
}
