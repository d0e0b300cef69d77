//! Hosts whose wall clocks are wrong: answers are created on the core's log time and their TTLs run from
//! there, so a regional node judges expiry on the core's clock, learned from the change feed, not on its
//! own. Regional node 1 runs under libfaketime: 10 minutes ahead of the core, it still serves an answer
//! within its 4-second TTL (judged on its own clock, every answer would be 10 minutes old and expired on
//! arrival); 10 minutes behind, it stops serving it once the TTL has passed (judged on its own clock, the
//! answer would live 10 minutes longer).

use std::ops::ControlFlow::{Break, Continue};
use std::time::Duration;

use mesh_harness::poll::poll_reporting;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

const TTL_S: u64 = 4;
const SKEW_S: i64 = 600;

fn question(text: &str) -> serde_json::Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 4,
           "messages": [{"role": "user", "content": text}]})
}

/// Waits until regional node 1 reckons the core's clock `expected_s` seconds from its own.
fn wait_offset(mesh: &Mesh, expected_s: i64) -> anyhow::Result<()> {
    poll_reporting(Duration::from_millis(250), Duration::from_secs(30), "the core's clock learned", || {
        let health: serde_json::Value =
            serde_json::from_str(&mesh.get_text(&mesh.regional_url(0), "/healthz")?)?;
        let offset_ms = health["core_clock_offset_ms"].as_i64().unwrap_or(i64::MIN);
        Ok(match (offset_ms - expected_s * 1_000).abs() < 2_000 {
            true => Break(()),
            false => Continue(format!("offset {offset_ms} ms")),
        })
    })
}

#[test]
fn a_regional_node_judges_ttls_on_the_core_s_clock_whatever_its_own_reads() -> anyhow::Result<()> {
    if !mesh_harness::fake_clock::available() {
        anyhow::bail!("{} is missing: run .ci/setup.sh", mesh_harness::fake_clock::LIBRARY);
    }
    let dir = std::env::temp_dir().join(format!("mesh-test-clocks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let ttl = TTL_S.to_string();
    let flags = ["--ttl-volatile-s", &ttl, "--ttl-default-s", &ttl, "--ttl-stable-s", &ttl];
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        fake_clocks: true,
        regional_args: flags.iter().map(|f| (*f).to_owned()).collect(),
        ..MeshSpec::local(&dir)
    })?;
    let client = mesh.regional_client(0);

    // Ahead: the answer is young on the core's clock, so the regional node serves it.
    mesh.set_clock_offset("regional-1", SKEW_S)?;
    wait_offset(&mesh, -SKEW_S)?;
    let q = question("Name a river, clock test one.");
    let first = client.chat(&q)?;
    assert_eq!(first.status, 200, "{}", first.body);
    let again = client.chat(&q)?;
    assert_eq!(again.header("x-cache"), Some("HIT-REGIONAL"), "a clock ahead expires nothing early");
    println!("10 min ahead: {:?} then {:?}", first.header("x-cache"), again.header("x-cache"));

    // Behind: once the TTL has passed on the core's clock, the answer is not served from the region.
    mesh.set_clock_offset("regional-1", -SKEW_S)?;
    wait_offset(&mesh, SKEW_S)?;
    let q = question("Name a lake, clock test two.");
    let first = client.chat(&q)?;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(client.chat(&q)?.header("x-cache"), Some("HIT-REGIONAL"), "young: served");
    // Deliberate: the answer's TTL must pass on the core's clock, with a margin.
    std::thread::sleep(Duration::from_secs(TTL_S) + Duration::from_millis(1_500));
    let late = client.chat(&q)?;
    assert_eq!(late.status, 200, "{}", late.body);
    println!("10 min behind, after the TTL: {:?}", late.header("x-cache"));
    assert_ne!(late.header("x-cache"), Some("HIT-REGIONAL"), "a clock behind keeps nothing longer");
    Ok(())
}
