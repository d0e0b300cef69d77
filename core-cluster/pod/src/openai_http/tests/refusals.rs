//! The model list, and what the API refuses, each in OpenAI's error shape.

use axum::http::header;
use daemon_runtime::http_serving::{serve, HttpLimits};
use tokio::net::TcpListener;

use super::client::{get, post};
use super::{assert_openai_error, question, Pod, CHAT, MODEL};
use crate::service::InferenceService;

const BAD: &str = "invalid_request_error";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_its_model_and_refuses_in_openai_shape() {
    let pod = Pod::start(None).await;

    let list = get(pod.addr, "/v1/models", None).await;
    assert_eq!(list.status, 200, "{}", list.body);
    let list = list.json();
    assert_eq!(list["object"], "list");
    let models = list["data"].as_array().expect("data");
    assert_eq!(models.len(), 1, "{list}");
    assert_eq!((models[0]["id"].as_str(), models[0]["object"].as_str()), (Some(MODEL), Some("model")));
    assert_eq!(models[0]["owned_by"], "llm-cache-mesh");
    assert_eq!(models[0]["apis"], serde_json::json!(["chat", "completions"]), "{list}");
    assert!(models[0]["created"].as_i64().is_some_and(|t| t > 1_600_000_000), "{list}");
    let one = get(pod.addr, &format!("/v1/models/{MODEL}"), None).await;
    assert_eq!((one.status, one.json()), (200, models[0].clone()));
    let missing = get(pod.addr, "/v1/models/gpt-4", None).await;
    assert_eq!(missing.status, 404);
    assert_openai_error(&missing.json(), BAD, Some("model"), Some("model_not_found"));

    let huge = format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(300_000)
    );
    let cases: [(String, u16, Option<&str>, Option<&str>); 11] = [
        ("{not json".into(), 400, None, None),
        (format!(r#"{{"model":"{MODEL}","messages":"hi"}}"#), 400, None, None),
        (question("hi", 5, r#","top_p":"high""#), 400, None, None),
        (question("hi", 5, r#","n":2"#), 400, Some("n"), None),
        (question("hi", 5, r#","logprobs":true"#), 400, Some("logprobs"), None),
        (question("hi", 5, r#","tools":[{"type":"function"}]"#), 400, Some("tools"), None),
        (question("hi", 5, r#","stream_options":{"include_usage":true}"#), 400, Some("stream_options"), None),
        (question("hi", 0, ""), 400, Some("max_tokens"), None),
        (question("hi", 5, "").replace(MODEL, "gpt-4"), 404, Some("model"), Some("model_not_found")),
        (huge, 413, None, Some("request_too_large")),
        (question(&"word ".repeat(9000), 5, ""), 400, Some("messages"), Some("context_length_exceeded")),
    ];
    let refused = cases.len();
    for (body, status, param, code) in cases {
        let reply = post(pod.addr, CHAT, None, &body).await;
        assert_eq!(reply.status, status, "{param:?} {code:?}: {}", reply.body);
        assert!(reply.headers.contains("content-type: application/json"), "{}", reply.headers);
        assert_openai_error(&reply.json(), BAD, param, code);
    }
    let wrong_method = get(pod.addr, CHAT, None).await;
    assert_eq!(wrong_method.status, 405);
    assert_openai_error(&wrong_method.json(), BAD, None, Some("method_not_allowed"));

    let rejected = format!("mesh_pod_requests_total{{model=\"{MODEL}\",outcome=\"rejected\"}} {refused}\n");
    assert!(pod.metrics().await.contains(&rejected), "every refusal is counted");
    pod.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_still_loading_answers_503_with_retry_after() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    // The routes over a service whose model never loads.
    let router = super::super::router(InferenceService::new(MODEL), None);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, router, HttpLimits::default(), None, async {
        let _ = stopped.await;
    }));

    let loading = post(addr, CHAT, None, &question("hi", 5, "")).await;
    assert_eq!(loading.status, 503, "{}", loading.body);
    assert!(loading.headers.contains(&format!("{}: 1", header::RETRY_AFTER)), "{}", loading.headers);
    assert_openai_error(&loading.json(), "server_error", None, Some("model_not_ready"));
    // What does not need the model is answered already.
    assert_eq!(get(addr, "/v1/models", None).await.status, 200);
    assert_eq!(post(addr, CHAT, None, "{not json").await.status, 400);

    stop.send(()).expect("serving");
    server.await.expect("join").expect("serve");
}
