//! The `core-node` daemon: the authoritative cache state, replicated with openraft over sled.
//!
//! Every core node serves one listener that speaks both gRPC (the `Raft` service between core nodes and
//! the `CoreCache` service for the regional tier) and plain HTTP (`/healthz`, `/metrics`). A completion
//! that misses the state machine is generated on an inference pod, streamed back as it decodes, and
//! committed through Raft before the final `Done` event.
//!
//! # Layout
//! - [`config`]: the command line ([`NodeArgs`]) and the validated [`NodeConfig`].
//! - [`auth`]: the shared tier secret and the gRPC interceptor that checks it.
//! - [`error`]: [`CoreError`] and its one conversion to `tonic::Status`.
//! - [`types`]: openraft's type configuration, the state-machine [`Command`] and its response.
//! - [`log_store`]: the Raft log, vote and committed pointer in sled.
//! - [`state_machine`]: cache entries, last applied, membership and snapshots in sled.
//! - [`convert`]: conversions between protobuf types and domain types, JSON Raft payloads.
//! - [`peers`]: gRPC channels to other core nodes, shared by replication and write forwarding.
//! - [`network`]: openraft's network factory over the `Raft` gRPC service.
//! - [`raft_service`]: the `Raft` gRPC server.
//! - [`writer`]: commits a command through Raft from any node (locally on the leader, else forwarded).
//! - [`pods`]: the client side of the inference pods, with failover.
//! - [`cache_service`]: the `CoreCache` gRPC server (lookup, complete).
//! - [`metrics`]: the node's Prometheus metrics.
//! - [`http`]: `/healthz` and `/metrics`.
//! - [`context`]: what every handler shares.
//! - [`server`]: [`run`], which wires it all together on one listener.
//!
//! Architecture invariant: a Raft write is acknowledged to a caller only after it is committed (the log
//! entry is fsynced on a quorum) and applied to the local state machine.

pub mod auth;
pub mod cache_service;
pub mod config;
pub mod context;
pub mod convert;
pub mod error;
pub mod http;
pub mod log_store;
pub mod metrics;
pub mod network;
pub mod peers;
pub mod pods;
pub mod raft_service;
pub mod server;
pub mod state_machine;
pub mod types;
pub mod writer;

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod storage_tests;

pub use config::{NodeArgs, NodeConfig, RaftTuning};
pub use error::CoreError;
pub use server::run;
pub use types::{Command, CommandResponse, NodeId, TypeConfig};
