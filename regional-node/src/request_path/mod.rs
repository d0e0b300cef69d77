//! The regional request path: how a validated chat request is answered, kept apart from HTTP.
//!
//! In order: the exact cache (a hit also counts toward the key's hotness for replication); then, on a
//! miss, one flight per key to the core (identical concurrent misses coalesce onto it): the core's
//! entry under the key, else a verified paraphrase's from the semantic tier, else a generation through
//! the core once admission lets it in. When no core node can be reached, an answer within its stale
//! grace is served instead. `only-if-cached` looks but never generates. Realtime requests skip every
//! cache and are generated for each request.
//!
//! - [`admitted`]: [`Admitted`], the request with what is derived from it once (key, class, question).
//! - `lookup`: the core's entry, then the semantic tier.
//! - `embedding_share`: how many MiniLM forwards one tenant may run at once.
//! - `flight_task`: the leader's work for a flight; when its last client leaves, the flight ends and
//!   the core stops the generation.
//!
//! The HTTP handlers only authenticate, parse and render: they call [`RequestPath::answer`] and
//! [`RequestPath::invalidate`], and read the parts below for status and metrics.

pub mod admitted;
mod audit;
mod embedding_share;
mod flight_task;
mod lookup;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sha2::{Digest as _, Sha256};

use shared::changes::{Change, Changes};
use shared::completion::CachedCompletion;
use shared::models::{ModelRef, ModelTable};
use shared::server_timing::ServerTiming;
use shared::RequestError;

pub use self::admitted::{Admitted, Caching, ClassTtl, Directives};
use self::flight_task::FlightTask;
use crate::admission::Admission;
use crate::clock::now_ms;
use crate::core_cache_client::{CoreCacheClient, InvalidatedAtCore};
use crate::core_view::CoreView;
use crate::exact_cache::ExactCache;
use crate::exact_store::ExactStore;
use crate::flight::{Flight, Flights, Joined, Outcome, Subscription};
use crate::metrics::RegionalMetrics;
use crate::metrics::{AnsweredBy, HitTier};
use crate::model_catalog::ModelCatalog;
use crate::replication::record::{Record, Resolved};
use crate::replication::{Applier, Replication};
use crate::semantic::tier::SemanticTier;
use crate::tenant_rate::TenantRate;
use crate::RegionalError;

/// `X-Cache` of an answer from this node's exact cache.
pub const X_CACHE_REGIONAL: &str = "HIT-REGIONAL";
/// `X-Cache` of an answer from the core's state.
pub const X_CACHE_CORE: &str = "HIT-CORE";
/// `X-Cache` of an answer served from a paraphrase's entry by the semantic tier.
pub const X_CACHE_SEMANTIC: &str = "HIT-REGIONAL-SEMANTIC";
/// `X-Cache` of an answer past its TTL, served within the stale grace while the core is out of reach.
pub const X_CACHE_STALE: &str = "STALE";
/// `X-Cache` of an answer generated for this request (or its flight).
pub const X_CACHE_MISS: &str = "MISS";

/// How a request is answered.
#[derive(Debug)]
pub enum Answered {
    /// A whole answer from a cache, at once.
    Ready(Outcome),
    /// The flight of the request's key to the core: its deltas as they are generated, then its outcome.
    Flight {
        /// This request's view of the flight.
        subscription: Subscription,
        /// Whether the request joined another identical request's flight.
        coalesced: bool,
    },
}

/// Everything that answers a request at this node.
#[derive(Debug)]
pub struct RequestPath {
    /// The exact cache.
    cache: ExactCache,
    /// Its copy on disk, when there is a data directory.
    exact_store: Option<ExactStore>,
    /// The core cluster.
    core: CoreCacheClient,
    /// The semantic tier, when a model directory was given.
    semantic: Option<Arc<SemanticTier>>,
    /// Misses in flight to the core, by key.
    flights: Flights,
    /// Admission of generations by predicted cost.
    admission: Admission,
    /// The replicated hot set and invalidations.
    replication: Arc<Replication>,
    /// Exported metrics.
    metrics: RegionalMetrics,
    /// The served models and their current versions.
    models: Arc<ModelCatalog>,
    /// Makes this node's invalidation request ids unique in the mesh (see [`RequestPath::invalidate`]).
    invalidation_ids: InvalidationIds,
    /// What the core decided: every answer is checked against it before it is served or kept.
    view: Arc<CoreView>,
    /// Core lookups of edge-hot keys in flight, at most [`HOT_FETCHES`]: a hit report names thousands
    /// of keys, and the ones past the bound wait for the next report.
    hot_fetches: Arc<tokio::sync::Semaphore>,
    /// MiniLM forwards each tenant has running ([`embedding_share`]).
    embedding_share: embedding_share::EmbeddingShare,
    /// Each tenant's rate of lookups at the core: a tenant sending questions nobody asked before pays a
    /// core read (and an embedding) for each, before admission ever sees it.
    core_lookups: TenantRate,
}

/// Core lookups of edge-hot keys this node runs at once.
const HOT_FETCHES: usize = 16;

/// Request ids of this node's invalidations at the core: unique across nodes, restarts and calls in
/// the same millisecond (the core applies a request id once, so a collision would drop an
/// invalidation while its caller is told it succeeded), and short (the core takes at most 128 bytes).
#[derive(Debug)]
struct InvalidationIds {
    /// A digest of this node's id, its process and its start time.
    tag: String,
    /// Numbers this run's invalidations.
    next: AtomicU64,
}

impl InvalidationIds {
    fn new(node_id: &str) -> Self {
        let started =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let digest = Sha256::digest(format!("{node_id}\n{}\n{started}", std::process::id()));
        Self { tag: shared::hex::encode(&digest[..8]), next: AtomicU64::new(0) }
    }

    fn next(&self) -> String {
        format!("invalidate:{}:{}", self.tag, self.next.fetch_add(1, Ordering::Relaxed))
    }
}

/// The parts a [`RequestPath`] is made of.
#[derive(Debug)]
pub struct PathParts {
    /// The exact cache (already filled from disk and replication, if at all).
    pub cache: ExactCache,
    /// The exact cache's copy on disk.
    pub exact_store: Option<ExactStore>,
    /// The client of the core cluster.
    pub core: CoreCacheClient,
    /// The semantic tier.
    pub semantic: Option<Arc<SemanticTier>>,
    /// Admission of generations.
    pub admission: Admission,
    /// Replication between regional nodes.
    pub replication: Arc<Replication>,
    /// The served models (the `--models` flag until the core's registry is known).
    pub models: Arc<ModelCatalog>,
    /// This node's view of the core's feed.
    pub view: Arc<CoreView>,
    /// Each tenant's rate of lookups at the core.
    pub core_lookups: TenantRate,
}

impl RequestPath {
    /// A path over `parts`, with no flight in the air.
    pub fn new(parts: PathParts) -> Self {
        let PathParts {
            cache,
            exact_store,
            core,
            semantic,
            admission,
            replication,
            models,
            view,
            core_lookups,
        } = parts;
        let invalidation_ids = InvalidationIds::new(&replication.settings().node_id);
        Self {
            view,
            invalidation_ids,
            models,
            cache,
            exact_store,
            core,
            semantic,
            flights: Flights::default(),
            admission,
            replication,
            metrics: RegionalMetrics::default(),
            hot_fetches: Arc::new(tokio::sync::Semaphore::new(HOT_FETCHES)),
            embedding_share: embedding_share::EmbeddingShare::default(),
            core_lookups,
        }
    }

    /// Answers `admitted`: from the exact cache at once, else through the flight of its key (joined, or
    /// led on a task of its own).
    pub async fn answer(self: &Arc<Self>, admitted: Admitted) -> Result<Answered, RegionalError> {
        let cacheable = admitted.caching.lookup;
        let key = admitted.key.as_str();
        if cacheable {
            let hot = self.replication.touch(key);
            if let Some(entry) = self.cached(key, &admitted.tenant, now_ms()) {
                self.replication.offer(&entry, Some(hot), now_ms());
                self.metrics.hits.get(HitTier::Regional).inc();
                self.metrics.tokens_avoided.add(entry.completion_tokens.into());
                let mut timing = ServerTiming::default();
                timing.push_ms("regional", elapsed_ms(admitted.started));
                self.metrics
                    .latency
                    .get(AnsweredBy::Regional)
                    .observe(admitted.started.elapsed().as_secs_f64());
                return Ok(Answered::Ready(Outcome {
                    entry,
                    x_cache: X_CACHE_REGIONAL,
                    timing,
                    semantic: None,
                }));
            }
        }
        if admitted.only_if_cached {
            // Looks, never generates, and so never leads or follows a flight that might.
            let (found, _) = self.find_cached(&admitted).await?;
            let outcome = found.ok_or_else(|| {
                RequestError::gateway_timeout("not cached, and the request said only-if-cached")
            })?;
            return Ok(Answered::Ready(outcome));
        }
        // Identical concurrent misses share one flight to the core; an answer that must not be cached
        // (realtime) is generated for each request.
        let (flight, leader) = if cacheable {
            match self.flights.join(key) {
                Joined::Leader(flight) => (flight, true),
                Joined::Follower(flight) => (flight, false),
            }
        } else {
            (Arc::new(Flight::new()), true)
        };
        let subscription = flight.subscribe();
        if leader {
            tokio::spawn(FlightTask::new(Arc::clone(self), admitted, flight).run());
        } else {
            self.metrics.coalesced.inc();
        }
        Ok(Answered::Flight { subscription, coalesced: !leader })
    }

    /// Invalidates `key` of `tenant` at the core (under a request id of its own, which the client's
    /// failover reuses, so that a retry applies once), here, and (as a tombstone) at every peer. Returns
    /// how many entries the core removed and its log time of the invalidation. A key this node holds for another tenant is refused without
    /// asking the core.
    pub async fn invalidate(&self, tenant: &str, key: &str) -> Result<InvalidatedAtCore, RegionalError> {
        let request_id = self.invalidation_ids.next();
        let done = self.core.invalidate(key, tenant, &request_id).await?;
        // Another tenant's answer under that key is neither touched nor revealed: the reply is the one
        // a key nobody holds gets (the core answers it so too, and announces nothing).
        if self.cache.peek(key).is_some_and(|entry| entry.tenant != tenant) {
            return Ok(done);
        }
        // The feed brings the same change to every node (this one included) moments later; applying
        // it here now means this node's next answer already obeys it.
        let change = Change::Key { tenant: tenant.to_owned(), key: key.to_owned() };
        self.view.cut_now(&change, done.at_ms);
        self.drop_invalidated(&change, done.at_ms);
        Ok(done)
    }

    /// Invalidates every answer of `tenant` carrying `tag` at the core (regenerating the hottest when
    /// `refresh`), and here at once, as [`invalidate`](Self::invalidate) does a key.
    pub async fn invalidate_tag(
        &self,
        tenant: &str,
        tag: &str,
        refresh: bool,
    ) -> Result<InvalidatedAtCore, RegionalError> {
        let request_id = self.invalidation_ids.next();
        let done = self.core.invalidate_tag(tenant, tag, refresh, &request_id).await?;
        let change = Change::Tag { tenant: tenant.to_owned(), tag: tag.to_owned() };
        self.view.cut_now(&change, done.at_ms);
        self.drop_invalidated(&change, done.at_ms);
        Ok(done)
    }

    /// Applies a batch of the core's feed: the view first (so nothing it covers is served from here
    /// on), then every tier drops what it can find at once: a key from the exact cache and the disk,
    /// and replicated answers a change covers, with a tombstone for the peers. Everything else a tenant
    /// or model-version cutoff covers (the exact tier, the disk, the semantic index's pointers) is
    /// refused as it is read. New model versions are learned. `received_at`: when the batch arrived
    /// (its confirmation age counts from then).
    pub fn apply_changes(&self, batch: &Changes, received_at: std::time::Instant) {
        self.view.apply(batch, received_at);
        if let Some(resync) = &batch.resync {
            let models = resync
                .models
                .iter()
                .map(|(name, version)| ModelRef { name: name.clone(), version: *version });
            if let Some(table) = ModelTable::from_models(models) {
                let specs = resync.specs.iter();
                self.models
                    .learn(&specs.fold(table, |table, (name, spec)| table.with_spec(name, spec.clone())));
            }
        }
        for revised in &batch.changes {
            self.drop_invalidated(&revised.change, revised.at_ms);
        }
    }

    /// Drops what `change` (at the core's log time `at_ms`) invalidates where it can be found by key.
    fn drop_invalidated(&self, change: &Change, at_ms: i64) {
        match change {
            Change::Key { tenant, key } => {
                // A tenant's invalidation covers its own answer only: another tenant's under the same key
                // (an invalidation of a key the core no longer held, naming someone else's) stays.
                if self.cache.peek(key).is_none_or(|held| &held.tenant == tenant) {
                    self.forget(key);
                }
                self.replication.invalidate(key, tenant, at_ms);
            }
            Change::ModelCurrent { model, version } => {
                let table = ModelTable::from_models([ModelRef { name: model.clone(), version: *version }]);
                if let Some(table) = table {
                    self.models.learn(&table);
                }
                self.tombstone_covered(at_ms);
            }
            Change::Tag { .. } | Change::Tenant { .. } | Change::ModelVersion { .. } => {
                self.tombstone_covered(at_ms)
            }
            Change::ModelSpec { model, spec } => self.models.learn_spec(model, spec),
            // A trial's start changes nothing held; its rollback comes with a model-version cutoff.
            Change::ModelCanary { .. } => {}
            Change::TenantSettings { .. } => {}
        }
    }

    /// Replicated answers the view now refuses become tombstones (and leave the exact tier), so the
    /// peers converge on the invalidation instead of offering each other answers they all refuse.
    fn tombstone_covered(&self, at_ms: i64) {
        for entry in self.replication.store().live_answers() {
            if !self.view.not_invalidated(&entry) {
                self.forget(&entry.key);
                self.replication.invalidate(&entry.key, &entry.tenant, at_ms);
            }
        }
    }

    /// This node's entry under `key`, if it is live and no cutoff of the core covers it (one that is
    /// covered is forgotten).
    fn cached(&self, key: &str, tenant: &str, now_ms: i64) -> Option<Arc<CachedCompletion>> {
        // Keys are derived per tenant, so another tenant's entry under this key is never its answer.
        let entry = self.cache.get(key, now_ms).filter(|entry| entry.tenant == tenant)?;
        if self.view.admits(&entry) {
            return Some(entry);
        }
        // A view that is merely not fresh refuses it for now; one that caught up and covers it drops it.
        if self.view.caught_up() && !self.view.not_invalidated(&entry) {
            self.forget(key);
        }
        None
    }

    /// Counts `hits` the edge served of `key` (of `tenant`) toward its hotness (as many lookups, at most
    /// 8), and offers the answer for replication (and so for the hot set) once the key is hot: this
    /// node's copy, else the core's, fetched off the caller's path.
    pub fn count_edge_hits(self: &Arc<Self>, key: &str, tenant: &str, hits: u32) {
        let mut hot = false;
        for _ in 0..hits.clamp(1, 8) {
            hot = self.replication.touch(key);
        }
        if let Some(entry) = self.cached(key, tenant, now_ms()) {
            self.replication.offer(&entry, Some(hot), now_ms());
            return;
        }
        if !hot || !self.view.caught_up() {
            return;
        }
        let Ok(permit) = Arc::clone(&self.hot_fetches).try_acquire_owned() else { return };
        let (path, key, tenant) = (Arc::clone(self), key.to_owned(), tenant.to_owned());
        tokio::spawn(async move {
            let _permit = permit;
            match path.core.lookup(&key, &tenant).await {
                Ok(Some(entry))
                    if entry.key == key && !entry.is_expired(now_ms()) && path.view.admits(&entry) =>
                {
                    path.remember(entry)
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%error, %key, "the core's copy of an edge-hot key was not fetched")
                }
            }
        });
    }

    /// Makes a peer's answer findable by paraphrase here too: the question it answers is embedded and
    /// indexed in this node's semantic tier, off the replication path (a question asked in one region
    /// and paraphrased in another is a semantic hit within the replication delay).
    fn index_replicated(&self, entry: &CachedCompletion) {
        let (Some(tier), Some(question)) = (self.semantic.clone(), entry.question.clone()) else { return };
        let query =
            shared::cache_key::SemanticQuery { partition: question.partition, question: &question.text };
        let Some(question) = tier.question(&query) else { return };
        let (key, tenant) = (entry.key.clone(), entry.tenant.clone());
        tokio::spawn(async move {
            let indexed = match tier.with_minilm(question).await {
                Ok(embedded) => tier.insert(&embedded, &tenant, &key),
                Err(error) => Err(error),
            };
            if let Err(error) = indexed {
                tracing::debug!(%error, %key, "a replicated question was not indexed");
            }
        });
    }

    /// Keeps `entry` in the exact cache, and on disk when there is a store; replicates it when it is hot.
    /// An answer older than an invalidation of its key is dropped.
    pub fn remember(&self, entry: CachedCompletion) {
        if !self.view.not_invalidated(&entry) || !self.replication.offer(&entry, None, now_ms()) {
            return;
        }
        self.keep(entry);
    }

    /// Stores `entry` in the exact cache and on disk, replicating nothing.
    fn keep(&self, entry: CachedCompletion) {
        match &self.exact_store {
            Some(store) => {
                self.cache.insert(entry.clone());
                store.put(&entry, &self.cache);
            }
            None => self.cache.insert(entry),
        }
    }

    /// Forgets `key` in the exact cache and on disk (an invalidation).
    fn forget(&self, key: &str) {
        self.cache.remove(key);
        if let Some(store) = &self.exact_store {
            store.remove(key);
        }
    }

    /// Writes what is buffered to disk (at shutdown).
    pub async fn flush(&self) {
        self.replication.store().flush().await;
        if let Some(store) = &self.exact_store {
            store.flush();
        }
    }

    /// This node's view of the core's feed.
    pub fn view(&self) -> &Arc<CoreView> {
        &self.view
    }

    /// The served models and their current versions.
    pub fn models(&self) -> &Arc<ModelCatalog> {
        &self.models
    }

    /// The exact cache (for status and metrics).
    pub fn cache(&self) -> &ExactCache {
        &self.cache
    }

    /// The client of the core (its breaker's state, for metrics).
    pub fn core(&self) -> &CoreCacheClient {
        &self.core
    }

    /// Admission of generations (for metrics).
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Replication between regional nodes (the hot set, status, metrics).
    pub fn replication(&self) -> &Arc<Replication> {
        &self.replication
    }

    /// The semantic tier, when the node has one.
    pub fn semantic(&self) -> Option<&Arc<SemanticTier>> {
        self.semantic.as_ref()
    }

    /// Exported metrics.
    pub fn metrics(&self) -> &RegionalMetrics {
        &self.metrics
    }

    /// Misses in the air now.
    pub fn flights_in_the_air(&self) -> usize {
        self.flights.len()
    }
}

impl Applier for RequestPath {
    fn apply(&self, key: &str, record: &Record) {
        match record.resolve() {
            Some(Resolved::Live(entry))
                if !entry.is_expired(now_ms()) && self.view.not_invalidated(entry) =>
            {
                let new_here = self.cache.peek(key).is_none();
                self.keep(entry.clone());
                if new_here {
                    self.index_replicated(entry);
                }
            }
            Some(Resolved::Invalidated) => self.forget(key),
            _ => {}
        }
    }

    fn admits(&self, entry: &CachedCompletion) -> bool {
        self.view.not_invalidated(entry)
    }
}

/// Milliseconds since `since`, for `Server-Timing`.
fn elapsed_ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}
