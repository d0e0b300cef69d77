//! The core's decisions as every tier receives them: a change feed ordered by the core's revision (its
//! Raft log index), with each change stamped with the core's log time.
//!
//! The core streams these to the regional nodes (gRPC `CoreCache.Watch`); a regional node passes them on
//! to the edge (`GET /v1/changes?since=<revision>`, JSON of [`Changes`]). A reader that fell too far behind
//! (the feed was compacted past its revision, or it has none yet) gets a [`Resync`] instead: the current
//! models and tenant settings, and a floor time before which nothing it holds may be served.
//!
//! Times are the core's log time (the leader's clock carried in the log), the same clock that stamps
//! every cached entry's `created_ms` at the core, so tiers compare an entry with an invalidation in one
//! clock and never compare two machines' wall clocks.

use serde::{Deserialize, Serialize};

use crate::model_spec::ModelSpec;

/// One decision of the core.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// One cached answer of a tenant is invalid.
    Key {
        /// Its owner.
        tenant: String,
        /// Its cache key.
        key: String,
    },
    /// Every cached answer of a tenant that carries a cache tag is invalid ([`crate::cache_tags`]).
    Tag {
        /// The tenant whose tag it is.
        tenant: String,
        /// The tag.
        tag: String,
    },
    /// Every cached answer of a tenant is invalid.
    Tenant {
        /// The tenant.
        tenant: String,
    },
    /// Every cached answer of one version of a model is invalid.
    ModelVersion {
        /// The model.
        model: String,
        /// The version.
        version: u64,
    },
    /// A model's current version (a registration or a bump): answers of other versions are stale.
    ModelCurrent {
        /// The model.
        model: String,
        /// Its current version.
        version: u64,
    },
    /// A model's next version went on trial for a share of requests (`percent` above 0), or its trial
    /// ended (`percent` 0: promoted, with a [`Change::ModelCurrent`], or rolled back, with a
    /// [`Change::ModelVersion`] cutoff of its answers).
    ModelCanary {
        /// The model.
        model: String,
        /// The version on trial.
        version: u64,
        /// Percent of requests it answers; 0 ends the trial.
        percent: u8,
    },
    /// A model's registry metadata changed (context length, price, APIs, backend pool).
    ModelSpec {
        /// The model.
        model: String,
        /// Its metadata now.
        spec: ModelSpec,
    },
    /// A tenant's settings that the tiers in front of the core apply.
    TenantSettings {
        /// The tenant.
        tenant: String,
        /// Whether answers to sampled requests (temperature above 0 without a seed) may be cached.
        cache_sampled: bool,
    },
}

/// A change with its place in the feed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revised {
    /// The core's revision (log index) of the change; several changes may share one.
    pub revision: u64,
    /// The core's log time of the change, Unix milliseconds.
    pub at_ms: i64,
    /// The change.
    pub change: Change,
}

/// Where a reader starts again when it cannot follow the feed from its revision.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resync {
    /// The revision the state below is at.
    pub revision: u64,
    /// Nothing created at or before this may be served any more. From the core: its log time at that
    /// revision (the invalidations in between are unknown to the reader). From a regional node: its
    /// view's own floor, with each tenant's and model version's cutoffs below.
    pub floor_ms: i64,
    /// Per tenant, its latest cutoff (a tenant invalidation, or the latest of its keys' invalidations):
    /// nothing of the tenant created at or before it may be served. One tenant's invalidations floor
    /// only that tenant's answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenant_floors: Vec<(String, i64)>,
    /// Per model version, its cutoff.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_version_floors: Vec<(String, u64, i64)>,
    /// Per tenant and cache tag, its cutoff: nothing of the tenant carrying the tag created at or before
    /// it may be served.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tag_floors: Vec<(String, String, i64)>,
    /// Per tenant, the cutoff of every tag it invalidated too long ago to remember each: nothing of the
    /// tenant carrying any tag created at or before it may be served.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tagged_floors: Vec<(String, i64)>,
    /// Every model's current version.
    pub models: Vec<(String, u64)>,
    /// The models with a version on trial: the version and the percent of requests it answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canaries: Vec<(String, u64, u8)>,
    /// The registry's metadata of the models that have any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub specs: Vec<(String, ModelSpec)>,
    /// Tenants that cache sampled answers.
    pub cache_sampled: Vec<String>,
}

/// A batch of the feed, as the edge pulls it from a regional node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    /// The revision this batch brings the reader to; pass it as `since` next time.
    pub revision: u64,
    /// Present when the reader must start again from this state before applying `changes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync: Option<Resync>,
    /// Changes after `since` (after the resync's revision when there is one), oldest first.
    #[serde(default)]
    pub changes: Vec<Revised>,
    /// How long before the sender sent this batch its view was last confirmed current by the core: on
    /// the core's feed, since a leader (one a quorum acknowledged) confirmed the serving node's state; at
    /// a regional node, since the core's feed last did so for its view. A reader counts its view as
    /// confirmed at the time of receipt minus this age, so freshness composes across tiers. Absent: not
    /// known, and the batch confirms nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed_age_ms: Option<u64>,
    /// The core's log time when the sender sent this batch, as the sender reckons it (Unix milliseconds):
    /// a reader learns from it how far its own clock is from the core's, by which answers' TTLs run
    /// ([`crate::core_clock`]). Absent: not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_time_ms: Option<i64>,
    /// Whether the batch brings the reader to the sender's current state: no rows are left behind it
    /// (a first batch after a long absence may carry only part of the backlog).
    #[serde(default)]
    pub at_head: bool,
}
