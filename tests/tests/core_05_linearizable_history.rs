//! The core's store history under faults, checked for linearizability: six clients put and read
//! (linearizable reads) three keys at random while the leader is killed and restarted, and then cut off
//! from the majority and healed. Every operation is recorded with its call and return times, and the
//! history is checked per key with a linearizability checker (`mesh_harness::linearizability`): some
//! order that respects real time must explain every read. A put whose call failed may or may not have
//! taken effect, and counts as either. Seeded (`CORE_HISTORY_SEED`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use core_client::Consistency;
use mesh_harness::core_cluster::{entry, test_dir, CoreCluster};
use mesh_harness::linearizability::{self, Action, Operation};
use mesh_harness::seeded::SeededRng;

const CLIENTS: u64 = 6;
const KEYS: usize = 3;
const RUN: Duration = Duration::from_secs(14);
/// A client's pause between two operations (deliberate: a history the checker searches in seconds).
const PACE: Duration = Duration::from_millis(15);
/// A call's own deadline: long enough for an election, so most calls during a fault return.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

fn key_name(k: usize) -> String {
    format!("core05/{k}")
}

#[test]
fn the_stores_history_under_a_leader_kill_and_a_partition_is_linearizable() -> anyhow::Result<()> {
    let seed: u64 = std::env::var("CORE_HISTORY_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let dir = test_dir("core05")?;
    let mut cluster = CoreCluster::start(3, &dir)?;
    cluster.wait_leader(Duration::from_secs(10))?;
    let client = cluster.client()?.with_timeout(CALL_TIMEOUT);
    let keys: Vec<String> = (0..KEYS).map(|k| entry("t1", &key_name(k), "").key).collect();
    let history = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (client, keys, history) = (client.clone(), keys.clone(), Arc::clone(&history));
            cluster.runtime().spawn(async move {
                let mut rng = SeededRng::new(seed * 64 + c);
                let mut seq = 0u64;
                while start.elapsed() < RUN {
                    let k = rng.below(KEYS);
                    let call = start.elapsed().as_nanos();
                    let operation = if rng.below(2) == 0 {
                        let content = format!("client {c} put {seq}");
                        let put = entry("t1", &key_name(k), &content);
                        let result = client.put(&format!("core05-{seed}-{c}-{seq}"), put, "default").await;
                        seq += 1;
                        let returned = result.is_ok().then(|| start.elapsed().as_nanos());
                        Some(Operation {
                            key: keys[k].clone(),
                            call,
                            returned,
                            action: Action::Write(content),
                        })
                    } else {
                        match client.read("t1", &keys[k], Consistency::Linearizable).await {
                            Ok(found) => Some(Operation {
                                key: keys[k].clone(),
                                call,
                                returned: Some(start.elapsed().as_nanos()),
                                action: Action::Read(found.map(|e| e.content)),
                            }),
                            // A failed read says nothing.
                            Err(_) => None,
                        }
                    };
                    history.lock().expect("history").extend(operation);
                    tokio::time::sleep(PACE).await;
                }
            })
        })
        .collect();

    // The faults, at deliberate points of the run.
    std::thread::sleep(Duration::from_secs(3));
    let leader = cluster.leader_id().context("a leader before the kill")?;
    cluster.kill(leader);
    std::thread::sleep(Duration::from_secs(3));
    cluster.start_node(leader)?;
    std::thread::sleep(Duration::from_secs(2));
    let leader = cluster.wait_leader(Duration::from_secs(10))?;
    cluster.partition(&HashSet::from([leader]))?;
    std::thread::sleep(Duration::from_secs(3));
    cluster.heal();
    for task in clients {
        cluster.block_on(task)?;
    }

    let history = history.lock().expect("history").clone();
    let writes = history.iter().filter(|o| matches!(o.action, Action::Write(_))).count();
    let unknown = history.iter().filter(|o| o.returned.is_none()).count();
    let checking = Instant::now();
    let verdicts = linearizability::check(&history);
    println!(
        "core history: {} operations ({writes} puts, {unknown} of unknown outcome, {} linearizable reads) on {} keys, checked in {:?}, seed {seed}",
        history.len(),
        history.len() - writes,
        verdicts.len(),
        checking.elapsed()
    );
    anyhow::ensure!(history.len() - writes > 100 && writes > 100, "too little happened to check anything");
    let violations: Vec<_> = verdicts.iter().filter(|v| !v.linearizable).collect();
    assert!(violations.is_empty(), "not linearizable: {violations:?}");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
