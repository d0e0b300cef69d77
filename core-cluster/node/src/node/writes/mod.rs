//! How a write reaches the log: validated, sized, batched by group commit on the leader, or forwarded
//! to it from a follower.
//!
//! # Layout
//! - [`group_commit`]: batches concurrent requests into one Raft entry on the leader.
//! - [`leader_clock`]: the time a leader stamps on its proposals (log time), banded against clock steps.
//! - [`writer`]: commits a request through Raft from any node (group commit on the leader, else forwarded).
//! - [`request_size`]: a request's approximate size in bytes, for group commit's and validation's bounds.
//! - [`validate`]: checks on names, keys and request ids, and on whole requests from callers and followers.

pub mod group_commit;
pub mod leader_clock;
pub mod request_size;
pub mod validate;
pub mod writer;
