//! The continuous-batching scheduler: which sequences run in each forward step, how many tokens
//! each computes, and which KV blocks they write.
//!
//! Each step has a token budget. Decodes go first (a decode is one token, or one plus the draft
//! tokens to verify for speculative decoding), then long prompts in chunks (chunked prefill), so a
//! long prompt never stalls the sequences already streaming. New sequences are admitted with a
//! prefix-cache lookup. When the KV cache runs out, the lowest-priority, latest-arrived sequence
//! is preempted and later recomputed (its prefix blocks usually still cached).
//!
//! # Layout
//! - [`config`]: [`SchedulerConfig`], the limits.
//! - [`sequence`]: [`SeqId`], [`Priority`] and [`Sequence`], one generation's state.
//! - [`plan`]: [`StepPlan`] and [`PlanItem`], what the engine runs in one step.
//! - [`error`]: [`SchedulerError`], why a call was refused.
//! - [`stats`]: [`SchedulerStats`], for metrics.
//! - `state`: [`Scheduler`] and the sequence lifecycle (add, commit, append, rollback, fork,
//!   finish, abort).
//! - `step`: [`Scheduler::schedule`], building a step, with preemption.
//! - `queue`: the waiting queue: per priority class, the tenants take turns, FIFO within a tenant.
//! - `invariants`: [`Scheduler::check_invariants`].
//!
//! Architecture Invariant: a step never exceeds `max_batched_tokens` tokens or `max_running`
//! sequences, and never writes into a KV block that another sequence or the prefix cache holds
//! (such blocks are copied first).
//!
//! Architecture Invariant: the scheduler does no I/O and holds no tensors; the engine drives it.

pub mod config;
pub mod error;
mod invariants;
pub mod plan;
mod queue;
pub mod sequence;
mod state;
pub mod stats;
mod step;

pub use config::SchedulerConfig;
pub use error::SchedulerError;
pub use plan::{Aborted, PlanItem, StepPlan};
pub use sequence::{Priority, SeqId, Sequence};
pub use state::Scheduler;
pub use stats::SchedulerStats;

#[cfg(test)]
mod mock_engine;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
