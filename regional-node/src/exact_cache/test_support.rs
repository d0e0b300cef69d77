//! Entry builders and a deterministic random source for the cache's tests.

use shared::completion::CachedCompletion;

/// An entry under `key` whose [`CachedCompletion::size_bytes`] is exactly `size` (at least the size of an
/// empty one), created at `created_ms`, living `ttl_s`.
pub(super) fn entry_sized(key: &str, size: usize, created_ms: i64, ttl_s: u64) -> CachedCompletion {
    let mut entry = CachedCompletion {
        tenant: "t".into(),
        etag: "\"e\"".into(),
        created_ms,
        ttl_s,
        ..CachedCompletion::example(key, String::new())
    };
    entry.content = "x".repeat(size.saturating_sub(entry.size_bytes()));
    entry
}

/// SplitMix64: a tiny deterministic generator, so that randomized tests replay exactly.
pub(super) struct Rng(u64);

impl Rng {
    /// A generator started from `seed`.
    pub(super) fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
