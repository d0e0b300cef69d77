//! The core cluster: the authoritative cache state replicated with Raft, and the inference pods it drives.
//!
//! # Layout
//! - [`admin_cli`]: `core-node admin ...`, the operator's command line over the client.
//! - [`client`]: `CoreClient`, the client library of the store and admin API (follows the leader, retries
//!   safely).
//! - [`node`]: the `core-node` daemon: openraft over sled, the Raft and cache gRPC services, routing to pods.
//! - [`shutdown`]: the SIGINT/SIGTERM future both daemons stop on.
//! - [`inference`]: the `inference-pod` daemon: the real SmolLM2 model, generation, its gRPC service.
//!
//! The two binaries in `src/bin/` only parse their command line, set up tracing and call into these modules.

pub mod admin_cli;
pub mod client;
pub mod inference;
pub mod node;
pub mod shutdown;
