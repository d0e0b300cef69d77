//! The hot set a regional node serves to the edge (`GET /v1/hotset?since=`): a snapshot, then deltas.
//!
//! A hot answer enters the set with the question it answers and that question's small embedding (the
//! same int8 vector the edge's table gives); the peer that received it by replication serves it too;
//! an invalidation shows up as a removal in the next delta; a restarted node (a new epoch) answers an
//! old version with a snapshot. Bad requests get errors in the OpenAI shape.

use std::ops::ControlFlow::{Break, Continue};
use std::time::Duration;

use anyhow::Context as _;
use mesh_harness::poll::{poll_every, poll_reporting};
use mesh_harness::{paths, Mesh, MeshSpec};
use serde_json::{json, Value};
use shared::small_embedding::SmallEmbedder;

/// Pause between two `GET /v1/hotset` while waiting.
const POLL: Duration = Duration::from_millis(200);

fn question(text: &str) -> Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 8,
           "messages": [{"role": "user", "content": text}]})
}

fn keys(set: &Value) -> Vec<String> {
    set["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["entry"]["key"].as_str())
        .map(str::to_owned)
        .collect()
}

/// Waits until node `index`'s snapshot holds `key`.
fn wait_for_key(mesh: &Mesh, index: usize, key: &str) -> anyhow::Result<Value> {
    let what = format!("node {index}'s hot set holding {key}");
    poll_reporting(POLL, Duration::from_secs(30), &what, || {
        let (status, set) = mesh.hotset(index, None, None)?;
        Ok(if status == 200 && keys(&set).iter().any(|k| k == key) { Break(set) } else { Continue(set) })
    })
}

#[test]
fn the_hot_set_carries_questions_and_small_embeddings_as_snapshots_and_deltas() -> anyhow::Result<()> {
    let table_path = paths::edge_table();
    let bytes = std::fs::read(&table_path)
        .with_context(|| format!("{} is missing: `make build` distils it", table_path.display()))?;
    let table = SmallEmbedder::from_bytes(&bytes).map_err(anyhow::Error::msg)?;
    let dir = std::env::temp_dir().join(format!("mesh-test-hotset-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 2,
        edge: false,
        anti_entropy_ms: Some(500),
        ..MeshSpec::local(&dir)
    })?;

    // Only tiers read it, and a version must be one.
    let (status, body) = mesh.hotset(0, None, Some("wrong-secret"))?;
    assert_eq!((status, body["error"]["code"].as_str()), (401, Some("invalid_api_key")), "{body}");
    let (status, body) = mesh.hotset(0, Some("yesterday"), None)?;
    assert_eq!((status, body["error"]["type"].as_str()), (400, Some("invalid_request_error")), "{body}");

    let (status, empty) = mesh.hotset(0, None, None)?;
    assert_eq!(status, 200, "{empty}");
    assert_eq!((empty["snapshot"].as_bool(), keys(&empty).len()), (Some(true), 0), "{empty}");
    assert_eq!(empty["table"].as_str(), Some(table.id()), "the node embeds with the same table");
    let v0 = empty["version"].as_str().context("version")?.to_owned();

    // Asked twice, the answer is hot: it enters the set with its question and embedding.
    let text = "What is the boiling point of water at sea level?";
    let client = mesh.regional_client(0);
    assert_eq!(client.chat(&question(text))?.status, 200);
    let hit = client.chat(&question(text))?;
    assert_eq!(hit.header("x-cache"), Some("HIT-REGIONAL"), "{:?}", hit.headers);
    let key = hit.header("x-cache-key").context("x-cache-key")?.to_owned();
    let (_, delta) = mesh.hotset(0, Some(&v0), None)?;
    println!("delta after one hot answer: {delta}");
    assert_eq!((delta["snapshot"].as_bool(), keys(&delta)), (Some(false), vec![key.clone()]));
    let entry = &delta["entries"][0];
    assert_eq!(entry["entry"]["question"]["text"].as_str(), Some(text));
    assert!(entry["entry"]["question"]["partition"].as_str().is_some_and(|p| p.starts_with("p1:")));
    let expected = shared::hot_set::encode_embedding(&table.embed_i8(text).context("embedding")?);
    assert_eq!(entry["embedding"].as_str(), Some(expected.as_str()));
    let v1 = delta["version"].as_str().context("version")?.to_owned();
    assert_ne!(v1, v0);
    let (_, unchanged) = mesh.hotset(0, Some(&v1), None)?;
    assert_eq!((keys(&unchanged).len(), unchanged["removed"].as_array().map(Vec::len)), (0, Some(0)));

    // The peer got it by replication, question and all.
    let peer = wait_for_key(&mesh, 1, &key)?;
    assert_eq!(peer["entries"][0]["entry"]["question"]["text"].as_str(), Some(text), "{peer}");
    assert_eq!(peer["entries"][0]["embedding"].as_str(), Some(expected.as_str()));

    // An invalidation is a removal in the next delta, here and at the peer.
    let reply = client.invalidate(&key)?;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let (_, after) = mesh.hotset(0, Some(&v1), None)?;
    assert_eq!((keys(&after).len(), after["removed"].clone()), (0, json!([key])), "{after}");
    poll_every(POLL, Duration::from_secs(30), "the peer dropping the invalidated entry", || {
        Ok((!keys(&mesh.hotset(1, None, None)?.1).contains(&key)).then_some(()))
    })?;

    // A restarted node has a new epoch: an old version gets a snapshot, without the invalidated entry.
    mesh.restart_regional(0)?;
    let (status, restarted) = mesh.hotset(0, Some(&v1), None)?;
    assert_eq!(status, 200);
    assert_eq!((restarted["snapshot"].as_bool(), keys(&restarted).len()), (Some(true), 0), "{restarted}");
    Ok(())
}
