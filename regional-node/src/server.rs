//! Serving the regional daemon on a listener until shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use shared::completion::CachedCompletion;
use shared::normalize::Limits;
use tokio::net::TcpListener;

use crate::config::Settings;
use crate::core_client::CoreClient;
use crate::embedding::SentenceEmbedder;
use crate::exact_cache::ExactCache;
use crate::flight::Flights;
use crate::hot_store::HotStore;
use crate::metrics::RegionalMetrics;
use crate::semantic_cache::SemanticLimits;
use crate::semantic_tier::SemanticTier;
use crate::RegionalError;

/// State shared by every request.
#[derive(Debug)]
pub struct AppState {
    /// Validated configuration.
    pub settings: Settings,
    /// The regional exact cache.
    pub cache: ExactCache,
    /// Client of the core cluster.
    pub core: CoreClient,
    /// Exported metrics.
    pub metrics: RegionalMetrics,
    /// Normalization limits.
    pub limits: Limits,
    /// The semantic tier, when a model directory was given.
    pub semantic: Option<Arc<SemanticTier>>,
    /// The exact cache's copy on disk, when a data directory was given.
    pub hot_store: Option<HotStore>,
    /// Misses in flight to the core, by key, for coalescing.
    pub flights: Flights,
}

impl AppState {
    /// Builds the state from validated settings.
    pub fn new(settings: Settings) -> Result<Self, RegionalError> {
        let core = CoreClient::new(&settings.config.core, &settings.tier_secret.0)?;
        let semantic = match &settings.config.semantic_model_dir {
            Some(dir) => {
                let embedder = SentenceEmbedder::load(dir).map_err(|e| {
                    RegionalError::Config(format!("loading the embedding model from {}: {e}", dir.display()))
                })?;
                let limits = SemanticLimits {
                    per_partition: settings.config.semantic_per_partition,
                    partitions: settings.config.semantic_partitions,
                };
                tracing::info!(dir = %dir.display(), "semantic tier on");
                Some(Arc::new(SemanticTier::new(embedder, limits, settings.config.semantic_thresholds())))
            }
            None => None,
        };
        let cache = ExactCache::new(settings.config.cache_bytes);
        let hot_store = match &settings.config.data_dir {
            Some(dir) => {
                let store = HotStore::open(&dir.join("hotset"), settings.config.cache_bytes)?;
                let report = store.load_into(&cache, now_ms());
                tracing::info!(
                    loaded = report.loaded,
                    expired = report.expired,
                    unreadable = report.unreadable,
                    "hot set restored"
                );
                Some(store)
            }
            None => None,
        };
        Ok(Self {
            semantic,
            hot_store,
            flights: Flights::default(),
            cache,
            core,
            metrics: RegionalMetrics::default(),
            limits: Limits::default(),
            settings,
        })
    }

    /// Keeps `entry` in the exact cache, and on disk when there is a store.
    pub fn remember(&self, entry: CachedCompletion) {
        match &self.hot_store {
            Some(store) => {
                self.cache.insert(entry.clone());
                store.put(&entry, &self.cache);
            }
            None => self.cache.insert(entry),
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
    let state = Arc::new(AppState::new(settings)?);
    tracing::info!(%region, addr = %listener.local_addr()?, "regional node serving");
    axum::serve(listener, crate::http::router(Arc::clone(&state))).with_graceful_shutdown(shutdown).await?;
    if let Some(store) = &state.hot_store {
        store.flush();
    }
    Ok(())
}

/// Wall-clock time in Unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
