//! [`SchedulerError`]: why the scheduler refused an operation on a sequence.

use super::sequence::SeqId;

/// Why the scheduler refused a call; the scheduler's state is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerError {
    /// The waiting queue is full; the caller should retry later or elsewhere.
    #[error("queue full ({waiting} sequences waiting)")]
    QueueFull {
        /// Sequences waiting.
        waiting: usize,
    },
    /// A sequence with this id already exists.
    #[error("sequence {0} already exists")]
    DuplicateSeq(SeqId),
    /// The prompt has no tokens; there would be nothing to compute logits from.
    #[error("empty prompt")]
    EmptyPrompt,
    /// No sequence has this id (it finished, was aborted, or never existed).
    #[error("unknown sequence {0}")]
    UnknownSeq(SeqId),
    /// The operation needs a running sequence (one holding KV blocks).
    #[error("sequence {0} is not running")]
    NotRunning(SeqId),
    /// The batch already holds `max_running` sequences.
    #[error("the batch is full")]
    RunningFull,
    /// A commit past the tokens the last plan handed to the engine.
    #[error("sequence {seq}: commit up to {requested} but only {scheduled} tokens were scheduled")]
    NotScheduled {
        /// The sequence.
        seq: SeqId,
        /// The position the commit asked for.
        requested: usize,
        /// Tokens scheduled so far.
        scheduled: usize,
    },
    /// A sampled token appended while some tokens still lack KV (their logits were not computed).
    #[error("sequence {seq} has {uncomputed} uncomputed tokens")]
    Uncomputed {
        /// The sequence.
        seq: SeqId,
        /// Tokens without KV.
        uncomputed: usize,
    },
    /// The draft tokens would not fit in one step with the token they follow.
    #[error("sequence {seq}: {drafts} draft tokens exceed the step budget of {budget}")]
    TooManyDrafts {
        /// The sequence.
        seq: SeqId,
        /// Draft tokens it would hold.
        drafts: usize,
        /// The per-step token budget.
        budget: usize,
    },
    /// A rollback to zero tokens or past the end.
    #[error("sequence {seq}: cannot roll back to {len} of {tokens} tokens")]
    BadRollback {
        /// The sequence.
        seq: SeqId,
        /// The length asked for.
        len: usize,
        /// Tokens the sequence has.
        tokens: usize,
    },
}
