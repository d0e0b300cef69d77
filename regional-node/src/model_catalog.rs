//! The models this node serves and their current versions. The core's registry is the authority: the
//! node asks the core for it at start, every `--model-refresh-ms`, and at once after the core refused
//! a generation (a version bump it had not seen yet). Until the core has answered, the `--models` flag
//! is the table; a model the flag names and the core does not know keeps the flag's version.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use shared::model_spec::ModelSpec;
use shared::models::ModelTable;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::core_cache_client::CoreCacheClient;
use crate::RegionalError;

/// The served models, shared by every request.
#[derive(Debug)]
pub struct ModelCatalog {
    table: RwLock<Arc<ModelTable>>,
    /// Wakes the refresher before its interval is up.
    refresh_now: Notify,
}

impl ModelCatalog {
    /// A catalog that starts as `initial` (the `--models` flag).
    pub fn new(initial: ModelTable) -> Self {
        Self { table: RwLock::new(Arc::new(initial)), refresh_now: Notify::new() }
    }

    /// The table in effect now.
    pub fn current(&self) -> Arc<ModelTable> {
        Arc::clone(&self.table.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Takes the versions of `registry` (the core's); true when anything changed.
    pub fn learn(&self, registry: &ModelTable) -> bool {
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        let updated = table.updated(registry);
        if updated == **table {
            return false;
        }
        tracing::info!(models = ?updated.models(), "model versions changed at the core");
        *table = Arc::new(updated);
        true
    }

    /// Takes `spec` as `model`'s registry metadata (a model the table does not serve yet gets it when
    /// its version arrives, from the core's registry).
    pub fn learn_spec(&self, model: &str, spec: &ModelSpec) {
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        if table.spec(model) != Some(spec) {
            tracing::info!(%model, "model spec changed at the core");
            *table = Arc::new((**table).clone().with_spec(model, spec.clone()));
        }
    }

    /// Asks the refresher to ask the core now.
    pub fn refresh_soon(&self) {
        self.refresh_now.notify_one();
    }

    /// Asks the core for its registry and learns it; true when anything changed.
    pub async fn refresh(&self, core: &CoreCacheClient) -> Result<bool, RegionalError> {
        Ok(core.models().await?.is_some_and(|registry| self.learn(&registry)))
    }

    /// Refreshes at once, then every `interval` and whenever [`ModelCatalog::refresh_soon`] is called.
    pub fn spawn(self: &Arc<Self>, core: CoreCacheClient, interval: Duration) -> JoinHandle<()> {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                if let Err(error) = this.refresh(&core).await {
                    tracing::debug!(%error, "model versions not refreshed");
                }
                tokio::select! {
                    () = tokio::time::sleep(interval) => {}
                    () = this.refresh_now.notified() => {}
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use shared::models::ModelRef;

    use super::*;

    #[test]
    fn learns_the_cores_versions_once() {
        let catalog = ModelCatalog::new(ModelTable::parse("m@1").expect("valid"));
        let registry = ModelTable::from_models([ModelRef { name: "m".into(), version: 2 }]).expect("one");
        assert!(catalog.learn(&registry));
        assert!(!catalog.learn(&registry), "nothing new the second time");
        assert_eq!(catalog.current().resolve("m").map(|m| m.version), Ok(2));
    }

    #[test]
    fn learns_a_spec_from_the_feed_and_keeps_it_across_a_version_change() {
        let catalog = ModelCatalog::new(ModelTable::parse("m@1").expect("valid"));
        let spec = ModelSpec { context_length: 8192, ..Default::default() };
        catalog.learn_spec("m", &spec);
        assert_eq!(catalog.current().spec("m"), Some(&spec));
        let registry = ModelTable::from_models([ModelRef { name: "m".into(), version: 2 }]).expect("one");
        assert!(catalog.learn(&registry));
        assert_eq!(catalog.current().spec("m"), Some(&spec), "a bump keeps the spec");
    }
}
