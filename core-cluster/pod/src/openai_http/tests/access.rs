//! The API key: required on every `/v1/*` route (chat and text completions, models) when set, and
//! nowhere else.

use super::client::{get, post};
use super::{assert_openai_error, completion, question, Pod, CHAT, TEXT};

const KEY: &str = "sk-pod-openai-test-key";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_guards_the_openai_routes_only() {
    let pod = Pod::start(Some(KEY)).await;
    let right = format!("Bearer {KEY}");

    for auth in [None, Some("Bearer sk-wrong"), Some(KEY)] {
        for reply in [
            get(pod.addr, "/v1/models", auth).await,
            // The key is checked before the body is even read.
            post(pod.addr, CHAT, auth, "{not json").await,
            post(pod.addr, TEXT, auth, "{not json").await,
        ] {
            assert_eq!(reply.status, 401, "{auth:?}: {}", reply.body);
            assert_openai_error(&reply.json(), "invalid_request_error", None, Some("invalid_api_key"));
            assert!(!reply.body.contains(KEY), "the key is never echoed");
        }
    }

    assert_eq!(get(pod.addr, "/v1/models", Some(&right)).await.status, 200);
    let answer = post(pod.addr, CHAT, Some(&right), &question("Say hello.", 4, "")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["object"], "chat.completion");
    let text = post(pod.addr, TEXT, Some(&right), &completion("Once upon a time", 4, "")).await;
    assert_eq!(text.status, 200, "{}", text.body);
    assert_eq!(text.json()["object"], "text_completion");

    // The probes stay open; gRPC keeps its own role check.
    assert_eq!(get(pod.addr, "/healthz", None).await.status, 200);
    assert_eq!(get(pod.addr, "/metrics", None).await.status, 200);
    pod.stop().await;
}
