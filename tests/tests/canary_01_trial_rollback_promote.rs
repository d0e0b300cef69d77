//! A canary model bump through the real binaries: `core-node admin bump-model --canary 50` puts the next
//! version on trial for half of the requests, at the edge and at both regional nodes alike (each
//! question always to the same arm, whose answers are hits within it); `rollback` makes every tier (the
//! edge, both regional nodes, all three core nodes) refuse the trial's answers within the bound, and the
//! trial's questions are answered by the current version again; `promote` makes the trial's version
//! current, and its answers stay hits. Prints the rollback's propagation per tier.

use std::time::{Duration, Instant};

use mesh_harness::poll::poll_every;
use mesh_harness::propagation::{self, Tiers, Warmed};
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

const MODEL: &str = "smollm2-135m-instruct";
/// The bound `mesh_01` holds a model-version invalidation to.
const BOUND_MS: f64 = 1_000.0 + 1_000.0;

fn question(round: usize, i: usize) -> serde_json::Value {
    json!({"model": MODEL, "temperature": 0, "max_tokens": 6,
           "messages": [{"role": "user", "content": format!("Name one animal, trial {round} number {i}.")}]})
}

/// The version that answered, from `X-Model-Version`.
fn version_of(reply: &mesh_harness::client::Reply) -> u64 {
    reply.header(shared::MODEL_VERSION_HEADER).and_then(|v| v.parse().ok()).unwrap_or_default()
}

/// Asks `count` questions of `round` through the edge until both arms have answered (the edge and the
/// regional nodes learn of the trial within their feed bounds); the answers split by the version that
/// gave them.
fn split_by_arm(
    mesh: &Mesh,
    tiers: &Tiers,
    round: usize,
    count: usize,
    trial: u64,
) -> anyhow::Result<(Vec<Warmed>, Vec<Warmed>)> {
    poll_every(Duration::from_millis(100), Duration::from_secs(10), "the trial's arm at the edge", || {
        let probe = (0..count).map(|i| mesh.client().chat(&question(round, i)));
        let versions = probe.map(|r| r.map(|r| version_of(&r))).collect::<anyhow::Result<Vec<_>>>()?;
        Ok(versions.contains(&trial).then_some(()))
    })?;
    let (mut trial_arm, mut current_arm) = (Vec::new(), Vec::new());
    for i in 0..count {
        let warmed = tiers.warm(question(round, i))?;
        let version = version_of(&mesh.client().chat(&warmed.body)?);
        if version == trial {
            trial_arm.push(warmed);
        } else {
            current_arm.push(warmed);
        }
    }
    Ok((trial_arm, current_arm))
}

#[test]
fn a_canary_takes_its_share_and_rolls_back_or_promotes_at_every_tier() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-canary-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec::local(&dir))?;
    let tiers = Tiers::of(&mesh, "dev")?;

    // Version 2 on trial for half of the requests: both arms answer, each question always in its own.
    propagation::admin(&mesh, &["bump-model", "--model", MODEL, "--canary", "50"])?;
    let (trial, current) = split_by_arm(&mesh, &tiers, 1, 12, 2)?;
    println!(
        "canary at 50%: {} of 12 questions on the trial version, {} on the current",
        trial.len(),
        current.len()
    );
    assert!(!trial.is_empty() && !current.is_empty(), "both arms answer");
    for answer in trial.iter().chain(&current) {
        let again = mesh.client().chat(&answer.body)?;
        assert_eq!(again.header("x-cache"), Some("HIT-EDGE"), "a hit within its arm");
        assert_eq!(again.header("etag"), Some(answer.etag.as_str()), "the same arm's answer");
    }

    // Rolled back: every tier refuses the trial's answers, and its questions go to version 1.
    propagation::admin(&mesh, &["rollback", "--model", MODEL])?;
    let acked = Instant::now();
    let refused = tiers.until_refused(&trial, acked)?;
    let worst = refused.iter().map(|(_, ms)| *ms).fold(0.0, f64::max);
    println!("rollback reached every tier: {refused:?}");
    assert!(worst < BOUND_MS, "the rollback reached a tier after {worst} ms");
    for answer in &trial {
        let reply = mesh.client().chat(&answer.body)?;
        // Both versions run on the same weights here, so only the version tells the answers apart.
        assert_eq!((reply.status, version_of(&reply)), (200, 1), "{}", reply.body);
    }
    for answer in &current {
        let reply = answer.ask(&mesh.client(), true)?;
        assert_eq!(reply.header("x-cache"), Some("HIT-EDGE"), "the current version's answers stay");
    }

    // The next trial takes version 3 (never the rolled-back 2 again); promoted, its answers stay hits.
    propagation::admin(&mesh, &["bump-model", "--model", MODEL, "--canary", "50"])?;
    let (trial, _) = split_by_arm(&mesh, &tiers, 2, 12, 3)?;
    assert!(!trial.is_empty());
    propagation::admin(&mesh, &["promote", "--model", MODEL])?;
    poll_every(Duration::from_millis(50), Duration::from_secs(10), "every question on version 3", || {
        let reply = mesh.client().chat(&question(3, 0))?;
        Ok((version_of(&reply) == 3).then_some(()))
    })?;
    for answer in &trial {
        let reply = mesh.client().chat(&answer.body)?;
        assert_eq!(version_of(&reply), 3);
        assert_ne!(reply.header("x-cache"), Some("MISS"), "a promoted trial's answer is still a hit");
        assert_eq!(reply.header("etag"), Some(answer.etag.as_str()));
    }
    Ok(())
}
