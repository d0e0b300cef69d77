//! Applying one proposal's requests to the state machine's tables: the rules of every command, written
//! against the [`Tables`] trait so that the same code runs over sled (through the state machine's overlay of a batch's
//! writes) and in unit tests.
//!
//! Applying never fails for a reason the command carries: a command that breaks a rule (unknown tenant,
//! oversized value, stale version) becomes an [`Outcome::Rejected`] and changes nothing. Only the storage
//! itself can fail.

use std::collections::BTreeMap;

use shared::canary::Canary;
use shared::changes::Change;

use super::records::{
    AppliedRequest, EntryHead, FeedRow, ModelState, StoredEntry, TenantState, FEED_RETENTION_MS,
    REQUEST_ID_RETENTION_MS,
};
use shared::completion::CachedCompletion;
use shared::model_spec::ModelSpec;

use super::types::{
    Applied, Command, InvalidateScope, Outcome, Prompt, RefreshJob, Rejection, Request, TenantPolicy,
};

/// Largest cached answer the cluster accepts, in bytes (a tenant policy may set less).
pub const MAX_VALUE_BYTES: u64 = 1024 * 1024;
/// Prompts queued for regeneration after a model-version bump or a tag invalidation.
pub const REFRESH_TOP: usize = 16;

/// Keyed access to the state machine's tables.
pub trait Tables {
    /// A storage failure.
    type Error;
    /// The entry under a cache key.
    fn entry(&mut self, key: &str) -> Result<Option<StoredEntry>, Self::Error>;
    /// The head of the entry under a cache key: whose it is and whether it is live, without its content.
    fn entry_head(&mut self, key: &str) -> Result<Option<EntryHead>, Self::Error> {
        Ok(self.entry(key)?.as_ref().map(EntryHead::of))
    }
    /// Stores an entry.
    fn put_entry(&mut self, key: &str, entry: &StoredEntry) -> Result<(), Self::Error>;
    /// Removes an entry.
    fn remove_entry(&mut self, key: &str) -> Result<(), Self::Error>;
    /// A tenant.
    fn tenant(&mut self, name: &str) -> Result<Option<TenantState>, Self::Error>;
    /// Stores a tenant.
    fn put_tenant(&mut self, name: &str, tenant: &TenantState) -> Result<(), Self::Error>;
    /// A model.
    fn model(&mut self, name: &str) -> Result<Option<ModelState>, Self::Error>;
    /// Stores a model.
    fn put_model(&mut self, name: &str, model: &ModelState) -> Result<(), Self::Error>;
    /// Every registered model's name.
    fn model_names(&mut self) -> Result<Vec<String>, Self::Error>;
    /// An applied request id.
    fn request(&mut self, id: &str) -> Result<Option<AppliedRequest>, Self::Error>;
    /// Records an applied request id.
    fn put_request(&mut self, id: &str, request: &AppliedRequest) -> Result<(), Self::Error>;
    /// Forgets an applied request id.
    fn remove_request(&mut self, id: &str) -> Result<(), Self::Error>;
    /// The change-feed row of a revision.
    fn feed_row(&mut self, revision: u64) -> Result<Option<FeedRow>, Self::Error>;
    /// Stores the change-feed row of a revision.
    fn put_feed_row(&mut self, revision: u64, row: &FeedRow) -> Result<(), Self::Error>;
    /// Removes the change-feed row of a revision (compaction).
    fn remove_feed_row(&mut self, revision: u64) -> Result<(), Self::Error>;
    /// The highest revision compacted out of the feed (0: none).
    fn feed_floor(&mut self) -> Result<u64, Self::Error>;
    /// Sets the highest revision compacted out of the feed.
    fn set_feed_floor(&mut self, revision: u64) -> Result<(), Self::Error>;
}

/// Applies one proposal's requests at the state machine's time `clock_ms`, in order, as log index
/// `revision`; the changes the tiers in front of the core must learn of become the feed row of that
/// revision.
///
/// Models touched by several requests are read once and written once, at the end.
pub fn apply_proposal<T: Tables>(
    tables: &mut T,
    revision: u64,
    clock_ms: i64,
    requests: &[Request],
) -> Result<Vec<Applied>, T::Error> {
    let mut applier =
        Applier { tables, clock_ms, tenants: BTreeMap::new(), models: BTreeMap::new(), changes: Vec::new() };
    let mut applied = Vec::with_capacity(requests.len());
    for request in requests {
        applied.push(applier.apply(request)?);
    }
    for (name, model) in &applier.models {
        if let Some(model) = model {
            applier.tables.put_model(name, model)?;
        }
    }
    if !applier.changes.is_empty() {
        let row = FeedRow { at_ms: clock_ms, changes: applier.changes };
        applier.tables.put_feed_row(revision, &row)?;
    }
    Ok(applied)
}

/// The state of one proposal's application.
struct Applier<'a, T> {
    tables: &'a mut T,
    clock_ms: i64,
    /// Tenants read so far (`None`: unknown), kept as written: a proposal of many puts for one tenant
    /// reads and decodes it once.
    tenants: BTreeMap<String, Option<TenantState>>,
    /// Models read so far (`None`: not registered), written back at the end.
    models: BTreeMap<String, Option<ModelState>>,
    /// What this proposal changed that the tiers in front of the core must learn of.
    changes: Vec<Change>,
}

fn rejected(reason: Rejection, message: impl Into<String>) -> Outcome {
    Outcome::Rejected { reason, message: message.into() }
}

/// The version a bump or a trial of `model` moves to: `asked`, or one above the highest it has had
/// (current or on trial) when 0; a refusal when `asked` is not above that.
fn next_version(name: &str, model: &ModelState, asked: u64) -> Result<u64, Outcome> {
    let highest = model.version.max(model.tried);
    match asked {
        0 => Ok(highest + 1),
        v if v > highest => Ok(v),
        _ => Err(rejected(
            Rejection::Conflict,
            format!("model {name:?} has had version {highest}; a new version must go higher than that"),
        )),
    }
}

impl<T: Tables> Applier<'_, T> {
    fn apply(&mut self, request: &Request) -> Result<Applied, T::Error> {
        if !request.id.is_empty() {
            if let Some(previous) = self.tables.request(&request.id)? {
                return Ok(Applied { outcome: previous.outcome, duplicate: true });
            }
        }
        let outcome = self.command(&request.command)?;
        if !request.id.is_empty() {
            let record = AppliedRequest { issued_ms: self.clock_ms, outcome: outcome.clone() };
            self.tables.put_request(&request.id, &record)?;
        }
        Ok(Applied { outcome, duplicate: false })
    }

    fn tenant(&mut self, name: &str) -> Result<Option<TenantState>, T::Error> {
        if let Some(tenant) = self.tenants.get(name) {
            return Ok(tenant.clone());
        }
        let tenant = self.tables.tenant(name)?;
        self.tenants.insert(name.to_owned(), tenant.clone());
        Ok(tenant)
    }

    fn put_tenant(&mut self, name: &str, tenant: TenantState) -> Result<(), T::Error> {
        self.tables.put_tenant(name, &tenant)?;
        self.tenants.insert(name.to_owned(), Some(tenant));
        Ok(())
    }

    fn model(&mut self, name: &str) -> Result<Option<&mut ModelState>, T::Error> {
        if !self.models.contains_key(name) {
            let model = self.tables.model(name)?;
            self.models.insert(name.to_owned(), model);
        }
        Ok(self.models.get_mut(name).and_then(Option::as_mut))
    }

    fn command(&mut self, command: &Command) -> Result<Outcome, T::Error> {
        match command {
            Command::Put { entry, content_class, prompt } => self.put(entry, content_class, prompt.as_ref()),
            Command::Invalidate { scope } => self.invalidate(scope),
            Command::BumpModelVersion { model: name, version, canary_percent: 0 } => {
                self.bump_model_version(name, *version)
            }
            Command::BumpModelVersion { model: name, version, canary_percent } => {
                self.start_canary(name, *version, *canary_percent)
            }
            Command::EndCanary { model: name, promote } => self.end_canary(name, *promote),
            Command::RegisterModel { model: name, version, spec } => {
                self.register_model(name, *version, spec.as_ref())
            }
            Command::SetTenantPolicy { tenant: name, policy } => self.set_tenant_policy(name, policy),
            Command::RecordHits { hits } => self.record_hits(hits),
            Command::Sweep { entries, requests, feed } => self.sweep(entries, requests, feed),
        }
    }

    /// Stores `entry` under its key, stamped with this command's log time and the tenant's TTL policy.
    fn put(
        &mut self,
        entry: &CachedCompletion,
        content_class: &str,
        prompt: Option<&Prompt>,
    ) -> Result<Outcome, T::Error> {
        let Some(tenant) = self.tenant(&entry.tenant)? else {
            return Ok(rejected(Rejection::UnknownTenant, format!("unknown tenant {:?}", entry.tenant)));
        };
        let clock_ms = self.clock_ms;
        let Some(model) = self.model(&entry.model)? else {
            return Ok(rejected(Rejection::UnknownModel, format!("unknown model {:?}", entry.model)));
        };
        if entry.model_version < model.version {
            return Ok(rejected(
                Rejection::StaleModelVersion,
                format!(
                    "model {:?} is at version {}, not {}",
                    entry.model, model.version, entry.model_version
                ),
            ));
        }
        if entry.model_version > model.version && !model.serves_version(entry.model_version) {
            return Ok(rejected(
                Rejection::Conflict,
                format!(
                    "model {:?} has no version {} yet (current {})",
                    entry.model, entry.model_version, model.version
                ),
            ));
        }
        let model_epoch = model.epoch;
        let limit = match tenant.policy.max_value_bytes {
            0 => MAX_VALUE_BYTES,
            n => n.min(MAX_VALUE_BYTES),
        };
        if entry.content.len() as u64 > limit {
            return Ok(rejected(
                Rejection::ValueTooLarge,
                format!(
                    "the value has {} bytes; tenant {:?} accepts at most {limit}",
                    entry.content.len(),
                    entry.tenant
                ),
            ));
        }
        if let Some(existing) = self.tables.entry_head(&entry.key)? {
            if existing.tenant != entry.tenant {
                return Ok(rejected(Rejection::WrongTenant, "the key belongs to another tenant"));
            }
        }
        let mut ttl_s = if entry.ttl_s == 0 { tenant.policy.default_ttl_s } else { entry.ttl_s };
        if tenant.policy.max_ttl_s != 0 && (ttl_s == 0 || ttl_s > tenant.policy.max_ttl_s) {
            ttl_s = tenant.policy.max_ttl_s;
        }
        let mut stored_entry = entry.clone();
        stored_entry.created_ms = clock_ms;
        stored_entry.ttl_s = ttl_s;
        let stored = StoredEntry {
            entry: stored_entry,
            content_class: content_class.to_owned(),
            tenant_epoch: tenant.epoch,
            model_epoch,
            prompt: prompt.cloned(),
        };
        self.tables.put_entry(&entry.key, &stored)?;
        if let Some(model) = self.model(&entry.model)? {
            model.hot.record(&entry.key, 1);
        }
        Ok(Outcome::Stored { key: entry.key.clone(), created_ms: clock_ms, ttl_s })
    }

    /// Moves `name` to `version` (the next one when 0), listing its hottest live prompts to regenerate.
    /// A version on trial is replaced: the bump decides for every request.
    fn bump_model_version(&mut self, name: &str, version: u64) -> Result<Outcome, T::Error> {
        let Some(model) = self.model(name)?.cloned() else {
            return Ok(rejected(Rejection::UnknownModel, format!("unknown model {name:?}")));
        };
        let next = match next_version(name, &model, version) {
            Ok(next) => next,
            Err(refusal) => return Ok(refusal),
        };
        let refresh = self.hottest_prompts(&model, next)?;
        if let Some(canary) = model.canary {
            self.changes.push(Change::ModelCanary {
                model: name.to_owned(),
                version: canary.version,
                percent: 0,
            });
        }
        if let Some(current) = self.model(name)? {
            current.version = next;
            current.hot = Default::default();
            current.canary = None;
        }
        self.changes.push(Change::ModelCurrent { model: name.to_owned(), version: next });
        Ok(Outcome::ModelVersion { model: name.to_owned(), previous: model.version, version: next, refresh })
    }

    /// Up to [`REFRESH_TOP`] of `model`'s hottest live prompts that are not of `version` yet, hottest
    /// first: what a move to `version` regenerates.
    fn hottest_prompts(&mut self, model: &ModelState, version: u64) -> Result<Vec<RefreshJob>, T::Error> {
        let mut refresh = Vec::new();
        for (key, _) in model.hot.hottest(super::hot_prompts::HOT_CAPACITY) {
            if refresh.len() == REFRESH_TOP {
                break;
            }
            let Some(stored) = self.tables.entry(&key)? else { continue };
            let tenant = self.tenant(&stored.entry.tenant)?;
            let Some(prompt) = stored.prompt.clone() else { continue };
            if stored.entry.model_version != version && stored.is_live(tenant.as_ref(), Some(model), i64::MIN)
            {
                refresh.push(RefreshJob {
                    model: String::new(),
                    model_version: 0,
                    tenant: stored.entry.tenant.clone(),
                    content_class: stored.content_class.clone(),
                    ttl_s: stored.entry.ttl_s,
                    prompt,
                });
            }
        }
        Ok(refresh)
    }

    /// Puts `name`'s `version` (the next one when 0) on trial for `percent` of requests.
    fn start_canary(&mut self, name: &str, version: u64, percent: u8) -> Result<Outcome, T::Error> {
        let Some(model) = self.model(name)?.cloned() else {
            return Ok(rejected(Rejection::UnknownModel, format!("unknown model {name:?}")));
        };
        if let Some(canary) = model.canary {
            return Ok(rejected(
                Rejection::Conflict,
                format!(
                    "model {name:?} has version {} on trial; promote or roll it back first",
                    canary.version
                ),
            ));
        }
        let next = match next_version(name, &model, version) {
            Ok(next) => next,
            Err(refusal) => return Ok(refusal),
        };
        let canary = Canary { version: next, percent };
        if let Some(state) = self.model(name)? {
            state.canary = Some(canary);
            state.tried = state.tried.max(next);
        }
        self.changes.push(Change::ModelCanary { model: name.to_owned(), version: next, percent });
        Ok(Outcome::CanaryStarted { model: name.to_owned(), current: model.version, version: next, percent })
    }

    /// Ends `name`'s trial: promotes its version (a bump to it, whose answers stay live) or rolls it back
    /// (every tier refuses its answers from now on, and no later version reuses its number).
    fn end_canary(&mut self, name: &str, promote: bool) -> Result<Outcome, T::Error> {
        let Some(model) = self.model(name)?.cloned() else {
            return Ok(rejected(Rejection::UnknownModel, format!("unknown model {name:?}")));
        };
        let Some(canary) = model.canary else {
            return Ok(rejected(Rejection::Conflict, format!("model {name:?} has no version on trial")));
        };
        let version = canary.version;
        self.changes.push(Change::ModelCanary { model: name.to_owned(), version, percent: 0 });
        let refresh = if promote { self.hottest_prompts(&model, version)? } else { Vec::new() };
        if let Some(state) = self.model(name)? {
            state.canary = None;
            if promote {
                state.version = version;
                state.hot = Default::default();
            }
        }
        self.changes.push(match promote {
            true => Change::ModelCurrent { model: name.to_owned(), version },
            false => Change::ModelVersion { model: name.to_owned(), version },
        });
        Ok(Outcome::CanaryEnded { model: name.to_owned(), version, promoted: promote, refresh })
    }

    /// Registers `name` at `version` with `spec`, or gives a registered model `spec` (at its version,
    /// or any with `version` 0); registering it again as it is changes nothing.
    fn register_model(
        &mut self,
        name: &str,
        version: u64,
        spec: Option<&ModelSpec>,
    ) -> Result<Outcome, T::Error> {
        let registered = match self.model(name)? {
            Some(existing) if version == 0 || existing.version == version => {
                let changed = spec.filter(|&s| existing.spec.as_ref() != Some(s));
                if let Some(spec) = changed {
                    existing.spec = Some(spec.clone());
                }
                let version = existing.version;
                if let Some(spec) = changed {
                    self.changes.push(Change::ModelSpec { model: name.to_owned(), spec: spec.clone() });
                }
                version
            }
            Some(existing) => {
                return Ok(rejected(
                    Rejection::Conflict,
                    format!("model {name:?} is registered at version {}", existing.version),
                ))
            }
            None if version == 0 => return Ok(rejected(Rejection::Conflict, "model versions start at 1")),
            None => {
                let model = ModelState { version, spec: spec.cloned(), ..Default::default() };
                self.models.insert(name.to_owned(), Some(model));
                self.changes.push(Change::ModelCurrent { model: name.to_owned(), version });
                if let Some(spec) = spec {
                    self.changes.push(Change::ModelSpec { model: name.to_owned(), spec: spec.clone() });
                }
                version
            }
        };
        Ok(Outcome::ModelRegistered { model: name.to_owned(), version: registered })
    }

    /// Sets a tenant's limits (creating the tenant), and tells the feed whether it caches sampled answers.
    fn set_tenant_policy(&mut self, name: &str, policy: &TenantPolicy) -> Result<Outcome, T::Error> {
        let mut tenant = self.tenant(name)?.unwrap_or_default();
        tenant.policy = policy.clone();
        let epoch = tenant.epoch;
        self.put_tenant(name, tenant)?;
        let cache_sampled = policy.cache_sampled;
        self.changes.push(Change::TenantSettings { tenant: name.to_owned(), cache_sampled });
        Ok(Outcome::TenantPolicySet { tenant: name.to_owned(), epoch })
    }

    /// Counts served hits toward each key's hotness, for the key's current model version only.
    fn record_hits(&mut self, hits: &[(String, u32)]) -> Result<Outcome, T::Error> {
        for (key, count) in hits {
            let Some(head) = self.tables.entry_head(key)? else { continue };
            if let Some(model) = self.model(&head.model)? {
                if model.version == head.model_version {
                    model.hot.record(key, u64::from(*count));
                }
            }
        }
        Ok(Outcome::HitsRecorded)
    }

    /// Removes the listed entries, request ids and feed rows that are dead at this command's log time;
    /// anything listed that is live (rewritten since the leader looked, or not yet old enough) stays.
    fn sweep(&mut self, entries: &[String], requests: &[String], feed: &[u64]) -> Result<Outcome, T::Error> {
        let clock = self.clock_ms;
        let mut removed = (0, 0, 0);
        for key in entries {
            let Some(head) = self.tables.entry_head(key)? else { continue };
            let tenant = self.tenant(&head.tenant)?;
            let model = self.model(&head.model)?.cloned();
            if head.is_live(tenant.as_ref(), model.as_ref(), clock) {
                continue;
            }
            self.tables.remove_entry(key)?;
            if let Some(model) = self.model(&head.model)? {
                model.hot.forget(key);
            }
            removed.0 += 1;
        }
        for id in requests {
            let Some(request) = self.tables.request(id)? else { continue };
            if request.issued_ms.saturating_add(REQUEST_ID_RETENTION_MS) < clock {
                self.tables.remove_request(id)?;
                removed.1 += 1;
            }
        }
        let mut floor = self.tables.feed_floor()?;
        for &revision in feed {
            let Some(row) = self.tables.feed_row(revision)? else { continue };
            if row.at_ms.saturating_add(FEED_RETENTION_MS) < clock {
                self.tables.remove_feed_row(revision)?;
                floor = floor.max(revision);
                removed.2 += 1;
            }
        }
        if removed.2 > 0 {
            self.tables.set_feed_floor(floor)?;
        }
        Ok(Outcome::Swept { entries: removed.0, requests: removed.1, feed: removed.2 })
    }

    /// Up to [`REFRESH_TOP`] of `tenant`'s live entries carrying `tag`, hottest first across every model's
    /// hot summary (ties in model and key order, so every replica lists the same), with what regenerating
    /// each under its own key needs.
    fn tagged_hottest(&mut self, tenant: &str, tag: &str) -> Result<Vec<RefreshJob>, T::Error> {
        let mut hot = Vec::new();
        for name in self.tables.model_names()? {
            if let Some(model) = self.model(&name)? {
                let tracked = model.hot.hottest(super::hot_prompts::HOT_CAPACITY).into_iter();
                hot.extend(tracked.map(|(key, count)| (count, name.clone(), key)));
            }
        }
        hot.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| (&a.1, &a.2).cmp(&(&b.1, &b.2))));
        let owner = self.tenant(tenant)?;
        let mut jobs = Vec::new();
        for (_, name, key) in hot {
            if jobs.len() == REFRESH_TOP {
                break;
            }
            let Some(head) = self.tables.entry_head(&key)? else { continue };
            if head.tenant != tenant || !head.tags.iter().any(|t| t == tag) {
                continue;
            }
            let model = self.model(&name)?.cloned();
            if !head.is_live(owner.as_ref(), model.as_ref(), i64::MIN) {
                continue;
            }
            let Some(stored) = self.tables.entry(&key)? else { continue };
            let Some(prompt) = stored.prompt else { continue };
            jobs.push(RefreshJob {
                model: name,
                model_version: stored.entry.model_version,
                tenant: tenant.to_owned(),
                content_class: stored.content_class,
                ttl_s: stored.entry.ttl_s,
                prompt,
            });
        }
        Ok(jobs)
    }

    fn invalidate(&mut self, scope: &InvalidateScope) -> Result<Outcome, T::Error> {
        match scope {
            InvalidateScope::Key { tenant, key } => {
                let removed = match self.tables.entry_head(key)? {
                    None => 0,
                    // Another tenant's key is answered as if nothing were held under it (no existence
                    // oracle), and nothing is removed or announced: the owner's copies stay served.
                    Some(head) if &head.tenant != tenant => {
                        return Ok(Outcome::Invalidated {
                            removed: 0,
                            at_ms: self.clock_ms,
                            refresh: Vec::new(),
                        })
                    }
                    Some(head) => {
                        self.tables.remove_entry(key)?;
                        if let Some(model) = self.model(&head.model)? {
                            model.hot.forget(key);
                        }
                        1
                    }
                };
                // Announced whether or not the core held it: a tier in front may still hold a copy.
                self.changes.push(Change::from(scope));
                Ok(Outcome::Invalidated { removed, at_ms: self.clock_ms, refresh: Vec::new() })
            }
            InvalidateScope::Tag { tenant: name, tag, refresh } => {
                let Some(mut tenant) = self.tenant(name)? else {
                    return Ok(rejected(Rejection::UnknownTenant, format!("unknown tenant {name:?}")));
                };
                let refresh = if *refresh { self.tagged_hottest(name, tag)? } else { Vec::new() };
                tenant.tags.cut(tag, self.clock_ms);
                self.put_tenant(name, tenant)?;
                self.changes.push(Change::from(scope));
                Ok(Outcome::Invalidated { removed: 0, at_ms: self.clock_ms, refresh })
            }
            InvalidateScope::Tenant { tenant: name } => {
                let Some(mut tenant) = self.tenant(name)? else {
                    return Ok(rejected(Rejection::UnknownTenant, format!("unknown tenant {name:?}")));
                };
                tenant.epoch += 1;
                self.put_tenant(name, tenant)?;
                self.changes.push(Change::from(scope));
                Ok(Outcome::Invalidated { removed: 0, at_ms: self.clock_ms, refresh: Vec::new() })
            }
            InvalidateScope::ModelVersion { model: name, version } => {
                let Some(model) = self.model(name)? else {
                    return Ok(rejected(Rejection::UnknownModel, format!("unknown model {name:?}")));
                };
                if *version == model.version {
                    model.epoch += 1;
                    model.hot = Default::default();
                }
                self.changes.push(Change::from(scope));
                Ok(Outcome::Invalidated { removed: 0, at_ms: self.clock_ms, refresh: Vec::new() })
            }
        }
    }
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
