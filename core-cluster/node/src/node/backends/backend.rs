//! One model backend, whichever its kind: its health, its counters, what this node has in flight on
//! it, and what a generation there is predicted to cost.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use proto::inference::GenerateRequest;
use shared::metrics::Counter;
use shared::trace::TraceParent;

use super::openai::OpenAiClient;
use super::pod::PodClient;
use super::EventStream;
use crate::node::error::CoreError;

/// Prompt tokens per byte of message text, roughly (byte-level BPE on English).
const TOKENS_PER_BYTE: f64 = 0.3;

/// What a generation is predicted to cost in tokens: its prompt (estimated from its bytes) and its output.
pub fn predicted_tokens(request: &GenerateRequest) -> u64 {
    let bytes: usize = request.messages.iter().map(|m| m.content.len() + m.role.len() + 4).sum();
    let output = request.sampling.as_ref().map_or(256, |s| u64::from(s.max_tokens));
    (bytes as f64 * TOKENS_PER_BYTE) as u64 + output
}

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
    /// Generations sent to the backend.
    generate_calls: Counter,
    /// Calls to the backend that failed to connect or were refused.
    failures: Counter,
    /// Generations this node has started on the backend and not yet seen finish.
    in_flight: Arc<InFlightCounts>,
}

/// What this node has in flight on one backend.
#[derive(Debug, Default)]
pub(super) struct InFlightCounts {
    /// Generations.
    requests: AtomicUsize,
    /// Their predicted tokens (prompt estimate plus `max_tokens`).
    pub(super) tokens: AtomicU64,
}

/// Counts a generation as in flight on a backend until dropped (the caller holds it while streaming).
#[derive(Debug)]
pub struct InFlight {
    counts: Arc<InFlightCounts>,
    tokens: u64,
}

impl InFlight {
    pub(super) fn start(counts: &Arc<InFlightCounts>, tokens: u64) -> Self {
        counts.requests.fetch_add(1, Ordering::Relaxed);
        counts.tokens.fetch_add(tokens, Ordering::Relaxed);
        Self { counts: Arc::clone(counts), tokens }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counts.requests.fetch_sub(1, Ordering::Relaxed);
        self.counts.tokens.fetch_sub(self.tokens, Ordering::Relaxed);
    }
}

impl Backend {
    /// A backend at `url`, healthy until a call or probe says otherwise.
    pub fn new(url: &str, kind: BackendKind) -> Self {
        Self {
            url: url.to_owned(),
            kind,
            healthy: AtomicBool::new(true),
            generate_calls: Counter::default(),
            failures: Counter::default(),
            in_flight: Arc::default(),
        }
    }

    /// The backend's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// How the backend is called.
    pub fn kind(&self) -> &BackendKind {
        &self.kind
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

    /// Generations sent to the backend.
    pub fn generate_calls(&self) -> &Counter {
        &self.generate_calls
    }

    /// Failed calls to the backend.
    pub fn failures(&self) -> &Counter {
        &self.failures
    }

    fn set_healthy(&self, healthy: bool) {
        let was = self.healthy.swap(healthy, Ordering::Relaxed);
        if was != healthy {
            tracing::info!(backend = %self.url, healthy, "backend health changed");
        }
    }

    /// The backend's predicted backlog in tokens if `request` (costing `tokens`) joined it, with whether
    /// the backend is short of room for it; `None` when it serves another model.
    pub fn predicted_cost(&self, request: &GenerateRequest, tokens: u64) -> Option<(bool, u64)> {
        let in_flight = self.in_flight.tokens.load(Ordering::Relaxed);
        match &self.kind {
            BackendKind::Pod(pod) => pod.predicted_cost(&request.model, tokens, in_flight),
            BackendKind::OpenAi(server) => {
                server.serves(&request.model).then_some((false, in_flight + tokens))
            }
        }
    }

    /// Starts `request` (predicted to cost `tokens`) on this backend. A refusal the next backend may not
    /// share (unreachable, full) is `CoreError::Backend` with `Unavailable` or `ResourceExhausted`.
    pub async fn generate(
        &self,
        request: GenerateRequest,
        tokens: u64,
        trace: &TraceParent,
    ) -> Result<(EventStream, InFlight), CoreError> {
        self.generate_calls.inc();
        let guard = InFlight::start(&self.in_flight, tokens);
        let started = match &self.kind {
            BackendKind::Pod(pod) => pod.generate(request, trace).await,
            BackendKind::OpenAi(server) => server.generate(request, trace).await,
        };
        match started {
            Ok(stream) => {
                self.set_healthy(true);
                Ok((stream, guard))
            }
            Err(e) => {
                self.failures.inc();
                if matches!(&e, CoreError::Backend { code: tonic::Code::Unavailable, .. }) {
                    self.set_healthy(false);
                }
                Err(e)
            }
        }
    }

    /// Asks the backend whether it is up (and a pod for its load), and records the answer.
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
    use proto::inference::{ChatMessage, Sampling};

    pub(crate) fn request(model: &str, text: &str, max_tokens: u32) -> GenerateRequest {
        GenerateRequest {
            model: model.into(),
            messages: vec![ChatMessage { role: "user".into(), content: text.into() }],
            sampling: Some(Sampling { max_tokens, ..Default::default() }),
            ..Default::default()
        }
    }

    #[test]
    fn a_generation_costs_its_prompt_and_its_output() {
        let short = predicted_tokens(&request("m", "hi", 64));
        let long = predicted_tokens(&request("m", &"word ".repeat(200), 64));
        assert!((64..70).contains(&short), "{short}");
        assert!(long > short + 250, "{long}");
    }

    #[test]
    fn in_flight_counts_until_dropped() {
        let counts = Arc::new(InFlightCounts::default());
        let guards: Vec<InFlight> = (0..3).map(|_| InFlight::start(&counts, 100)).collect();
        assert_eq!(counts.tokens.load(Ordering::Relaxed), 300);
        drop(guards);
        assert_eq!(counts.tokens.load(Ordering::Relaxed), 0);
        assert_eq!(counts.requests.load(Ordering::Relaxed), 0);
    }
}
