//! The core cluster: the authoritative cache state replicated with Raft. The inference pod it drives is
//! its own crate, `inference-pod` (`core-cluster/pod/`), reached only over gRPC; the client library is
//! `core-client` (`core-cluster/client/`).
//!
//! # Layout
//! - [`admin_cli`]: `core-node admin ...`, the operator's command line over `core-client`.
//! - [`model_spec_args`]: a model's registry spec as `register-model` flags.
//! - [`node`]: the `core-node` daemon: openraft over a write-ahead log and sled, the Raft and cache gRPC
//!   services, routing to pods.
//! - [`wal`]: the write-ahead log that keeps the Raft log and the vote durable.
//!
//! The binary in `src/bin/` only parses its command line, sets up tracing and calls into these modules.

pub mod admin_cli;
pub mod model_spec_args;
pub mod node;
pub mod wal;
