//! [`Load`]: how busy the step loop is, published by the loop after every step and read by the
//! service (admission, `Health`) and the metrics, none of which needs the worker itself.

use std::sync::atomic::{AtomicUsize, Ordering};

/// How busy the step loop is, published after every step.
#[derive(Debug, Default)]
pub struct Load {
    /// Requests queued and not yet running (in the channel or the scheduler's waiting queues).
    pub(super) queued: AtomicUsize,
    /// The scheduler's waiting sequences, as of the last step.
    pub(super) waiting: AtomicUsize,
    /// Sequences in the running batch.
    pub(super) running: AtomicUsize,
    /// KV blocks free or evictable.
    pub(super) free_blocks: AtomicUsize,
    /// KV blocks in the pool.
    pub(super) total_blocks: AtomicUsize,
    /// Tokens per KV block.
    pub(super) block_size: AtomicUsize,
}

impl Load {
    /// Requests waiting to start.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed) + self.waiting.load(Ordering::Relaxed)
    }

    /// Sequences being generated.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    /// KV blocks that could be handed out now.
    pub fn free_blocks(&self) -> usize {
        self.free_blocks.load(Ordering::Relaxed)
    }

    /// KV blocks in the pool.
    pub fn total_blocks(&self) -> usize {
        self.total_blocks.load(Ordering::Relaxed)
    }

    /// Tokens per KV block.
    pub fn block_size(&self) -> usize {
        self.block_size.load(Ordering::Relaxed)
    }
}
