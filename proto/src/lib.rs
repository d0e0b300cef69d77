//! Protocol buffers between the tiers and their generated tonic clients and servers.
//!
//! # Layout
//! - [`inference`]: core node -> inference pod (generate, health).
//! - [`cache`]: regional node -> core node (lookup, complete).
//! - [`raft`]: core node <-> core node (openraft RPCs, forwarded writes).
//!
//! The daemons convert these types to their own at the boundary; `shared` never sees them.

#![allow(missing_docs)]

/// Inference pod API.
pub mod inference {
    tonic::include_proto!("mesh.inference.v1");
}

/// Cache API between the regional tier and the core.
pub mod cache {
    tonic::include_proto!("mesh.cache.v1");
}

/// Raft RPCs between core nodes.
pub mod raft {
    tonic::include_proto!("mesh.raft.v1");
}

/// gRPC metadata key that carries the shared secret between tiers.
pub const TIER_SECRET_METADATA: &str = "x-mesh-secret";
