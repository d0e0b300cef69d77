//! The client side of the inference pods: picks the first healthy pod in `--pods` order and fails over to
//! the next when one cannot be reached or is full. A background probe keeps each pod's health current.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proto::inference::inference_pod_client::InferencePodClient;
use proto::inference::{GenerateEvent, GenerateRequest, HealthRequest};
use shared::metrics::Counter;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Streaming};

use super::auth::TierSecret;
use super::error::CoreError;

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
    secret: TierSecret,
}

impl PodPool {
    /// A pool over `urls` (`http://host:port`); connections open lazily.
    pub fn new(urls: &[String], secret: TierSecret) -> Result<Self, CoreError> {
        let mut pods = Vec::with_capacity(urls.len());
        for url in urls {
            let channel = Endpoint::from_shared(url.clone())
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
            });
        }
        Ok(Self { pods, secret })
    }

    /// Whether no pod is configured (the node then serves the store only).
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// The pods, in order of preference.
    pub fn pods(&self) -> &[Pod] {
        &self.pods
    }

    /// Starts a generation on the first pod that takes it: healthy pods first, in order, then the others
    /// (their health may be stale). Returns the pod's URL and its event stream.
    pub async fn generate(
        &self,
        request: GenerateRequest,
    ) -> Result<(&str, Streaming<GenerateEvent>), CoreError> {
        let order =
            self.pods.iter().filter(|p| p.is_healthy()).chain(self.pods.iter().filter(|p| !p.is_healthy()));
        let mut last_error = String::from("no pods configured");
        for pod in order {
            pod.generate_calls.inc();
            let mut client = pod.client.clone();
            match client.generate(self.secret.request(request.clone())).await {
                Ok(response) => {
                    pod.set_healthy(true);
                    return Ok((&pod.url, response.into_inner()));
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
            let mut request = self.secret.request(HealthRequest {});
            request.set_timeout(PROBE_TIMEOUT);
            let healthy =
                matches!(tokio::time::timeout(PROBE_TIMEOUT, client.health(request)).await, Ok(Ok(_)));
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
