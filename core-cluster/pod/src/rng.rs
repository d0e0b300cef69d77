//! A small seeded random generator for sampling: xoshiro256** seeded through SplitMix64.
//!
//! Not cryptographic; fast, and the same seed always gives the same stream on every platform, which is
//! what reproducible sampling (`seed` in a request) needs.

use std::hash::{BuildHasher, Hasher};

/// xoshiro256** (Blackman and Vigna), 256 bits of state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    /// The generator state; never all zero.
    state: [u64; 4],
}

impl Rng {
    /// A generator whose stream depends only on `seed`.
    pub fn seed_from_u64(seed: u64) -> Self {
        // SplitMix64 spreads any seed (0 included) over the whole state and never yields four zeros.
        let mut sm = seed;
        let state = [splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm)];
        Self { state }
    }

    /// A generator seeded from [`random_seed`].
    pub fn from_entropy() -> Self {
        Self::seed_from_u64(random_seed())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// A uniform `f32` in `[0, 1)`, on a grid of 2^-24.
    pub fn uniform_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }

    /// A uniform `f64` in `[0, 1)`, on a grid of 2^-53.
    pub fn uniform_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// One step of SplitMix64: advances `state` and returns a well-mixed output.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seed from the process's random hasher keys and the clock (no extra dependency needed).
pub fn random_seed() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_outputs() {
        // The reference implementation's first outputs for seed 1234567.
        let mut s = 1_234_567;
        let got: Vec<u64> = (0..3).map(|_| splitmix64(&mut s)).collect();
        assert_eq!(got, [6_457_827_717_110_365_317, 3_203_168_211_198_807_973, 9_817_491_932_198_370_423]);
    }

    #[test]
    fn xoshiro_matches_the_reference_outputs() {
        // The reference xoshiro256** from state [1, 2, 3, 4].
        let mut rng = Rng { state: [1, 2, 3, 4] };
        let got: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(got, [11_520, 0, 1_509_978_240]);
    }

    #[test]
    fn same_seed_same_stream_and_different_seeds_differ() {
        let draw = |seed| {
            let mut rng = Rng::seed_from_u64(seed);
            (0..8).map(|_| rng.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert_ne!(draw(0), vec![0; 8]);
    }

    #[test]
    fn uniforms_stay_in_the_unit_interval_with_mean_one_half() {
        let mut rng = Rng::seed_from_u64(1);
        let n = 100_000;
        let (mut sum32, mut sum64) = (0.0f64, 0.0f64);
        for _ in 0..n {
            let (a, b) = (rng.uniform_f32(), rng.uniform_f64());
            assert!((0.0..1.0).contains(&a) && (0.0..1.0).contains(&b), "{a} {b}");
            sum32 += f64::from(a);
            sum64 += b;
        }
        // The standard error of the mean is 1/sqrt(12 n) ~ 0.0009.
        assert!((sum32 / f64::from(n) - 0.5).abs() < 0.005);
        assert!((sum64 / f64::from(n) - 0.5).abs() < 0.005);
    }
}
