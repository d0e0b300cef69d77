//! Cache tags through the real binaries: answers to requests carrying `X-Cache-Tags` are refused by every
//! tier (the edge, both regional nodes, all three core nodes) within the key bound once a tenant
//! invalidates one of their tags through `POST /v1/cache/invalidate`, while answers of other tags and
//! untagged ones stay served; another tenant invalidating a tag of the same name changes nothing of
//! the first tenant's; and with `refresh` the hottest answers of the tag are generated again, so the
//! next caller gets a hit instead of a miss. Prints the propagation per tier and the hit ratio right
//! after an invalidation with and without refresh.

use std::time::{Duration, Instant};

use mesh_harness::poll::poll_every;
use mesh_harness::propagation::{self, Tiers, Warmed};
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

/// The documented bound at the edge plus the regional node's share and the probe's own latency (the
/// same bound `mesh_01` holds keys to).
const BOUND_MS: f64 = 1_000.0 + 1_000.0;

fn question(text: &str) -> serde_json::Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 6,
           "messages": [{"role": "user", "content": text}]})
}

/// Whether the edge answers `answer` from a cache (any tier), not by generating it.
fn hit_through_the_edge(mesh: &Mesh, answer: &Warmed) -> anyhow::Result<bool> {
    let reply = answer.ask(&mesh.client(), false)?;
    anyhow::ensure!(reply.status == 200, "{} {}", reply.status, reply.body);
    Ok(reply.header("x-cache").is_some_and(|x| x != "MISS"))
}

/// `count` answers carrying `tag` made hot everywhere, `tag` invalidated (with `refresh` or not) and
/// its refusal awaited at every tier; then, once the refresh has had its chance, each question asked
/// once through the edge. The share of those that were hits.
fn hit_ratio_after(
    mesh: &Mesh,
    tiers: &Tiers,
    tag: &str,
    refresh: bool,
    count: usize,
) -> anyhow::Result<f64> {
    let warmed: Vec<Warmed> = (0..count)
        .map(|i| tiers.warm_tagged(question(&format!("Name one fruit for {tag} number {i}.")), tag))
        .collect::<anyhow::Result<_>>()?;
    let reply = mesh.regional_client(1).invalidate_tag(tag, refresh)?;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let refreshing = reply.json()["refreshing"].as_u64().unwrap_or_default();
    if refresh {
        assert_eq!(refreshing, count as u64, "every answer of the tag is among the hottest: {}", reply.body);
    } else {
        assert_eq!(refreshing, 0, "{}", reply.body);
    }
    tiers.until_refused(&warmed, Instant::now())?;
    if refresh {
        // The core generates the jobs one after another in the background: wait until each of its
        // answers is a new one at the core (the edge asks through a regional node, which asks the core).
        let regional = mesh.regional_client(0);
        for answer in &warmed {
            poll_every(Duration::from_millis(50), Duration::from_secs(60), "a refreshed answer", || {
                let reply = answer.ask(&regional, true)?;
                Ok((reply.status == 200).then_some(()))
            })?;
        }
    }
    let mut hits = 0;
    for answer in &warmed {
        hits += usize::from(hit_through_the_edge(mesh, answer)?);
    }
    Ok(hits as f64 / count as f64)
}

#[test]
fn a_tag_invalidation_reaches_every_tier_spares_the_rest_and_refreshes() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-tags-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec {
        other_tenants: vec![("acme".into(), "sk-acme".into())],
        ..MeshSpec::local(&dir)
    })?;
    let tiers = Tiers::of(&mesh, "dev")?;

    // A tag's answers are refused everywhere within the bound; another tag's and untagged ones stay.
    let (tag, bystanders) = propagation::tag(&tiers, &mesh.regional_client(0), 4, 2, "tags01")?;
    print!("{}", tag.table());
    assert!(tag.worst_p99() < BOUND_MS, "a tag invalidation reached a tier after {} ms", tag.worst_p99());
    for answer in &bystanders {
        let edge = answer.ask(&mesh.client(), true)?;
        assert_eq!(
            edge.header("x-cache"),
            Some("HIT-EDGE"),
            "{} ({}) was not covered",
            answer.key,
            answer.tags
        );
    }

    // Another tenant's tag of the same name is its own: dev's answer stays served at every tier.
    let ours = tiers.warm_tagged(question("Name one metal for the shared tag."), "stock:SHARED")?;
    let theirs = mesh.regional_client_with_key(0, "sk-acme").invalidate_tag("stock:SHARED", false)?;
    assert_eq!(theirs.status, 200, "{}", theirs.body);
    let acked = Instant::now();
    // Past the bound, dev's answer is still an edge hit and cached at both regional nodes.
    std::thread::sleep(Duration::from_millis(BOUND_MS as u64).saturating_sub(acked.elapsed()));
    let edge = ours.ask(&mesh.client(), true)?;
    assert_eq!(edge.header("x-cache"), Some("HIT-EDGE"), "acme's invalidation reached dev's answer");
    for i in 0..mesh.regional_nodes() {
        let regional = ours.ask(&mesh.regional_client(i), true)?;
        assert_eq!(
            (regional.status, regional.header("etag")),
            (200, Some(ours.etag.as_str())),
            "regional-{i}"
        );
    }
    // Malformed tags are a 400 in OpenAI's shape, at the edge and at a regional node.
    for client in [mesh.client(), mesh.regional_client(0)] {
        let bad = client.chat_with_headers(&question("Name one bird."), &[("x-cache-tags", "a b")])?;
        assert_eq!(bad.status, 400, "{}", bad.body);
        assert_eq!(bad.json()["error"]["param"], "X-Cache-Tags", "{}", bad.body);
    }

    // Right after an invalidation: a miss for every answer without refresh, a hit with it.
    let without = hit_ratio_after(&mesh, &tiers, "catalog:plain", false, 3)?;
    let with = hit_ratio_after(&mesh, &tiers, "catalog:refreshed", true, 3)?;
    println!(
        "hit ratio right after a tag invalidation: without refresh {without:.2}, with refresh {with:.2}"
    );
    assert_eq!(without, 0.0, "an invalidated answer was served");
    assert_eq!(with, 1.0, "a refreshed answer was not a hit");
    Ok(())
}
