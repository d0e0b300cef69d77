//! openraft's type configuration for the core cluster and the state machine's commands and outcomes.
//!
//! Every application log entry is a [`Proposal`]: a batch of client [`Request`]s (group commit) stamped
//! with the leader's clock. New command variants may be added; existing ones keep their JSON shape, because
//! old entries stay in logs and snapshots.

use openraft::BasicNode;
use serde::{Deserialize, Serialize};
use shared::completion::CachedCompletion;
use shared::model_spec::ModelSpec;
use shared::normalize::{Message, Sampling};

/// A core node's id in the Raft group.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The core cluster's Raft types: entries are [`Proposal`]s, snapshots are files
    /// ([`crate::node::raft::snapshot_file`]).
    pub TypeConfig:
        D = Proposal,
        R = ProposalResponse,
        NodeId = NodeId,
        Node = BasicNode,
        SnapshotData = crate::node::raft::snapshot_file::SnapshotFile,
);

/// A running Raft node of the core cluster.
pub type Raft = openraft::Raft<TypeConfig>;
/// A Raft log entry of the core cluster.
pub type Entry = openraft::Entry<TypeConfig>;
/// A storage error of the core cluster's Raft stores.
pub type StorageError = openraft::StorageError<NodeId>;

/// One log entry's payload: requests committed together, in order, at the leader's time `issued_ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    /// Unix milliseconds on the leader when it proposed the batch. Replicas take time from here (never
    /// from their own clocks), so they agree on creation times and on what has expired.
    pub issued_ms: i64,
    /// The batched requests, shared: the leader hands the same entry to every follower's replication
    /// and to its own apply, and a deep copy of a batch of answers each time was a few per cent of its CPU.
    #[serde(with = "shared_requests")]
    pub requests: std::sync::Arc<[Request]>,
}

/// Serde for a shared batch of requests, in the shape of a plain list.
mod shared_requests {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Request;

    pub fn serialize<S: Serializer>(requests: &Arc<[Request]>, serializer: S) -> Result<S::Ok, S::Error> {
        requests.as_ref().serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Arc<[Request]>, D::Error> {
        Vec::<Request>::deserialize(deserializer).map(Arc::from)
    }
}

/// One client request: a command and the id that makes retrying it safe.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Idempotency key; a request whose id was applied before is not applied again. Empty: no dedup.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// What to do.
    pub command: Command,
}

/// A change to the authoritative cache state.
///
/// `Put` is much larger than the rest; boxing it would only add an allocation, since commands are built
/// once and moved into a proposal.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// Stores a completion under its key, replacing whatever was there.
    Put {
        /// The completion; `entry.key` is where it goes. Its `created_ms` is replaced by the leader's time.
        entry: CachedCompletion,
        /// The content class it was cached under (decides nothing here; recorded and returned).
        #[serde(default)]
        content_class: String,
        /// The request that produced it, so that a model-version bump can regenerate hot entries.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<Prompt>,
    },
    /// Makes entries unreadable at once (lazily removed later).
    Invalidate {
        /// Which entries.
        scope: InvalidateScope,
    },
    /// Moves a model to a newer version: every entry of an older version becomes stale in one step. With
    /// a canary share, the new version goes on trial for that share of requests instead.
    BumpModelVersion {
        /// The model.
        model: String,
        /// The new version; 0 means one above the highest the model has had.
        version: u64,
        /// 1 to 99: the percent of requests the new version answers while on trial; 0: all, now.
        #[serde(default, skip_serializing_if = "is_zero_u8")]
        canary_percent: u8,
    },
    /// Ends a model's trial: promotes its version (a bump to it) or rolls it back (its answers invalid).
    EndCanary {
        /// The model.
        model: String,
        /// Promote (true) or roll back (false).
        promote: bool,
    },
    /// Adds a model to the registry (no-op when it is there with the same version and spec), or
    /// replaces a registered model's spec.
    RegisterModel {
        /// The model.
        model: String,
        /// Its current version (at least 1); 0 with a spec means whichever version it is at.
        version: u64,
        /// Its metadata; `None` keeps what the registry holds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spec: Option<ModelSpec>,
    },
    /// Creates a tenant or replaces its policy (its invalidation epoch is kept).
    SetTenantPolicy {
        /// The tenant.
        tenant: String,
        /// The policy.
        policy: TenantPolicy,
    },
    /// Adds served hits to the models' hot-prompt summaries.
    RecordHits {
        /// Cache keys and how often each was served since the last report.
        hits: Vec<(String, u32)>,
    },
    /// The leader's periodic proposal: it advances the log time (what reads decide expiry against) and
    /// removes what the leader found dead. Each listed item is removed only if it is dead at this
    /// command's log time, so every replica removes the same items at the same index.
    Sweep {
        /// Cache keys of entries found expired or invalidated.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        entries: Vec<String>,
        /// Request ids found past their retention.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        requests: Vec<String>,
        /// Revisions of change-feed rows found past their retention.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        feed: Vec<u64>,
    },
}

/// Which entries an [`Command::Invalidate`] removes. The log keeps its own type (its serialized form is
/// part of the log); the feed announces it as the matching [`shared::changes::Change`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "scope", rename_all = "snake_case")]
pub enum InvalidateScope {
    /// One entry (the tenant must own it).
    Key {
        /// Its owner.
        tenant: String,
        /// Its cache key.
        key: String,
    },
    /// Every entry of a tenant that carries a cache tag.
    Tag {
        /// The tenant.
        tenant: String,
        /// The tag.
        tag: String,
        /// Whether the hottest answers it invalidates are regenerated in the background.
        #[serde(default)]
        refresh: bool,
    },
    /// Every entry of a tenant (its epoch moves on).
    Tenant {
        /// The tenant.
        tenant: String,
    },
    /// Every entry of one version of a model.
    ModelVersion {
        /// The model.
        model: String,
        /// The version.
        version: u64,
    },
}

impl From<&InvalidateScope> for shared::changes::Change {
    /// The change feed's announcement of an invalidation: the same scopes, under the feed's name.
    fn from(scope: &InvalidateScope) -> Self {
        use shared::changes::Change;
        match scope.clone() {
            InvalidateScope::Key { tenant, key } => Change::Key { tenant, key },
            InvalidateScope::Tag { tenant, tag, .. } => Change::Tag { tenant, tag },
            InvalidateScope::Tenant { tenant } => Change::Tenant { tenant },
            InvalidateScope::ModelVersion { model, version } => Change::ModelVersion { model, version },
        }
    }
}

/// A tenant's limits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantPolicy {
    /// Largest cached answer accepted, in bytes; 0 means the cluster's limit.
    pub max_value_bytes: u64,
    /// TTL of a put that gives none, in seconds; 0 means no expiry.
    pub default_ttl_s: u64,
    /// Longest TTL kept, in seconds (longer ones are cut to it); 0 means unlimited.
    pub max_ttl_s: u64,
    /// Whether the tiers cache answers to sampled requests (temperature above 0 without a seed); by
    /// default only deterministic requests are cached.
    #[serde(default)]
    pub cache_sampled: bool,
}

/// The normalized request behind an entry: enough to generate it again under a new model version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    /// The conversation.
    pub messages: Vec<Message>,
    /// Sampling parameters.
    pub sampling: Sampling,
    /// Its cache tags (part of its key).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// What applying one log entry did: one [`Applied`] per request of its proposal (none for blank and
/// membership entries).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProposalResponse {
    /// In request order.
    pub applied: Vec<Applied>,
}

/// What one request did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    /// The outcome (for a duplicate: the outcome of its first application).
    pub outcome: Outcome,
    /// Whether the request id had been applied before, so nothing changed this time.
    #[serde(default)]
    pub duplicate: bool,
}

/// The outcome of one command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The entry was stored.
    Stored {
        /// Its key.
        key: String,
        /// Its creation time (the leader's clock).
        created_ms: i64,
        /// Its TTL after the tenant policy.
        ttl_s: u64,
    },
    /// Entries were invalidated.
    Invalidated {
        /// Entries removed now (a key), or 0 when the scope is invalidated lazily by an epoch or version.
        removed: u64,
        /// The log time of the invalidation: answers created at or before it are invalid.
        #[serde(default)]
        at_ms: i64,
        /// The hottest answers it invalidated, to regenerate (a tag invalidation that asked for it).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        refresh: Vec<RefreshJob>,
    },
    /// A model moved to a new version.
    ModelVersion {
        /// The model.
        model: String,
        /// The version it had.
        previous: u64,
        /// The version it has now.
        version: u64,
        /// The hottest prompts of the old version, to regenerate under the new one (hottest first).
        refresh: Vec<RefreshJob>,
    },
    /// A model's next version went on trial.
    CanaryStarted {
        /// The model.
        model: String,
        /// Its current version, which answers the other requests.
        current: u64,
        /// The version on trial.
        version: u64,
        /// The percent of requests it answers.
        percent: u8,
    },
    /// A model's trial ended.
    CanaryEnded {
        /// The model.
        model: String,
        /// The version that was on trial.
        version: u64,
        /// Whether it was promoted (else rolled back).
        promoted: bool,
        /// After a promotion: the old version's hottest prompts, to regenerate under the new one.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        refresh: Vec<RefreshJob>,
    },
    /// A model is registered.
    ModelRegistered {
        /// The model.
        model: String,
        /// Its current version.
        version: u64,
    },
    /// A tenant's policy is set.
    TenantPolicySet {
        /// The tenant.
        tenant: String,
        /// Its invalidation epoch.
        epoch: u64,
    },
    /// Hits were added to the hot summaries.
    HitsRecorded,
    /// A sweep was applied.
    Swept {
        /// Entries removed.
        entries: u64,
        /// Request ids forgotten.
        requests: u64,
        /// Change-feed rows compacted.
        feed: u64,
    },
    /// The command was refused; nothing changed.
    Rejected {
        /// Why, as a category.
        reason: Rejection,
        /// Why, in words.
        message: String,
    },
}

/// Why the state machine refused a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// The tenant has no policy (it was never created).
    UnknownTenant,
    /// The model is not in the registry.
    UnknownModel,
    /// The entry is for an older version than the model's current one.
    StaleModelVersion,
    /// The value is larger than the tenant's limit.
    ValueTooLarge,
    /// The key belongs to another tenant.
    WrongTenant,
    /// The model is registered with another version, or a bump does not move forward.
    Conflict,
}

/// One prompt to regenerate after a model-version bump or a tag invalidation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RefreshJob {
    /// The model that answers it, and its version (empty and 0 in a bump's jobs: the bump names them).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// That model's version.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub model_version: u64,
    /// The tenant that owns it.
    pub tenant: String,
    /// Its content class.
    pub content_class: String,
    /// Its TTL.
    pub ttl_s: u64,
    /// The request to generate again.
    pub prompt: Prompt,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn is_zero_u8(value: &u8) -> bool {
    *value == 0
}
