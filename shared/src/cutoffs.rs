//! What a tier in front of the core knows of the core's invalidations, as cutoff times: an answer is
//! servable only if it was created (at the core, in the core's log time) after every cutoff that covers it
//! and under its model's current version.
//!
//! Every cache layer asks [`Cutoffs::admits`] before serving an entry and before keeping one that arrives
//! late (a replication delta, an edge fill), so an invalidation holds even where a layer could not remove
//! the entry at once (the edge's Cache API, a peer's delta that raced the invalidation). An answer created
//! in the same millisecond as a cutoff is refused: a needless miss at worst, never a stale hit.
//!
//! Key cutoffs are bounded ([`MAX_KEY_CUTOFFS`]): past the bound, the tenant holding the most forgets its
//! oldest, which raises that tenant's cutoff to its time. The bound costs misses of old answers, never
//! correctness, and they fall on the tenant that invalidated the most keys, not on every tenant.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::canary::Canary;
use crate::changes::{Change, Changes, Resync, Revised};
use crate::completion::CachedCompletion;
use crate::model_spec::ModelSpec;
use crate::tag_cutoffs::TenantTags;

/// Key cutoffs remembered before the oldest is folded into the floor.
pub const MAX_KEY_CUTOFFS: usize = 100_000;

/// The cutoffs a tier applies, at one revision of the core's feed. Serializable, so that a tier can keep
/// them across a restart and resume the feed from their revision.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Cutoffs {
    /// The feed revision applied so far (0: none yet).
    revision: u64,
    /// Nothing created at or before this is servable.
    floor_ms: i64,
    /// Per tenant.
    tenants: BTreeMap<String, i64>,
    /// Per model, per version.
    model_versions: BTreeMap<String, BTreeMap<u64, i64>>,
    /// Each model's current version.
    current: BTreeMap<String, u64>,
    /// Per key, for every tenant: only what a view persisted before key cutoffs were scoped by tenant
    /// holds (read, never added to; it empties as the bound evicts).
    keys: HashMap<String, i64>,
    /// Per tenant, per key: a tenant's invalidation of a key covers only that tenant's answer under it,
    /// so invalidating a key one does not own changes nothing for its owner.
    #[serde(default)]
    tenant_keys: HashMap<String, HashMap<String, i64>>,
    /// Per tenant, its keys in the order their cutoffs were set, for the bound.
    #[serde(default)]
    tenant_key_order: HashMap<String, VecDeque<String>>,
    /// Key cutoffs in `tenant_key_order`.
    #[serde(default)]
    ordered_keys: usize,
    /// Tenants that cache sampled answers.
    cache_sampled: BTreeSet<String>,
    /// Each model's registry metadata, as far as the feed said.
    #[serde(default)]
    specs: BTreeMap<String, ModelSpec>,
    /// The latest cutoff time applied (or the resync floor).
    latest_ms: i64,
    /// Per tenant, the latest of its key cutoffs: a reader that resyncs from this view (and so does not
    /// get the key cutoffs) is floored per tenant by it, not by every tenant's latest.
    #[serde(default)]
    tenant_key_latest: BTreeMap<String, i64>,
    /// Each model's version on trial, if it has one: its answers are servable beside the current ones.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    canaries: BTreeMap<String, Canary>,
    /// Per tenant, its cache-tag cutoffs (bounded per tenant as the core bounds them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    tenant_tags: BTreeMap<String, TenantTags>,
}

impl Cutoffs {
    /// The feed revision applied so far.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The floor: nothing created at or before it is servable.
    pub fn floor_ms(&self) -> i64 {
        self.floor_ms
    }

    /// The latest cutoff time applied: the floor for a reader that resyncs from this view.
    pub fn latest_ms(&self) -> i64 {
        self.latest_ms
    }

    /// Where a reader of this view starts again: this view's revision, models and settings, its floor,
    /// each tenant's latest cutoff (its own or its keys'), and each model version's cutoff. One tenant's
    /// invalidations floor only its own answers.
    pub fn resync_point(&self) -> Resync {
        let mut tenant_floors = self.tenants.clone();
        for (tenant, at) in &self.tenant_key_latest {
            raise(tenant_floors.entry(tenant.clone()).or_insert(*at), *at);
        }
        let model_version_floors = self
            .model_versions
            .iter()
            .flat_map(|(model, versions)| versions.iter().map(move |(v, at)| (model.clone(), *v, *at)))
            .collect();
        let tag_floors = self
            .tenant_tags
            .iter()
            .flat_map(|(tenant, tags)| {
                tags.cutoffs().map(move |(tag, at)| (tenant.clone(), tag.to_owned(), at))
            })
            .collect();
        let tagged_floors = self
            .tenant_tags
            .iter()
            .filter(|(_, tags)| tags.floor_ms() != 0)
            .map(|(tenant, tags)| (tenant.clone(), tags.floor_ms()))
            .collect();
        Resync {
            revision: self.revision,
            floor_ms: self.floor_ms,
            tenant_floors: tenant_floors.into_iter().collect(),
            model_version_floors,
            tag_floors,
            tagged_floors,
            models: self.current.iter().map(|(m, v)| (m.clone(), *v)).collect(),
            canaries: self.canaries.iter().map(|(m, c)| (m.clone(), c.version, c.percent)).collect(),
            cache_sampled: self.cache_sampled.iter().cloned().collect(),
            specs: self.specs.iter().map(|(m, s)| (m.clone(), s.clone())).collect(),
        }
    }

    /// Each model's registry metadata, as far as the feed said.
    pub fn specs(&self) -> &BTreeMap<String, ModelSpec> {
        &self.specs
    }

    /// Each model's current version, as far as the feed said.
    pub fn current_versions(&self) -> &BTreeMap<String, u64> {
        &self.current
    }

    /// `model`'s version on trial, if it has one.
    pub fn canary(&self, model: &str) -> Option<Canary> {
        self.canaries.get(model).copied()
    }

    /// The current version of `model`, if the feed named one.
    pub fn current_version(&self, model: &str) -> Option<u64> {
        self.current.get(model).copied()
    }

    /// Whether `tenant` caches answers to sampled requests.
    pub fn caches_sampled(&self, tenant: &str) -> bool {
        self.cache_sampled.contains(tenant)
    }

    /// Whether `entry` may be served (and kept): created after every cutoff that covers it, and of its
    /// model's current version (or the version on trial) when the feed named one.
    pub fn admits(&self, entry: &CachedCompletion) -> bool {
        let created = entry.created_ms;
        let after = |cutoff: Option<&i64>| cutoff.is_none_or(|&at| created > at);
        created > self.floor_ms
            && after(self.tenants.get(&entry.tenant))
            && after(self.model_versions.get(&entry.model).and_then(|v| v.get(&entry.model_version)))
            && after(self.keys.get(&entry.key))
            && after(self.tenant_keys.get(&entry.tenant).and_then(|keys| keys.get(&entry.key)))
            && !self.tenant_tags.get(&entry.tenant).is_some_and(|tags| tags.covers(&entry.tags, created))
            && self.current.get(&entry.model).is_none_or(|&v| {
                v == entry.model_version
                    || self.canary(&entry.model).is_some_and(|c| c.version == entry.model_version)
            })
    }

    /// Applies a batch: its resync first, then its changes. Changes at or before the revision already
    /// applied are skipped (a batch may be delivered twice). Returns whether the batch's resync was
    /// taken ([`resync`](Self::resync)).
    pub fn apply_batch(&mut self, batch: &Changes) -> bool {
        let resynced = batch.resync.as_ref().is_some_and(|resync| self.resync(resync));
        for revised in &batch.changes {
            self.apply(revised);
        }
        self.revision = self.revision.max(batch.revision);
        resynced
    }

    /// Starts again from `resync`: its models and settings, and its floors over everything held. A resync
    /// from a view behind this one (a lower revision: a source that knows less) is ignored, and model
    /// versions only move forward, so no source can make this view forget a cutoff or a bump.
    /// Returns whether it was taken.
    pub fn resync(&mut self, resync: &Resync) -> bool {
        if self.revision > 0 && resync.revision < self.revision {
            return false;
        }
        let mut current: BTreeMap<String, u64> = resync.models.iter().cloned().collect();
        for (model, version) in &self.current {
            let kept = current.entry(model.clone()).or_default();
            *kept = (*kept).max(*version);
        }
        // Cutoffs are facts: this view's own stay, and the resync's floors are added to them.
        self.floor_ms = self.floor_ms.max(resync.floor_ms);
        self.latest_ms = self.latest_ms.max(resync.floor_ms);
        for (tenant, at) in &resync.tenant_floors {
            raise(self.tenants.entry(tenant.clone()).or_insert(*at), *at);
            self.latest_ms = self.latest_ms.max(*at);
        }
        for (model, version, at) in &resync.model_version_floors {
            raise(self.model_versions.entry(model.clone()).or_default().entry(*version).or_insert(*at), *at);
            self.latest_ms = self.latest_ms.max(*at);
        }
        for (tenant, tag, at) in &resync.tag_floors {
            self.tenant_tags.entry(tenant.clone()).or_default().cut(tag, *at);
            self.latest_ms = self.latest_ms.max(*at);
        }
        for (tenant, at) in &resync.tagged_floors {
            self.tenant_tags.entry(tenant.clone()).or_default().raise_floor(*at);
            self.latest_ms = self.latest_ms.max(*at);
        }
        self.current = current;
        self.canaries = resync
            .canaries
            .iter()
            .map(|(model, version, percent)| (model.clone(), Canary { version: *version, percent: *percent }))
            .collect();
        self.cache_sampled = resync.cache_sampled.iter().cloned().collect();
        self.specs = resync.specs.iter().cloned().collect();
        self.revision = resync.revision;
        true
    }

    /// Applies one change unless it is at or before the revision applied so far (changes of one
    /// revision arrive together, so a revision is applied whole or not at all).
    pub fn apply(&mut self, revised: &Revised) {
        if revised.revision < self.revision {
            return;
        }
        let at = revised.at_ms;
        self.latest_ms = self.latest_ms.max(at);
        match &revised.change {
            Change::Key { tenant, key } => {
                self.cut_key(tenant, key, at);
                raise(self.tenant_key_latest.entry(tenant.clone()).or_insert(at), at);
            }
            Change::Tag { tenant, tag } => self.tenant_tags.entry(tenant.clone()).or_default().cut(tag, at),
            Change::Tenant { tenant } => raise(self.tenants.entry(tenant.clone()).or_insert(at), at),
            Change::ModelVersion { model, version } => {
                raise(self.model_versions.entry(model.clone()).or_default().entry(*version).or_insert(at), at)
            }
            Change::ModelCurrent { model, version } => {
                let current = self.current.entry(model.clone()).or_insert(*version);
                *current = (*current).max(*version);
                if self.canaries.get(model).is_some_and(|c| c.version <= *version) {
                    self.canaries.remove(model);
                }
            }
            Change::ModelCanary { model, version, percent: 0 } => {
                // Only the trial it ends: a later trial's start may arrive first after a resync.
                if self.canaries.get(model).is_some_and(|c| c.version == *version) {
                    self.canaries.remove(model);
                }
            }
            Change::ModelCanary { model, version, percent } => {
                self.canaries.insert(model.clone(), Canary { version: *version, percent: *percent });
            }
            Change::ModelSpec { model, spec } => {
                self.specs.insert(model.clone(), spec.clone());
            }
            Change::TenantSettings { tenant, cache_sampled } => {
                if *cache_sampled {
                    self.cache_sampled.insert(tenant.clone());
                } else {
                    self.cache_sampled.remove(tenant);
                }
            }
        }
        self.revision = self.revision.max(revised.revision);
    }

    fn cut_key(&mut self, tenant: &str, key: &str, at: i64) {
        match self.tenant_keys.entry(tenant.to_owned()).or_default().get_mut(key) {
            Some(cutoff) => raise(cutoff, at),
            None => {
                self.tenant_keys.entry(tenant.to_owned()).or_default().insert(key.to_owned(), at);
                self.tenant_key_order.entry(tenant.to_owned()).or_default().push_back(key.to_owned());
                self.ordered_keys += 1;
            }
        }
        while self.ordered_keys > MAX_KEY_CUTOFFS {
            let Some(heaviest) =
                self.tenant_key_order.iter().max_by_key(|(_, keys)| keys.len()).map(|(t, _)| t.clone())
            else {
                break;
            };
            let order = self.tenant_key_order.get_mut(&heaviest).expect("found above");
            let oldest = order.pop_front();
            if order.is_empty() {
                self.tenant_key_order.remove(&heaviest);
            }
            self.ordered_keys -= 1;
            let evicted = oldest.and_then(|key| {
                let own = self.tenant_keys.get_mut(&heaviest).and_then(|keys| keys.remove(&key));
                own.or_else(|| self.keys.remove(&key))
            });
            if self.tenant_keys.get(&heaviest).is_some_and(HashMap::is_empty) {
                self.tenant_keys.remove(&heaviest);
            }
            if let Some(cutoff) = evicted {
                raise(self.tenants.entry(heaviest).or_insert(cutoff), cutoff);
            }
        }
    }
}

fn raise(cutoff: &mut i64, at: i64) {
    *cutoff = (*cutoff).max(at);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, tenant: &str, version: u64, created_ms: i64) -> CachedCompletion {
        CachedCompletion {
            tenant: tenant.into(),
            model_version: version,
            etag: String::new(),
            created_ms,
            ..CachedCompletion::example(key, "a")
        }
    }

    fn at(revision: u64, at_ms: i64, change: Change) -> Revised {
        Revised { revision, at_ms, change }
    }

    #[test]
    fn each_scope_cuts_what_it_covers_and_only_before_its_time() {
        let mut cutoffs = Cutoffs::default();
        cutoffs.apply(&at(1, 100, Change::Key { tenant: "a".into(), key: "k".into() }));
        assert!(!cutoffs.admits(&entry("k", "a", 1, 100)), "same millisecond: refused");
        assert!(cutoffs.admits(&entry("k", "a", 1, 101)));
        assert!(
            cutoffs.admits(&entry("k", "b", 1, 50)),
            "another tenant's invalidation of b's key cuts nothing"
        );
        assert!(cutoffs.admits(&entry("other", "a", 1, 50)));
        cutoffs.apply(&at(2, 200, Change::Tenant { tenant: "a".into() }));
        assert!(!cutoffs.admits(&entry("other", "a", 1, 150)));
        assert!(cutoffs.admits(&entry("other", "b", 1, 150)));
        cutoffs.apply(&at(3, 300, Change::ModelVersion { model: "m".into(), version: 1 }));
        assert!(!cutoffs.admits(&entry("x", "b", 1, 250)));
        assert!(cutoffs.admits(&entry("x", "b", 2, 250)), "another version is not covered");
        cutoffs.apply(&at(4, 400, Change::ModelCurrent { model: "m".into(), version: 2 }));
        assert!(!cutoffs.admits(&entry("x", "b", 1, 500)), "an old version is stale");
        assert!(cutoffs.admits(&entry("x", "b", 2, 500)));
        cutoffs.apply(&at(4, 400, Change::ModelCurrent { model: "m".into(), version: 1 }));
        assert_eq!(cutoffs.current_version("m"), Some(2), "versions never go back");
    }

    #[test]
    fn a_tag_cuts_its_tenants_answers_carrying_it_and_travels_in_a_resync() {
        let tagged = |tenant: &str, tags: &[&str], created_ms: i64| CachedCompletion {
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            ..entry("k", tenant, 1, created_ms)
        };
        let mut view = Cutoffs::default();
        view.apply(&at(1, 100, Change::Tag { tenant: "a".into(), tag: "stock:AAPL".into() }));
        assert!(!view.admits(&tagged("a", &["region:eu", "stock:AAPL"], 100)));
        assert!(view.admits(&tagged("a", &["stock:AAPL"], 101)));
        assert!(view.admits(&tagged("a", &["stock:MSFT"], 50)), "another tag");
        assert!(view.admits(&tagged("a", &[], 50)), "an untagged answer");
        assert!(view.admits(&tagged("b", &["stock:AAPL"], 50)), "another tenant's tag of the same name");
        let mut reader = Cutoffs::default();
        reader.apply_batch(&Changes { revision: 1, resync: Some(view.resync_point()), ..Default::default() });
        assert!(!reader.admits(&tagged("a", &["stock:AAPL"], 100)), "the cutoff came with the resync");
        assert!(reader.admits(&tagged("a", &["stock:MSFT"], 50)), "and floors nothing else");
        assert!(reader.admits(&tagged("a", &[], 50)));
    }

    #[test]
    fn a_canarys_answers_are_served_while_it_runs_and_refused_once_it_is_rolled_back() {
        let mut view = Cutoffs::default();
        view.apply(&at(1, 10, Change::ModelCurrent { model: "m".into(), version: 1 }));
        view.apply(&at(2, 20, Change::ModelCanary { model: "m".into(), version: 2, percent: 10 }));
        assert!(view.admits(&entry("k", "a", 2, 25)) && view.admits(&entry("k", "a", 1, 25)), "both arms");
        assert!(!view.admits(&entry("k", "a", 3, 25)), "no other version");
        let mut reader = Cutoffs::default();
        reader.apply_batch(&Changes { revision: 2, resync: Some(view.resync_point()), ..Default::default() });
        assert_eq!(reader.canary("m"), Some(Canary { version: 2, percent: 10 }), "a resync carries it");
        view.apply(&at(3, 30, Change::ModelCanary { model: "m".into(), version: 2, percent: 0 }));
        view.apply(&at(3, 30, Change::ModelVersion { model: "m".into(), version: 2 }));
        assert_eq!(view.canary("m"), None);
        assert!(!view.admits(&entry("k", "a", 2, 25)), "rolled back");
        assert!(view.admits(&entry("k", "a", 1, 25)));
    }

    #[test]
    fn a_view_persisted_before_key_cutoffs_had_tenants_keeps_them_for_every_tenant() {
        let persisted = r#"{"revision":3,"floor_ms":0,"tenants":{},"model_versions":{},"current":{},
            "keys":{"k":100},"cache_sampled":[],"latest_ms":100}"#;
        let cutoffs: Cutoffs = serde_json::from_str(persisted).expect("an older view");
        assert!(!cutoffs.admits(&entry("k", "a", 1, 100)) && !cutoffs.admits(&entry("k", "b", 1, 50)));
        assert!(cutoffs.admits(&entry("k", "b", 1, 101)));
    }

    #[test]
    fn old_revisions_are_skipped_and_a_resync_floors_everything() {
        let mut cutoffs = Cutoffs::default();
        cutoffs.apply(&at(5, 100, Change::Tenant { tenant: "a".into() }));
        cutoffs.apply(&at(3, 900, Change::Tenant { tenant: "a".into() }));
        assert!(cutoffs.admits(&entry("k", "a", 1, 500)), "revision 3 came after 5 was applied");
        let resync = Resync {
            revision: 9,
            floor_ms: 1_000,
            models: vec![("m".into(), 3)],
            cache_sampled: vec!["a".into()],
            ..Default::default()
        };
        cutoffs.apply_batch(&Changes { revision: 9, resync: Some(resync), ..Default::default() });
        assert_eq!(cutoffs.revision(), 9);
        assert!(!cutoffs.admits(&entry("k", "b", 3, 1_000)));
        assert!(cutoffs.admits(&entry("k", "b", 3, 1_001)));
        assert!(!cutoffs.admits(&entry("k", "b", 2, 2_000)));
        assert!(cutoffs.caches_sampled("a") && !cutoffs.caches_sampled("b"));
    }

    /// A reader that pulls from sources at different revisions (a resync from one behind it, changes
    /// from one ahead, in a seeded random order) never admits again what it once refused, and its
    /// revision and model versions never move back.
    #[test]
    fn no_source_behind_the_reader_makes_it_forget_a_cutoff() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let history: Vec<Revised> = (1..=200u64)
            .map(|revision| {
                let at_ms = revision as i64 * 10;
                let change = match next(4) {
                    0 => Change::Key { tenant: "a".into(), key: format!("k{}", next(8)) },
                    1 => Change::Tenant { tenant: ["a", "b"][next(2) as usize].into() },
                    2 => Change::ModelVersion { model: "m".into(), version: 1 + next(3) },
                    _ => Change::ModelCurrent { model: "m".into(), version: 1 + revision / 50 },
                };
                at(revision, at_ms, change)
            })
            .collect();
        let source_at = |revision: u64| {
            let mut source = Cutoffs::default();
            for revised in history.iter().filter(|r| r.revision <= revision) {
                source.apply(revised);
            }
            source
        };
        let entries: Vec<CachedCompletion> = (0..400)
            .map(|i| entry(&format!("k{}", i % 8), ["a", "b"][i % 2], 1 + (i as u64 % 5), i as i64 * 5))
            .collect();
        for _round in 0..20 {
            let mut reader = Cutoffs::default();
            let mut refused = vec![false; entries.len()];
            for _pull in 0..30 {
                let source = source_at(next(201));
                let (revision, version) = (reader.revision(), reader.current_version("m"));
                let batch = if reader.revision() == 0 || source.revision() < reader.revision() {
                    Changes {
                        revision: source.revision(),
                        resync: Some(source.resync_point()),
                        ..Default::default()
                    }
                } else {
                    let changes = history
                        .iter()
                        .filter(|r| r.revision > reader.revision() && r.revision <= source.revision())
                        .cloned()
                        .collect();
                    Changes { revision: source.revision(), changes, ..Default::default() }
                };
                reader.apply_batch(&batch);
                assert!(reader.revision() >= revision, "the revision moved back");
                assert!(reader.current_version("m") >= version, "a model version moved back");
                for (was_refused, entry) in refused.iter_mut().zip(&entries) {
                    let admits = reader.admits(entry);
                    assert!(!(*was_refused && admits), "{entry:?} was refused and is admitted again");
                    // A version newer than the current one is refused until a bump makes it current:
                    // that refusal is no cutoff.
                    let future = reader.current_version("m").is_some_and(|v| entry.model_version > v);
                    *was_refused |= !admits && !future;
                }
            }
        }
    }

    /// A reader that resyncs from a view (a new edge isolate) is floored per tenant: one tenant's
    /// invalidations refuse its own older answers, not every tenant's.
    #[test]
    fn a_resync_floors_each_tenant_at_its_own_latest_cutoff() {
        let mut view = Cutoffs::default();
        view.apply(&at(1, 100, Change::Key { tenant: "a".into(), key: "k".into() }));
        view.apply(&at(2, 200, Change::Tenant { tenant: "c".into() }));
        view.apply(&at(3, 300, Change::ModelVersion { model: "m".into(), version: 1 }));
        let mut reader = Cutoffs::default();
        reader.apply_batch(&Changes { revision: 3, resync: Some(view.resync_point()), ..Default::default() });
        assert!(!reader.admits(&entry("k", "a", 2, 100)), "tenant a's key cutoff floors tenant a");
        assert!(!reader.admits(&entry("other", "a", 2, 90)));
        assert!(reader.admits(&entry("other", "a", 2, 101)));
        assert!(!reader.admits(&entry("x", "c", 2, 200)), "tenant c's invalidation");
        assert!(reader.admits(&entry("x", "b", 2, 150)), "tenant b had no invalidation");
        assert!(!reader.admits(&entry("x", "b", 1, 250)), "model m version 1's cutoff");
        assert!(reader.admits(&entry("x", "b", 1, 301)));
    }

    #[test]
    fn past_the_bound_the_flooding_tenant_forgets_its_own_oldest_key_cutoffs() {
        let mut cutoffs = Cutoffs::default();
        cutoffs.apply(&at(1, 5, Change::Key { tenant: "b".into(), key: "b-key".into() }));
        for i in 0..MAX_KEY_CUTOFFS as i64 {
            cutoffs.apply(&at(1, i + 10, Change::Key { tenant: "a".into(), key: format!("k{i}") }));
        }
        assert_eq!(cutoffs.floor_ms(), 0, "no global floor");
        assert!(!cutoffs.admits(&entry("k0", "a", 1, 10)), "a's oldest cutoff became a's tenant cutoff");
        assert!(!cutoffs.admits(&entry("other", "a", 1, 10)));
        assert!(cutoffs.admits(&entry("k0", "a", 1, 11)));
        assert!(cutoffs.admits(&entry("other", "b", 1, 3)), "tenant b keeps its old answers");
        assert!(!cutoffs.admits(&entry("b-key", "b", 1, 5)), "and its own key cutoff");
    }

    #[test]
    fn a_view_survives_serialization_and_offers_its_own_resync_point() {
        let mut cutoffs = Cutoffs::default();
        cutoffs.apply(&at(3, 40, Change::ModelVersion { model: "m".into(), version: 1 }));
        cutoffs.apply(&at(4, 50, Change::ModelCurrent { model: "m".into(), version: 2 }));
        let spec = ModelSpec { context_length: 2048, ..Default::default() };
        cutoffs.apply(&at(4, 50, Change::ModelSpec { model: "m".into(), spec: spec.clone() }));
        let back: Cutoffs =
            serde_json::from_str(&serde_json::to_string(&cutoffs).expect("json")).expect("back");
        assert!(!back.admits(&entry("k", "a", 1, 45)));
        assert_eq!(back.revision(), 4);
        let resync = back.resync_point();
        assert_eq!(resync.specs, [("m".to_owned(), spec)]);
        assert_eq!((resync.revision, resync.floor_ms, resync.models), (4, 0, vec![("m".into(), 2)]));
        assert_eq!(resync.model_version_floors, vec![("m".to_owned(), 1, 40)], "carried, not a global floor");
    }
}
