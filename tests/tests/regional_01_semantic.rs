//! The regional semantic tier with real processes and the real models: a paraphrase of an answered
//! question is served from that answer's entry, with its similarity and key in headers; near
//! misses (another language, another number) and the same words in another conversation are not.

use std::ops::ControlFlow::{Break, Continue};
use std::time::Duration;

use mesh_harness::client::Reply;
use mesh_harness::poll::poll_reporting;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

fn request(system: &str, question: &str) -> serde_json::Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 24,
           "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]})
}

fn x_cache(reply: &Reply) -> &str {
    reply.header("x-cache").unwrap_or_default()
}

#[test]
fn paraphrases_hit_and_near_misses_do_not() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-semantic-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec {
        regional_nodes: 1,
        edge: false,
        // Every semantic hit is audited against a fresh generation.
        regional_args: vec!["--semantic-audit-fraction".into(), "1".into()],
        ..MeshSpec::local(&dir)
    })?;
    let regional = mesh.regional_client(0);
    let system = "You are a concise assistant.";

    let first = regional.chat(&request(system, "How do I reverse a list in Python?"))?;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(x_cache(&first), "MISS");
    let first_key = first.header("x-cache-key").expect("a key").to_string();

    let paraphrase = regional.chat(&request(system, "How can I reverse a list in python"))?;
    assert_eq!(paraphrase.status, 200, "{}", paraphrase.body);
    assert_eq!(x_cache(&paraphrase), "HIT-REGIONAL-SEMANTIC", "{:?}", paraphrase.headers);
    assert_eq!(paraphrase.header("x-cache-matched-key"), Some(first_key.as_str()));
    let similarity: f32 = paraphrase.header("x-cache-similarity").expect("a similarity").parse()?;
    // The similarity of whichever embedding found it (the small one first, else MiniLM).
    assert!((0.80..=1.0).contains(&similarity), "{similarity}");
    assert_eq!(paraphrase.content(), first.content());
    assert_ne!(paraphrase.header("x-cache-key"), Some(first_key.as_str()), "its own key is reported");

    // Streamed, the paraphrase is an event stream of the same text.
    let streamed = regional.chat_stream(&request(system, "How can I reverse a list in python"))?;
    assert_eq!(streamed.header("x-cache"), Some("HIT-REGIONAL-SEMANTIC"));
    assert!(streamed.finished());
    assert_eq!(Some(streamed.content()), first.content());

    // Near misses embed close but ask something else.
    let java = regional.chat(&request(system, "How do I reverse a list in Java?"))?;
    assert_eq!(x_cache(&java), "MISS", "another language: {:?}", java.headers);
    regional.chat(&request(system, "What is 3 times 7?"))?;
    let eight = regional.chat(&request(system, "What is 3 times 8?"))?;
    assert_eq!(x_cache(&eight), "MISS", "another number: {:?}", eight.headers);

    // The same words in another conversation are another partition.
    let elsewhere = regional.chat(&request("You are a pirate.", "How can I reverse a list in python"))?;
    assert_eq!(x_cache(&elsewhere), "MISS", "another context: {:?}", elsewhere.headers);

    let metrics = regional.get("/metrics")?.body;
    assert!(metrics.contains("tier=\"semantic\"} 2"), "two semantic hits counted:\n{metrics}");

    // Both hits are audited off the request path (or counted as skipped), with the agreement's
    // interval exported for the tenant and class.
    let what = "both semantic hits audited or skipped";
    let (metrics, audited, skipped) =
        poll_reporting(Duration::from_millis(250), Duration::from_secs(60), what, || {
            let metrics = regional.get("/metrics")?.body;
            let audited = sum(&metrics, "mesh_semantic_audits_total{");
            let skipped = sum(&metrics, "mesh_semantic_audits_skipped_total{");
            Ok(if audited + skipped >= 2.0 {
                Break((metrics, audited, skipped))
            } else {
                Continue(format!("\n{metrics}"))
            })
        })?;
    assert!(audited >= 1.0, "at most one audit may be skipped (two run at once):\n{metrics}");
    assert!(
        metrics.contains("tier=\"regional\",tenant=\"dev\",class=\"stable\",bound=\"low\"}"),
        "{metrics}"
    );
    println!("audits: {audited} done, {skipped} skipped");
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The sum of the samples of the metric lines that start with `prefix`.
fn sum(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(prefix))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
