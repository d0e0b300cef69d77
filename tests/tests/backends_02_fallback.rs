//! A lighter model answers when a model's backends cannot: `big-model` is served only by an
//! OpenAI-compatible server that is down, with the pod's model as its fallback. Every client gets an
//! answer that says which model gave it (its `model` field and `X-Model-Fallback`), the answer is cached
//! under the fallback model's key only, and both tiers count it.

use std::time::Duration;

use mesh_harness::{client, Mesh, MeshSpec};
use serde_json::json;

const LIGHT: &str = "smollm2-135m-instruct";
const BIG: &str = "big-model";

fn ask(model: &str, text: &str, stream: bool) -> serde_json::Value {
    json!({"model": model, "temperature": 0, "max_tokens": 16, "stream": stream,
           "messages": [{"role": "user", "content": text}]})
}

/// A counter's value in a daemon's `/metrics`.
fn counter(url: &str, name: &str) -> anyhow::Result<f64> {
    let text = client::agent(Duration::from_secs(5))
        .get(&format!("{url}/metrics"))
        .call()?
        .body_mut()
        .read_to_string()?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum())
}

#[test]
fn the_fallback_model_answers_says_so_and_is_cached_under_its_own_key() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-fallback-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let models = format!("{LIGHT}@1,{BIG}@1");
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        models: models.clone(),
        core_args: vec![
            "--models".into(),
            models,
            // Nothing listens on the discard port: every try at big-model's only backend fails.
            "--openai-backends".into(),
            format!("{BIG}=http://127.0.0.1:9/v1"),
            "--fallback-models".into(),
            format!("{BIG}={LIGHT}"),
        ],
        ..MeshSpec::local(&dir)
    })?;
    let regional = mesh.regional_client(0);

    let question = "Who wrote Romeo and Juliet?";
    let first = regional.chat(&ask(BIG, question, false))?;
    anyhow::ensure!(first.status == 200, "{}", first.body);
    assert_eq!(first.json()["model"], LIGHT, "{}", first.body);
    assert_eq!(first.header("x-model-fallback"), Some(LIGHT));
    assert_eq!(first.header("cache-control"), Some("no-store"), "no edge keeps it under big-model's key");
    let answer = first.content().unwrap_or_default();
    assert!(!answer.trim().is_empty(), "{}", first.body);

    // Cached under the light model's key: asking it is a hit with the same text ...
    let light = regional.chat(&ask(LIGHT, question, false))?;
    assert_eq!(light.header("x-cache"), Some("HIT-REGIONAL"), "{}", light.body);
    assert_eq!(light.content().unwrap_or_default(), answer);
    assert_eq!(light.header("x-model-fallback"), None);
    // ... and never under big-model's.
    let only_cached = regional.chat_only_if_cached(&ask(BIG, question, false))?;
    assert_ne!(only_cached.status, 200, "{:?} {}", only_cached.header("x-cache"), only_cached.body);

    // Asked again, the core answers from the fallback's stored entry (no second generation on the pod).
    let on_the_pod = format!("mesh_core_pod_generate_total{{pod=\"{}\"}}", mesh.pod_url());
    let generated = counter(&mesh.core_url(0), &on_the_pod)?;
    assert_eq!(generated, 1.0);
    let again = regional.chat(&ask(BIG, question, false))?;
    assert_eq!((again.status, again.header("x-model-fallback")), (200, Some(LIGHT)), "{}", again.body);
    assert_eq!(again.content().unwrap_or_default(), answer);
    assert_eq!(counter(&mesh.core_url(0), &on_the_pod)?, generated);

    // Streamed: the header and every chunk name the light model.
    let streamed = regional.chat_stream(&ask(BIG, "Name a primary color.", true))?;
    assert!(streamed.finished(), "the stream ends with [DONE]");
    assert_eq!(streamed.header("x-model-fallback"), Some(LIGHT));
    let chunk_models: Vec<String> = streamed
        .events
        .iter()
        .filter_map(|(_, data)| serde_json::from_str::<serde_json::Value>(data).ok())
        .filter_map(|chunk| chunk["model"].as_str().map(str::to_owned))
        .collect();
    assert!(!chunk_models.is_empty() && chunk_models.iter().all(|m| m == LIGHT), "{chunk_models:?}");

    assert!(counter(&mesh.core_url(0), "mesh_core_fallbacks_total")? >= 3.0);
    assert!(counter(&mesh.regional_url(0), "mesh_regional_fallbacks_total")? >= 3.0);
    Ok(())
}
