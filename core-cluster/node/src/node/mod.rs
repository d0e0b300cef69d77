//! The `core-node` daemon: the authoritative cache state, replicated with openraft over sled.
//!
//! Every core node serves one listener that speaks both gRPC (the `Raft` service between core nodes and
//! the `CoreCache` service for the regional tier) and plain HTTP (`/healthz`, `/metrics`). A completion
//! that misses the state machine is generated on an inference pod, streamed back as it decodes, and
//! committed through Raft before the final `Done` event.
//!
//! # Layout
//! - [`config`]: the command line ([`NodeArgs`]) and the validated [`NodeConfig`].
//! - [`error`]: [`CoreError`] and its one conversion to `tonic::Status`.
//! - [`types`]: openraft's type configuration: the log's [`Proposal`]s of [`Request`]s and [`Command`]s,
//!   and their outcomes.
//! - [`validate`]: checks on names, keys and request ids, and on whole requests from callers and followers.
//! - [`request_size`]: a request's approximate size in bytes, for group commit's and validation's bounds.
//! - [`records`]: what the state machine stores per entry, tenant, model and request id; liveness.
//! - [`hot_prompts`]: the replicated top-k of each model's hottest keys.
//! - [`apply`]: the rules of every command, over the [`apply::Tables`] trait.
//! - `memory_tables`: those tables in memory (tests), and `state_machine_proptests`, three replicas of
//!   one random log compared at every index.
//! - [`log_codec`]: the binary form of log entries, AppendEntries and snapshot chunks (prost).
//! - [`reply_codec`]: the binary form of votes and of every Raft RPC's reply.
//! - [`log_store`]: the Raft log, vote, committed pointer and purge point in the write-ahead log.
//! - [`state_machine`]: the sled state machine: apply, reads at log time, digest, sweep candidates,
//!   the change feed's rows, snapshots.
//! - [`snapshot_file`]: snapshot files, written and read one framed record at a time.
//! - [`change_feed`]: the `CoreCache.Watch` stream of the feed, resumable by revision.
//! - [`convert`]: conversions between protobuf types and domain types, JSON Raft payloads.
//! - [`peers`]: gRPC channels to other core nodes, shared by replication and forwarding.
//! - [`network`]: openraft's network factory over the `Raft` gRPC service.
//! - [`append_stream`]: one long-lived AppendEntries stream per replication target.
//! - [`raft_service`]: the `Raft` gRPC server.
//! - [`group_commit`]: batches concurrent requests into one Raft entry on the leader.
//! - [`writer`]: commits a request through Raft from any node (group commit on the leader, else forwarded).
//! - [`pods`]: the client side of the inference pods, with failover.
//! - [`hit_reporter`]: counts served hits and reports them through Raft.
//! - [`ticker`]: the leader's periodic sweep proposal, which also keeps the log time moving.
//! - [`refresher`]: regenerates the hottest prompts after a model-version bump.
//! - [`cache_service`]: the `CoreCache` gRPC server (lookup, complete).
//! - [`leader_contact`]: when a leader last confirmed this node's state (bounded-staleness reads).
//! - [`read_barrier`]: quorum rounds shared by concurrent linearizable reads.
//! - [`store_service`]: the `CoreStore` gRPC server (write, linearizable or local read).
//! - [`admin_service`]: the `CoreAdmin` gRPC server (membership, status).
//! - [`metrics`]: the node's Prometheus metrics.
//! - [`http`]: `/healthz` and `/metrics`.
//! - [`context`]: what every handler shares.
//! - [`server`]: [`run`], which wires it all together on one listener.
//!
//! Architecture invariant: a Raft write is acknowledged to a caller only after it is committed (the log
//! entry is fsynced on a quorum) and applied to the leader's state machine.

pub mod admin_service;
pub mod append_stream;
pub mod apply;
pub mod cache_service;
pub mod change_feed;
pub mod clean_stop;
pub mod config;
pub mod context;
pub mod convert;
pub mod durable_log;
pub mod error;
pub mod group_commit;
pub mod hit_reporter;
pub mod hot_prompts;
pub mod http;
pub mod leader_contact;
pub mod log_codec;
pub mod log_store;
pub mod metrics;
pub mod network;
pub mod peers;
pub mod pods;
pub mod raft_service;
pub mod read_barrier;
pub mod recent_entries;
pub mod records;
pub mod refresher;
pub mod reply_codec;
pub mod request_size;
pub mod server;
pub mod snapshot_file;
pub mod snapshot_trigger;
pub mod state_machine;
pub mod store_service;
pub mod ticker;
pub mod types;
pub mod validate;
pub mod writer;

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
