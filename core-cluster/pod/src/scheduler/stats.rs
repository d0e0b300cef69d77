//! [`SchedulerStats`]: the scheduler's gauges and counters, for metrics.

/// A snapshot of the scheduler's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedulerStats {
    /// Interactive sequences waiting for admission.
    pub waiting_interactive: usize,
    /// Batch sequences waiting for admission.
    pub waiting_batch: usize,
    /// Sequences in the batch.
    pub running: usize,
    /// KV blocks free or evictable.
    pub available_blocks: usize,
    /// KV blocks registered in the prefix cache.
    pub cached_blocks: usize,
    /// Preemptions since start (counter).
    pub preemptions_total: u64,
    /// Sequences aborted for not fitting in the KV cache, since start (counter).
    pub aborted_total: u64,
}
