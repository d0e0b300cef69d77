//! The pod's listener: gRPC, the OpenAI API (`/v1/*`) and HTTP `/healthz` and `/metrics` on one port,
//! over mutual TLS or, in insecure development mode, plain TCP.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use proto::inference::inference_pod_server::InferencePodServer;
use tokio::net::TcpListener;
use tonic::server::NamedService;

use super::openai_http::{self, ApiKey};
use super::service::InferenceService;
use super::{Engine, PodConfig};
use daemon_runtime::identity::{ClientAuth, RoleCheck};
use daemon_runtime::probes::Readiness;
use daemon_runtime::TierRole;

/// Serves the pod on `listener` until `shutdown` completes, then drains in-flight requests.
///
/// The listener answers at once: `/healthz` and chat completions are 503 and gRPC calls are
/// `UNAVAILABLE` until the model has loaded (in the background). Fails if the model cannot be loaded.
pub async fn run(
    config: PodConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let service = InferenceService::new(config.model_name.clone());
    let readiness = readiness(&service);
    // The pod's row of the authorization table: only core nodes call it.
    let app = router(
        service.clone(),
        readiness.clone(),
        config.identity.interceptor(&[TierRole::Core]),
        config.identity.interceptor(&TierRole::ALL),
        config.openai_api_key.clone(),
    );
    // Every client presents a mesh certificate (gRPC is the core's; `/healthz`, `/metrics` and the
    // OpenAI API take any role, the API its key as well).
    let tls = config.identity.acceptor(ClientAuth::Required)?;
    tracing::info!(addr = %listener.local_addr()?, model = %config.model_name, "inference pod listening");
    let server = daemon_runtime::http_serving::serve(
        listener,
        app,
        daemon_runtime::http_serving::HttpLimits::default(),
        tls,
        shutdown,
    );
    tokio::pin!(server);
    let _probes = match config.probe_listen {
        Some(addr) => {
            Some(AbortOnDrop(daemon_runtime::probes::spawn(TcpListener::bind(addr).await?, readiness)))
        }
        None => None,
    };
    let _tls_reloader = config.identity.spawn_tls_reloader().map(AbortOnDrop);

    let path = config.model_path.clone();
    let load = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        Engine::load(&path).map(|engine| (engine, started.elapsed()))
    });
    tokio::select! {
        served = &mut server => {
            // Shut down before the model finished loading.
            return served.context("serving");
        }
        loaded = load => {
            let (engine, took) = loaded
                .context("model loader panicked")?
                .with_context(|| format!("loading {}", config.model_path.display()))?;
            tracing::info!(
                load_ms = took.as_millis() as u64,
                context = engine.context_len(),
                "model loaded"
            );
            service.set_ready(engine, config.engine.loop_config(config.max_queue), config.max_queue).context("starting the inference worker")?;
            // Under a `Type=notify` unit: ready with the model loaded, as `/readyz` says.
            if let Err(error) = daemon_runtime::systemd_notify::notify("READY=1") {
                tracing::warn!(%error, "could not tell systemd the pod is ready");
            }
        }
    }
    server.await.context("serving")
}

/// gRPC behind the role check, the OpenAI API behind its key (if any), and the probes (HTTP and the
/// standard gRPC health service, ready once the model is loaded) open to any mesh certificate.
fn router(
    service: InferenceService,
    readiness: Readiness,
    auth: RoleCheck,
    any_role: RoleCheck,
    openai_key: Option<ApiKey>,
) -> Router {
    let grpc = InferencePodServer::with_interceptor(service.clone(), auth);
    let pod_name = <InferencePodServer<InferenceService> as NamedService>::NAME;
    let grpc_path = format!("/{pod_name}/{{*method}}");
    let health = daemon_runtime::grpc_health::server(&[pod_name], readiness.clone());
    let health_path = format!("/{}/{{*method}}", <daemon_runtime::grpc_health::HealthServer<daemon_runtime::grpc_health::HealthService> as NamedService>::NAME);
    Router::new()
        .route_service(&grpc_path, grpc)
        .route_service(&health_path, tonic::service::interceptor::InterceptedService::new(health, any_role))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(service.clone())
        .merge(daemon_runtime::probes::router(readiness))
        .merge(openai_http::router(service, openai_key))
}

/// Unknown paths: `UNIMPLEMENTED` for gRPC callers, 404 for everyone else.
async fn not_found(headers: HeaderMap) -> Response {
    let grpc = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        tonic::Status::unimplemented("no such service or method")
            .into_http::<axum::body::Body>()
            .into_response()
    } else {
        (StatusCode::NOT_FOUND, "not found\n").into_response()
    }
}

/// The pod's readiness (`/readyz`, the probe port, gRPC health): the model is loaded, else why not.
fn readiness(service: &InferenceService) -> Readiness {
    let service = service.clone();
    Arc::new(move || if service.is_ready() { Ok(()) } else { Err(service.not_ready_reason().to_owned()) })
}

/// `/healthz`, as `/readyz`: 200 once the model is loaded, else 503 with the reason.
async fn healthz(State(service): State<InferenceService>) -> impl IntoResponse {
    if service.is_ready() {
        (StatusCode::OK, "ok\n".to_owned())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{}\n", service.not_ready_reason()))
    }
}

async fn metrics(State(service): State<InferenceService>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, shared::metrics::CONTENT_TYPE)], service.render_metrics())
}

/// Ends the probe listener with the pod.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use proto::inference as pb;
    use proto::inference::inference_pod_client::InferencePodClient;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tonic::transport::Channel;
    use tonic::Code;

    use super::*;
    use crate::test_support::model_path;
    use daemon_runtime::TierIdentity;

    const SECRET: &str = "a-development-secret-of-32-bytes!";

    /// A plain HTTP/1.1 GET; returns the status code and the body.
    async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET {path} HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("read");
        let status = response.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
        (status, body)
    }

    fn authed<T>(message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert(daemon_runtime::TIER_SECRET_METADATA, SECRET.parse().expect("ascii"));
        request
    }

    fn chat(model: &str, question: &str, max_tokens: u32) -> pb::GenerateRequest {
        pb::GenerateRequest {
            request_id: "req-1".into(),
            tenant: "tenant-a".into(),
            model: model.into(),
            messages: vec![pb::ChatMessage { role: "user".into(), content: question.into() }],
            sampling: Some(pb::Sampling { max_tokens, ..Default::default() }),
            ..Default::default()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serves_grpc_and_http_on_one_port() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let config = PodConfig::new(model_path(), TierIdentity::insecure_secret(SECRET).expect("secret"));
        let server = tokio::spawn(run(config, listener, async {
            let _ = stopped.await;
        }));

        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(addr, "/healthz").await.0 != 200 {
            assert!(Instant::now() < deadline, "model never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        let channel =
            Channel::from_shared(format!("http://{addr}")).expect("uri").connect().await.expect("connect");
        let mut client = InferencePodClient::new(channel);

        let unauthenticated = client.health(pb::HealthRequest {}).await.expect_err("no secret");
        assert_eq!(unauthenticated.code(), Code::Unauthenticated);
        let health = client.health(authed(pb::HealthRequest {})).await.expect("health").into_inner();
        assert_eq!(health.model, "smollm2-135m-instruct");

        let model = "smollm2-135m-instruct";
        for (bad, what) in [
            (chat("gpt-4", "hi", 5), "unknown model"),
            (chat(model, "hi", 0), "max_tokens 0"),
            (chat(model, "hi", 1_000_000), "max_tokens over the context"),
            (chat(model, &"word ".repeat(9000), 5), "prompt over the context"),
            (pb::GenerateRequest { messages: vec![], ..chat(model, "hi", 5) }, "no messages"),
            (
                pb::GenerateRequest {
                    raw_prompt: true,
                    messages: [chat(model, "Once", 5).messages, chat(model, "upon", 5).messages].concat(),
                    ..chat(model, "hi", 5)
                },
                "a raw prompt of two messages",
            ),
        ] {
            let status = client.generate(authed(bad)).await.map(|_| ()).expect_err(what);
            assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
        }

        let mut stream = client
            .generate(authed(chat(model, "How many legs does a spider have?", 20)))
            .await
            .expect("generate")
            .into_inner();
        let mut text = String::new();
        let mut done = None;
        while let Some(event) = stream.message().await.expect("event") {
            assert!(done.is_none(), "an event after Done");
            match event.event.expect("event") {
                pb::generate_event::Event::Delta(d) => text.push_str(&d.text),
                pb::generate_event::Event::Done(d) => done = Some(d),
                pb::generate_event::Event::ChoiceDone(c) => panic!("one choice was asked for: {c:?}"),
            }
        }
        let done = done.expect("a Done event");
        // Words of an answer, not markers (the model's numerics are checked against a reference elsewhere;
        // which facts a 135M model gets right moves with every change of its arithmetic).
        assert!(text.split_whitespace().count() >= 5 && !text.contains("<|im_"), "{text:?}");
        assert!(done.completion_tokens >= 1 && done.prompt_tokens > 10);
        let timings = done.timings.expect("timings");
        assert!(timings.ttft_us >= timings.prefill_us && timings.prefill_us > 0);

        assert_eq!(http_get(addr, "/nope").await.0, 404);
        let (status, metrics) = http_get(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(metrics
            .contains("mesh_pod_requests_total{model=\"smollm2-135m-instruct\",outcome=\"rejected\"} 6"));
        assert!(metrics.contains(&format!(
            "mesh_pod_generated_tokens_total{{model=\"smollm2-135m-instruct\"}} {}",
            done.completion_tokens
        )));
        assert!(metrics.contains("mesh_pod_queue_depth{model=\"smollm2-135m-instruct\"} 0"));

        drop(client);
        stop.send(()).expect("server running");
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("shut down in time")
            .expect("join")
            .expect("run");
    }
}
