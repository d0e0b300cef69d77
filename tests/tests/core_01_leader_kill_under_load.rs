//! Core store faults: the leader is killed (SIGKILL) while eight clients write. Writes pause for an
//! election and resume on the new leader; every acknowledged write survives and, once the killed node is
//! back, is readable with its exact content.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use core_client::Consistency;
use mesh_harness::core_cluster::{describe, entry, test_dir, CoreCluster};

const WRITERS: usize = 8;
const LOAD: Duration = Duration::from_secs(8);
/// When the leader is killed: a deliberate wait into the load, so writes are in flight at the kill.
const KILL_AFTER: Duration = Duration::from_secs(3);
/// The longest the writers together may go without an acknowledgement: an election and a retry or two.
const MAX_PAUSE: Duration = Duration::from_secs(4);

/// One acknowledged put.
struct Acked {
    key: String,
    content: String,
    at: Instant,
    duplicate: bool,
}

#[test]
fn acknowledged_writes_survive_a_leader_kill_under_load() -> anyhow::Result<()> {
    let dir = test_dir("core01")?;
    let mut cluster = CoreCluster::start(3, &dir)?;
    let client = cluster.client()?;

    let start = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let client = client.clone();
            cluster.runtime().spawn(async move {
                let (mut acked, mut failed) = (Vec::new(), Vec::new());
                let mut seq = 0u64;
                while start.elapsed() < LOAD {
                    let content = format!("core01 writer {w} put {seq}");
                    let put = entry("t1", &format!("core01/{w}/{seq}"), &content);
                    let key = put.key.clone();
                    let sent = Instant::now();
                    match client.put(&format!("core01-{w}-{seq}"), put, "default").await {
                        Ok(ack) => {
                            acked.push(Acked { key, content, at: Instant::now(), duplicate: ack.duplicate })
                        }
                        Err(e) => {
                            failed.push(format!("writer {w} put {seq} after {:?}: {e}", sent.elapsed()))
                        }
                    }
                    seq += 1;
                }
                (acked, failed)
            })
        })
        .collect();

    std::thread::sleep(KILL_AFTER);
    let leader = cluster.leader_id().context("no leader before the kill")?;
    let killed_at = Instant::now();
    cluster.kill(leader);
    println!("killed leader {leader} at {:?}", killed_at.duration_since(start));

    let (mut acked, mut failed) = (Vec::new(), Vec::new());
    for writer in writers {
        let (a, f) = cluster.block_on(writer)?;
        acked.extend(a);
        failed.extend(f);
    }
    acked.sort_by_key(|a| a.at);
    let after_kill = acked.iter().filter(|a| a.at > killed_at).count();
    let first_after_kill = acked.iter().find(|a| a.at > killed_at).map(|a| a.at.duration_since(killed_at));
    let max_pause = acked.windows(2).map(|w| w[1].at.duration_since(w[0].at)).max().unwrap_or_default();
    let duplicates = acked.iter().filter(|a| a.duplicate).count();
    let new_leader = cluster.leader_id();
    println!(
        "acked {} ({after_kill} after the kill, {duplicates} as duplicates of a retried request), failed {}, \
         max write pause {max_pause:?}, first ack after the kill {first_after_kill:?}, new leader {new_leader:?}",
        acked.len(),
        failed.len()
    );
    for failure in failed.iter().take(10) {
        println!("  failed: {failure}");
    }
    assert!(after_kill > 0, "no write was acknowledged after the leader was killed");
    assert_ne!(new_leader, Some(leader), "the killed node is still reported as leader");
    assert!(max_pause < MAX_PAUSE, "writes stalled for {max_pause:?} (at most {MAX_PAUSE:?} expected)");

    // The killed node comes back on its data directory and catches up.
    let restarted = Instant::now();
    cluster.start_node(leader)?;
    let statuses = cluster.wait_converged(Duration::from_secs(30))?;
    println!("node {leader} restarted and converged in {:?}", restarted.elapsed());
    for status in &statuses {
        println!("  {}", describe(status));
        assert!(
            status.entries >= acked.len() as u64,
            "node {} holds {} entries, fewer than the {} acknowledged",
            status.id,
            status.entries,
            acked.len()
        );
    }

    // Every acknowledged put is there, with its exact content (linearizable reads, eight at a time).
    let reading = Instant::now();
    let total = acked.len();
    let chunks: Vec<Vec<(String, String)>> = (0..WRITERS)
        .map(|i| acked.iter().skip(i).step_by(WRITERS).map(|a| (a.key.clone(), a.content.clone())).collect())
        .collect();
    let readers: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            let client = client.clone();
            cluster.runtime().spawn(async move {
                let mut wrong = Vec::new();
                for (key, content) in chunk {
                    match client.read("t1", &key, Consistency::Linearizable).await {
                        Ok(Some(found)) if found.content == content => {}
                        Ok(Some(found)) => wrong.push(format!("{key}: content {:?}", found.content)),
                        Ok(None) => wrong.push(format!("{key}: missing ({content})")),
                        Err(e) => wrong.push(format!("{key}: read failed: {e}")),
                    }
                }
                wrong
            })
        })
        .collect();
    let mut wrong = Vec::new();
    for reader in readers {
        wrong.extend(cluster.block_on(reader)?);
    }
    println!("read back {total} acknowledged puts in {:?}", reading.elapsed());
    assert!(
        wrong.is_empty(),
        "{} acknowledged puts are lost or wrong, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );

    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
