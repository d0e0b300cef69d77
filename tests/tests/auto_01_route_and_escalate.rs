//! `model: "auto"`: the core picks the model per request by the rule of `shared::auto_model`, climbs to
//! the next model when the first answer is not confident, and the answer is cached under the auto key
//! with the model that gave it.
//!
//! Two models, cheapest first by their registry prices: the pod's SmolLM2 (`smollm2-135m-instruct`) and
//! `big-model`, the same pod reached as an OpenAI-compatible server (a second backend; the rule and the
//! cascade are what is tested, not the models' quality). The core takes a rung's answer only at a
//! confidence of 1.0, so every judged answer climbs. A simple question starts on SmolLM2 and escalates;
//! a complex one starts on `big-model`; tenant `frugal`'s budget pays only for SmolLM2, which answers
//! alone. Each answer says which model gave it, the next identical request is a hit at the edge, and
//! the core's metrics count each choice.

use std::time::{Duration, Instant};

use mesh_harness::client::{self, ChatClient};
use mesh_harness::propagation::admin;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::{json, Value};

const SMALL: &str = "smollm2-135m-instruct";
const BIG: &str = "big-model";

fn ask(text: &str) -> Value {
    json!({"model": "auto", "temperature": 0, "max_tokens": 16, "messages": [{"role": "user", "content": text}]})
}

/// `mesh_core_auto_generations_total` for `model` after `escalations` climbs, at the core node.
fn auto_count(mesh: &Mesh, model: &str, escalations: usize) -> anyhow::Result<f64> {
    let text = client::agent(Duration::from_secs(5))
        .get(&format!("{}/metrics", mesh.core_url(0)))
        .call()?
        .body_mut()
        .read_to_string()?;
    let series =
        format!("mesh_core_auto_generations_total{{model=\"{model}\",escalations=\"{escalations}\"}} ");
    Ok(text.lines().find_map(|l| l.strip_prefix(&series)).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0))
}

/// Asks until the tiers agree on the models (a tier learns `big-model` from the change feed).
fn answered(client: &ChatClient, body: &Value) -> anyhow::Result<mesh_harness::client::Reply> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply = client.chat(body)?;
        if reply.status == 200 || Instant::now() > deadline {
            anyhow::ensure!(reply.status == 200, "{}", reply.body);
            return Ok(reply);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn auto_picks_by_complexity_escalates_when_unsure_and_caches_under_the_answering_model() -> anyhow::Result<()>
{
    let dir = std::env::temp_dir().join(format!("mesh-test-auto-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        other_tenants: vec![("frugal".into(), "sk-frugal".into())],
        core_args: vec![
            "--auto-min-confidence".into(),
            "1.0".into(),
            // 16 tokens cost SmolLM2 about 2 micro-dollars and big-model about 320.
            "--auto-budgets".into(),
            "frugal=100".into(),
        ],
        ..MeshSpec::local(&dir)
    })?;
    let pool = format!("openai={}/v1;upstream_model={SMALL};capacity=4", mesh.pod_url());
    admin(
        &mesh,
        &[
            "register-model",
            "--model",
            SMALL,
            "--input-cost-per-mtok",
            "0.05",
            "--output-cost-per-mtok",
            "0.1",
        ],
    )?;
    admin(&mesh, &["register-model", "--model", BIG, "--version", "1"])?;
    admin(
        &mesh,
        &[
            "register-model",
            "--model",
            BIG,
            "--input-cost-per-mtok",
            "5",
            "--output-cost-per-mtok",
            "20",
            "--backend",
            &pool,
        ],
    )?;
    let edge = mesh.client();
    // Every tier derives the auto key from the models it knows: wait until the edge and the regional
    // node know big-model (a tier behind derives another key, and the edge keeps no answer whose key
    // the regional node derived otherwise).
    let deadline = Instant::now() + Duration::from_secs(30);
    // (A request naming a model a tier does not know makes it pull the core's view at once; asking
    // only-if-cached generates nothing.)
    let names_big = json!({"model": BIG, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]});
    for tier in [&edge, &mesh.regional_client(0)] {
        while tier.chat_only_if_cached(&names_big)?.status == 404 {
            anyhow::ensure!(Instant::now() < deadline, "a tier never learned {BIG}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // A short factual question starts on the cheapest model; its answer is not confident enough, so
    // big-model answers (the core waits for its pool to be reconciled first).
    let simple = ask("What is the capital of Italy?");
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let reply = answered(&edge, &simple)?;
        if reply.json()["model"] == BIG || Instant::now() > deadline {
            break reply;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(first.json()["model"], BIG, "{}", first.body);
    assert_eq!(first.header("x-model-fallback"), None, "auto is not a fallback");
    assert!(auto_count(&mesh, BIG, 1)? >= 1.0, "counted as an escalation from {SMALL}");
    let answer = first.content().unwrap_or_default();
    assert!(!answer.trim().is_empty(), "{}", first.body);

    // Cached under the auto key, as big-model's answer at its version: the same question is a hit at the
    // edge, naming the model that gave it.
    let again = edge.chat(&simple)?;
    assert_eq!(again.status, 200, "{}", again.body);
    let models_at = |client: &ChatClient| client.get("/v1/models").map(|r| r.body).unwrap_or_default();
    assert_eq!(
        again.header("x-cache"),
        Some("HIT-EDGE"),
        "{}\nedge models: {}\nregional models: {}",
        again.body,
        models_at(&edge),
        models_at(&mesh.regional_client(0))
    );
    assert_eq!(
        (again.json()["model"].clone(), again.content().unwrap_or_default()),
        (json!(BIG), answer.clone())
    );
    assert_eq!(again.header("x-model-version"), Some("1"));

    // A complex request starts on big-model: no judged rung before it.
    let before = auto_count(&mesh, BIG, 0)?;
    let complex = ask(
        "Explain step by step why the following function can deadlock when two threads call it at once, \
         compare it with a version that takes both locks in a fixed order, and write the fixed code:\n\
         ```\nfn transfer(a: &Mutex<u64>, b: &Mutex<u64>) { let x = a.lock(); let y = b.lock(); }\n```",
    );
    let hard = answered(&edge, &complex)?;
    assert_eq!(hard.json()["model"], BIG, "{}", hard.body);
    assert_eq!(auto_count(&mesh, BIG, 0)?, before + 1.0, "answered by big-model from the start");

    // Streamed, every chunk names the model that answers (the core says which before the first delta).
    let mut streamed_body = ask("What is the capital of Spain?");
    streamed_body["stream"] = json!(true);
    let streamed = edge.chat_stream(&streamed_body)?;
    assert!(streamed.finished(), "the stream ends with [DONE]");
    let chunk_models: Vec<String> = streamed
        .events
        .iter()
        .filter_map(|(_, data)| serde_json::from_str::<Value>(data).ok())
        .filter_map(|chunk| chunk["model"].as_str().map(str::to_owned))
        .collect();
    assert!(!chunk_models.is_empty() && chunk_models.iter().all(|m| m == BIG), "{chunk_models:?}");

    // Tenant frugal's budget leaves big-model out: SmolLM2 answers alone, with no judgement to climb.
    let frugal = ChatClient::new(&mesh.edge_url().expect("the edge runs"), Some("sk-frugal"));
    let cheap = answered(&frugal, &simple)?;
    assert_eq!(cheap.json()["model"], SMALL, "{}", cheap.body);
    assert!(auto_count(&mesh, SMALL, 0)? >= 1.0);

    // A bump of either model moves the auto version: the cached auto answer is not served again.
    admin(&mesh, &["bump-model", "--model", SMALL])?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let after_bump = loop {
        let reply = edge.chat(&simple)?;
        if reply.status == 200 && !reply.header("x-cache").is_some_and(|c| c.starts_with("HIT")) {
            break reply;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the auto answer outlived the bump: {:?}",
            reply.header("x-cache")
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(after_bump.json()["model"], BIG, "{}", after_bump.body);
    Ok(())
}
