//! A STREAM-like memory bandwidth measurement (the "copy" kernel): two arrays far larger than the caches,
//! one copied onto the other by `threads` threads, best of several passes. Bytes moved count the read and
//! the write, as STREAM does. Single-stream decode reads every weight once per token, so this bandwidth
//! over the bytes read per token is the ceiling of single-stream tokens/s.

use std::time::{Duration, Instant};

/// Bytes of each of the two arrays: far above any last-level cache here.
pub const DEFAULT_ARRAY_BYTES: usize = 256 << 20;
/// Passes; the fastest counts (the others absorb page faults and noisy neighbours).
pub const DEFAULT_PASSES: usize = 8;

/// What the copy measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bandwidth {
    /// Bytes moved per second (read + write) in the fastest pass.
    pub bytes_per_s: f64,
    /// Threads that copied.
    pub threads: usize,
}

impl Bandwidth {
    /// In GB/s (10^9 bytes).
    pub fn gb_per_s(&self) -> f64 {
        self.bytes_per_s / 1e9
    }

    /// Tokens/s a decoder that reads `bytes_per_token` bytes per token cannot exceed (0 when unknown).
    pub fn ceiling_tok_s(&self, bytes_per_token: u64) -> f64 {
        if bytes_per_token == 0 {
            0.0
        } else {
            self.bytes_per_s / bytes_per_token as f64
        }
    }
}

/// Copies an `array_bytes` array onto another `passes` times with `threads` threads (each its own slice)
/// and returns the fastest pass.
pub fn measure_copy(threads: usize, array_bytes: usize, passes: usize) -> Bandwidth {
    let threads = threads.max(1);
    let words = (array_bytes / 8).max(threads);
    // Written before the first pass so that page faults are not timed.
    let source: Vec<u64> = (0..words as u64).collect();
    let mut target = vec![0u64; words];
    let chunk = words.div_ceil(threads);
    let mut best = Duration::MAX;
    for _ in 0..passes.max(1) {
        let started = Instant::now();
        std::thread::scope(|scope| {
            for (from, to) in source.chunks(chunk).zip(target.chunks_mut(chunk)) {
                scope.spawn(move || to.copy_from_slice(from));
            }
        });
        best = best.min(started.elapsed());
    }
    std::hint::black_box(&target);
    let moved = 2.0 * (words * 8) as f64;
    Bandwidth { bytes_per_s: moved / best.as_secs_f64().max(1e-9), threads }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_and_reports_a_plausible_rate() {
        let bw = measure_copy(2, 8 << 20, 2);
        assert_eq!(bw.threads, 2);
        // Anything from an old laptop to a server: 100 MB/s .. 10 TB/s.
        assert!(bw.gb_per_s() > 0.1 && bw.gb_per_s() < 10_000.0, "{bw:?}");
        assert_eq!(bw.ceiling_tok_s(0), 0.0);
        let fixed = Bandwidth { bytes_per_s: 16e9, threads: 1 };
        assert_eq!(fixed.ceiling_tok_s(100_000_000), 160.0);
    }
}
