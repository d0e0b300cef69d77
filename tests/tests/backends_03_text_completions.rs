//! Text completions (`/v1/completions`) through every tier, and a model that joins through the core's
//! registry with a backend pool of its own.
//!
//! The pod's model is described in the core nodes' registry file (`--model-registry`) as answering chat
//! and text completions; a second model, `smollm2-base`, is registered through `core-node admin
//! register-model` with a pool of one OpenAI-compatible backend (the pod's own `/v1`, under its upstream name) and text completions only.
//! Both reach every tier through the change feed: `/v1/models` at the edge lists their APIs and context
//! length. A text completion is generated (the pod continues the raw prompt over gRPC; the pool
//! backend gets `/v1/completions`), cached under a key of its own (apart from the same words as a
//! chat), served by the edge whole and streamed, echoed, bumped and invalidated like any answer; chat to a
//! completion-only model and a text completion to a chat-only model are clear 400s.

use std::time::{Duration, Instant};

use mesh_harness::client::{ChatClient, Reply};
use mesh_harness::propagation::admin;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::{json, Value};

const MODEL: &str = "smollm2-135m-instruct";
const BASE: &str = "smollm2-base";
const PROMPT: &str = "The capital of France is";

fn completion(model: &str, prompt: &str, extra: Value) -> Value {
    let mut body = json!({"model": model, "prompt": prompt, "temperature": 0, "max_tokens": 12});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body
}

fn text_of(reply: &Reply) -> String {
    reply.json()["choices"][0]["text"].as_str().unwrap_or_default().to_owned()
}

/// Polls `/v1/models/{model}` at `client` until `ready` holds for it.
fn wait_for_model(client: &ChatClient, model: &str, ready: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply = client.get(&format!("/v1/models/{model}"))?;
        if reply.status == 200 && ready(&reply.json()) {
            return Ok(reply.json());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{model} never became ready: {} {}",
            reply.status,
            reply.body
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn serves_completions(model: &Value) -> bool {
    model["apis"].as_array().is_some_and(|apis| apis.iter().any(|a| a == "completions"))
}

#[test]
fn text_completions_are_generated_cached_and_invalidated_at_every_tier() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-text-completions-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let registry = dir.join("models.toml");
    std::fs::write(
        &registry,
        format!("[models.{MODEL}]\napis = [\"chat\", \"completions\"]\ncontext_length = 8192\n"),
    )?;
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        core_args: vec!["--model-registry".into(), registry.display().to_string()],
        ..MeshSpec::local(&dir)
    })?;
    let edge = mesh.client();

    // Not registered yet: an unknown model, OpenAI's 404.
    let unknown = edge.post_json("/v1/completions", &completion(BASE, PROMPT, json!({})))?;
    assert_eq!(unknown.status, 404, "{}", unknown.body);

    // The leader registers the file's description; every tier learns it from the feed.
    let described = wait_for_model(&edge, MODEL, serves_completions)?;
    assert_eq!(described["context_length"], 8192, "{described}");

    // Generated, then the edge's own answer; the same words as a chat are another key.
    let first = edge.post_json("/v1/completions", &completion(MODEL, PROMPT, json!({})))?;
    anyhow::ensure!(first.status == 200, "{}", first.body);
    let body = first.json();
    assert_eq!(body["object"], "text_completion", "{body}");
    assert!(body["id"].as_str().is_some_and(|id| id.starts_with("cmpl-")), "{body}");
    assert_eq!(first.header("x-cache"), Some("MISS"));
    let text = text_of(&first);
    assert!(!text.trim().is_empty(), "{body}");
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap_or(0) > 0, "{body}");
    let key = first.header("x-cache-key").unwrap_or_default().to_owned();
    let again = edge.post_json("/v1/completions", &completion(MODEL, PROMPT, json!({})))?;
    assert_eq!(
        (again.header("x-cache"), text_of(&again)),
        (Some("HIT-EDGE"), text.clone()),
        "{}",
        again.body
    );
    let as_chat = edge.chat(&json!({"model": MODEL, "temperature": 0, "max_tokens": 12,
                                    "messages": [{"role": "user", "content": PROMPT}]}))?;
    assert_eq!(as_chat.header("x-cache"), Some("MISS"), "a chat is not the text completion's answer");
    assert_ne!(as_chat.header("x-cache-key"), Some(key.as_str()));

    // Streamed and echoed from the cache: the same text, in text_completion chunks.
    let streamed = edge.stream_at("/v1/completions", &completion(MODEL, PROMPT, json!({})), &[])?;
    assert!(streamed.finished(), "the stream ends with [DONE]");
    let chunks: Vec<Value> =
        streamed.events.iter().filter_map(|(_, data)| serde_json::from_str(data).ok()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"), "{chunks:?}");
    let streamed_text: String =
        chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect::<Vec<_>>().concat();
    assert_eq!(streamed_text, text);
    let echoed = edge.post_json("/v1/completions", &completion(MODEL, PROMPT, json!({"echo": true})))?;
    assert_eq!(text_of(&echoed), format!("{PROMPT}{text}"), "{}", echoed.body);
    assert_eq!(echoed.header("x-cache-key"), Some(key.as_str()), "echo is not part of the key");

    // A model that joins through the registry, with a pool backend and text completions only.
    let pool = format!("openai={}/v1;upstream_model={MODEL};capacity=4", mesh.pod_url());
    admin(&mesh, &["register-model", "--model", BASE, "--version", "1"])?;
    admin(&mesh, &["register-model", "--model", BASE, "--apis", "completions", "--backend", &pool])?;
    let listed = wait_for_model(&edge, BASE, serves_completions)?;
    assert_eq!(listed["apis"], json!(["completions"]), "{listed}");
    let started = Instant::now();
    let chat_refused = loop {
        let reply = edge.chat(&json!({"model": BASE, "messages": [{"role": "user", "content": "hi"}]}))?;
        if reply.status != 404 || started.elapsed() > Duration::from_secs(10) {
            break reply;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("the edge knew {BASE} after {:?}", started.elapsed());
    assert_eq!(chat_refused.status, 400, "{}", chat_refused.body);
    let message = chat_refused.json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("/v1/completions"), "{message}");
    // The core reconciles its pool on its next round; until then the model has no backend.
    let deadline = Instant::now() + Duration::from_secs(30);
    let base = loop {
        let reply = edge.post_json("/v1/completions", &completion(BASE, PROMPT, json!({})))?;
        if reply.status == 200 || Instant::now() > deadline {
            break reply;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    anyhow::ensure!(base.status == 200, "{}", base.body);
    assert_eq!(base.json()["model"], BASE, "{}", base.body);
    assert_eq!(base.header("x-cache"), Some("MISS"));
    assert_eq!(text_of(&base), text, "the pod's HTTP and gRPC paths continue the prompt alike");
    assert_ne!(base.header("x-cache-key"), Some(key.as_str()), "two models never share an entry");

    // A bump of the model its OpenAI-compatible backend serves reaches the edge as a pod model's does:
    // the next request is a new key (the new version's), generated again.
    let base_key = base.header("x-cache-key").unwrap_or_default().to_owned();
    let cached = edge.post_json("/v1/completions", &completion(BASE, PROMPT, json!({})))?;
    assert_eq!(cached.header("x-cache"), Some("HIT-EDGE"), "{}", cached.body);
    admin(&mesh, &["bump-model", "--model", BASE])?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = edge.post_json("/v1/completions", &completion(BASE, PROMPT, json!({})))?;
        if reply.header("x-cache-key").is_some_and(|k| k != base_key) {
            assert_eq!(reply.header("x-cache"), Some("MISS"), "{}", reply.body);
            assert_eq!(text_of(&reply), text);
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "still the old version's key 10 s after the bump");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Invalidated like any answer: refused by the edge within the bound, then generated again.
    admin(&mesh, &["invalidate", "--tenant", "dev", "--key", &key])?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = edge.post_json("/v1/completions", &completion(MODEL, PROMPT, json!({})))?;
        if reply.header("x-cache") == Some("MISS") {
            assert_eq!(text_of(&reply), text);
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "still {:?} 10 s after the invalidation",
            reply.header("x-cache")
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // What the API does not serve is refused by name.
    let n =
        edge.post_json("/v1/completions", &completion(MODEL, PROMPT, json!({"n": 2, "temperature": 0.7})))?;
    assert_eq!((n.status, n.json()["error"]["param"].as_str()), (400, Some("n")), "{}", n.body);
    Ok(())
}
