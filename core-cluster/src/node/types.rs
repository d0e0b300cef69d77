//! openraft's type configuration for the core cluster and the state machine's commands.

use std::io::Cursor;

use openraft::BasicNode;
use serde::{Deserialize, Serialize};
use shared::completion::CachedCompletion;

/// A core node's id in the Raft group.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The core cluster's Raft types: commands are [`Command`], snapshots are JSON bytes in memory.
    pub TypeConfig:
        D = Command,
        R = CommandResponse,
        NodeId = NodeId,
        Node = BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
);

/// A running Raft node of the core cluster.
pub type Raft = openraft::Raft<TypeConfig>;
/// A Raft log entry of the core cluster.
pub type Entry = openraft::Entry<TypeConfig>;
/// A storage error of the core cluster's Raft stores.
pub type StorageError = openraft::StorageError<NodeId>;

/// A change to the authoritative cache state; the payload of every application log entry.
///
/// New variants may be added; existing ones keep their JSON shape, because old entries stay in logs and
/// snapshots.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// Stores a completion under its key, replacing whatever was there.
    Put {
        /// The completion to store; `entry.key` is where it goes.
        entry: CachedCompletion,
    },
}

/// What applying one log entry did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum CommandResponse {
    /// A blank or membership entry: nothing changed in the cache.
    Empty,
    /// A completion was stored.
    Stored {
        /// The key it was stored under.
        key: String,
    },
}
