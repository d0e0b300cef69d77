//! The `core-node` daemon: the authoritative cache state, replicated with openraft over sled.
//!
//! Every core node serves one listener that speaks both gRPC (the `Raft` service between core nodes and
//! the `CoreCache` service for the regional tier) and plain HTTP (`/healthz`, `/metrics`). A completion
//! that misses the state machine is generated on an inference pod, streamed back as it decodes, and
//! committed through Raft before the final `Done` event.
//!
//! # Layout
//! - [`raft`]: Raft between core nodes: the log in the write-ahead log, its codecs, the network over the
//!   `Raft` gRPC service, snapshots, and the leader's confirmations that reads rely on.
//! - [`writes`]: how a write reaches the log: validated, sized, batched by group commit on the leader, or
//!   forwarded to it from a follower.
//! - [`services`]: the gRPC services (`CoreCache`, `CoreStore`, `CoreAdmin`), the change feed's `Watch`
//!   stream, and the HTTP routes.
//! - [`background`]: the leader's ticker (sweeps, log time), hit reports, and the refresher that
//!   regenerates the hottest prompts after a bump.
//! - [`config`]: the command line ([`NodeArgs`]) and the validated [`NodeConfig`].
//! - [`error`]: [`CoreError`] and its one conversion to `tonic::Status`.
//! - [`types`]: openraft's type configuration: the log's [`Proposal`]s of [`Request`]s and [`Command`]s,
//!   and their outcomes.
//! - [`records`]: what the state machine stores per entry, tenant, model and request id; liveness.
//! - [`hot_prompts`]: the replicated top-k of each model's hottest keys.
//! - [`apply`]: the rules of every command, over the [`apply::Tables`] trait.
//! - `memory_tables`: those tables in memory (tests), and `state_machine_proptests`, three replicas of
//!   one random log compared at every index.
//! - [`clean_stop`]: the marker file only a clean stop leaves, so a start knows whether to trust sled.
//! - [`state_db`]: the state machine's sled database, opened empty after a stop that was not clean.
//! - [`state_machine`]: the sled state machine: apply, reads at log time, digest, sweep candidates,
//!   the change feed's rows, snapshots.
//! - [`convert`]: conversions between protobuf types and domain types, JSON Raft payloads.
//! - [`backends`]: the model backends generations go to (our pods over gRPC, OpenAI-compatible servers
//!   over HTTP), ranked by predicted cost, with failover.
//! - [`metrics`]: the node's Prometheus metrics.
//! - [`context`]: what every handler shares.
//! - [`server`]: [`run`], which wires it all together on one listener.
//!
//! Architecture invariant: a Raft write is acknowledged to a caller only after it is committed (the log
//! entry is fsynced on a quorum) and applied to the leader's state machine.

pub mod apply;
pub mod backends;
pub mod background;
pub mod clean_stop;
pub mod config;
pub mod context;
pub mod convert;
pub mod error;
pub mod hot_prompts;
pub mod metrics;
pub mod raft;
pub mod records;
pub mod server;
pub mod services;
pub mod state_db;
pub mod state_machine;
pub mod types;
pub mod writes;

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod memory_tables;
#[cfg(test)]
mod state_machine_proptests;
#[cfg(test)]
mod storage_tests;

pub use config::{NodeArgs, NodeConfig, RaftTuning};
pub use error::CoreError;
pub use server::run;
pub use types::{Command, NodeId, Outcome, Proposal, Request, TypeConfig};
