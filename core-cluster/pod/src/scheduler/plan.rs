//! [`StepPlan`]: what the engine computes in one forward step.

use crate::kv::{BlockCopy, BlockId, OutOfBlocks};

use super::sequence::SeqId;

/// One sequence's share of a step: positions `start_pos .. start_pos + tokens.len()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanItem {
    /// The sequence.
    pub seq: SeqId,
    /// Position of the first token to compute; positions before it are already in the cache.
    pub start_pos: usize,
    /// The tokens to compute.
    pub tokens: Vec<u32>,
    /// The sequence's block table: position `pos` reads and writes slot
    /// `block_table[pos / block_size] * block_size + pos % block_size`.
    pub block_table: Vec<BlockId>,
    /// Trailing positions whose logits the engine must return: 0 for a prefill chunk that does
    /// not reach the end, 1 for the end of a prefill or a decode, `1 + k` with `k` draft tokens.
    pub num_logits: usize,
}

impl PlanItem {
    /// One past the last position computed.
    pub fn end_pos(&self) -> usize {
        self.start_pos + self.tokens.len()
    }
}

/// A sequence the scheduler gave up on: it cannot fit in the KV cache even alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aborted {
    /// The sequence, now removed from the scheduler.
    pub seq: SeqId,
    /// The shortfall when it was the only sequence left.
    pub error: OutOfBlocks,
}

/// What the engine should do in one step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepPlan {
    /// The sequences to compute, decodes first, then prefill chunks.
    pub items: Vec<PlanItem>,
    /// Block copies (copy-on-write) to perform in this order, before the forward pass.
    pub copies: Vec<BlockCopy>,
    /// Sequences preempted this step: their KV is gone (and their draft tokens dropped); they are
    /// waiting again and will be recomputed.
    pub preempted: Vec<SeqId>,
    /// Sequences removed because they cannot fit in the KV cache; the engine should fail them.
    pub aborted: Vec<Aborted>,
}

impl StepPlan {
    /// Tokens computed in this step.
    pub fn num_tokens(&self) -> usize {
        self.items.iter().map(|i| i.tokens.len()).sum()
    }

    /// Whether there is nothing to run.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && self.copies.is_empty()
    }
}
