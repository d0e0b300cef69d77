//! Cache-policy arms: tenant `dev` tries its semantic thresholds two ways side by side
//! (`--semantic-experiment dev=50:1.0`). Half of its questions (by key, each always in the same arm) are
//! in the trial arm, whose thresholds are moved past 1, so no paraphrase hits there; the control arm's
//! paraphrases hit as usual. Each arm's lookups and hits are counted apart in the regional node's
//! `/metrics`, which is how an operator compares two cache settings on live traffic.

use std::time::Duration;

use mesh_harness::client;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

const TASKS: [&str; 8] = [
    "reverse a list",
    "sort a dictionary by value",
    "read a file line by line",
    "remove duplicates from a list",
    "merge two dictionaries",
    "convert a string to an integer",
    "check if a file exists",
    "get the current date",
];

fn request(question: &str) -> serde_json::Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 12,
           "messages": [{"role": "system", "content": "You are a concise assistant."},
                        {"role": "user", "content": question}]})
}

/// `family{tenant="dev",arm="<arm>"}` at the regional node.
fn arm_count(text: &str, family: &str, arm: &str) -> f64 {
    let series = format!("{family}{{tenant=\"dev\",arm=\"{arm}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&series)).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0)
}

#[test]
fn each_arm_of_a_threshold_experiment_hits_by_its_own_threshold_and_is_counted_apart() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-semantic-arms-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        regional_args: vec!["--semantic-experiment".into(), "dev=50:1.0".into()],
        ..MeshSpec::local(&dir)
    })?;
    let regional = mesh.regional_client(0);
    for task in TASKS {
        let first = regional.chat(&request(&format!("How do I {task} in Python?")))?;
        anyhow::ensure!(first.status == 200, "{}", first.body);
    }
    let mut semantic_hits = 0;
    for task in TASKS {
        let paraphrase = regional.chat(&request(&format!("How can I {task} in python")))?;
        anyhow::ensure!(paraphrase.status == 200, "{}", paraphrase.body);
        semantic_hits += usize::from(paraphrase.header("x-cache") == Some("HIT-REGIONAL-SEMANTIC"));
    }
    let text = client::agent(Duration::from_secs(5))
        .get(&format!("{}/metrics", mesh.regional_url(0)))
        .call()?
        .body_mut()
        .read_to_string()?;
    let lookups = |arm| arm_count(&text, "mesh_regional_semantic_arm_lookups_total", arm);
    let hits = |arm| arm_count(&text, "mesh_regional_semantic_arm_hits_total", arm);
    println!(
        "control: {} hits of {} lookups; trial (thresholds +1.0): {} of {}",
        hits("control"),
        lookups("control"),
        hits("trial"),
        lookups("trial")
    );
    assert!(lookups("trial") >= 1.0 && lookups("control") >= 1.0, "both arms looked up paraphrases");
    assert_eq!(hits("trial"), 0.0, "no paraphrase passes a threshold past 1");
    assert!(hits("control") >= 1.0, "the control arm's paraphrases hit");
    assert_eq!(hits("control"), semantic_hits as f64, "every semantic hit was the control arm's");
    Ok(())
}
