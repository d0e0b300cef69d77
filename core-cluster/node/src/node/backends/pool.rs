//! The backends the registry's model pools name (`register-model --backend`), kept in step with the
//! registry: a pool backend that stays listed keeps its counters, rates and breaker; one that leaves is
//! dropped (generations already on it finish); a new one is connected lazily like a flag's.

use std::path::PathBuf;
use std::sync::Arc;

use daemon_runtime::TierIdentity;
use shared::model_spec::{ModelSpec, PoolBackend, PoolBackendKind};

use super::backend::{Backend, BackendKind};
use super::openai::OpenAiClient;
use super::pod::PodClient;
use super::settings::{OpenAiBackendSpec, OpenAiTimeouts};
use crate::node::error::CoreError;

/// One pool backend: the model it serves, its registry entry, and the backend built from it.
#[derive(Debug, Clone)]
pub struct Pooled {
    model: String,
    entry: PoolBackend,
    backend: Arc<Backend>,
}

/// How pool backends are connected: as this node calls pods, and with its OpenAI-compatible timeouts.
#[derive(Debug, Clone)]
pub struct PoolConnector {
    /// The identity pods are called with.
    pub identity: TierIdentity,
    /// The OpenAI-compatible backends' timeouts and retries.
    pub timeouts: OpenAiTimeouts,
}

impl PoolConnector {
    /// The backend for `entry` of `model`'s pool.
    fn connect(&self, model: &str, entry: &PoolBackend) -> Result<Backend, CoreError> {
        let kind = match entry.kind {
            PoolBackendKind::Pod => BackendKind::Pod(PodClient::new(&entry.url, self.identity.clone())?),
            PoolBackendKind::Openai => {
                let path = |p: &str| (!p.is_empty()).then(|| PathBuf::from(p));
                let upstream = if entry.upstream_model.is_empty() { model } else { &entry.upstream_model };
                let spec = OpenAiBackendSpec {
                    model: model.to_owned(),
                    url: entry.url.clone(),
                    key_file: path(&entry.key_file),
                    ca: path(&entry.ca_file),
                    upstream_model: upstream.to_owned(),
                };
                BackendKind::OpenAi(OpenAiClient::new(&spec, self.timeouts)?)
            }
        };
        Ok(Backend::new(&entry.url, kind).pinned(model, entry.capacity).for_version(entry.version))
    }

    /// The pool backends `specs` list, reusing those of `current` that stay; `None` when nothing
    /// changed. A backend that cannot be built (an unreadable key file) is left out with a warning.
    pub fn reconcile(&self, current: &[Pooled], specs: &[(String, ModelSpec)]) -> Option<Vec<Pooled>> {
        let wanted: Vec<(&String, &PoolBackend)> = specs
            .iter()
            .flat_map(|(model, spec)| spec.backends.iter().map(move |entry| (model, entry)))
            .collect();
        let same = wanted.len() == current.len()
            && wanted.iter().zip(current).all(|((model, entry), p)| **model == p.model && **entry == p.entry);
        if same {
            return None;
        }
        let mut next = Vec::with_capacity(wanted.len());
        for (model, entry) in wanted {
            let kept = current.iter().find(|p| p.model == *model && p.entry == *entry);
            let backend = match kept {
                Some(p) => Arc::clone(&p.backend),
                None => match self.connect(model, entry) {
                    Ok(backend) => {
                        tracing::info!(%model, backend = %entry.url, capacity = entry.capacity, "pool backend added");
                        Arc::new(backend)
                    }
                    Err(error) => {
                        tracing::warn!(%model, backend = %entry.url, %error, "pool backend left out");
                        continue;
                    }
                },
            };
            next.push(Pooled { model: model.clone(), entry: entry.clone(), backend });
        }
        Some(next)
    }
}

impl Pooled {
    /// The backend.
    pub fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connector() -> PoolConnector {
        let identity = TierIdentity::insecure_secret("a-development-secret-of-32-bytes!").expect("secret");
        PoolConnector { identity, timeouts: OpenAiTimeouts::default() }
    }

    fn spec(backends: &[&str]) -> ModelSpec {
        ModelSpec {
            backends: backends.iter().map(|b| b.parse().expect("valid")).collect(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_backend_that_stays_is_kept_and_the_rest_follow_the_registry() {
        let connector = connector();
        let first = [("m".to_owned(), spec(&["openai=http://127.0.0.1:1/v1", "pod=http://127.0.0.1:2"]))];
        let pooled = connector.reconcile(&[], &first).expect("changed");
        assert_eq!(pooled.len(), 2);
        assert!(pooled[0].backend.takes("m") && !pooled[0].backend.takes("other"));
        assert!(connector.reconcile(&pooled, &first).is_none(), "nothing changed");
        let second =
            [("m".to_owned(), spec(&["openai=http://127.0.0.1:1/v1", "openai=http://127.0.0.1:3/v1"]))];
        let next = connector.reconcile(&pooled, &second).expect("changed");
        assert!(Arc::ptr_eq(&next[0].backend, &pooled[0].backend), "the kept backend keeps its state");
        assert_eq!(next[1].backend.url(), "http://127.0.0.1:3/v1");
        let missing_key =
            [("m".to_owned(), spec(&["openai=http://127.0.0.1:1/v1;key_file=/nonexistent/key"]))];
        assert_eq!(connector.reconcile(&next, &missing_key).expect("changed").len(), 0);
    }
}
