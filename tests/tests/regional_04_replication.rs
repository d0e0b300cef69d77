//! Three regional nodes replicate their hot set and invalidations (vector-clock records over gRPC).
//!
//! Hot answers reach the other nodes at once; a partitioned node keeps serving, and both sides write and
//! invalidate; after healing, anti-entropy brings every node to the same state (equal root digests), no
//! hot write is lost and no invalidated answer comes back. A node that was down catches up after its
//! restart, and the tombstones are collected once every peer has them. A question made hot at one node
//! is a semantic hit when paraphrased at another.

use std::ops::ControlFlow::{Break, Continue};
use std::time::Duration;

use mesh_harness::poll::poll_reporting;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::{json, Value};

fn question(text: &str) -> Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 8,
           "messages": [{"role": "user", "content": text}]})
}

/// Asks `text` at node `index` twice (a miss, then a hit that makes the key hot); returns its key.
fn write_hot(mesh: &Mesh, index: usize, text: &str) -> anyhow::Result<(String, String)> {
    let client = mesh.regional_client(index);
    let first = client.chat(&question(text))?;
    assert_eq!(first.status, 200, "{}", first.body);
    let second = client.chat(&question(text))?;
    assert_eq!(second.header("x-cache"), Some("HIT-REGIONAL"), "{:?}", second.headers);
    let key = second.header("x-cache-key").unwrap_or_default().to_owned();
    Ok((key, second.content().unwrap_or_default()))
}

/// How node `index` answers `text` from caches only: its `x-cache` header, or the status when none.
fn cached_at(mesh: &Mesh, index: usize, text: &str) -> anyhow::Result<String> {
    let reply = mesh.regional_client(index).chat_only_if_cached(&question(text))?;
    Ok(match reply.header("x-cache") {
        Some(cache) if reply.status == 200 => cache.to_owned(),
        _ => reply.status.to_string(),
    })
}

/// Waits until `done` holds for the replication status of every node in `nodes`.
fn wait_for(
    mesh: &Mesh,
    nodes: &[usize],
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> anyhow::Result<Vec<Value>> {
    poll_reporting(Duration::from_millis(200), Duration::from_secs(60), what, || {
        let statuses =
            nodes.iter().map(|&i| mesh.replication_status(i)).collect::<anyhow::Result<Vec<_>>>()?;
        Ok(if done(&statuses) { Break(statuses) } else { Continue(format!("{statuses:#?}")) })
    })
}

fn same_root(statuses: &[Value]) -> bool {
    statuses.windows(2).all(|w| w[0]["root"] == w[1]["root"])
}

#[test]
fn regional_nodes_converge_after_a_partition_and_a_restart() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-replication-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 3,
        edge: false,
        peer_fault_proxies: true,
        anti_entropy_ms: Some(500),
        ..MeshSpec::local(&dir)
    })?;
    let all = [0, 1, 2];

    // Two hot answers at node 1 reach nodes 2 and 3 by delta; a cold one stays local.
    let (q1, q4) = ("Name a primary colour.", "Name a planet.");
    let (key1, _) = write_hot(&mesh, 0, q1)?;
    let (_key4, _) = write_hot(&mesh, 0, q4)?;
    assert_eq!(mesh.regional_client(0).chat(&question("Name a fruit."))?.status, 200);
    wait_for(&mesh, &all, "the hot answers everywhere", |s| {
        s.iter().all(|n| n["live"] == 2) && same_root(s)
    })?;
    assert_eq!(cached_at(&mesh, 2, q1)?, "HIT-REGIONAL", "replicated, so node 3 answers without the core");

    // Partition node 3. Node 1 invalidates q1 and writes q2; node 3 invalidates q4 and writes q3.
    mesh.partition_regional(2)?;
    let (q2, q3) = ("Name a metal.", "Name an ocean.");
    let invalidated = mesh.regional_client(0).invalidate(&key1)?;
    assert_eq!(invalidated.status, 200, "{}", invalidated.body);
    let (_, answer2) = write_hot(&mesh, 0, q2)?;
    let key4 =
        mesh.regional_client(2).chat(&question(q4))?.header("x-cache-key").unwrap_or_default().to_owned();
    assert_eq!(mesh.regional_client(2).invalidate(&key4)?.status, 200);
    let (_, answer3) = write_hot(&mesh, 2, q3)?;
    // The partition cuts replication, not the core's feed: both invalidations reach every node.
    let majority = wait_for(&mesh, &[0, 1], "the majority side to agree", |s| {
        same_root(s) && s.iter().all(|n| n["tombstones"] == 2)
    })?;
    assert_ne!(majority[0]["root"], mesh.replication_status(2)?["root"], "node 3 is cut off");
    assert_eq!(cached_at(&mesh, 2, q1)?, "504", "node 3 obeys node 1's invalidation through the core's feed");

    // Heal: every node converges; both writes are everywhere, both invalidations too.
    mesh.heal_regional(2)?;
    wait_for(&mesh, &all, "convergence after healing", same_root)?;
    for node in all {
        assert_eq!(cached_at(&mesh, node, q2)?, "HIT-REGIONAL", "node {} has q2", node + 1);
        assert_eq!(cached_at(&mesh, node, q3)?, "HIT-REGIONAL", "node {} has q3", node + 1);
        assert_eq!(cached_at(&mesh, node, q1)?, "504", "q1 stays invalidated at node {}", node + 1);
        assert_eq!(cached_at(&mesh, node, q4)?, "504", "q4 stays invalidated at node {}", node + 1);
    }
    let q3_at_1 = mesh.regional_client(0).chat(&question(q3))?;
    assert_eq!(q3_at_1.content(), Some(answer3));

    // Node 2 goes down; meanwhile node 1 writes q5 and node 3 invalidates q2. Node 2 catches up.
    mesh.stop_regional(1);
    let q5 = "Name a river.";
    write_hot(&mesh, 0, q5)?;
    let key2 = mesh.regional_client(2).chat(&question(q2))?;
    assert_eq!(key2.content(), Some(answer2));
    assert_eq!(
        mesh.regional_client(2).invalidate(key2.header("x-cache-key").unwrap_or_default())?.status,
        200
    );
    mesh.start_all()?;
    wait_for(&mesh, &all, "the restarted node to catch up", same_root)?;
    assert_eq!(cached_at(&mesh, 1, q5)?, "HIT-REGIONAL");
    assert_eq!(cached_at(&mesh, 1, q2)?, "504");

    // Every peer has every tombstone now, so they are collected everywhere.
    let statuses = wait_for(&mesh, &all, "the tombstones to be collected", |s| {
        same_root(s) && s.iter().all(|n| n["tombstones"] == 0)
    })?;
    for status in &statuses {
        println!("{}", serde_json::to_string(status)?);
    }

    // A question made hot at node 1 is a semantic hit at node 3 when paraphrased there: replicated
    // answers bring their questions, and every node indexes them.
    let (asked_key, asked_answer) = write_hot(&mesh, 0, "How do I reverse a list in Python?")?;
    wait_for(&mesh, &all, "the question everywhere", |s| {
        same_root(s) && s.iter().all(|n| n["live"].as_u64() >= Some(3))
    })?;
    let what = "the paraphrase answered from the cache at node 3";
    let paraphrase = poll_reporting(Duration::from_millis(100), Duration::from_secs(10), what, || {
        let reply =
            mesh.regional_client(2).chat_only_if_cached(&question("How can I reverse a list in python"))?;
        Ok(if reply.status == 200 {
            Break(reply)
        } else {
            Continue(format!("{} {:?}", reply.status, reply.headers))
        })
    })?;
    assert_eq!(paraphrase.header("x-cache"), Some("HIT-REGIONAL-SEMANTIC"), "{:?}", paraphrase.headers);
    assert_eq!(paraphrase.header("x-cache-matched-key"), Some(asked_key.as_str()));
    assert_eq!(paraphrase.content(), Some(asked_answer));
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
