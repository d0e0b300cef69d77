//! Protocol buffers between the tiers and their generated tonic clients and servers.
//!
//! # Layout
//! - [`inference`]: core node -> inference pod (generate, health).
//! - [`cache`]: regional node -> core node (lookup, complete).
//! - [`raft`]: core node <-> core node (openraft RPCs, forwarded writes).
//! - [`core`]: clients and operators -> any core node (store writes and reads, membership, status).
//! - [`replication`]: regional node <-> regional node (deltas, anti-entropy).
//! - [`convert`]: every conversion between these messages and `shared`'s domain types (a cached
//!   answer, the normalized request as the core's and the pod's request, a finished generation as its
//!   entry).
//!
//! How a daemon carries these (TLS, identities, serving) is `daemon-runtime`'s; this crate is the wire
//! alone. The daemons convert these types to their own at the boundary; `shared` never sees them.

#![allow(missing_docs)]

/// The generated code, nested as the protobuf packages are (`mesh.cache.v1` refers to `mesh.inference.v1`).
pub mod mesh {
    /// `mesh.inference.v1`.
    pub mod inference {
        /// Version 1.
        pub mod v1 {
            tonic::include_proto!("mesh.inference.v1");
        }
    }
    /// `mesh.cache.v1`.
    pub mod cache {
        /// Version 1.
        pub mod v1 {
            tonic::include_proto!("mesh.cache.v1");
        }
    }
    /// `mesh.core.v1`.
    pub mod core {
        /// Version 1.
        pub mod v1 {
            tonic::include_proto!("mesh.core.v1");
        }
    }
    /// `mesh.replication.v1`.
    pub mod replication {
        /// Version 1.
        pub mod v1 {
            tonic::include_proto!("mesh.replication.v1");
        }
    }
    /// `mesh.raft.v1`.
    pub mod raft {
        /// Version 1.
        pub mod v1 {
            tonic::include_proto!("mesh.raft.v1");
        }
    }
}

/// Cache API between the regional tier and the core (`mesh.cache.v1`).
pub use mesh::cache::v1 as cache;
/// The core cluster's store and admin API (`mesh.core.v1`).
pub use mesh::core::v1 as core;
/// Inference pod API (`mesh.inference.v1`).
pub use mesh::inference::v1 as inference;
/// Raft RPCs between core nodes (`mesh.raft.v1`).
pub use mesh::raft::v1 as raft;
/// Replication between regional nodes (`mesh.replication.v1`).
pub use mesh::replication::v1 as replication;

pub mod convert;
