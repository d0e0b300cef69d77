//! Raft between core nodes: the log in the write-ahead log, its binary codecs, the network over the
//! `Raft` gRPC service, snapshots, and the leader's confirmations that reads rely on.
//!
//! # Layout
//! - [`network`]: openraft's network factory over the `Raft` gRPC service.
//! - [`append_stream`]: one long-lived AppendEntries stream per replication target.
//! - [`raft_service`]: the `Raft` gRPC server.
//! - [`peers`]: gRPC channels to other core nodes, shared by replication and forwarding.
//! - [`log_store`]: the Raft log, vote, committed pointer and purge point in the write-ahead log.
//! - [`log_codec`]: the binary form of log entries, AppendEntries and snapshot chunks (prost).
//! - [`reply_codec`]: the binary form of votes and of every Raft RPC's reply.
//! - [`durable_log`]: how far this node's own log is durable, so a leader's sync and replication overlap.
//! - [`recent_entries`]: the newest log entries, kept decoded for replication and apply.
//! - [`snapshot_file`]: snapshot files, written and read one framed record at a time.
//! - [`snapshot_trigger`]: snapshots in proportion to the state (log since the last one vs its size).
//! - [`read_barrier`]: quorum rounds shared by concurrent linearizable reads.
//! - [`leader_contact`]: when a leader last confirmed this node's state (bounded-staleness reads).

pub mod append_stream;
pub mod durable_log;
pub mod leader_contact;
pub mod log_codec;
pub mod log_store;
#[cfg(test)]
mod log_store_tests;
pub mod network;
pub mod peers;
pub mod raft_service;
pub mod read_barrier;
pub mod recent_entries;
pub mod reply_codec;
pub mod snapshot_file;
pub mod snapshot_trigger;
