//! What the state machine stores per cache entry, tenant, model and applied request, and when an entry is
//! live. Entries are invalidated lazily: a tenant's or a model's epoch moves on (and a version bump moves the
//! model's version), so one command makes any number of entries stale; the stale ones are removed later.

use serde::{Deserialize, Serialize};
use shared::canary::Canary;
use shared::completion::CachedCompletion;
use shared::model_spec::ModelSpec;
use shared::tag_cutoffs::TenantTags;

use super::hot_prompts::HotPrompts;
use super::types::{Outcome, Prompt, TenantPolicy};

/// One cache entry as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredEntry {
    /// The completion (its `created_ms` is the leader's time of the put).
    pub entry: CachedCompletion,
    /// The content class it was cached under.
    pub content_class: String,
    /// The owner's invalidation epoch when it was stored.
    pub tenant_epoch: u64,
    /// The model's invalidation epoch when it was stored.
    pub model_epoch: u64,
    /// The request that produced it, when known.
    pub prompt: Option<Prompt>,
}

/// A tenant: its policy, its invalidation epoch and its cache-tag cutoffs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantState {
    /// The limits.
    pub policy: TenantPolicy,
    /// Entries stored under an older epoch are invalid.
    pub epoch: u64,
    /// Entries carrying a tag created at or before its cutoff are invalid (bounded per tenant, as every
    /// tier bounds them).
    #[serde(default, skip_serializing_if = "TenantTags::is_empty")]
    pub tags: TenantTags,
}

/// A registered model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelState {
    /// The current version; entries of other versions are stale.
    pub version: u64,
    /// Entries of the current version stored under an older epoch are invalid.
    pub epoch: u64,
    /// The current version's hottest keys.
    pub hot: HotPrompts,
    /// The registry's metadata (context length, prices, APIs, backend pool), when it was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<ModelSpec>,
    /// The next version on trial for a share of requests; its answers are live beside the current ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<Canary>,
    /// The highest version ever on trial (0: none): bumps and trials go above it.
    #[serde(default)]
    pub tried: u64,
}

impl ModelState {
    /// Whether answers of `version` are live (the current version, or the one on trial).
    pub fn serves_version(&self, version: u64) -> bool {
        self.version == version || self.canary.is_some_and(|c| c.version == version)
    }
}

/// A request id that was applied, with its outcome (so a retry gets the same answer).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppliedRequest {
    /// When it was applied (the leader's clock); ids are forgotten [`REQUEST_ID_RETENTION_MS`] later.
    pub issued_ms: i64,
    /// What it did.
    pub outcome: Outcome,
}

/// How long an applied request id is remembered: a client retrying for longer may apply twice.
pub const REQUEST_ID_RETENTION_MS: i64 = 10 * 60 * 1000;

/// How long (log time) a change stays in the feed: a watcher away for longer resyncs.
pub const FEED_RETENTION_MS: i64 = 60 * 60 * 1000;

/// The changes one log entry made that the tiers in front of the core must learn of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedRow {
    /// The entry's log time.
    pub at_ms: i64,
    /// In the order they were applied.
    pub changes: Vec<shared::changes::Change>,
}

/// What decides whose an entry is and whether it is live, without its content: the state machine keeps it
/// in sled apart from the stored row (`state_machine/entry_heads.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryHead {
    /// The owner.
    pub tenant: String,
    /// The model that answered.
    pub model: String,
    /// That model's version.
    pub model_version: u64,
    /// The owner's invalidation epoch when it was stored.
    pub tenant_epoch: u64,
    /// The model's invalidation epoch when it was stored.
    pub model_epoch: u64,
    /// When it was stored (the leader's clock).
    pub created_ms: i64,
    /// Seconds it lives (0: until removed).
    pub ttl_s: u64,
    /// Its cache tags.
    pub tags: Vec<String>,
}

impl EntryHead {
    /// The head of `stored`.
    pub fn of(stored: &StoredEntry) -> Self {
        Self {
            tenant: stored.entry.tenant.clone(),
            model: stored.entry.model.clone(),
            model_version: stored.entry.model_version,
            tenant_epoch: stored.tenant_epoch,
            model_epoch: stored.model_epoch,
            created_ms: stored.entry.created_ms,
            ttl_s: stored.entry.ttl_s,
            tags: stored.entry.tags.clone(),
        }
    }

    /// Whether the entry may be served at `now_ms`, given its tenant and model as they are now.
    pub fn is_live(&self, tenant: Option<&TenantState>, model: Option<&ModelState>, now_ms: i64) -> bool {
        let (model_version, tenant_epoch, model_epoch) =
            (self.model_version, self.tenant_epoch, self.model_epoch);
        let (created_ms, ttl_s, tags) = (self.created_ms, self.ttl_s, self.tags.as_slice());
        Stamp { model_version, tenant_epoch, model_epoch, created_ms, ttl_s, tags }
            .is_live(tenant, model, now_ms)
    }
}

/// What decides whether an entry is live, read from a head or a stored entry without copying their names.
#[derive(Clone, Copy)]
struct Stamp<'a> {
    model_version: u64,
    tenant_epoch: u64,
    model_epoch: u64,
    created_ms: i64,
    ttl_s: u64,
    tags: &'a [String],
}

impl Stamp<'_> {
    fn is_live(self, tenant: Option<&TenantState>, model: Option<&ModelState>, now_ms: i64) -> bool {
        let tenant_ok = tenant
            .is_some_and(|t| t.epoch == self.tenant_epoch && !t.tags.covers(self.tags, self.created_ms));
        let model_ok =
            model.is_some_and(|m| m.serves_version(self.model_version) && m.epoch == self.model_epoch);
        tenant_ok && model_ok && !shared::completion::expired(self.created_ms, self.ttl_s, now_ms)
    }
}

impl StoredEntry {
    /// An entry of `tenant` under `key` answering `content` (model `m` at version 1, no expiry), for tests.
    #[cfg(test)]
    pub fn sample(key: &str, tenant: &str, content: &str) -> Self {
        let entry = CachedCompletion {
            tenant: tenant.into(),
            etag: "\"e\"".into(),
            created_ms: 5,
            ..CachedCompletion::example(key, content)
        };
        Self { entry, content_class: "c".into(), tenant_epoch: 1, model_epoch: 2, prompt: None }
    }

    /// Whether the entry may be served at `now_ms`, given its tenant and model as they are now.
    pub fn is_live(&self, tenant: Option<&TenantState>, model: Option<&ModelState>, now_ms: i64) -> bool {
        let (tenant_epoch, model_epoch) = (self.tenant_epoch, self.model_epoch);
        let (model_version, created_ms, ttl_s) =
            (self.entry.model_version, self.entry.created_ms, self.entry.ttl_s);
        let tags = self.entry.tags.as_slice();
        Stamp { model_version, tenant_epoch, model_epoch, created_ms, ttl_s, tags }
            .is_live(tenant, model, now_ms)
    }
}
