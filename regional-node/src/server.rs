//! Serving the regional daemon on a listener until shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use shared::normalize::Limits;
use tokio::net::TcpListener;

use crate::config::Settings;
use crate::core_client::CoreClient;
use crate::exact_cache::ExactCache;
use crate::metrics::RegionalMetrics;
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
}

impl AppState {
    /// Builds the state from validated settings.
    pub fn new(settings: Settings) -> Result<Self, RegionalError> {
        let core = CoreClient::new(&settings.config.core, &settings.tier_secret.0)?;
        Ok(Self {
            cache: ExactCache::new(settings.config.cache_bytes),
            core,
            metrics: RegionalMetrics::default(),
            limits: Limits::default(),
            settings,
        })
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
    axum::serve(listener, crate::http::router(state)).with_graceful_shutdown(shutdown).await?;
    Ok(())
}

/// Wall-clock time in Unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
