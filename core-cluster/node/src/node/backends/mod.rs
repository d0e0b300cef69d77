//! The model backends a core node sends generations to: our inference pods (gRPC) and any
//! OpenAI-compatible `/v1/chat/completions` server (vLLM, SGLang, TGI, llama.cpp's server, a hosted
//! API). Every generation goes through here, whichever the backend, so caching, commits, invalidation
//! and the change feed treat both kinds alike: each answers with the same stream of [`GenerateEvent`]s.
//!
//! A generation goes to the backend of its model with the lowest predicted cost, healthy ones first, and
//! moves on to the next when one cannot be reached or is full. A background probe keeps each backend's
//! health (and a pod's reported load) current; calls this node has in flight count too, so a burst
//! between probes spreads out.
//!
//! # Layout
//! - [`backend`]: one backend, its counters, what it has in flight, and its predicted cost.
//! - [`pod`]: an inference pod over gRPC, and the load its `Health` reports.
//! - [`openai`]: an OpenAI-compatible server over HTTP: the request it is sent, its server-sent events
//!   read as [`GenerateEvent`]s, its errors mapped, retries before the first token.
//! - [`settings`]: `--openai-backend` values and the timeouts every OpenAI-compatible backend shares.

pub mod backend;
pub mod openai;
pub mod pod;
pub mod settings;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use proto::inference::{GenerateEvent, GenerateRequest};
use tonic::Code;

pub use backend::{Backend, BackendKind, InFlight};
pub use settings::{OpenAiBackendSpec, OpenAiTimeouts};

use super::error::CoreError;
use daemon_runtime::TierIdentity;

/// A backend's answer: its events, in order, until `Done` (or an error).
pub type EventStream = Pin<Box<dyn Stream<Item = Result<GenerateEvent, tonic::Status>> + Send>>;

/// The backends a core node sends generations to.
#[derive(Debug)]
pub struct Backends {
    /// Every backend: the pods in order of preference, then the OpenAI-compatible servers.
    backends: Vec<Backend>,
}

impl Backends {
    /// Pods over `pod_urls` (`http://host:port`, gRPC, called with `identity`) and the OpenAI-compatible
    /// servers of `openai`; connections open lazily.
    pub fn new(
        pod_urls: &[String],
        openai: &[OpenAiBackendSpec],
        timeouts: OpenAiTimeouts,
        identity: TierIdentity,
    ) -> Result<Self, CoreError> {
        let mut backends = Vec::with_capacity(pod_urls.len() + openai.len());
        for url in pod_urls {
            backends.push(Backend::new(url, BackendKind::Pod(pod::PodClient::new(url, identity.clone())?)));
        }
        for spec in openai {
            let client = openai::OpenAiClient::new(spec, timeouts)?;
            backends.push(Backend::new(&spec.url, BackendKind::OpenAi(client)));
        }
        Ok(Self { backends })
    }

    /// Whether no backend is configured (the node then serves the store only).
    pub fn is_empty(&self) -> bool {
        self.backends.is_empty()
    }

    /// Every backend.
    pub fn all(&self) -> &[Backend] {
        &self.backends
    }

    /// Starts a generation on the backend that takes it at the lowest predicted cost: healthy backends
    /// serving the request's model by predicted cost, then the others (their health may be stale).
    /// Returns the backend's URL, its event stream, and a guard that counts the generation against the
    /// backend while it is held.
    pub async fn generate(
        &self,
        request: GenerateRequest,
        trace: &shared::trace::TraceParent,
    ) -> Result<(&str, EventStream, InFlight), CoreError> {
        let tokens = backend::predicted_tokens(&request);
        let mut ranked: Vec<(bool, (bool, u64), usize)> = self
            .backends
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.predicted_cost(&request, tokens).map(|cost| (!b.is_healthy(), cost, i)))
            .collect();
        ranked.sort();
        let mut last_error = format!("no backend serves model {:?}", request.model);
        for backend in ranked.into_iter().map(|(_, _, i)| &self.backends[i]) {
            match backend.generate(request.clone(), tokens, trace).await {
                Ok((stream, guard)) => return Ok((backend.url(), stream, guard)),
                Err(CoreError::Backend { code, message })
                    if matches!(code, Code::Unavailable | Code::ResourceExhausted) =>
                {
                    tracing::warn!(backend = %backend.url(), ?code, error = %message, "backend refused generation; trying the next");
                    last_error = format!("{}: {message}", backend.url());
                }
                Err(e) => return Err(e),
            }
        }
        Err(CoreError::NoBackend(last_error))
    }

    /// Probes every backend once and records the result.
    pub async fn probe(&self) {
        futures::future::join_all(self.backends.iter().map(Backend::probe)).await;
    }

    /// Probes the backends every `interval`, forever (the task is aborted at shutdown).
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            self.probe().await;
        }
    }
}

/// The next event of a backend's stream: `None` when it ended (without `Done`, which callers treat as
/// a failure), an error when it failed or stayed silent for `idle`.
pub async fn next_event(
    stream: &mut EventStream,
    idle: Duration,
) -> Result<Option<GenerateEvent>, CoreError> {
    match tokio::time::timeout(idle, stream.next()).await {
        Err(_) => Err(CoreError::Backend {
            code: Code::DeadlineExceeded,
            message: "the backend went silent mid-generation".into(),
        }),
        Ok(Some(Err(status))) => {
            Err(CoreError::Backend { code: status.code(), message: status.message().to_owned() })
        }
        Ok(Some(Ok(event))) => Ok(Some(event)),
        Ok(None) => Ok(None),
    }
}
