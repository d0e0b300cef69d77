//! The model backends a core node sends generations to: our inference pods (gRPC) and any
//! OpenAI-compatible `/v1/chat/completions` server (vLLM, SGLang, TGI, llama.cpp's server, a hosted
//! API). Every generation goes through here, whichever the backend, so caching, commits, invalidation
//! and the change feed treat both kinds alike: each answers with the same stream of [`GenerateEvent`]s.
//!
//! A generation goes to the backend of its model where it is predicted to finish first: its own prefill
//! and decode at one request's measured rates, or the draining of the work queued there with it at the
//! backend's measured throughput when that takes longer ([`prediction`]; or, with
//! `--backend-routing round-robin`, to each in turn). Healthy backends go first, a backend whose breaker
//! is open gets none, and a refusal moves on to the next. A background probe keeps each backend's health
//! (and a pod's reported load) current; calls this node has in flight count too, so a burst between
//! probes spreads out.
//!
//! # Layout
//! - [`backend`]: one backend, its counters, what it has in flight, and where it stands for a request.
//! - [`prediction`]: a request's work in tokens and a backend's measured rates.
//! - [`breaker`]: a backend's circuit breaker.
//! - [`pod`]: an inference pod over gRPC, and the load its `Health` reports.
//! - [`openai`]: an OpenAI-compatible server over HTTP: the request it is sent, its server-sent events
//!   read as [`GenerateEvent`]s, its errors mapped, retries before the first token.
//! - [`settings`]: `--openai-backends` values, the timeouts every OpenAI-compatible backend shares, and
//!   the routing rule.
//! - [`pool`]: the backends the registry's model pools name, kept in step with the registry.
//!
//! A node's backends are those of its flags (`--pods`, `--openai-backends`) and those of the registry's
//! pools; the prober re-reads the registry every round, so a pool change reaches every core node within
//! a probe interval.

pub mod backend;
pub mod breaker;
pub mod openai;
pub mod pod;
pub mod pool;
pub mod prediction;
pub mod settings;

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use futures::{Stream, StreamExt};
use proto::inference::{GenerateEvent, GenerateRequest};
use tonic::Code;

pub use backend::{Backend, BackendKind, InFlight};
pub use prediction::Work;
pub use settings::{FallbackPolicy, OpenAiBackendSpec, OpenAiTimeouts, Routing};

use super::error::CoreError;
use daemon_runtime::TierIdentity;
use pool::{PoolConnector, Pooled};
use shared::model_spec::ModelSpec;

/// A backend's answer: its events, in order, until `Done` (or an error).
pub type EventStream = Pin<Box<dyn Stream<Item = Result<GenerateEvent, tonic::Status>> + Send>>;

/// The backends a core node sends generations to.
#[derive(Debug)]
pub struct Backends {
    /// The flags' backends: the pods in order of preference, then the OpenAI-compatible servers.
    fixed: Vec<Arc<Backend>>,
    /// The registry pools' backends.
    pooled: Mutex<Vec<Pooled>>,
    /// Every backend now: the flags', then the pools'.
    current: RwLock<Arc<Vec<Arc<Backend>>>>,
    /// Connects the pools' backends.
    connector: PoolConnector,
    routing: Routing,
    /// Round robin's next turn.
    turn: AtomicUsize,
    /// Which model answers for one that cannot.
    fallbacks: FallbackPolicy,
}

impl Backends {
    /// Pods over `pod_urls` (`http://host:port`, gRPC, called with `identity`) and the OpenAI-compatible
    /// servers of `openai`; connections open lazily.
    pub fn new(
        pod_urls: &[String],
        openai: &[OpenAiBackendSpec],
        timeouts: OpenAiTimeouts,
        routing: Routing,
        identity: TierIdentity,
    ) -> Result<Self, CoreError> {
        let mut fixed = Vec::with_capacity(pod_urls.len() + openai.len());
        for url in pod_urls {
            let pod = pod::PodClient::new(url, identity.clone())?;
            fixed.push(Arc::new(Backend::new(url, BackendKind::Pod(pod))));
        }
        for spec in openai {
            let client = openai::OpenAiClient::new(spec, timeouts)?;
            fixed.push(Arc::new(Backend::new(&spec.url, BackendKind::OpenAi(client))));
        }
        Ok(Self {
            current: RwLock::new(Arc::new(fixed.clone())),
            fixed,
            pooled: Mutex::default(),
            connector: PoolConnector { identity, timeouts },
            routing,
            turn: AtomicUsize::new(0),
            fallbacks: FallbackPolicy::default(),
        })
    }

    /// Takes the registry's pools (`specs`, by model): backends that stay keep their state, new ones
    /// join, the rest leave.
    pub fn set_pools(&self, specs: &[(String, ModelSpec)]) {
        let mut pooled = self.pooled.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(next) = self.connector.reconcile(&pooled, specs) else { return };
        let all: Vec<Arc<Backend>> =
            self.fixed.iter().cloned().chain(next.iter().map(|p| Arc::clone(p.backend()))).collect();
        *pooled = next;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(all);
    }

    /// The same backends with `fallbacks` as their fallback policy.
    pub fn with_fallbacks(self, fallbacks: FallbackPolicy) -> Self {
        Self { fallbacks, ..self }
    }

    /// `model`'s fallback model, if it has one.
    pub fn fallback_for(&self, model: &str) -> Option<&str> {
        self.fallbacks.fallback_for(model)
    }

    /// Why `request` should go to its model's fallback before any backend is tried: the soonest
    /// predicted first token among its backends is past the time-to-first-token target. `None` when
    /// it has no fallback, no target is set, or a backend is predicted in time (or none is measured).
    pub fn too_slow(&self, request: &GenerateRequest) -> Option<String> {
        let target = self.fallbacks.ttft_target?;
        self.fallback_for(&request.model)?;
        let own = prediction::predicted_work(request);
        let all = self.all();
        let measured = all.iter().filter(|b| b.rates().is_measured());
        let soonest = measured.filter_map(|b| b.predicted_ttft_us(request, own)).min()?;
        (soonest > target.as_micros() as u64).then(|| {
            format!(
                "first token predicted in {} ms, past the {} ms target",
                soonest / 1000,
                target.as_millis()
            )
        })
    }

    /// Whether no backend is configured (the node then serves the store only).
    pub fn is_empty(&self) -> bool {
        self.all().is_empty()
    }

    /// Every backend now.
    pub fn all(&self) -> Arc<Vec<Arc<Backend>>> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Starts a generation on the first backend of [`Backends::ranked`] that takes it. Returns the
    /// backend's URL, its event stream, and a guard that counts the generation against the backend while
    /// it is held.
    pub async fn generate(
        &self,
        request: GenerateRequest,
        trace: &shared::trace::TraceParent,
    ) -> Result<(String, EventStream, InFlight), CoreError> {
        let own = prediction::predicted_work(&request);
        let mut last_error = format!("no backend serves model {:?} now", request.model);
        for backend in self.ranked(&request, own) {
            match backend.generate(request.clone(), own, trace).await {
                Ok((stream, guard)) => return Ok((backend.url().to_owned(), stream, guard)),
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

    /// The backends that may take `request` (work `own`), in the order to try them: healthy ones first
    /// (the others' health may be stale), then by the routing rule (predicted finish, short-of-room ones
    /// last; or each in turn). Backends of other models and those whose breaker is open are left out.
    pub fn ranked(&self, request: &GenerateRequest, own: Work) -> Vec<Arc<Backend>> {
        let turn = match self.routing {
            Routing::RoundRobin => self.turn.fetch_add(1, Ordering::Relaxed),
            Routing::PredictedTime => 0,
        };
        let all = self.all();
        let count = all.len().max(1);
        // A version with backends of its own (a canary's trial on new weights) goes to those only;
        // any other version to the backends pinned to no version.
        let version = request.model_version;
        let own_backends = all.iter().any(|b| b.pinned_to(&request.model, version));
        let fits = |b: &Backend| match own_backends {
            true => b.pinned_version() == version,
            false => b.pinned_version() == 0,
        };
        let mut ranked: Vec<(bool, (bool, u64), &Arc<Backend>)> = all
            .iter()
            .enumerate()
            .filter(|(_, b)| fits(b))
            .filter_map(|(i, b)| {
                let (short, finish) = b.standing(request, own)?;
                let place = match self.routing {
                    Routing::PredictedTime => (short, finish),
                    Routing::RoundRobin => (false, ((i + count - turn % count) % count) as u64),
                };
                Some((!b.is_healthy(), place, b))
            })
            .collect();
        ranked.sort_by_key(|(unhealthy, place, _)| (*unhealthy, *place));
        ranked.into_iter().map(|(_, _, b)| Arc::clone(b)).collect()
    }

    /// Probes every backend once and records the result.
    pub async fn probe(&self) {
        let all = self.all();
        futures::future::join_all(all.iter().map(|b| b.probe())).await;
    }

    /// Every `interval`, forever (the task is aborted at shutdown): takes the registry's pools from
    /// `registry`, then probes every backend.
    pub async fn watch(
        self: Arc<Self>,
        interval: Duration,
        registry: impl Fn() -> Vec<(String, ModelSpec)> + Send + 'static,
    ) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            self.set_pools(&registry());
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

#[cfg(test)]
mod tests {
    use super::*;
    use proto::inference::{ChatMessage, GenerateDone, Sampling, Timings};

    fn backends(routing: Routing, models: &[&str]) -> Backends {
        let specs: Vec<OpenAiBackendSpec> = models
            .iter()
            .enumerate()
            .map(|(i, model)| format!("{model}=http://127.0.0.1:{}/v1", i + 1).parse().expect("spec"))
            .collect();
        let identity = TierIdentity::insecure_secret("a-development-secret-of-32-bytes!").expect("secret");
        Backends::new(&[], &specs, OpenAiTimeouts::default(), routing, identity).expect("backends")
    }

    fn request() -> GenerateRequest {
        GenerateRequest {
            model: "m".into(),
            messages: vec![ChatMessage { role: "user".into(), content: "hello".into() }],
            sampling: Some(Sampling { max_tokens: 32, ..Default::default() }),
            ..Default::default()
        }
    }

    fn urls(ranked: &[Arc<Backend>]) -> Vec<String> {
        ranked
            .iter()
            .map(|b| b.url().trim_end_matches("/v1").rsplit(':').next().unwrap_or("").to_owned())
            .collect()
    }

    #[test]
    fn predicted_time_puts_the_fastest_first_and_leaves_other_models_out() {
        let backends = backends(Routing::PredictedTime, &["m", "m", "other"]);
        let done = |decode_tokens: u32| GenerateDone {
            prompt_tokens: 10,
            completion_tokens: decode_tokens + 1,
            timings: Some(Timings { prefill_us: 10_000, decode_us: 1_000_000, ..Default::default() }),
            ..Default::default()
        };
        backends.all()[0].rates().observe(&done(10));
        backends.all()[1].rates().observe(&done(90));
        let own = prediction::predicted_work(&request());
        assert_eq!(urls(&backends.ranked(&request(), own)), ["2", "1"]);
    }

    #[test]
    fn a_version_with_backends_of_its_own_goes_to_them_only() {
        let backends = backends(Routing::RoundRobin, &["m"]);
        let pool = |version: &str| -> ModelSpec {
            let backend = format!("openai=http://127.0.0.1:7/v1;version={version}");
            ModelSpec { backends: vec![backend.parse().expect("valid")], ..ModelSpec::default() }
        };
        backends.set_pools(&[("m".to_owned(), pool("2"))]);
        let at = |version: u64| GenerateRequest { model_version: version, ..request() };
        let own = Work::default();
        assert_eq!(urls(&backends.ranked(&at(2), own)), ["7"], "the trial's weights");
        assert_eq!(urls(&backends.ranked(&at(1), own)), ["1"], "the current version's");
        assert_eq!(urls(&backends.ranked(&at(3), own)), ["1"], "a version without backends of its own");
    }

    #[test]
    fn round_robin_takes_each_in_turn() {
        let backends = backends(Routing::RoundRobin, &["m", "m", "m"]);
        let own = Work::default();
        let firsts: Vec<String> =
            (0..4).map(|_| urls(&backends.ranked(&request(), own))[0].clone()).collect();
        assert_eq!(firsts, ["1", "2", "3", "1"]);
    }
}
