//! A model-version bump at the core (`core-node admin bump-model`, the README's operation) while the
//! mesh serves: no new question fails, the regional node learns the new version from the core without a
//! restart, and an answer of the old version is no longer served under the new version's key.

use std::process::Command;
use std::time::{Duration, Instant};

use mesh_harness::{paths, Mesh, MeshSpec};
use serde_json::json;

const MODEL: &str = "smollm2-135m-instruct";

fn question(text: &str) -> serde_json::Value {
    json!({"model": MODEL, "temperature": 0, "max_tokens": 16, "messages": [{"role": "user", "content": text}]})
}

/// The version `/v1/models` of the regional node reports for the model.
fn served_version(mesh: &Mesh) -> anyhow::Result<u64> {
    let models = mesh.regional_client(0).get("/v1/models")?.json();
    let data = models["data"].as_array().cloned().unwrap_or_default();
    Ok(data.iter().find(|m| m["id"] == MODEL).and_then(|m| m["version"].as_u64()).unwrap_or(0))
}

#[test]
fn a_version_bump_reaches_the_regional_tier_without_a_restart() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-bump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec { regional_nodes: 1, edge: false, ..MeshSpec::local(&dir) })?;
    let client = mesh.regional_client(0);
    let asked = question("Name three primary colors.");
    let first = client.chat(&asked)?;
    anyhow::ensure!(first.status == 200, "{}", first.body);
    let old_key = first.header("x-cache-key").unwrap_or_default().to_owned();
    let again = client.chat(&asked)?;
    assert_eq!(again.header("x-cache"), Some("HIT-REGIONAL"));
    assert_eq!(served_version(&mesh)?, 1);

    let nodes: Vec<String> =
        (0..3).map(|i| mesh.core_url(i).trim_start_matches("http://").to_owned()).collect();
    let bump = Command::new(paths::binary("core-node"))
        .args(["admin", "--nodes", &nodes.join(","), "bump-model", "--model", MODEL])
        .env("MESH_INSECURE_TIER_SECRET", mesh.tier_secret())
        .output()?;
    anyhow::ensure!(bump.status.success(), "bump-model: {}", String::from_utf8_lossy(&bump.stderr));
    let bumped_at = Instant::now();

    // New questions keep being answered while the node learns the version (at most one refusal, the
    // one that makes it ask the core at once).
    let mut failures = 0;
    let mut learned = None;
    for i in 0..40 {
        let reply = client.chat(&question(&format!("Give me a word that rhymes with cat, number {i}.")))?;
        if reply.status != 200 {
            failures += 1;
        }
        if served_version(&mesh)? == 2 {
            learned = Some(bumped_at.elapsed());
            break;
        }
        // The pace of new questions (at most 40 of them), not a wait for a condition: each one counts.
        std::thread::sleep(Duration::from_millis(100));
    }
    let learned = learned.ok_or_else(|| anyhow::anyhow!("the regional node never learned version 2"))?;
    println!(
        "version 2 learned {:.0} ms after bump-model returned; {failures} refused meanwhile",
        learned.as_secs_f64() * 1000.0
    );
    assert!(failures <= 1, "{failures} new questions failed after the bump");

    let after = client.chat(&question("Give me a word that rhymes with dog."))?;
    assert_eq!(after.status, 200, "{}", after.body);
    let old = client.chat(&asked)?;
    assert_eq!(old.status, 200, "{}", old.body);
    assert_ne!(
        old.header("x-cache-key"),
        Some(old_key.as_str()),
        "the old question is keyed under version 2"
    );
    assert_ne!(
        old.header("x-cache"),
        Some("HIT-REGIONAL"),
        "the version-1 answer is not served from this node"
    );
    Ok(())
}
