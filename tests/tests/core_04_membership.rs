//! Core store membership: a fourth node joins as a learner, becomes a voter, and node 1 is removed, all
//! while a client keeps writing. Every acknowledged write is readable on the new configuration, and every
//! node reports the voters it should.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use core_client::Consistency;
use mesh_harness::core_cluster::{describe, entry, test_dir, CoreCluster};

/// The longest the writer may go without an acknowledgement: an election and a retry or two.
const MAX_PAUSE: Duration = Duration::from_secs(3);

/// One acknowledged put.
struct Acked {
    key: String,
    content: String,
    at: Instant,
}

fn sorted(mut ids: Vec<u64>) -> Vec<u64> {
    ids.sort_unstable();
    ids
}

#[test]
fn a_node_joins_and_another_leaves_under_writes() -> anyhow::Result<()> {
    let dir = test_dir("core04")?;
    let mut cluster = CoreCluster::start(3, &dir)?;
    let client = cluster.client()?;

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (client, stop) = (client.clone(), Arc::clone(&stop));
        cluster.runtime().spawn(async move {
            let (mut acked, mut failed) = (Vec::new(), Vec::new());
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let content = format!("core04 put {seq}");
                let put = entry("t1", &format!("core04/{seq}"), &content);
                let key = put.key.clone();
                match client.put(&format!("core04-{seq}"), put, "default").await {
                    Ok(_) => acked.push(Acked { key, content, at: Instant::now() }),
                    Err(e) => failed.push(format!("put {seq}: {e}")),
                }
                seq += 1;
            }
            (acked, failed)
        })
    };
    // Deliberate: a second of writes on the first configuration before it changes.
    std::thread::sleep(Duration::from_secs(1));

    // Node 4 joins as a learner, then becomes a voter.
    let joining = Instant::now();
    cluster.add_node(4)?;
    let learner = cluster.block_on(client.add_learner(4, &cluster.proxy_addr(4)))?;
    println!("node 4 added as a learner in {:?}: {learner:?}", joining.elapsed());
    assert!(learner.learners.contains(&4), "node 4 is not a learner: {learner:?}");
    let promoted_at = Instant::now();
    let four = cluster.block_on(client.change_membership(vec![1, 2, 3, 4], vec![]))?;
    println!("voters {:?} after {:?}", four.voters, promoted_at.elapsed());
    assert_eq!(sorted(four.voters.clone()), [1, 2, 3, 4]);
    assert!(four.learners.is_empty(), "learners left: {four:?}");
    // Deliberate: a second of writes on the four voters before one leaves.
    std::thread::sleep(Duration::from_secs(1));

    // Node 1 (the bootstrap node, often the leader) leaves.
    let leader_before = cluster.leader_id();
    let removing = Instant::now();
    let three = cluster.block_on(client.change_membership(vec![2, 3, 4], vec![1]))?;
    let removed_at = Instant::now();
    println!("voters {:?} after {:?} (leader before: {leader_before:?})", three.voters, removing.elapsed());
    assert_eq!(sorted(three.voters.clone()), [2, 3, 4]);
    assert!(three.learners.is_empty(), "learners left: {three:?}");
    let leader = cluster.wait_leader_among(&[2, 3, 4], Duration::from_secs(15))?;
    println!("leader of the new configuration: {leader}");
    // Deliberate: two seconds of writes on the new configuration, inside the measured pauses.
    std::thread::sleep(Duration::from_secs(2));

    stop.store(true, Ordering::Relaxed);
    let (acked, failed) = cluster.block_on(writer)?;
    let after_removal = acked.iter().filter(|a| a.at > removed_at).count();
    let mut times: Vec<Instant> = acked.iter().map(|a| a.at).collect();
    times.sort_unstable();
    let (max_pause, pause_began) = times
        .windows(2)
        .map(|w| (w[1].duration_since(w[0]), w[0]))
        .max()
        .map_or((Duration::ZERO, None), |(gap, from)| (gap, Some(from)));
    // Where the longest pause began, relative to the start of node 1's removal (negative: before it).
    let pause_offset_ms = pause_began.map(|from| {
        if from >= removing {
            from.duration_since(removing).as_millis() as i128
        } else {
            -(removing.duration_since(from).as_millis() as i128)
        }
    });
    println!(
        "acked {} ({after_removal} after node 1 left), failed {}, max write pause {max_pause:?} \
         beginning {pause_offset_ms:?} ms after the removal began",
        acked.len(),
        failed.len()
    );
    for failure in failed.iter().take(10) {
        println!("  failed: {failure}");
    }
    assert!(after_removal > 0, "no write was acknowledged on the new configuration");

    // What a write sent to the removed node alone does (a diagnostic, not a requirement).
    let probe = cluster.client_for(&[1])?.with_timeout(Duration::from_secs(2));
    let probing = Instant::now();
    let outcome =
        cluster.block_on(probe.put("core04-probe", entry("t1", "core04/probe", "probe"), "default"));
    println!(
        "a put sent only to removed node 1: {:?} after {:?}",
        outcome.map(|a| a.leader_id),
        probing.elapsed()
    );

    // Node 1 is out: the rest commits without it, and every node reports voters {2, 3, 4}.
    cluster.kill(1);
    let statuses = cluster.wait_converged(Duration::from_secs(30))?;
    for status in &statuses {
        println!("  {}", describe(status));
        assert_eq!(sorted(status.voters.clone()), [2, 3, 4], "node {}'s voters", status.id);
        assert!(status.learners.is_empty(), "node {} still lists learners {:?}", status.id, status.learners);
    }
    let new_client = cluster.client_for(&[2, 3, 4])?;
    let last = entry("t1", "core04/without-node-1", "written without node 1");
    cluster.block_on(new_client.put("core04-without-node-1", last, "default"))?;

    let mut wrong = Vec::new();
    for a in &acked {
        match cluster.block_on(new_client.read("t1", &a.key, Consistency::Linearizable)) {
            Ok(Some(found)) if found.content == a.content => {}
            other => wrong.push(format!("{}: {:?}", a.key, other.map(|f| f.map(|f| f.content)))),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} acknowledged puts lost or wrong, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
    println!("all {} acknowledged puts readable on voters {{2, 3, 4}}", acked.len());
    assert!(max_pause < MAX_PAUSE, "writes stalled for {max_pause:?} (at most {MAX_PAUSE:?} expected)");

    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
