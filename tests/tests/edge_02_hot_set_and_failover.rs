//! The edge tier under `wrangler dev` (real workerd) beyond exact repeats: revalidation (304), the
//! client's `Cache-Control`, the regional hot set answered at the edge by key and by verified
//! paraphrase (small int8 embeddings scanned in wasm), near misses refused, and failover when the
//! first regional node is down.

use std::ops::ControlFlow::{Break, Continue};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mesh_harness::poll::{poll_every, poll_reporting};
use mesh_harness::{Mesh, MeshSpec};
use serde_json::{json, Value};

/// Pause between two looks at the edge or the regional tier while waiting.
const POLL: Duration = Duration::from_millis(300);

fn question(text: &str) -> Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 8,
           "messages": [{"role": "user", "content": text}]})
}

/// `GET /v1/edge/status` (which also starts a hot-set pull when one is due).
fn edge_status(mesh: &Mesh) -> anyhow::Result<Value> {
    let url = mesh.edge_url().context("edge runs")?;
    Ok(mesh_harness::client::ChatClient::new(&url, None).get("/v1/edge/status")?.json())
}

/// Whether an answer came from a cache behind the edge (a regional node's, or the core's through it).
fn from_behind_the_edge(x_cache: Option<&str>) -> bool {
    matches!(x_cache, Some("HIT-REGIONAL" | "HIT-CORE"))
}

/// Waits until the edge's hot set holds at least `entries` entries.
fn wait_for_hot_set(mesh: &Mesh, entries: u64) -> anyhow::Result<Value> {
    let what = format!("the edge's hot set reaching {entries} entries");
    poll_reporting(POLL, Duration::from_secs(30), &what, || {
        let status = edge_status(mesh)?;
        Ok(if status["hotset"]["entries"].as_u64().unwrap_or(0) >= entries {
            Break(status)
        } else {
            Continue(status)
        })
    })
}

#[test]
fn the_edge_revalidates_honours_cache_control_serves_the_hot_set_and_fails_over() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-edge-hotset-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 2,
        edge_vars: vec![
            ("HOTSET_REFRESH_S".into(), "1".into()),
            // The edge's own small-embedding matching is opt-in; this test checks it.
            ("SEMANTIC_THRESHOLDS".into(), "0.90,0.88,0.85".into()),
        ],
        ..MeshSpec::local(&dir)
    })?;
    let client = mesh.client();
    let status = edge_status(&mesh)?;
    assert!(status["table"]["dims"].as_u64().is_some_and(|d| d > 0), "no table in the bundle: {status}");

    // MISS, then HIT-EDGE; naming its ETag gets a 304 without a body.
    let capital = question("What is the capital of Italy?");
    assert_eq!(client.chat(&capital)?.header("x-cache"), Some("MISS"));
    let hit = client.chat(&capital)?;
    assert_eq!(hit.header("x-cache"), Some("HIT-EDGE"), "{:?}", hit.headers);
    let etag = hit.header("etag").context("etag")?.to_owned();
    let revalidated = client.chat_with_headers(&capital, &[("if-none-match", &etag)])?;
    assert_eq!((revalidated.status, revalidated.body.as_str()), (304, ""));
    // no-cache is honoured by every tier: a fresh answer; max-age=0 refuses the edge copy only, and a
    // regional node finds the answer in its cache or the core's.
    let fresh = client.chat_with_headers(&capital, &[("cache-control", "no-cache")])?;
    assert_eq!(fresh.header("x-cache"), Some("MISS"), "no-cache: {:?}", fresh.headers);
    let reply = client.chat_with_headers(&capital, &[("cache-control", "max-age=0")])?;
    assert!(from_behind_the_edge(reply.header("x-cache")), "max-age=0: {:?}", reply.headers);
    assert_eq!(
        client.chat_with_headers(&capital, &[("cache-control", "max-age=3600")])?.header("x-cache"),
        Some("HIT-EDGE")
    );

    // no-store: neither read nor written at the edge, nor stored behind it.
    let river = question("What is the longest river in Africa?");
    for _ in 0..2 {
        let reply = client.chat_with_headers(&river, &[("cache-control", "no-store")])?;
        assert_ne!(reply.header("x-cache"), Some("HIT-EDGE"), "{:?}", reply.headers);
    }
    let after = client.chat(&river)?;
    assert_eq!(after.header("x-cache"), Some("MISS"), "no-store stored the answer: {:?}", after.headers);

    // A question made hot at a regional node reaches the edge's hot set: a paraphrase is answered at the
    // edge, a near miss (another number) is not.
    let cached = "How many days are there in a leap year?";
    let regional = mesh.regional_client(0);
    assert_eq!(regional.chat(&question(cached))?.status, 200);
    let answer = regional.chat(&question(cached))?;
    assert_eq!(answer.header("x-cache"), Some("HIT-REGIONAL"));
    // The edge pulls node 1's hot set (or node 2's: replication makes them equal).
    let key = answer.header("x-cache-key").context("key")?;
    let (_, node_set) = mesh.hotset(0, None, None)?;
    let held = node_set["entries"].as_array().map(Vec::len).unwrap_or(0) as u64;
    assert!(
        node_set["entries"].as_array().into_iter().flatten().any(|e| e["entry"]["key"] == key),
        "{node_set}"
    );
    let status = wait_for_hot_set(&mesh, held)?;
    println!("edge status with the hot set: {status}");
    let exact = client.chat(&question(cached))?;
    assert_eq!(exact.header("x-cache"), Some("HIT-EDGE"), "hot entry by key: {:?}", exact.headers);
    assert_eq!(exact.content(), answer.content());

    let paraphrase = client.chat(&question("How many days are in a leap year?"))?;
    println!("paraphrase: {:?} {:?}", paraphrase.header("x-cache"), paraphrase.header("x-cache-similarity"));
    assert_eq!(paraphrase.header("x-cache"), Some("HIT-EDGE-SEMANTIC"), "{:?}", paraphrase.headers);
    assert_eq!(paraphrase.content(), answer.content());
    assert_eq!(paraphrase.header("x-cache-matched-key"), answer.header("x-cache-key"));
    let near_miss = client.chat(&question("How many days are there in 2 leap years?"))?;
    assert!(!near_miss.header("x-cache").unwrap_or_default().contains("SEMANTIC"), "{:?}", near_miss.headers);

    // Hits served at the edge count as hotness at the regional tier: a question answered once there and
    // then only by the edge still becomes part of the hot set.
    let edge_only = question("What is the chemical symbol of gold?");
    let first_ask = client.chat(&edge_only)?;
    assert_eq!(first_ask.header("x-cache"), Some("MISS"));
    let edge_key = first_ask.header("x-cache-key").context("key")?.to_owned();
    poll_every(POLL, Duration::from_secs(15), "edge hits making the key hot at the regional tier", || {
        let reply = client.chat(&edge_only)?;
        assert_eq!(reply.header("x-cache"), Some("HIT-EDGE"), "{:?}", reply.headers);
        let hot = (0..2).any(|i| {
            mesh.hotset(i, None, None).is_ok_and(|(_, set)| {
                set["entries"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|e| e["entry"]["key"] == edge_key.as_str())
            })
        });
        Ok(hot.then_some(()))
    })?;

    // The node the edge tries first goes down: the edge fails over to the other.
    let order = edge_status(&mesh)?["regional_order"].clone();
    let first = order[0].as_str().context("regional order")?;
    let index = (0..2).find(|&i| mesh.regional_url(i) == first).context("first node is one of ours")?;
    println!("edge tries {order}; stopping regional node {}", index + 1);
    mesh.stop_regional(index);
    let started = Instant::now();
    let failover = client.chat(&question("What is the capital of Spain?"))?;
    assert_eq!(failover.status, 200, "{}", failover.body);
    assert_eq!(failover.header("x-cache"), Some("MISS"));
    println!("answered through the second regional node in {:?}", started.elapsed());

    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
