//! Request coalescing with real processes: 50 identical concurrent misses make one lookup and one
//! generation at the core, and all 50 get the same answer, streaming or not.

use std::sync::Arc;

use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

/// The value of a counter line that starts with `prefix` in an OpenMetrics text.
fn counter(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn fifty_identical_misses_make_one_call_to_the_core() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-coalesce-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec { regional_nodes: 1, edge: false, ..MeshSpec::local(&dir) })?;
    let client = Arc::new(mesh.regional_client(0));
    let question = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 48,
                          "messages": [{"role": "user", "content": "Write a short poem about rivers."}]});
    let before = client.get("/metrics")?.body;

    let barrier = Arc::new(std::sync::Barrier::new(50));
    let requests: Vec<_> = (0..50)
        .map(|i| {
            let (client, question, barrier) = (Arc::clone(&client), question.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || -> anyhow::Result<(String, Option<String>)> {
                barrier.wait();
                if i % 2 == 0 {
                    let reply = client.chat(&question)?;
                    anyhow::ensure!(reply.status == 200, "{}", reply.body);
                    Ok((reply.content().unwrap_or_default(), reply.header("x-cache").map(str::to_string)))
                } else {
                    let reply = client.chat_stream(&question)?;
                    anyhow::ensure!(reply.status == 200 && reply.finished(), "stream {i} did not finish");
                    Ok((reply.content(), reply.header("x-cache").map(str::to_string)))
                }
            })
        })
        .collect();
    let answers: Vec<(String, Option<String>)> =
        requests.into_iter().map(|r| r.join().expect("request thread")).collect::<anyhow::Result<_>>()?;

    let first = &answers[0].0;
    assert!(!first.trim().is_empty());
    for (i, (content, x_cache)) in answers.iter().enumerate() {
        assert_eq!(content, first, "request {i} ({x_cache:?}) got another answer");
    }
    let after = client.get("/metrics")?.body;
    let delta = |prefix: &str| counter(&after, prefix) - counter(&before, prefix);
    assert_eq!(
        delta("mesh_regional_core_calls_total{region=\"region-1\",call=\"complete\"}"),
        1.0,
        "{after}"
    );
    assert_eq!(delta("mesh_regional_core_calls_total{region=\"region-1\",call=\"lookup\"}"), 1.0, "{after}");
    let coalesced = delta("mesh_regional_coalesced_total");
    let hits = delta("mesh_regional_hits_total{region=\"region-1\",tier=\"regional\"}");
    assert_eq!(coalesced + hits, 49.0, "the other 49 shared the flight or came after it landed:\n{after}");
    println!("50 identical requests: 1 generation, {coalesced} coalesced, {hits} exact hits after landing");

    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
