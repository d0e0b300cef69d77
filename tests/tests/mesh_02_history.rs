//! A recorded history of the whole mesh under faults, checked for one truth: clients generate and read
//! a few questions through the edge and both regional nodes while another invalidates them, and
//! meanwhile the core's leader is killed with SIGKILL (and restarted), a regional node is partitioned
//! from its peer (and healed), the core's leader is cut off from the other core nodes while the regional
//! nodes still reach it (and healed), a core follower is removed from the cluster (left running) and
//! added back as a learner and promoted, the edge's first regional node is killed with SIGKILL (and
//! restarted, so the edge alternates between regional nodes at different revisions), a
//! regional node is stopped while more invalidations commit than one feed batch holds (and restarted), and
//! the wall clocks of the leader and a regional node are stepped ahead and behind (libfaketime).
//! Every operation is recorded with its start and end.
//!
//! Checked per question: no read returns an answer created (at the core) at or before an invalidation
//! whose acknowledgement came more than the documented bound before the read started; and no
//! acknowledged answer is lost: at the end, a question whose last acknowledged generation came after its
//! last invalidation is still answered from a cache. Seeded (`MESH_HISTORY_SEED`, default 0, moves every
//! generator); `MESH_HISTORY_SECONDS` makes it longer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mesh_harness::client::ChatClient;
use mesh_harness::poll::poll_every;
use mesh_harness::propagation;
use mesh_harness::seeded::SeededRng;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

/// The longest a tier may serve an answer after its invalidation was acknowledged: the edge's
/// `CHANGES_BOUND_MS` default plus the regional feed's delivery and a request's own time.
const BOUND: Duration = Duration::from_millis(2_500);
const QUESTIONS: usize = 4;
/// Invalidations committed while a regional node is down: more than one batch of its feed (256 rows).
const BACKLOG: usize = 300;

fn question(i: usize) -> serde_json::Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 6,
           "messages": [{"role": "user", "content": format!("Name one animal, history question {i}.")}]})
}

#[derive(Clone, Debug)]
enum Op {
    /// A chat answered 200 from `tier`, with the answer's creation time at the core.
    Read { question: usize, start: Instant, created_ms: i64, x_cache: String, tier: String },
    /// An acknowledged invalidation and its core time.
    Invalidated { question: usize, acked: Instant, at_ms: i64 },
}

fn reader(name: &str, client: ChatClient, seed: u64, stop: Arc<AtomicBool>, history: Arc<Mutex<Vec<Op>>>) {
    let mut rng = SeededRng::new(seed);
    while !stop.load(Ordering::Relaxed) {
        let q = rng.below(QUESTIONS);
        let start = Instant::now();
        let Ok(reply) = client.chat(&question(q)) else { continue };
        let created = reply.header("x-cache-created-ms").and_then(|v| v.parse::<i64>().ok());
        if let (200, Some(created_ms)) = (reply.status, created) {
            let x_cache = reply.header("x-cache").unwrap_or_default().to_owned();
            let read = Op::Read { question: q, start, created_ms, x_cache, tier: name.to_owned() };
            history.lock().expect("history").push(read);
        }
        // Deliberate: the readers' pace, a pause of 20 ms between two reads.
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn no_invalidated_answer_returns_and_no_acknowledged_answer_is_lost_under_faults() -> anyhow::Result<()> {
    let seconds: u64 = std::env::var("MESH_HISTORY_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(24);
    let seed: u64 = std::env::var("MESH_HISTORY_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("mesh-test-history-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let spec = MeshSpec {
        peer_fault_proxies: true,
        core_fault_proxies: true,
        fake_clocks: true,
        ..MeshSpec::local(&dir)
    };
    let mut mesh = Mesh::start(spec)?;
    let keys: Vec<String> = (0..QUESTIONS)
        .map(|q| {
            let reply = mesh.client().chat(&question(q))?;
            anyhow::ensure!(reply.status == 200, "{}", reply.body);
            Ok(reply.header("x-cache-key").unwrap_or_default().to_owned())
        })
        .collect::<anyhow::Result<_>>()?;

    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for (i, (name, client)) in [
        ("edge", mesh.client()),
        ("regional-0", mesh.regional_client(0)),
        ("regional-1", mesh.regional_client(1)),
    ]
    .into_iter()
    .enumerate()
    {
        let (stop, history) = (Arc::clone(&stop), Arc::clone(&history));
        threads
            .push(std::thread::spawn(move || reader(name, client, seed * 16 + 7 + i as u64, stop, history)));
    }
    {
        let (stop, history, keys) = (Arc::clone(&stop), Arc::clone(&history), keys.clone());
        let invalidator = mesh.regional_client(0);
        threads.push(std::thread::spawn(move || {
            let mut rng = SeededRng::new(seed * 16 + 99);
            while !stop.load(Ordering::Relaxed) {
                // Deliberate: about one invalidation a second, at random moments.
                std::thread::sleep(Duration::from_millis(700 + rng.below(600) as u64));
                let q = rng.below(QUESTIONS);
                let Ok(reply) = invalidator.invalidate(&keys[q]) else { continue };
                let acked = Instant::now();
                if reply.status == 200 {
                    let at_ms = reply.json()["invalidated_at_ms"].as_i64().unwrap_or(i64::MAX);
                    history.lock().expect("history").push(Op::Invalidated { question: q, acked, at_ms });
                }
            }
        }));
    }

    // The faults, spread over the run: each sleep is a deliberate step of the fault schedule
    // (`MESH_HISTORY_SECONDS` in all), with the readers and the invalidator running throughout.
    let step = Duration::from_secs(seconds / 6);
    std::thread::sleep(step);
    let leader = mesh.leader_index();
    if let Some(index) = leader {
        mesh.kill_core(index);
    }
    std::thread::sleep(step);
    mesh.start_all()?;
    mesh.partition_regional(1)?;
    std::thread::sleep(step);
    mesh.heal_regional(1)?;
    // The leader cut off from the other core nodes, still reachable by the regional nodes: it can neither
    // commit nor vouch for its feed, and what the majority invalidates meanwhile must not be served.
    let leader = mesh.leader_index();
    if let Some(index) = leader {
        mesh.partition_core(index)?;
        // The cut holds: the other two elect a leader of their own.
        let others: Vec<usize> = (0..3).filter(|i| *i != index).collect();
        poll_every(
            Duration::from_millis(100),
            Duration::from_secs(15),
            "a leader among the majority",
            || Ok(mesh.leader_seen_by(others[0]).filter(|id| *id != Mesh::core_id(index))),
        )?;
    }
    std::thread::sleep(step);
    mesh.heal_cores();
    std::thread::sleep(step);
    // A membership change with the regional nodes attached: a follower leaves (left running), and comes
    // back as a learner that is then promoted.
    mesh.wait_core_converged(Duration::from_secs(30))?;
    let leader = mesh.leader_id().context("a leader before the membership change")?;
    let follower = (0..3).find(|i| Mesh::core_id(*i) != leader).context("a follower")?;
    let id = Mesh::core_id(follower).to_string();
    let rest: Vec<String> = (0..3).filter(|i| *i != follower).map(|i| Mesh::core_id(i).to_string()).collect();
    propagation::admin(&mesh, &["set-voters", "--voters", &rest.join(","), "--remove", &id])?;
    std::thread::sleep(step / 2);
    let addr = mesh.core_raft_addr(follower).to_string();
    propagation::admin(&mesh, &["add-learner", "--id", &id, "--addr", &addr])?;
    propagation::admin(&mesh, &["set-voters", "--voters", "1,2,3"])?;
    std::thread::sleep(step / 2);
    // The edge's first regional node is killed and restarted: the edge moves to the other one, then back
    // to one that restarts behind it, so it alternates between regional nodes at different revisions.
    mesh.kill_regional(0);
    std::thread::sleep(step);
    mesh.start_all()?;
    std::thread::sleep(step);
    // Wall clocks stepped as NTP steps them: the leader's and a regional node's 30 s ahead, then 30 s
    // behind, then right. Log time must neither jump nor stop, and nothing invalidated may come back.
    let leader = mesh.leader_index().map(|index| format!("core-{}", Mesh::core_id(index)));
    let stepped: Vec<String> = leader.into_iter().chain(["regional-2".to_owned()]).collect();
    for offset_s in [30, -30, 0] {
        for name in &stepped {
            mesh.set_clock_offset(name, offset_s)?;
        }
        std::thread::sleep(step / 2);
    }
    // A backlog: regional node 1 is stopped, more invalidations than one feed batch commit (other keys,
    // beside the invalidator's), and it must not serve before it has read them all.
    mesh.stop_regional(1);
    let backlog = mesh.regional_client(0);
    for i in 0..BACKLOG {
        let key = format!("v1:{:064x}", 0xb0_0000 + i);
        // The tenant's request rate paces the backlog (429 answers): each invalidation is retried.
        poll_every(Duration::from_millis(50), Duration::from_secs(20), "a backlog invalidation", || {
            Ok(backlog.invalidate(&key).ok().filter(|reply| reply.status == 200))
        })?;
    }
    mesh.start_all()?;
    std::thread::sleep(step);
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    // Every core node, the one that left and came back included, holds the same log.
    mesh.wait_core_converged(Duration::from_secs(30))?;

    let history = history.lock().expect("history").clone();
    let reads = history.iter().filter(|op| matches!(op, Op::Read { .. })).count();
    let invalidations: Vec<(usize, Instant, i64)> = history
        .iter()
        .filter_map(|op| match op {
            Op::Invalidated { question, acked, at_ms } => Some((*question, *acked, *at_ms)),
            Op::Read { .. } => None,
        })
        .collect();
    println!(
        "history: {reads} reads, {} acknowledged invalidations, {seconds} s, seed {seed}",
        invalidations.len()
    );
    anyhow::ensure!(reads > 50 && invalidations.len() > 5, "too little happened to check anything");
    for op in &history {
        let Op::Read { question, start, created_ms, x_cache, tier, .. } = op else { continue };
        for (q, acked, at_ms) in &invalidations {
            let stale = q == question && *created_ms <= *at_ms && *start > *acked + BOUND;
            assert!(
                !stale,
                "{tier} served question {question} ({x_cache}, created {created_ms}) {:?} after an invalidation \
                 at {at_ms} was acknowledged",
                start.duration_since(*acked)
            );
        }
    }
    // No acknowledged answer lost: a question generated (a MISS) after its last invalidation still
    // has that answer at the core.
    for question in 0..QUESTIONS {
        let last_invalidation =
            invalidations.iter().filter(|(q, ..)| *q == question).map(|(_, _, at)| *at).max();
        let last_miss = history
            .iter()
            .filter_map(|op| match op {
                Op::Read { question: q, x_cache, created_ms, .. } if *q == question && x_cache == "MISS" => {
                    Some(*created_ms)
                }
                _ => None,
            })
            .max();
        if let Some(created) = last_miss.filter(|c| last_invalidation.is_none_or(|at| *c > at)) {
            let reply = mesh.regional_client(0).chat_only_if_cached(&self::question(question))?;
            assert_eq!(
                reply.status, 200,
                "question {question}: its answer created at {created} was lost: {}",
                reply.body
            );
        }
    }
    // A passing run leaves nothing behind (make history-long runs twenty); a failing one keeps its logs.
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
