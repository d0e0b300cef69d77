//! An OpenAI-compatible backend that fails in every way a real one does: busy (429), failing (500),
//! silent before its first token, a malformed chunk or a cut connection after it. Every client gets an
//! OpenAI-shaped error (a streamed one ends in an error event, never `[DONE]`), nothing it said is
//! cached (the same question is generated afresh once the backend is well), and the core's circuit
//! breaker opens after three failures in a row (a busy 429 is no failure), keeps generations away while
//! open although the server still answers its health checks, and closes again once a generation
//! succeeds.

use std::time::{Duration, Instant};

use mesh_harness::client::{ChatClient, Reply};
use mesh_harness::scripted_backend::{Behaviour, ScriptedBackend};
use mesh_harness::{client, Mesh, MeshSpec};
use serde_json::json;

const MODEL: &str = "smollm2-135m-instruct";
const GOOD: &str = "Paris is the capital of France.";

fn ask(question: &str) -> serde_json::Value {
    json!({"model": MODEL, "temperature": 0, "max_tokens": 16, "messages": [{"role": "user", "content": question}]})
}

/// `mesh_core_backend_breaker_open` of the scripted backend, as core node 1 reports it.
fn breaker_open(mesh: &Mesh, backend: &str) -> anyhow::Result<Option<f64>> {
    let url = format!("{}/metrics", mesh.core_url(0));
    let text = client::agent(Duration::from_secs(5)).get(&url).call()?.body_mut().read_to_string()?;
    let series = format!("mesh_core_backend_breaker_open{{backend=\"{backend}\",kind=\"openai\"}} ");
    Ok(text.lines().find_map(|l| l.strip_prefix(&series)).and_then(|v| v.trim().parse().ok()))
}

/// A failed answer in OpenAI's shape that is no cache hit.
fn assert_clean_error(reply: &Reply, what: &str) {
    assert!(reply.status >= 400, "{what}: {} {}", reply.status, reply.body);
    let message = reply.json()["error"]["message"].as_str().map(str::to_owned);
    assert!(message.is_some_and(|m| !m.is_empty()), "{what}: not OpenAI-shaped: {}", reply.body);
    assert!(!reply.header("x-cache").unwrap_or_default().starts_with("HIT"), "{what}: {:?}", reply.headers);
}

/// Asks `question` until the scripted backend's good answer comes back generated (the breaker may
/// still be open for a few seconds), and checks nothing from the failure was kept.
fn answered_afresh(regional: &ChatClient, question: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = regional.chat(&ask(question))?;
        if reply.status == 200 {
            assert_eq!(
                reply.header("x-cache"),
                Some("MISS"),
                "{question}: nothing was cached from the failure"
            );
            assert_eq!(reply.content().unwrap_or_default(), GOOD, "{question}");
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{question}: never answered: {} {}",
            reply.status,
            reply.body
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn every_failure_of_a_backend_is_a_clean_error_and_nothing_is_cached() -> anyhow::Result<()> {
    let backend = ScriptedBackend::start(Behaviour::Answer(GOOD.into()))?;
    let dir = std::env::temp_dir().join(format!("mesh-test-failing-backend-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        openai_backends: vec![format!("{MODEL}={}", backend.url())],
        core_args: ["--backend-first-token-timeout-ms", "700", "--backend-retries", "1"]
            .map(str::to_owned)
            .to_vec(),
        ..MeshSpec::local(&dir)
    })?;
    let regional = mesh.regional_client(0);
    let good = regional.chat(&ask("Warm-up: what is the capital of France?"))?;
    anyhow::ensure!(good.status == 200, "{}", good.body);
    assert_eq!(good.content().unwrap_or_default(), GOOD);

    // Busy, then failing, malformed and unavailable: each a clean error, each tried again once before
    // its first token where trying again may help. Busy is not failing; the next three are in a row.
    let faults = [
        (Behaviour::Status(429), "Busy: who wrote Hamlet?"),
        (Behaviour::Status(500), "Failing: who wrote Macbeth?"),
        (Behaviour::MalformedAfterFirst, "Malformed: who wrote Othello?"),
        (Behaviour::Status(503), "Unavailable: who wrote Emma?"),
    ];
    for (i, (behaviour, question)) in faults.iter().enumerate() {
        backend.set(behaviour.clone());
        assert_clean_error(&regional.chat(&ask(question))?, question);
        if i < 3 {
            assert_eq!(breaker_open(&mesh, backend.url())?, Some(0.0), "{question}: not yet three failures");
        }
    }
    assert_eq!(breaker_open(&mesh, backend.url())?, Some(1.0), "three failures in a row open the breaker");
    // While it is open, generations are kept away from the backend.
    let before = backend.generations();
    assert_clean_error(&regional.chat(&ask("While open: who wrote Lear?"))?, "while open");
    assert_eq!(backend.generations(), before, "an open breaker sends nothing to the backend");

    // Well again: once the breaker lets a generation through, it closes, and every question that failed
    // is generated afresh, so nothing the failures said was kept.
    backend.set(Behaviour::Answer(GOOD.into()));
    for (_, question) in &faults {
        answered_afresh(&regional, question)?;
    }
    assert_eq!(breaker_open(&mesh, backend.url())?, Some(0.0), "a success closes the breaker");

    // Silent before the first token: a timeout, tried again once, then a clean error.
    backend.set(Behaviour::Stall);
    let started = Instant::now();
    assert_clean_error(&regional.chat(&ask("Stalled: who wrote Faust?"))?, "stalled");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the first-token timeout bounds it: {:?}",
        started.elapsed()
    );

    // Cut after the first token, streamed: the client saw the first words, then an error event.
    backend.set(Behaviour::CutAfterFirst);
    let cut = regional.chat_stream(&ask("Cut: who wrote Dracula?"))?;
    assert!(!cut.finished(), "a cut stream never ends with [DONE]: {:?}", cut.events);
    let last = cut.events.last().map(|(_, data)| data.clone()).unwrap_or_default();
    assert!(last.contains("\"error\""), "the stream ends with an error event: {last}");

    backend.set(Behaviour::Answer(GOOD.into()));
    answered_afresh(&regional, "Stalled: who wrote Faust?")?;
    answered_afresh(&regional, "Cut: who wrote Dracula?")?;
    Ok(())
}
