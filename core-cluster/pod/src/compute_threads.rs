//! How many threads the model's kernels really run on: candle's barrier pool (which our quantized
//! matmul and paged attention use) sizes itself from `CANDLE_NUM_THREADS`, else `RAYON_NUM_THREADS`, else
//! the physical cores. The pod sets both from `--threads`, and reports the pool as counted here, so a
//! benchmark can check that both engines it compares run on the same number of threads.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The pool's thread count, counted by running one task on every thread of it (the caller included).
pub fn compute_threads() -> usize {
    let seen = AtomicUsize::new(0);
    candle_core::utils::barrier_pool().execute(|thread| {
        seen.fetch_max(thread + 1, Ordering::Relaxed);
    });
    seen.into_inner()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_pool_has_at_least_the_calling_thread() {
        let threads = super::compute_threads();
        assert!(threads >= 1);
        assert_eq!(super::compute_threads(), threads, "the pool is made once");
    }
}
