//! An inference pod as a backend: generations over gRPC, and the load its `Health` reports (queue,
//! running sequences, free KV blocks), which its predicted cost reads.

use std::sync::Mutex;
use std::time::Duration;

use proto::inference::inference_pod_client::InferencePodClient;
use proto::inference::{GenerateRequest, HealthRequest};
use shared::trace::TraceParent;
use tonic::transport::Channel;

use super::EventStream;
use crate::node::error::CoreError;
use daemon_runtime::{TierIdentity, TierRole};

/// How long a health probe may take before the pod counts as down.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Tokens a queued or running request on a pod is assumed to still cost when nothing better is known.
const TOKENS_PER_REPORTED_REQUEST: u64 = 256;

/// A client of one pod.
#[derive(Debug)]
pub struct PodClient {
    /// A client on a lazily connected channel.
    client: InferencePodClient<Channel>,
    /// Sent with every call.
    identity: TierIdentity,
    /// What the pod's last `Health` said.
    reported: Mutex<ReportedLoad>,
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

impl PodClient {
    /// A client of the pod at `url` (`http://host:port`); the connection opens lazily.
    pub fn new(url: &str, identity: TierIdentity) -> Result<Self, CoreError> {
        let channel = identity
            .endpoint(url, TierRole::Pod)
            .map_err(|e| CoreError::Config(format!("pod URL {url:?}: {e}")))?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .connect_lazy();
        Ok(Self { client: InferencePodClient::new(channel), identity, reported: Mutex::default() })
    }

    /// The pod's predicted backlog in tokens if a request of `model` costing `tokens` joined it, given
    /// `in_flight` tokens this node has sent it; `None` when it serves another model. A pod whose free KV
    /// blocks cannot hold the request ranks after every pod that can.
    pub fn predicted_cost(&self, model: &str, tokens: u64, in_flight: u64) -> Option<(bool, u64)> {
        let load = self.reported.lock().map(|l| l.clone()).unwrap_or_default();
        if !load.model.is_empty() && !load.model.eq_ignore_ascii_case(model) {
            return None;
        }
        let reported = u64::from(load.queue_depth + load.running) * TOKENS_PER_REPORTED_REQUEST;
        let backlog = reported.max(in_flight) + tokens;
        let kv_short =
            load.block_size > 0 && u64::from(load.free_blocks) * u64::from(load.block_size) < tokens;
        Some((kv_short, backlog))
    }

    /// Starts a generation; a pod that cannot be reached or is full is `Unavailable` or
    /// `ResourceExhausted`.
    pub async fn generate(
        &self,
        request: GenerateRequest,
        trace: &TraceParent,
    ) -> Result<EventStream, CoreError> {
        let mut call = self.identity.request(request);
        daemon_runtime::trace_context::attach(&mut call, trace);
        match self.client.clone().generate(call).await {
            Ok(response) => Ok(Box::pin(response.into_inner())),
            Err(status) => {
                Err(CoreError::Backend { code: status.code(), message: status.message().to_owned() })
            }
        }
    }

    /// Asks the pod's `Health` and records its load; whether it answered.
    pub async fn probe(&self) -> bool {
        let mut request = self.identity.request(HealthRequest {});
        request.set_timeout(PROBE_TIMEOUT);
        let reply = match tokio::time::timeout(PROBE_TIMEOUT, self.client.clone().health(request)).await {
            Ok(Ok(reply)) => reply.into_inner(),
            _ => return false,
        };
        if let Ok(mut load) = self.reported.lock() {
            *load = ReportedLoad {
                model: reply.model,
                queue_depth: reply.queue_depth,
                running: reply.running,
                free_blocks: reply.free_blocks,
                block_size: reply.block_size,
            };
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> PodClient {
        let identity = TierIdentity::insecure_secret("a-development-secret-of-32-bytes!").expect("secret");
        PodClient::new("http://127.0.0.1:1", identity).expect("client")
    }

    fn report(pod: &PodClient, model: &str, queue_depth: u32, running: u32, free_blocks: u32) {
        *pod.reported.lock().expect("lock") =
            ReportedLoad { model: model.into(), queue_depth, running, free_blocks, block_size: 16 };
    }

    #[tokio::test]
    async fn the_less_loaded_pod_costs_less_and_in_flight_calls_count() {
        let (a, b) = (pod(), pod());
        report(&a, "m", 3, 8, 1000);
        report(&b, "m", 0, 1, 1000);
        assert!(b.predicted_cost("m", 80, 0) < a.predicted_cost("m", 80, 0));
        // Work this node sent to `b` since its last report makes it the dearer one.
        assert!(a.predicted_cost("m", 80, 0) < b.predicted_cost("m", 80, 20 * 256));
    }

    #[tokio::test]
    async fn pods_of_another_model_or_without_room_rank_last() {
        let (a, b) = (pod(), pod());
        report(&a, "other-model", 0, 0, 1000);
        assert_eq!(a.predicted_cost("m", 600, 0), None);
        report(&a, "m", 0, 0, 2);
        report(&b, "m", 5, 5, 1000);
        let (a_cost, b_cost) = (a.predicted_cost("m", 600, 0), b.predicted_cost("m", 600, 0));
        assert!(b_cost < a_cost, "{a_cost:?} vs {b_cost:?}: 2 free blocks of 16 cannot hold 600 tokens");
    }
}
