//! The client side of the inference pods: routes each generation to the healthy pod with the lowest
//! predicted cost for its model, and fails over to the next when one cannot be reached or is full.
//! A background probe keeps each pod's health and load (queue, running sequences, free KV blocks)
//! current; calls this node has in flight on a pod count too, so a burst between probes spreads out.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use proto::inference::inference_pod_client::InferencePodClient;
use proto::inference::{GenerateEvent, GenerateRequest, HealthRequest};
use shared::metrics::Counter;
use tonic::transport::Channel;
use tonic::{Code, Streaming};

use super::error::CoreError;
use daemon_runtime::{TierIdentity, TierRole};

/// How long a health probe may take before the pod counts as down.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One inference pod and what this node knows about it.
#[derive(Debug)]
pub struct Pod {
    /// The pod's URL, as configured.
    url: String,
    /// A client on a lazily connected channel.
    client: InferencePodClient<Channel>,
    /// Whether the pod answered its last call or probe.
    healthy: AtomicBool,
    /// Generate calls sent to the pod.
    generate_calls: Counter,
    /// Calls to the pod that failed to connect or were refused.
    failures: Counter,
    /// What the pod's last `Health` said.
    reported: Mutex<ReportedLoad>,
    /// Generations this node has started on the pod and not yet seen finish.
    in_flight: Arc<InFlightCounts>,
}

/// What this node has in flight on one pod.
#[derive(Debug, Default)]
struct InFlightCounts {
    /// Generations.
    requests: AtomicUsize,
    /// Their predicted tokens (prompt estimate plus `max_tokens`).
    tokens: AtomicU64,
}

/// A pod's load as its `Health` reports it.
#[derive(Debug, Clone, Default)]
struct ReportedLoad {
    /// The model it serves (empty until the first probe).
    model: String,
    /// Requests waiting to start.
    queue_depth: u32,
    /// Sequences in its running batch.
    running: u32,
    /// KV blocks it could hand out now, and their size in tokens.
    free_blocks: u32,
    block_size: u32,
}

/// Prompt tokens per byte of message text, roughly (byte-level BPE on English).
const TOKENS_PER_BYTE: f64 = 0.3;
/// Tokens a queued or running request on a pod is assumed to still cost when nothing better is known.
const TOKENS_PER_REPORTED_REQUEST: u64 = 256;

/// What a generation is predicted to cost in tokens: its prompt (estimated from its bytes) and its output.
pub fn predicted_tokens(request: &GenerateRequest) -> u64 {
    let bytes: usize = request.messages.iter().map(|m| m.content.len() + m.role.len() + 4).sum();
    let output = request.sampling.as_ref().map_or(256, |s| u64::from(s.max_tokens));
    (bytes as f64 * TOKENS_PER_BYTE) as u64 + output
}

impl Pod {
    /// The pod's predicted backlog in tokens if `request` (costing `tokens`) joined it, or `None` when
    /// it serves another model. A pod whose free KV blocks cannot hold the request ranks after every
    /// pod that can.
    fn predicted_cost(&self, request: &GenerateRequest, tokens: u64) -> Option<(bool, u64)> {
        let load = self.reported.lock().map(|l| l.clone()).unwrap_or_default();
        if !load.model.is_empty() && !load.model.eq_ignore_ascii_case(&request.model) {
            return None;
        }
        let reported = u64::from(load.queue_depth + load.running) * TOKENS_PER_REPORTED_REQUEST;
        let backlog = reported.max(self.in_flight.tokens.load(Ordering::Relaxed)) + tokens;
        let kv_short =
            load.block_size > 0 && u64::from(load.free_blocks) * u64::from(load.block_size) < tokens;
        Some((kv_short, backlog))
    }
}

/// Counts a generation as in flight on a pod until dropped (the caller holds it while streaming).
#[derive(Debug)]
pub struct InFlight {
    counts: Arc<InFlightCounts>,
    tokens: u64,
}

impl InFlight {
    fn start(counts: &Arc<InFlightCounts>, tokens: u64) -> Self {
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

impl Pod {
    /// The pod's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether the pod answered its last call or probe.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Generate calls sent to the pod.
    pub fn generate_calls(&self) -> &Counter {
        &self.generate_calls
    }

    /// Failed calls to the pod.
    pub fn failures(&self) -> &Counter {
        &self.failures
    }

    fn set_healthy(&self, healthy: bool) {
        let was = self.healthy.swap(healthy, Ordering::Relaxed);
        if was != healthy {
            tracing::info!(pod = %self.url, healthy, "pod health changed");
        }
    }
}

/// The inference pods a core node sends generation to.
#[derive(Debug)]
pub struct PodPool {
    /// The pods in order of preference.
    pods: Vec<Pod>,
    /// Sent with every call.
    identity: TierIdentity,
}

impl PodPool {
    /// A pool over `urls` (`http://host:port`); connections open lazily.
    pub fn new(urls: &[String], identity: TierIdentity) -> Result<Self, CoreError> {
        let mut pods = Vec::with_capacity(urls.len());
        for url in urls {
            let channel = identity
                .endpoint(url, TierRole::Pod)
                .map_err(|e| CoreError::Config(format!("pod URL {url:?}: {e}")))?
                .connect_timeout(Duration::from_secs(1))
                .tcp_nodelay(true)
                .connect_lazy();
            pods.push(Pod {
                url: url.clone(),
                client: InferencePodClient::new(channel),
                healthy: AtomicBool::new(true),
                generate_calls: Counter::default(),
                failures: Counter::default(),
                reported: Mutex::default(),
                in_flight: Arc::default(),
            });
        }
        Ok(Self { pods, identity })
    }

    /// Whether no pod is configured (the node then serves the store only).
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// The pods, in order of preference.
    pub fn pods(&self) -> &[Pod] {
        &self.pods
    }

    /// Starts a generation on the pod that takes it at the lowest predicted cost: healthy pods serving the
    /// request's model by predicted backlog, then the others (their health may be stale). Returns the pod's
    /// URL, its event stream, and a guard that counts the generation against the pod while it is held.
    pub async fn generate(
        &self,
        request: GenerateRequest,
        trace: &shared::trace::TraceParent,
    ) -> Result<(&str, Streaming<GenerateEvent>, InFlight), CoreError> {
        let tokens = predicted_tokens(&request);
        let mut ranked: Vec<(bool, (bool, u64), usize)> = self
            .pods
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.predicted_cost(&request, tokens).map(|cost| (!p.is_healthy(), cost, i)))
            .collect();
        ranked.sort();
        let mut last_error = String::from("no pods configured for this model");
        for pod in ranked.into_iter().map(|(_, _, i)| &self.pods[i]) {
            pod.generate_calls.inc();
            let mut client = pod.client.clone();
            let guard = InFlight::start(&pod.in_flight, tokens);
            let mut call = self.identity.request(request.clone());
            daemon_runtime::trace_context::attach(&mut call, trace);
            match client.generate(call).await {
                Ok(response) => {
                    pod.set_healthy(true);
                    return Ok((&pod.url, response.into_inner(), guard));
                }
                Err(status) if matches!(status.code(), Code::Unavailable | Code::ResourceExhausted) => {
                    pod.failures.inc();
                    if status.code() == Code::Unavailable {
                        pod.set_healthy(false);
                    }
                    tracing::warn!(pod = %pod.url, code = ?status.code(), error = %status.message(), "pod refused generation; trying the next");
                    last_error = format!("{}: {}", pod.url, status.message());
                }
                Err(status) => {
                    pod.failures.inc();
                    return Err(CoreError::Pod { code: status.code(), message: status.message().to_owned() });
                }
            }
        }
        Err(CoreError::NoPod(last_error))
    }

    /// Probes every pod's `Health` once and records the result.
    pub async fn probe(&self) {
        for pod in &self.pods {
            let mut client = pod.client.clone();
            let mut request = self.identity.request(HealthRequest {});
            request.set_timeout(PROBE_TIMEOUT);
            let reply = match tokio::time::timeout(PROBE_TIMEOUT, client.health(request)).await {
                Ok(Ok(reply)) => Some(reply.into_inner()),
                _ => None,
            };
            let healthy = reply.is_some();
            if let (Some(reply), Ok(mut load)) = (reply, pod.reported.lock()) {
                *load = ReportedLoad {
                    model: reply.model,
                    queue_depth: reply.queue_depth,
                    running: reply.running,
                    free_blocks: reply.free_blocks,
                    block_size: reply.block_size,
                };
            }
            if !healthy {
                pod.failures.inc();
            }
            pod.set_healthy(healthy);
        }
    }

    /// Probes the pods every `interval`, forever (the task is aborted at shutdown).
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            self.probe().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::inference::{ChatMessage, Sampling};

    fn request(model: &str, text: &str, max_tokens: u32) -> GenerateRequest {
        GenerateRequest {
            model: model.into(),
            messages: vec![ChatMessage { role: "user".into(), content: text.into() }],
            sampling: Some(Sampling { max_tokens, ..Default::default() }),
            ..Default::default()
        }
    }

    fn pool() -> PodPool {
        let urls = ["http://127.0.0.1:1".to_owned(), "http://127.0.0.1:2".to_owned()];
        PodPool::new(
            &urls,
            TierIdentity::insecure_secret("a-development-secret-of-32-bytes!").expect("secret"),
        )
        .expect("pool")
    }

    fn report(pod: &Pod, model: &str, queue_depth: u32, running: u32, free_blocks: u32) {
        *pod.reported.lock().expect("lock") =
            ReportedLoad { model: model.into(), queue_depth, running, free_blocks, block_size: 16 };
    }

    #[tokio::test]
    async fn the_less_loaded_pod_costs_less_and_in_flight_calls_count() {
        let pool = pool();
        let (a, b) = (&pool.pods[0], &pool.pods[1]);
        report(a, "m", 3, 8, 1000);
        report(b, "m", 0, 1, 1000);
        let r = request("m", "hello there", 64);
        let tokens = predicted_tokens(&r);
        assert!(tokens >= 64);
        assert!(b.predicted_cost(&r, tokens) < a.predicted_cost(&r, tokens));
        // Work this node sent to `b` since its last report makes it the dearer one.
        let guards: Vec<InFlight> = (0..20).map(|_| InFlight::start(&b.in_flight, 256)).collect();
        assert!(a.predicted_cost(&r, tokens) < b.predicted_cost(&r, tokens));
        drop(guards);
        assert_eq!(b.in_flight.tokens.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn pods_of_another_model_or_without_room_rank_last() {
        let pool = pool();
        let (a, b) = (&pool.pods[0], &pool.pods[1]);
        let r = request("m", "hi", 512);
        report(a, "other-model", 0, 0, 1000);
        assert_eq!(a.predicted_cost(&r, 600), None);
        report(a, "m", 0, 0, 2);
        report(b, "m", 5, 5, 1000);
        let (a_cost, b_cost) = (a.predicted_cost(&r, 600), b.predicted_cost(&r, 600));
        assert!(b_cost < a_cost, "{a_cost:?} vs {b_cost:?}: 2 free blocks of 16 cannot hold 600 tokens");
    }
}
