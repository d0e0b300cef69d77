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

/// A trial that breaks the core's canary rule is rolled back by the core itself, and none of its answers
/// is served afterwards, by the edge or by a regional node. Both versions run the same weights here, so
/// the rule is set to one no trial can meet (a p99 at most a hundredth of the current version's).
#[test]
fn a_canary_that_breaks_its_rule_is_rolled_back_by_itself() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-canary-rule-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let core_args =
        ["--canary-max-p99-ratio", "0.01", "--canary-min-samples", "2"].map(String::from).to_vec();
    let mesh = Mesh::start(MeshSpec { core_args, ..MeshSpec::local(&dir) })?;
    propagation::admin(&mesh, &["bump-model", "--model", MODEL, "--canary", "50"])?;
    let started = Instant::now();
    let mut trial_answers = Vec::new();
    let mut round = 10;
    // Questions until the trial has answered some and then answers none any more: the judge tripped.
    poll_every(
        Duration::from_millis(10),
        Duration::from_secs(30),
        "the trial rolled back by itself",
        || {
            round += 1;
            let mut trial_now = 0;
            for i in 0..8 {
                let body = question(round, i);
                let reply = mesh.client().chat(&body)?;
                anyhow::ensure!(reply.status == 200, "{}", reply.body);
                if version_of(&reply) == 2 {
                    trial_now += 1;
                    trial_answers.push(body);
                }
            }
            Ok((!trial_answers.is_empty() && trial_now == 0).then_some(()))
        },
    )?;
    println!(
        "the rule rolled the trial back {:.1} s after it started; {} answers came from the trial",
        started.elapsed().as_secs_f64(),
        trial_answers.len()
    );
    // One rollback in all, counted by the node that made it; both arms' generations are in `/metrics`.
    let agent = mesh_harness::client::agent(Duration::from_secs(5));
    let mut rollbacks = 0.0;
    let mut arms = std::collections::BTreeSet::new();
    for i in 0..mesh.core_nodes() {
        let text = agent.get(format!("{}/metrics", mesh.core_url(i))).call()?.into_body().read_to_string()?;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).unwrap_or_default();
            if line.starts_with("mesh_core_canary_rollbacks_total") {
                rollbacks += value;
            }
            if line.starts_with("mesh_core_generation_seconds_count") && value > 0.0 {
                arms.extend(
                    ["current", "retired"].into_iter().filter(|arm| line.contains(&format!("arm=\"{arm}\""))),
                );
            }
        }
    }
    assert_eq!(rollbacks, 1.0, "one rollback, made once");
    assert_eq!(arms.len(), 2, "the current version's and the rolled-back trial's generations: {arms:?}");
    let clients = [mesh.client(), mesh.regional_client(0), mesh.regional_client(1)];
    for body in &trial_answers {
        for client in &clients {
            let reply = client.chat(body)?;
            assert_eq!(
                (reply.status, version_of(&reply)),
                (200, 1),
                "the trial's answer was served: {}",
                reply.body
            );
        }
    }
    Ok(())
}

/// A trial on weights of its own: the model's pool lists a backend pinned to version 2 (the pod reached
/// as an OpenAI-compatible server stands in for the new weights), so the trial's generations go there and
/// the current version's stay on the pod over gRPC. Each arm's time to first token and tokens show in
/// `/metrics`.
#[test]
fn a_trial_on_backends_of_its_own_is_generated_there_only() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-canary-pool-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        core_args: vec!["--canary-audit-percent".into(), "100".into()],
        ..MeshSpec::local(&dir)
    })?;
    let trial_backend = format!("{}/v1", mesh.pod_url());
    let pool = format!("openai={trial_backend};upstream_model={MODEL};version=2");
    propagation::admin(&mesh, &["register-model", "--model", MODEL, "--backend", &pool])?;
    let agent = mesh_harness::client::agent(Duration::from_secs(5));
    let metrics = || -> anyhow::Result<String> {
        Ok(agent.get(format!("{}/metrics", mesh.core_url(0))).call()?.into_body().read_to_string()?)
    };
    // The core connects a pool's backends on its next reconciliation; the trial starts after that, as an
    // operator would start it once the new weights are up.
    let listed = format!("mesh_core_pod_healthy{{pod=\"{trial_backend}\"}}");
    poll_every(
        Duration::from_millis(200),
        Duration::from_secs(30),
        "the trial's backend in the pool",
        || Ok(metrics()?.contains(&listed).then_some(())),
    )?;
    propagation::admin(&mesh, &["bump-model", "--model", MODEL, "--canary", "50"])?;
    let sent_to = |text: &str, backend: &str| -> f64 {
        let series = format!("mesh_core_pod_generate_total{{pod=\"{backend}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&series)).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0)
    };
    let regional = mesh.regional_client(0);
    let ask = |round: usize| -> anyhow::Result<(usize, usize)> {
        let (mut trial, mut current) = (0, 0);
        for i in 0..12 {
            let reply = regional
                .chat_with_headers(&question(round, i), &[("cache-control", "no-store, no-cache")])?;
            anyhow::ensure!(reply.status == 200, "{}", reply.body);
            match version_of(&reply) {
                2 => trial += 1,
                _ => current += 1,
            }
        }
        Ok((trial, current))
    };
    // Audits of the trial's answers (every one here) and their agreements, summed over the trial arm.
    let trial_counts = |text: &str, family: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(family) && l.contains("arm=\"trial\""))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .sum()
    };
    let audits = |text: &str| trial_counts(text, "mesh_core_canary_audits_total");
    let settled = |at_least: f64| -> anyhow::Result<String> {
        let mut text = String::new();
        poll_every(Duration::from_millis(100), Duration::from_secs(20), "the trial's audits", || {
            text = metrics()?;
            Ok((audits(&text) >= at_least).then_some(()))
        })?;
        Ok(text)
    };
    let (mut trial_total, mut round) = (0, 20);
    poll_every(Duration::from_millis(200), Duration::from_secs(30), "answers from both arms", || {
        round += 1;
        let (trial, current) = ask(round)?;
        trial_total += trial;
        Ok((trial > 0 && current > 0).then_some(()))
    })?;
    let text = settled(trial_total as f64)?;
    let pod = mesh.pod_url();
    let before = (sent_to(&text, &trial_backend), sent_to(&text, &pod), audits(&text));
    // One more round: the trial's backend takes exactly the trial's generations, and the pod over gRPC
    // the current version's and the audits (the trial's answers generated again on the current version).
    let (trial_now, current_now) = ask(round + 1)?;
    let text = settled(before.2 + trial_now as f64)?;
    let audited_now = audits(&text) - before.2;
    println!("{trial_now} of 12 on the trial's backend, {current_now} on the pod (and {audited_now} audits)");
    assert_eq!(sent_to(&text, &trial_backend) - before.0, trial_now as f64, "the trial on its own backend");
    assert_eq!(
        sent_to(&text, &pod) - before.1,
        current_now as f64 + audited_now,
        "the current version on the pod"
    );
    for arm in ["current", "trial"] {
        let ttft = text.lines().any(|l| {
            l.starts_with("mesh_core_generation_ttft_seconds_count") && l.contains(&format!("arm=\"{arm}\""))
        });
        let tokens = text.lines().any(|l| {
            l.starts_with("mesh_core_generation_output_tokens_total") && l.contains(&format!("arm=\"{arm}\""))
        });
        assert!(ttft && tokens, "the {arm} arm's TTFT and tokens are in /metrics");
    }
    // The same weights behind both versions: every audited answer agrees.
    let agreed = trial_counts(&text, "mesh_core_canary_audit_agreements_total");
    println!("audits of the trial: {agreed} agreed of {}", audits(&text));
    assert_eq!(agreed, audits(&text), "the same weights agree");
    Ok(())
}
