//! The fake inference pod the cluster generates with.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proto::inference::inference_pod_server::{InferencePod, InferencePodServer};
use proto::inference::{
    generate_event, GenerateDone, GenerateEvent, GenerateRequest, HealthReply, HealthRequest, Timings,
    TokenDelta,
};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

use super::SECRET;
use daemon_runtime::TierIdentity;

/// An inference pod that answers `echo: <last message>` in two deltas and counts its calls. A message
/// starting with `slow` is answered with a delta every 20 ms and never finishes; the pod counts such
/// streams that the core drops (cancels).
#[derive(Clone, Default)]
pub(super) struct FakePod {
    pub(super) calls: Arc<AtomicU64>,
    pub(super) cancelled: Arc<AtomicU64>,
}

/// Counts its own drop.
struct DropCounter(Arc<AtomicU64>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tonic::async_trait]
impl InferencePod for FakePod {
    type GenerateStream =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<GenerateEvent, Status>> + Send>>;

    async fn generate(
        &self,
        request: Request<GenerateRequest>,
    ) -> Result<Response<Self::GenerateStream>, Status> {
        TierIdentity::insecure_secret(SECRET)
            .map_err(|e| Status::internal(e.to_string()))?
            .check(&request, &[daemon_runtime::TierRole::Core])?;
        self.calls.fetch_add(1, Ordering::SeqCst);
        let last = request.into_inner().messages.last().map(|m| m.content.clone()).unwrap_or_default();
        let delta = |text: &str| GenerateEvent {
            event: Some(generate_event::Event::Delta(TokenDelta { text: text.into(), ..Default::default() })),
        };
        if last.starts_with("slow") {
            let counter = DropCounter(Arc::clone(&self.cancelled));
            let ticks = futures::stream::unfold(counter, move |counter| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Some((Ok(delta("tick ")), counter))
            });
            return Ok(Response::new(Box::pin(ticks)));
        }
        let done = GenerateDone {
            finish_reason: "stop".into(),
            prompt_tokens: 2,
            completion_tokens: 2,
            timings: Some(Timings { queue_us: 1, prefill_us: 2, decode_us: 3, ttft_us: 4, tpot_us: 1 }),
            ..Default::default()
        };
        let events = vec![
            Ok(delta("echo: ")),
            Ok(delta(&last)),
            Ok(GenerateEvent { event: Some(generate_event::Event::Done(done)) }),
        ];
        Ok(Response::new(Box::pin(tokio_stream::iter(events))))
    }

    async fn health(&self, _: Request<HealthRequest>) -> Result<Response<HealthReply>, Status> {
        Ok(Response::new(HealthReply { model: "fake".into(), ..Default::default() }))
    }
}

pub(super) async fn start_pod(pod: FakePod) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind pod");
    let addr = listener.local_addr().expect("pod addr");
    let app = tonic::service::Routes::new(InferencePodServer::new(pod)).into_axum_router();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}
