//! An inference pod as a backend: generations over gRPC, and the load its `Health` reports (queue,
//! running sequences, free KV blocks), which its predicted cost reads.

use std::sync::Mutex;
use std::time::Duration;

use proto::inference::inference_pod_client::InferencePodClient;
use proto::inference::{GenerateRequest, HealthRequest};
use shared::trace::TraceParent;
use tonic::transport::Channel;

use super::prediction::Work;
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
            .configure(|endpoint| endpoint.connect_timeout(Duration::from_secs(1)).tcp_nodelay(true))
            .connect_lazy();
        Ok(Self { client: InferencePodClient::new(channel), identity, reported: Mutex::default() })
    }

    /// The work queued on the pod as it and this node know it (`in_flight` is what this node has sent
    /// it), with whether its free KV blocks are short of `own`; `None` when it serves another model.
    /// Requests it reports queued or running count [`TOKENS_PER_REPORTED_REQUEST`] output tokens each.
    pub fn queued(&self, model: &str, own: Work, in_flight: Work) -> Option<(bool, Work)> {
        let load = self.reported.lock().map(|l| l.clone()).unwrap_or_default();
        if !load.model.is_empty() && !load.model.eq_ignore_ascii_case(model) {
            return None;
        }
        let reported = u64::from(load.queue_depth + load.running) * TOKENS_PER_REPORTED_REQUEST;
        let queued = Work { prompt: in_flight.prompt, output: reported.max(in_flight.output) };
        let kv_short =
            load.block_size > 0 && u64::from(load.free_blocks) * u64::from(load.block_size) < own.total();
        Some((kv_short, queued))
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

    const OWN: Work = Work { prompt: 16, output: 64 };

    #[tokio::test]
    async fn the_reported_load_and_this_nodes_calls_are_the_queue() {
        let pod = pod();
        report(&pod, "m", 3, 8, 1000);
        let (short, queued) = pod.queued("m", OWN, Work::default()).expect("serves m");
        assert_eq!((short, queued.output), (false, 11 * TOKENS_PER_REPORTED_REQUEST));
        // Work this node sent since the last report counts when it is more.
        let (_, queued) = pod.queued("m", OWN, Work { prompt: 100, output: 20 * 256 }).expect("serves m");
        assert_eq!(queued, Work { prompt: 100, output: 20 * 256 });
    }

    #[tokio::test]
    async fn pods_of_another_model_are_out_and_those_without_room_say_so() {
        let pod = pod();
        report(&pod, "other-model", 0, 0, 1000);
        assert_eq!(pod.queued("m", OWN, Work::default()), None);
        report(&pod, "m", 0, 0, 2);
        let big = Work { prompt: 100, output: 500 };
        assert_eq!(
            pod.queued("m", big, Work::default()).map(|(short, _)| short),
            Some(true),
            "2 blocks of 16"
        );
    }
}
