//! One model backend, whichever its kind: its health and breaker, its counters, what this node has in
//! flight on it, its measured rates, and when a generation sent there is predicted to finish.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use proto::inference::{generate_event, GenerateRequest};
use shared::metrics::Counter;
use shared::trace::TraceParent;

use super::breaker::Breaker;
use super::openai::OpenAiClient;
use super::pod::PodClient;
use super::prediction::{MeasuredRates, Work};
use super::EventStream;
use crate::node::error::CoreError;

/// How a backend is called.
#[derive(Debug)]
pub enum BackendKind {
    /// One of our inference pods, over gRPC.
    Pod(PodClient),
    /// An OpenAI-compatible `/v1/chat/completions` server, over HTTP.
    OpenAi(OpenAiClient),
}

/// One backend and what this node knows about it.
#[derive(Debug)]
pub struct Backend {
    /// The backend's URL, as configured.
    url: String,
    kind: BackendKind,
    /// Whether the backend answered its last call or probe.
    healthy: AtomicBool,
    /// Keeps generations away after failures in a row.
    breaker: Arc<Breaker>,
    /// Its prefill and decode speed, from its answers.
    rates: Arc<MeasuredRates>,
    /// Generations sent to the backend.
    generate_calls: Counter,
    /// Calls to the backend that failed to connect or were refused.
    failures: Counter,
    /// Generations this node has started on the backend and not yet seen finish.
    in_flight: Arc<InFlightCounts>,
    /// The model a registry pool gave it; a backend of the flags serves what it says it serves.
    pinned_model: Option<String>,
    /// The model version a registry pool pinned it to (0: every version without backends of its own).
    pinned_version: u64,
    /// Generations this node sends it at once before it counts as short of room (0: no limit).
    capacity: u32,
}

/// What this node has in flight on one backend.
#[derive(Debug, Default)]
pub(super) struct InFlightCounts {
    /// Generations.
    requests: AtomicUsize,
    /// Their predicted prompt and output tokens.
    prompt: AtomicU64,
    output: AtomicU64,
    /// When the count last went from none to one (the backend's busy period began).
    busy_since: std::sync::Mutex<Option<Instant>>,
}

impl InFlightCounts {
    fn work(&self) -> Work {
        Work { prompt: self.prompt.load(Ordering::Relaxed), output: self.output.load(Ordering::Relaxed) }
    }

    fn busy_since(&self) -> Option<Instant> {
        self.busy_since.lock().ok().and_then(|since| *since)
    }
}

/// Counts a generation as in flight on a backend until dropped (the caller holds it while streaming).
#[derive(Debug)]
pub struct InFlight {
    counts: Arc<InFlightCounts>,
    work: Work,
}

impl InFlight {
    pub(super) fn start(counts: &Arc<InFlightCounts>, work: Work) -> Self {
        if counts.requests.fetch_add(1, Ordering::Relaxed) == 0 {
            if let Ok(mut since) = counts.busy_since.lock() {
                *since = Some(Instant::now());
            }
        }
        counts.prompt.fetch_add(work.prompt, Ordering::Relaxed);
        counts.output.fetch_add(work.output, Ordering::Relaxed);
        Self { counts: Arc::clone(counts), work }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counts.requests.fetch_sub(1, Ordering::Relaxed);
        self.counts.prompt.fetch_sub(self.work.prompt, Ordering::Relaxed);
        self.counts.output.fetch_sub(self.work.output, Ordering::Relaxed);
    }
}

/// Where a backend stands for one request: out of the running (another model, an open breaker), or its
/// place: whether it is short of room, and when it would finish.
pub type Standing = Option<(bool, u64)>;

impl Backend {
    /// A backend at `url`, healthy until a call or probe says otherwise.
    pub fn new(url: &str, kind: BackendKind) -> Self {
        Self {
            url: url.to_owned(),
            kind,
            healthy: AtomicBool::new(true),
            breaker: Arc::default(),
            rates: Arc::default(),
            generate_calls: Counter::default(),
            failures: Counter::default(),
            in_flight: Arc::default(),
            pinned_model: None,
            pinned_version: 0,
            capacity: 0,
        }
    }

    /// The same backend serving `model` only, taking `capacity` generations at once (0: no limit).
    pub fn pinned(self, model: &str, capacity: u32) -> Self {
        Self { pinned_model: Some(model.to_owned()), capacity, ..self }
    }

    /// The same backend serving `version` of its model only (0: every version without backends of its
    /// own).
    pub fn for_version(self, version: u64) -> Self {
        Self { pinned_version: version, ..self }
    }

    /// The model version it is pinned to (0: none).
    pub fn pinned_version(&self) -> u64 {
        self.pinned_version
    }

    /// Whether a registry pool pinned it to `model` and `version`.
    pub fn pinned_to(&self, model: &str, version: u64) -> bool {
        version != 0
            && self.pinned_version == version
            && self.pinned_model.as_deref().is_some_and(|pinned| pinned.eq_ignore_ascii_case(model))
    }

    /// Whether a registry pool pinned it to a model other than `model`.
    fn pinned_elsewhere(&self, model: &str) -> bool {
        self.pinned_model.as_deref().is_some_and(|pinned| !pinned.eq_ignore_ascii_case(model))
    }

    /// The backend's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `pod` or `openai`.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            BackendKind::Pod(_) => "pod",
            BackendKind::OpenAi(_) => "openai",
        }
    }

    /// Whether the backend answered its last call or probe.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Whether its breaker keeps generations away now.
    pub fn is_open(&self) -> bool {
        self.breaker.is_open(Instant::now())
    }

    /// Generations sent to the backend.
    pub fn generate_calls(&self) -> &Counter {
        &self.generate_calls
    }

    /// Failed calls to the backend.
    pub fn failures(&self) -> &Counter {
        &self.failures
    }

    /// Its measured rates.
    pub fn rates(&self) -> &MeasuredRates {
        &self.rates
    }

    fn set_healthy(&self, healthy: bool) {
        let was = self.healthy.swap(healthy, Ordering::Relaxed);
        if was != healthy {
            tracing::info!(backend = %self.url, healthy, "backend health changed");
        }
    }

    /// Whether the backend serves `model` and its breaker lets a generation through.
    pub fn takes(&self, model: &str) -> bool {
        if self.pinned_elsewhere(model) {
            return false;
        }
        let serves = match &self.kind {
            BackendKind::Pod(pod) => pod.queued(model, Work::default(), Work::default()).is_some(),
            BackendKind::OpenAi(server) => server.serves(model),
        };
        serves && self.breaker.admits(Instant::now())
    }

    /// Where the backend stands for `request` (its work `own`): when it would finish there, behind what
    /// is queued, at the backend's measured speed.
    pub fn standing(&self, request: &GenerateRequest, own: Work) -> Standing {
        let (short, queued) = self.queued(request, own)?;
        Some((short, self.rates.predicted_us(queued, own)))
    }

    /// When `request` (its work `own`) would see its first token here: the work queued and its prompt,
    /// at the measured rates; `None` when the backend would not take it.
    pub fn predicted_ttft_us(&self, request: &GenerateRequest, own: Work) -> Option<u64> {
        let (_, queued) = self.queued(request, own)?;
        Some(self.rates.predicted_ttft_us(queued, own.prompt))
    }

    /// The work queued here ahead of `request`, with whether the backend is short of room for it (its
    /// pod's KV blocks, or its capacity in generations at once); `None` when it serves another model
    /// or its breaker is open.
    fn queued(&self, request: &GenerateRequest, own: Work) -> Option<(bool, Work)> {
        if self.pinned_elsewhere(&request.model) || !self.breaker.admits(Instant::now()) {
            return None;
        }
        let in_flight = self.in_flight.work();
        let (short, queued) = match &self.kind {
            BackendKind::Pod(pod) => pod.queued(&request.model, own, in_flight)?,
            BackendKind::OpenAi(server) => server.serves(&request.model).then_some((false, in_flight))?,
        };
        let full =
            self.capacity > 0 && self.in_flight.requests.load(Ordering::Relaxed) >= self.capacity as usize;
        Some((short || full, queued))
    }

    /// Starts `request` (its work `own`) on this backend. A refusal the next backend may not share
    /// (unreachable, full) is `CoreError::Backend` with `Unavailable` or `ResourceExhausted`. The stream
    /// it returns feeds the backend's rates and breaker as it goes.
    pub async fn generate(
        &self,
        request: GenerateRequest,
        own: Work,
        trace: &TraceParent,
    ) -> Result<(EventStream, InFlight), CoreError> {
        self.generate_calls.inc();
        let guard = InFlight::start(&self.in_flight, own);
        let started = match &self.kind {
            BackendKind::Pod(pod) => pod.generate(request, trace).await,
            BackendKind::OpenAi(server) => server.generate(request, trace).await,
        };
        match started {
            Ok(stream) => {
                self.set_healthy(true);
                Ok((self.observed(stream), guard))
            }
            Err(e) => {
                self.failures.inc();
                if let CoreError::Backend { code, .. } = &e {
                    if matches!(code, tonic::Code::Unavailable | tonic::Code::DeadlineExceeded) {
                        self.set_healthy(false);
                        self.breaker.record_failure(Instant::now());
                    }
                }
                Err(e)
            }
        }
    }

    /// `stream`, with each `Done` measured into the rates and closing the breaker, and a failure
    /// counting toward opening it.
    fn observed(&self, stream: EventStream) -> EventStream {
        let (rates, breaker) = (Arc::clone(&self.rates), Arc::clone(&self.breaker));
        let in_flight = Arc::clone(&self.in_flight);
        Box::pin(stream.inspect(move |event| match event {
            Ok(event) => {
                if let Some(generate_event::Event::Done(done)) = &event.event {
                    rates.observe(done);
                    rates.observe_finish(done.completion_tokens, in_flight.busy_since(), Instant::now());
                    breaker.record_success();
                }
            }
            Err(status) if status.code() != tonic::Code::Cancelled => breaker.record_failure(Instant::now()),
            Err(_) => {}
        }))
    }

    /// Asks the backend whether it is up (and a pod for its load), and records the answer. An answer
    /// does not close the breaker: a server can answer its health check and fail every generation, so
    /// only a generation that succeeds (the half-open try after [`super::breaker::OPEN_FOR`]) closes it.
    pub async fn probe(&self) {
        let healthy = match &self.kind {
            BackendKind::Pod(pod) => pod.probe().await,
            BackendKind::OpenAi(server) => server.probe().await,
        };
        if !healthy {
            self.failures.inc();
        }
        self.set_healthy(healthy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::backends::{OpenAiBackendSpec, OpenAiTimeouts};
    use proto::inference::{ChatMessage, GenerateDone, Sampling, Timings};

    fn server(model: &str) -> Backend {
        let spec: OpenAiBackendSpec = format!("{model}=http://127.0.0.1:1/v1").parse().expect("spec");
        let client = OpenAiClient::new(&spec, OpenAiTimeouts::default()).expect("client");
        Backend::new(&spec.url, BackendKind::OpenAi(client))
    }

    fn request(model: &str) -> GenerateRequest {
        GenerateRequest {
            model: model.into(),
            messages: vec![ChatMessage { role: "user".into(), content: "hello".into() }],
            sampling: Some(Sampling { max_tokens: 32, ..Default::default() }),
            ..Default::default()
        }
    }

    fn measured(backend: &Backend, decode_tokens_per_s: u64) {
        let timings = Timings { prefill_us: 10_000, decode_us: 1_000_000, ..Default::default() };
        let completion_tokens = u32::try_from(decode_tokens_per_s + 1).expect("small");
        let done = GenerateDone {
            prompt_tokens: 10,
            completion_tokens,
            timings: Some(timings),
            ..Default::default()
        };
        backend.rates.observe(&done);
    }

    #[test]
    fn the_faster_backend_stands_first_until_this_nodes_calls_queue_on_it() {
        let (fast, slow) = (server("m"), server("m"));
        measured(&fast, 100);
        measured(&slow, 20);
        let own = Work { prompt: 4, output: 32 };
        assert!(fast.standing(&request("m"), own) < slow.standing(&request("m"), own));
        let guards: Vec<InFlight> = (0..8).map(|_| InFlight::start(&fast.in_flight, own)).collect();
        assert!(fast.standing(&request("m"), own) > slow.standing(&request("m"), own));
        drop(guards);
        assert_eq!(fast.in_flight.work(), Work::default());
        assert_eq!(fast.in_flight.requests.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn another_models_backend_and_an_open_breaker_are_out() {
        let backend = server("m");
        assert_eq!(backend.standing(&request("other"), Work::default()), None);
        assert!(backend.takes("m") && !backend.takes("other"));
        let now = Instant::now();
        for _ in 0..super::super::breaker::FAILURES_TO_OPEN {
            backend.breaker.record_failure(now);
        }
        assert!(backend.is_open());
        assert_eq!(backend.standing(&request("m"), Work::default()), None);
        assert!(!backend.takes("m"));
    }

    #[test]
    fn a_pool_backend_at_its_capacity_is_short_of_room_and_serves_its_model_only() {
        let pooled = server("m").pinned("M", 1);
        let own = Work { prompt: 4, output: 32 };
        assert_eq!(pooled.standing(&request("m"), own).map(|(short, _)| short), Some(false));
        let guard = InFlight::start(&pooled.in_flight, own);
        assert_eq!(pooled.standing(&request("m"), own).map(|(short, _)| short), Some(true));
        drop(guard);
        let elsewhere = server("m").pinned("other", 0);
        assert_eq!(elsewhere.standing(&request("m"), own), None);
        assert!(!elsewhere.takes("m"));
    }
}
