//! [`SchedulerConfig`]: the limits the continuous-batching scheduler works within.

/// Limits of one model's scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Most sequences in one batch (running at once). Zero is taken as one.
    pub max_running: usize,
    /// Token budget of one forward step, prefill chunks and decodes together. Zero is taken as
    /// one.
    pub max_batched_tokens: usize,
    /// Most sequences waiting for admission; [`add`](super::Scheduler::add) refuses past it.
    /// Preempted sequences go back to the queue regardless.
    pub max_waiting: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self { max_running: 64, max_batched_tokens: 2048, max_waiting: 1024 }
    }
}

impl SchedulerConfig {
    /// The same limits with zeros raised to one where zero would stall the scheduler.
    pub(super) fn normalized(self) -> Self {
        Self {
            max_running: self.max_running.max(1),
            max_batched_tokens: self.max_batched_tokens.max(1),
            ..self
        }
    }
}
