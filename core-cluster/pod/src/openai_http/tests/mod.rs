//! The OpenAI API against the real pod: the real model on a loopback port, driven over plain HTTP/1.1.

mod access;
mod answers;
mod cancellation;
mod client;
mod refusals;
mod text;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use shared::openai::{ChatCompletionChunk, SSE_DONE};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::ApiKey;
use crate::config::{EngineConfig, DEFAULT_MODEL_NAME};
use crate::test_support::model_path;
use crate::PodConfig;
use daemon_runtime::TierIdentity;

/// The served model.
const MODEL: &str = DEFAULT_MODEL_NAME;
/// The chat route.
const CHAT: &str = "/v1/chat/completions";
/// The text completion route.
const TEXT: &str = "/v1/completions";

/// A pod serving on a loopback port until it is stopped.
struct Pod {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    server: JoinHandle<anyhow::Result<()>>,
}

impl Pod {
    /// Starts the real pod (with the OpenAI API behind `key`, when given) and waits for its model.
    async fn start(key: Option<&str>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let identity = TierIdentity::insecure_secret("a-development-secret-of-32-bytes!").expect("secret");
        // 8,192 tokens of KV: a whole context, a fraction of the default pool's memory.
        let engine = EngineConfig { kv_blocks: 512, ..EngineConfig::default() };
        let mut config = PodConfig::new(model_path(), identity).with_engine(engine);
        if let Some(key) = key {
            config = config.with_openai_api_key(ApiKey::new(key).expect("a key"));
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(crate::run(config, listener, async {
            let _ = stopped.await;
        }));
        let deadline = Instant::now() + Duration::from_secs(60);
        while client::get(addr, "/healthz", None).await.status != 200 {
            assert!(Instant::now() < deadline, "model never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self { addr, stop, server }
    }

    /// The pod's `/metrics` text.
    async fn metrics(&self) -> String {
        client::get(self.addr, "/metrics", None).await.body
    }

    /// Stops the pod and checks it shut down cleanly.
    async fn stop(self) {
        self.stop.send(()).expect("server running");
        tokio::time::timeout(Duration::from_secs(10), self.server)
            .await
            .expect("shut down in time")
            .expect("join")
            .expect("run");
    }
}

/// A greedy question of at most `max_tokens` tokens, with `extra` fields (each starting with a comma).
fn question(text: &str, max_tokens: u32, extra: &str) -> String {
    format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"{text}"}}],"temperature":0,"max_tokens":{max_tokens}{extra}}}"#
    )
}

/// A greedy text completion of `prompt`, at most `max_tokens` tokens, with `extra` fields (each starting
/// with a comma).
fn completion(prompt: &str, max_tokens: u32, extra: &str) -> String {
    let prompt = serde_json::to_string(prompt).expect("a JSON string");
    format!(r#"{{"model":"{MODEL}","prompt":{prompt},"temperature":0,"max_tokens":{max_tokens}{extra}}}"#)
}

/// The chat chunks of a complete SSE body, which must end with `data: [DONE]`.
fn sse_chunks(body: &str) -> Vec<ChatCompletionChunk> {
    sse_events(body)
}

/// The events of a complete SSE body, which must end with `data: [DONE]`.
fn sse_events<T: DeserializeOwned>(body: &str) -> Vec<T> {
    let rest = body.strip_suffix(SSE_DONE).unwrap_or_else(|| panic!("no [DONE] at the end: {body:?}"));
    rest.split("\n\n")
        .filter(|event| !event.is_empty())
        .map(|event| {
            let data =
                event.strip_prefix("data: ").unwrap_or_else(|| panic!("not an SSE data event: {event:?}"));
            serde_json::from_str(data).unwrap_or_else(|e| panic!("not a chunk ({e}): {data}"))
        })
        .collect()
}

/// Checks `body` is OpenAI's error shape with this type, parameter and code.
#[track_caller]
fn assert_openai_error(body: &serde_json::Value, kind: &str, param: Option<&str>, code: Option<&str>) {
    let error = &body["error"];
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    assert_eq!(error["type"], kind, "{body}");
    assert_eq!(error["param"].as_str(), param, "{body}");
    assert_eq!(error["code"].as_str(), code, "{body}");
    let keys: Vec<&String> = error.as_object().expect("an object").keys().collect();
    assert_eq!(keys.len(), 4, "message, type, param and code only: {body}");
}
