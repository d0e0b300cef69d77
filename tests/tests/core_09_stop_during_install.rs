//! SIGTERM while a follower installs a snapshot: a follower that was down while the others wrote more
//! than their snapshots keep behind them catches up by a snapshot install; it is asked to stop as soon as
//! the install begins. It stops cleanly (its clean stop waits for the install to be kept), starts again
//! instead of waiting for ever for a snapshot that never comes, and holds the others' state.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use mesh_harness::core_cluster::{entry, test_dir, CoreCluster, CoreClusterSpec};
use mesh_harness::poll::poll_every;

/// Puts while the follower is down: about 24 MB of answers, so that the install takes a while.
const PUTS: usize = 6_000;
const WRITERS: usize = 8;

#[test]
fn a_follower_stopped_during_a_snapshot_install_starts_again_and_converges() -> anyhow::Result<()> {
    let dir = test_dir("mesh-test-core-stop-during-install")?;
    let spec = CoreClusterSpec {
        extra_args: ["--snapshot-logs", "200", "--logs-kept-after-snapshot", "20"]
            .map(str::to_owned)
            .to_vec(),
        ..CoreClusterSpec::new(3, &dir)
    };
    let mut cluster = CoreCluster::start_with(spec)?;
    let leader = cluster.wait_leader(Duration::from_secs(30))?;
    let follower = cluster.ids().into_iter().find(|id| *id != leader).context("a follower")?;
    cluster.kill(follower);

    let client = cluster.client()?;
    let writing = Instant::now();
    cluster.block_on(async {
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let client = client.clone();
                tokio::spawn(async move {
                    for i in (w..PUTS).step_by(WRITERS) {
                        let put = entry("t1", &format!("install/{i}"), &format!("{i} {}", "y".repeat(4_000)));
                        client.put(&format!("install-{i}"), put, "default").await?;
                    }
                    anyhow::Ok(())
                })
            })
            .collect();
        for task in tasks {
            task.await??;
        }
        anyhow::Ok(())
    })?;
    println!("{PUTS} puts of 4 KB while node {follower} was down, in {:?}", writing.elapsed());

    // Back up: it installs the leader's snapshot, and is asked to stop the moment the install begins.
    cluster.spawn_node(follower)?;
    poll_every(Duration::from_millis(2), Duration::from_secs(60), "the install beginning", || {
        Ok(cluster.log_tail(follower).contains("installing snapshot").then_some(()))
    })?;
    let stopping = Instant::now();
    let exited = cluster.stop_node(follower, Duration::from_secs(30));
    let log = cluster.log_tail(follower);
    println!(
        "SIGTERM at the install's start; {} in {:?}; the install was {}",
        if exited { "it exited by itself" } else { "it was killed" },
        stopping.elapsed(),
        if log.contains("installed snapshot") { "kept before the exit" } else { "cut short" },
    );
    assert!(exited, "a clean stop during an install finishes:\n{log}");

    // It starts again, and holds what the others hold.
    cluster.start_node(follower)?;
    let statuses = cluster.wait_converged(Duration::from_secs(60))?;
    assert!(statuses.iter().all(|s| s.entries >= PUTS as u64), "{statuses:?}");
    println!("node {follower} started again and converged: {} entries on every node", statuses[0].entries);
    // What holding the installed snapshot cost at its peak: the entries stream into the content log, so
    // the peak does not grow with the snapshot's answers.
    let peaks: Vec<String> = cluster
        .ids()
        .into_iter()
        .zip(cluster.pids())
        .map(|(id, pid)| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let peak =
                status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap_or("unknown").trim().to_owned();
            format!("node {id} {peak}")
        })
        .collect();
    println!(
        "peak RSS after node {follower} installed a snapshot of {PUTS} answers of 4 KB: {}",
        peaks.join(", ")
    );
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
