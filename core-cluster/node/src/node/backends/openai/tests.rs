//! The adapter against a scripted OpenAI-compatible server on a loopback port: each call takes the next
//! step of its script (an answer, a refusal, a stall, a stream cut short, malformed chunks).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::StreamExt;
use proto::inference::{generate_event, ChatMessage, GenerateRequest, Sampling};

use super::*;

/// One call's answer.
#[derive(Clone)]
enum Step {
    /// A whole stream: these content deltas, then `stop`, usage and `[DONE]`.
    Answer(Vec<&'static str>),
    /// This status with an OpenAI-shaped error.
    Refuse(u16),
    /// Nothing for this long, then an answer of one word.
    Stall(Duration),
    /// These deltas, then the connection ends.
    Cut(Vec<&'static str>),
    /// This raw event data, then `[DONE]`.
    Raw(&'static str),
}

/// What one call carried: its `Authorization` header and its body.
type Call = (Option<String>, serde_json::Value);

#[derive(Clone, Default)]
struct Script {
    steps: Arc<Mutex<VecDeque<Step>>>,
    calls: Arc<Mutex<Vec<Call>>>,
}

fn sse(data: &str) -> String {
    format!("data: {data}\n\n")
}

fn delta(text: &str) -> String {
    sse(&serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
        .to_string())
}

fn finish() -> String {
    sse(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#)
        + &sse(r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#)
        + &sse("[DONE]")
}

fn stream_of(parts: Vec<String>, delay: Duration) -> Response {
    let body = futures::stream::iter(parts).then(move |part| async move {
        tokio::time::sleep(delay).await;
        Ok::<_, std::io::Error>(part)
    });
    ([("content-type", "text/event-stream")], Body::from_stream(body)).into_response()
}

async fn chat(
    axum::extract::State(script): axum::extract::State<Script>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let json = serde_json::from_str(&body).unwrap_or_default();
    script.calls.lock().expect("lock").push((auth, json));
    let step = script.steps.lock().expect("lock").pop_front().unwrap_or(Step::Answer(vec!["ok"]));
    match step {
        Step::Answer(words) => {
            stream_of(words.iter().map(|w| delta(w)).chain([finish()]).collect(), Duration::ZERO)
        }
        Step::Refuse(status) => {
            let error = serde_json::json!({"error": {"message": format!("scripted {status}"), "type": "server_error"}});
            (StatusCode::from_u16(status).expect("status"), error.to_string()).into_response()
        }
        Step::Stall(wait) => stream_of(vec![delta("late"), finish()], wait),
        Step::Cut(words) => {
            let parts: Vec<_> = words.iter().map(|w| Ok::<_, std::io::Error>(delta(w))).collect();
            // The deltas go out first; a moment later the connection breaks.
            let cut = futures::stream::iter(parts).chain(futures::stream::once(async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Err(std::io::Error::other("cut"))
            }));
            ([("content-type", "text/event-stream")], Body::from_stream(cut)).into_response()
        }
        Step::Raw(data) => stream_of(vec![sse(data), sse("[DONE]")], Duration::ZERO),
    }
}

async fn serve(steps: Vec<Step>) -> (String, Script) {
    let script = Script { steps: Arc::new(Mutex::new(steps.into())), ..Default::default() };
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(|| async { r#"{"object":"list","data":[]}"# }))
        .with_state(script.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, script)
}

fn client(url: &str, key_file: Option<std::path::PathBuf>) -> OpenAiClient {
    let spec = OpenAiBackendSpec {
        model: "m".into(),
        url: url.into(),
        key_file,
        ca: None,
        upstream_model: "served".into(),
    };
    let timeouts = OpenAiTimeouts {
        connect: Duration::from_millis(500),
        first_token: Duration::from_millis(400),
        retries: 2,
    };
    OpenAiClient::new(&spec, timeouts).expect("client")
}

fn request() -> GenerateRequest {
    GenerateRequest {
        model: "m".into(),
        messages: vec![ChatMessage { role: "user".into(), content: "Who wrote Hamlet?".into() }],
        sampling: Some(Sampling { max_tokens: 16, ..Default::default() }),
        ..Default::default()
    }
}

fn trace() -> TraceParent {
    TraceParent::start([7; 24])
}

/// The stream's text and its `Done`'s finish reason, or the error that ended it.
async fn drain(mut stream: EventStream) -> Result<(String, String), Status> {
    let mut text = String::new();
    while let Some(event) = stream.next().await {
        match event?.event {
            Some(generate_event::Event::Delta(d)) => text.push_str(&d.text),
            Some(generate_event::Event::Done(done)) => return Ok((text, done.finish_reason)),
            _ => {}
        }
    }
    Err(Status::internal("ended without Done"))
}

#[tokio::test]
async fn a_streamed_answer_is_relayed_with_its_usage_and_the_model_renamed() {
    let (url, script) = serve(vec![Step::Answer(vec!["William", " Shakespeare."])]).await;
    let stream = client(&url, None).generate(request(), &trace()).await.expect("starts");
    assert_eq!(drain(stream).await.expect("answer"), ("William Shakespeare.".into(), "stop".into()));
    let calls = script.calls.lock().expect("lock");
    assert_eq!(calls[0].1["model"], "served");
    assert_eq!(calls[0].1["max_tokens"], 16);
    assert_eq!(calls[0].0, None, "no key configured, none sent");
}

#[tokio::test]
async fn busy_and_failing_servers_are_tried_again_before_the_first_token() {
    let (url, script) = serve(vec![Step::Refuse(429), Step::Refuse(503), Step::Answer(vec!["third"])]).await;
    let stream = client(&url, None).generate(request(), &trace()).await.expect("the third try answers");
    assert_eq!(drain(stream).await.expect("answer").0, "third");
    assert_eq!(script.calls.lock().expect("lock").len(), 3);

    let (url, script) = serve(vec![Step::Refuse(500), Step::Refuse(500), Step::Refuse(500)]).await;
    match client(&url, None).generate(request(), &trace()).await {
        Err(CoreError::Backend { code: Code::Unavailable, message }) => {
            assert!(message.contains("500"), "{message}")
        }
        other => panic!("{:?}", other.map(|_| "a stream")),
    }
    assert_eq!(script.calls.lock().expect("lock").len(), 3, "one try and two retries");
}

#[tokio::test]
async fn a_refused_request_is_the_callers_error_and_is_not_tried_again() {
    let (url, script) = serve(vec![Step::Refuse(400)]).await;
    match client(&url, None).generate(request(), &trace()).await {
        Err(CoreError::InvalidArgument(message)) => assert!(message.contains("scripted 400"), "{message}"),
        other => panic!("{:?}", other.map(|_| "a stream")),
    }
    assert_eq!(script.calls.lock().expect("lock").len(), 1);
}

#[tokio::test]
async fn a_stalled_server_fails_at_the_first_token_timeout() {
    let stall = Step::Stall(Duration::from_secs(2));
    let (url, _) = serve(vec![stall.clone(), stall.clone(), stall]).await;
    let started = std::time::Instant::now();
    match client(&url, None).generate(request(), &trace()).await {
        Err(CoreError::Backend { code: Code::Unavailable, message }) => {
            assert!(message.contains("no first token"), "{message}")
        }
        other => panic!("{:?}", other.map(|_| "a stream")),
    }
    assert!(started.elapsed() < Duration::from_secs(4), "three tries of 400 ms, not of 2 s");
}

#[tokio::test]
async fn a_stream_cut_or_malformed_after_the_first_token_ends_in_an_error() {
    let (url, _) = serve(vec![Step::Cut(vec!["half", " an answer"])]).await;
    let stream = client(&url, None).generate(request(), &trace()).await.expect("starts");
    let error = drain(stream).await.expect_err("cut");
    assert_eq!(error.code(), Code::Unavailable, "{error:?}");

    let (url, _) = serve(vec![Step::Raw(r#"{"choices":[{"delta":{"content":"a"}}]}"#)]).await;
    let stream = client(&url, None).generate(request(), &trace()).await.expect("starts");
    assert!(drain(stream).await.expect_err("no finish reason").message().contains("finish reason"));

    let (url, _) = serve(vec![Step::Raw("{not json")]).await;
    match client(&url, None).generate(request(), &trace()).await {
        Err(CoreError::Backend { code: Code::Internal, message }) => {
            assert!(message.contains("not JSON"), "{message}")
        }
        other => panic!("{:?}", other.map(|_| "a stream")),
    }
}

#[tokio::test]
async fn the_api_key_is_sent_as_a_bearer_token_and_never_shown() {
    let dir = std::env::temp_dir().join(format!("openai-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let key_file = dir.join("key");
    std::fs::write(&key_file, "sk-secret-test-key\n").expect("write");
    let (url, script) = serve(vec![Step::Answer(vec!["x"])]).await;
    let client = client(&url, Some(key_file.clone()));
    assert!(!format!("{client:?}").contains("sk-secret"), "{client:?}");
    drain(client.generate(request(), &trace()).await.expect("starts")).await.expect("answer");
    assert_eq!(script.calls.lock().expect("lock")[0].0.as_deref(), Some("Bearer sk-secret-test-key"));
    assert!(client.probe().await, "GET /models answers");

    std::fs::write(&key_file, "  \n").expect("write");
    let spec = OpenAiBackendSpec { key_file: Some(key_file), ..client.spec.clone() };
    let error = OpenAiClient::new(&spec, OpenAiTimeouts::default()).expect_err("an empty key file");
    assert!(error.to_string().contains("is empty"), "{error}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable() {
    let client = client("http://127.0.0.1:1/v1", None);
    assert!(matches!(
        client.generate(request(), &trace()).await,
        Err(CoreError::Backend { code: Code::Unavailable, .. })
    ));
    assert!(!client.probe().await);
}
