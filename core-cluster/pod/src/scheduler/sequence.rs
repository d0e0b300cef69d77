//! [`Sequence`]: one generation as the scheduler tracks it, and what it asks of the next step.

use crate::kv::{BlockId, SeqBlocks};

/// Identifies a sequence; chosen by the caller, unique among live sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeqId(pub u64);

impl std::fmt::Display for SeqId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Scheduling class; `Interactive` sorts first (is served first, preempted last).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// A person is waiting on the stream.
    Interactive,
    /// Throughput work that can wait.
    Batch,
}

/// One generation: its tokens, how many have KV in the cache, and its blocks while running.
#[derive(Debug)]
pub struct Sequence {
    /// The caller's id.
    pub(super) id: SeqId,
    /// The tenant salt for prefix caching.
    pub(super) salt: u64,
    /// Scheduling class.
    pub(super) priority: Priority,
    /// Arrival order (unique, increasing); later arrivals are preempted first.
    pub(super) arrival: u64,
    /// Prompt, then generated tokens, then any unverified draft tokens.
    pub(super) tokens: Vec<u32>,
    /// Leading tokens that came from the prompt.
    pub(super) prompt_len: usize,
    /// Trailing tokens that are unverified drafts (speculative decoding).
    pub(super) drafts: usize,
    /// Leading tokens whose KV is in the cache.
    pub(super) computed: usize,
    /// Leading tokens handed to the engine so far (`computed <= scheduled <= tokens.len()`).
    pub(super) scheduled: usize,
    /// Prompt tokens served from the prefix cache at the latest admission.
    pub(super) cached_prompt_tokens: usize,
    /// The KV blocks; `Some` exactly while the sequence is running.
    pub(super) blocks: Option<SeqBlocks>,
}

impl Sequence {
    /// The caller's id.
    pub fn id(&self) -> SeqId {
        self.id
    }

    /// The tenant salt.
    pub fn salt(&self) -> u64 {
        self.salt
    }

    /// Scheduling class.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// Prompt, generated and draft tokens.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Tokens that came from the prompt.
    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }

    /// Trailing unverified draft tokens.
    pub fn drafts(&self) -> usize {
        self.drafts
    }

    /// Tokens whose KV is in the cache.
    pub fn computed(&self) -> usize {
        self.computed
    }

    /// Prompt tokens served from the prefix cache at the latest admission.
    pub fn cached_prompt_tokens(&self) -> usize {
        self.cached_prompt_tokens
    }

    /// Whether the sequence holds KV blocks (is in the batch).
    pub fn is_running(&self) -> bool {
        self.blocks.is_some()
    }

    /// The block table (empty while waiting).
    pub fn block_table(&self) -> &[BlockId] {
        self.blocks.as_ref().map_or(&[], |b| b.table())
    }

    /// Tokens up to and including the last sampled one (drafts excluded); at least 1.
    fn verified_len(&self) -> usize {
        self.tokens.len().saturating_sub(self.drafts)
    }

    /// Whether what is left to compute is only the last sampled token and its drafts, which must
    /// go in one step because the engine needs the logits of all of them.
    pub(super) fn is_decoding(&self) -> bool {
        self.computed + 1 >= self.verified_len()
    }

    /// The positions the next step should compute within `budget` tokens, if any.
    ///
    /// A decode is all or nothing. A prefill is cut at the budget, but never inside the
    /// decode-like tail (last verified token plus drafts), whose logits must come in one step.
    pub(super) fn wanted(&self, budget: usize) -> Option<(usize, usize)> {
        let (start, len) = (self.computed, self.tokens.len());
        if start >= len || budget == 0 {
            return None;
        }
        if self.is_decoding() {
            return (len - start <= budget).then_some((start, len));
        }
        Some((start, self.clamp_end(start, (start + budget).min(len))?))
    }

    /// Moves a prefill chunk's end back out of the decode-like tail; `None` if nothing is left.
    pub(super) fn clamp_end(&self, start: usize, end: usize) -> Option<usize> {
        let tail = self.verified_len().saturating_sub(1);
        let end = if end < self.tokens.len() && end > tail { tail } else { end };
        (end > start).then_some(end)
    }

    /// Trailing positions of `start..end` whose logits the engine must return.
    pub(super) fn logits_for(&self, start: usize, end: usize) -> usize {
        if end < self.tokens.len() {
            return 0;
        }
        end - start.max(self.verified_len().saturating_sub(1))
    }

    /// Back to waiting after preemption: drafts are dropped (they were never verified) and
    /// everything else will be recomputed. Returns the blocks to free.
    pub(super) fn reset_for_recompute(&mut self) -> Option<SeqBlocks> {
        self.tokens.truncate(self.verified_len());
        self.drafts = 0;
        self.computed = 0;
        self.scheduled = 0;
        self.blocks.take()
    }
}
