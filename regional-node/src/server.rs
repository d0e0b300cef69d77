//! Serving the regional daemon on a listener until shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use daemon_runtime::identity::ClientAuth;
use proto::replication::replication_server::ReplicationServer;
use shared::normalize::Limits;
use shared::small_embedding::SmallEmbedder;
use tokio::net::TcpListener;

use crate::replication::link::MAX_MESSAGE_BYTES;

use crate::admission::{Admission, AdmissionLimits};
use crate::breaker::CircuitBreaker;
use crate::clock::now_ms;
use crate::config::Settings;
use crate::core_cache_client::CoreCacheClient;
use crate::core_view::CoreView;
use crate::exact_cache::ExactCache;
use crate::exact_store::ExactStore;
use crate::model_catalog::ModelCatalog;
use crate::replication::service::ReplicationService;
use crate::replication::{Applier, Replication, ReplicationSettings};
use crate::request_path::{PathParts, RequestPath};
use crate::semantic::cache::SemanticLimits;
use crate::semantic::embedding::SentenceEmbedder;
use crate::semantic::experiment::Experiments;
use crate::semantic::tier::SemanticTier;
use crate::tenant_rate::TenantRate;
use crate::RegionalError;

/// State shared by every request: the settings, the request path, and the edge's table.
#[derive(Debug)]
pub struct AppState {
    /// Validated configuration.
    settings: Settings,
    /// Normalization limits.
    limits: Limits,
    /// Everything that answers a request.
    path: Arc<RequestPath>,
    /// The edge's small-embedding table, for the hot set's embeddings.
    edge_table: Option<Arc<SmallEmbedder>>,
    /// Each tenant's rate of invalidations.
    invalidations: TenantRate,
}

impl AppState {
    /// Builds the state from validated settings: loads the models and the stores the settings name.
    pub fn new(settings: Settings) -> Result<Self, RegionalError> {
        let path = Arc::new(RequestPath::new(path_parts(&settings)?));
        // The semantic tier holds the table already when it has one.
        let edge_table = match path.semantic().and_then(|tier| tier.small_table()) {
            Some(table) => Some(Arc::clone(table)),
            None => load_edge_table(&settings)?,
        };
        let invalidations =
            TenantRate::new(settings.config.invalidations_per_s, settings.config.invalidation_burst);
        Ok(Self { settings, limits: Limits::default(), path, edge_table, invalidations })
    }

    /// The validated configuration.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The normalization limits requests are held to.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The request path.
    pub fn path(&self) -> &Arc<RequestPath> {
        &self.path
    }

    /// Each tenant's rate of invalidations.
    pub fn invalidations(&self) -> &TenantRate {
        &self.invalidations
    }

    /// The edge's small-embedding table, when one was given.
    pub fn edge_table(&self) -> Option<&SmallEmbedder> {
        self.edge_table.as_deref()
    }
}

/// The edge's small-embedding table, when `--edge-table` names one.
fn load_edge_table(settings: &Settings) -> Result<Option<Arc<SmallEmbedder>>, RegionalError> {
    let Some(path) = &settings.config.edge_table else { return Ok(None) };
    let bytes = std::fs::read(path)
        .map_err(|e| RegionalError::Config(format!("reading the edge table {}: {e}", path.display())))?;
    let table = SmallEmbedder::from_bytes(&bytes)
        .map_err(|e| RegionalError::Config(format!("the edge table {}: {e}", path.display())))?;
    tracing::info!(path = %path.display(), id = table.id(), dims = table.dims(), "edge table loaded");
    Ok(Some(Arc::new(table)))
}

/// The request path's parts, as `settings` configure them: the exact cache refilled from disk and from
/// replication, the core client behind its breaker, the semantic tier, admission and replication.
pub fn path_parts(settings: &Settings) -> Result<PathParts, RegionalError> {
    let config = &settings.config;
    let breaker = CircuitBreaker::new(
        config.breaker_failures,
        std::time::Duration::from_millis(config.breaker_open_ms),
    );
    let core = CoreCacheClient::new(&config.core, settings.identity.clone(), breaker)?;
    let admission = Admission::new(AdmissionLimits {
        budget: config.admission_budget,
        queue: config.admission_queue,
        max_wait: std::time::Duration::from_millis(config.admission_wait_ms),
        tenant_share: config.admission_tenant_share,
        ttft_target: std::time::Duration::from_millis(config.admission_ttft_target_ms),
        tenant_ttft_targets: AdmissionLimits::parse_ttft_targets(&config.admission_tenant_ttft_target)
            .map_err(RegionalError::Config)?,
    });
    let semantic = match &config.semantic_model_dir {
        Some(dir) => {
            let embedder = SentenceEmbedder::load(dir).map_err(|e| {
                RegionalError::Config(format!("loading the embedding model from {}: {e}", dir.display()))
            })?;
            let limits = SemanticLimits {
                per_partition: config.semantic_per_partition,
                tenant_share: config.tenant_cache_share,
                partitions: config.semantic_partitions,
                bytes: config.semantic_bytes,
            };
            tracing::info!(dir = %dir.display(), "semantic tier on");
            let audit = config.audit_settings().map_err(RegionalError::Config)?;
            // The edge's table also finds paraphrases here before MiniLM is run.
            let small = load_edge_table(settings)?;
            let thresholds = config.semantic_thresholds();
            let tier = SemanticTier::new(embedder, small, limits, thresholds, audit)
                .with_max_words(config.semantic_max_words)
                .with_minilm_lookups(config.semantic_minilm_lookups)
                .with_experiments(
                    Experiments::parse(&config.semantic_experiment).map_err(RegionalError::Config)?,
                );
            Some(Arc::new(tier))
        }
        None => None,
    };
    let cache = ExactCache::new(config.cache_bytes)
        .with_stale_grace(config.stale_grace_s)
        .with_tenant_share(config.tenant_cache_share);
    if let Some(dir) = &config.data_dir {
        daemon_runtime::private_dir::create(dir)?;
    }
    let exact_store = match &config.data_dir {
        Some(dir) => {
            // The directory keeps the name it had before the exact store was named for what it holds.
            let store = ExactStore::open(&dir.join("hotset"), config.cache_bytes)?;
            let report = store.load_into(&cache, now_ms());
            tracing::info!(
                loaded = report.loaded,
                expired = report.expired,
                unreadable = report.unreadable,
                "exact cache restored"
            );
            Some(store)
        }
        None => None,
    };
    let db = match &config.data_dir {
        Some(dir) => Some(sled::open(dir.join("replica")).map_err(|e| {
            RegionalError::Config(format!("opening the replica store in {}: {e}", dir.display()))
        })?),
        None => None,
    };
    let replication = Replication::new(replication_settings(settings)?, db.as_ref())?;
    // Replicated answers are part of the hot set too: a restart serves them at once.
    for entry in replication.store().live_answers() {
        if !entry.is_expired(now_ms()) {
            cache.insert(entry);
        }
    }
    let models = Arc::new(ModelCatalog::new(settings.models.clone()));
    let view = Arc::new(CoreView::open(settings.config.data_dir.as_deref()));
    Ok(PathParts {
        view,
        cache,
        exact_store,
        core,
        semantic,
        admission,
        replication: Arc::new(replication),
        models,
        core_lookups: TenantRate::new(config.core_lookups_per_s, config.core_lookup_burst),
    })
}

fn replication_settings(settings: &Settings) -> Result<ReplicationSettings, RegionalError> {
    let config = &settings.config;
    let node_id = match &config.node_id {
        Some(id) => id.clone(),
        None => default_node_id(&config.region, config.data_dir.as_deref())?,
    };
    Ok(ReplicationSettings {
        node_id,
        peers: config.peers.clone(),
        min_lookups: config.replicate_min_lookups,
        anti_entropy_interval: std::time::Duration::from_millis(config.anti_entropy_interval_ms),
        identity: settings.identity.clone(),
        // A tenant's replicated answers are bounded as its share of the exact cache is.
        tenant_bytes: (config.cache_bytes as f64 * config.tenant_cache_share) as usize,
        answer_verifier: settings.answer_verifier.clone(),
    })
}

/// This node's replication actor id when none is configured: the region and a random suffix, kept in
/// the data directory so that the node is the same actor after a restart. Two nodes of one region, or
/// two left at the default region, are never one actor.
fn default_node_id(region: &str, data_dir: Option<&std::path::Path>) -> Result<String, RegionalError> {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.write_u32(std::process::id());
    let fresh = format!("{region}-{:016x}", hasher.finish());
    let Some(dir) = data_dir else { return Ok(fresh) };
    let path = dir.join("node-id");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => Ok(id.trim().to_owned()),
        _ => {
            daemon_runtime::private_dir::create(dir)?;
            std::fs::write(&path, format!("{fresh}\n"))?;
            tracing::info!(node = %fresh, path = %path.display(), "replication node id chosen");
            Ok(fresh)
        }
    }
}

/// Serves HTTP on `listener` until `shutdown` resolves.
pub async fn run(
    settings: Settings,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RegionalError> {
    let region = settings.config.region.clone();
    let peer_listen = settings.config.peer_listen;
    let state = Arc::new(AppState::new(settings)?);
    let mut tasks = Vec::new();
    let replication = state.path().replication();
    if let Some(addr) = peer_listen {
        let peer_listener = TcpListener::bind(addr).await?;
        tracing::info!(node = %replication.settings().node_id, addr = %peer_listener.local_addr()?, peers = replication.settings().peers.len(), "replication serving");
        let applier: Arc<dyn Applier> = state.path().clone();
        let service =
            ReplicationServer::new(ReplicationService::new(Arc::clone(replication), Arc::clone(&applier)))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
        // Only peers call this listener: a client certificate is required.
        let tls = state.settings().identity.acceptor(ClientAuth::Required)?;
        let routes = tonic::service::Routes::new(service).into_axum_router();
        let limits = state.settings().config.http_limits();
        tasks.push(tokio::spawn(async move {
            let forever = std::future::pending::<()>();
            if let Err(error) =
                daemon_runtime::http_serving::serve(peer_listener, routes, limits, tls, forever).await
            {
                tracing::error!(%error, "replication server stopped");
            }
        }));
    }
    tasks.extend(replication.spawn()?);
    tasks.extend(state.settings().identity.spawn_tls_reloader());
    let refresh = std::time::Duration::from_millis(state.settings().config.model_refresh_ms.max(100));
    tasks.push(state.path().models().spawn(state.path().core().clone(), refresh));
    tasks.push(crate::change_feed::spawn(Arc::clone(state.path())));
    // Ready once caught up with the core's feed: `/readyz`, the probe port, systemd.
    let readiness = crate::http::readiness(&state);
    if let Some(addr) = state.settings().config.probe_listen {
        tasks.push(daemon_runtime::probes::spawn(TcpListener::bind(addr).await?, readiness.clone()));
    }
    tasks.extend(daemon_runtime::systemd_notify::notify_when_ready(readiness));
    tracing::info!(%region, addr = %listener.local_addr()?, "regional node serving");
    let limits = state.settings().config.http_limits();
    // Clients with API keys present no certificate; the edge presents its own.
    let tls = state.settings().identity.acceptor(ClientAuth::Optional)?;
    let router = crate::http::router(Arc::clone(&state));
    let served = daemon_runtime::http_serving::serve(listener, router, limits, tls, shutdown).await;
    for task in tasks {
        task.abort();
    }
    served?;
    state.path().flush().await;
    state.path().view().save(true);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_node_id_is_unique_and_survives_a_restart() {
        let (a, b) = (default_node_id("eu", None), default_node_id("eu", None));
        let (a, b) = (a.expect("id"), b.expect("id"));
        assert!(a.starts_with("eu-") && a != b, "{a} {b}");
        let dir = std::env::temp_dir().join(format!("regional-node-id-{}", std::process::id()));
        let first = default_node_id("eu", Some(&dir)).expect("id");
        assert_eq!(default_node_id("eu", Some(&dir)).expect("id"), first, "kept in the data directory");
        let _ = std::fs::remove_dir_all(dir);
    }
}
