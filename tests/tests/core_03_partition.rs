//! Core store faults: network partitions (all Raft traffic passes per-node fault proxies). The majority side
//! keeps committing, the minority side cannot commit, and after the partition heals every node converges on
//! the same state.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use core_client::ClientError;
use core_client::{Consistency, CoreClient};
use mesh_harness::core_cluster::{describe, entry, test_dir, CoreCluster};

/// How long a client on the minority side tries before giving up.
const MINORITY_TIMEOUT: Duration = Duration::from_secs(3);
const PUTS: usize = 30;

/// Puts `PUTS` entries one after another; each must be acknowledged. Returns their keys and contents.
fn put_many(
    cluster: &CoreCluster,
    client: &CoreClient,
    prefix: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let started = Instant::now();
    let written = cluster.put_numbered(client, prefix, PUTS)?;
    println!("{prefix}: {PUTS} puts acknowledged in {:?}", started.elapsed());
    Ok(written)
}

/// A put sent only to `id` (on the minority side): it must fail as `NoQuorum` within the client's timeout.
fn minority_put_fails(cluster: &CoreCluster, id: u64, name: &str) -> anyhow::Result<String> {
    let client = cluster.client_for(&[id])?.with_timeout(MINORITY_TIMEOUT);
    let put = entry("t1", name, "written on the minority side");
    let key = put.key.clone();
    let started = Instant::now();
    let result = cluster.block_on(client.put(name, put, "default"));
    let took = started.elapsed();
    println!("put to isolated node {id}: {:?} after {took:?}", result.as_ref().map(|a| a.log_index));
    assert!(
        matches!(result, Err(ClientError::NoQuorum(_))),
        "a put on the minority side did not fail as NoQuorum: {result:?}"
    );
    assert!(took < MINORITY_TIMEOUT + Duration::from_secs(3), "the minority put took {took:?} to fail");
    Ok(key)
}

/// Every `(key, content)` reads back from node `id`'s own replica.
fn assert_on_node(cluster: &CoreCluster, id: u64, written: &[(String, String)]) -> anyhow::Result<()> {
    let client = cluster.client_for(&[id])?;
    for (key, content) in written {
        let found = cluster.block_on(client.read("t1", key, Consistency::Local))?;
        assert_eq!(found.map(|f| f.content).as_deref(), Some(content.as_str()), "node {id} lacks {key}");
    }
    Ok(())
}

#[test]
fn an_isolated_follower_cannot_commit_and_catches_up_after_healing() -> anyhow::Result<()> {
    let dir = test_dir("core03a")?;
    let cluster = CoreCluster::start(3, &dir)?;
    let leader = cluster.wait_leader(Duration::from_secs(10))?;
    let follower = cluster.ids().into_iter().find(|id| *id != leader).context("a follower")?;
    let majority: Vec<u64> = cluster.ids().into_iter().filter(|id| *id != follower).collect();
    println!("leader {leader}; isolating follower {follower}");

    cluster.partition(&HashSet::from([follower]))?;
    let written = put_many(&cluster, &cluster.client_for(&majority)?, "core03a-majority")?;
    minority_put_fails(&cluster, follower, "core03a-isolated")?;
    println!("isolated follower's view: {}", describe(&cluster.status(follower)?));

    cluster.heal();
    let healing = Instant::now();
    let statuses = cluster.wait_converged(Duration::from_secs(30))?;
    println!("healed; converged in {:?}", healing.elapsed());
    for status in &statuses {
        println!("  {}", describe(status));
    }
    assert_on_node(&cluster, follower, &written)?;

    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn an_isolated_leader_is_replaced_and_cannot_commit() -> anyhow::Result<()> {
    let dir = test_dir("core03b")?;
    let cluster = CoreCluster::start(3, &dir)?;
    let old = cluster.wait_leader(Duration::from_secs(10))?;
    let majority: Vec<u64> = cluster.ids().into_iter().filter(|id| *id != old).collect();
    println!("isolating leader {old}");

    let cut = Instant::now();
    cluster.partition(&HashSet::from([old]))?;
    let new = cluster.wait_leader_among(&majority, Duration::from_secs(15))?;
    println!("majority {majority:?} elected leader {new} {:?} after the cut", cut.elapsed());
    let written = put_many(&cluster, &cluster.client_for(&majority)?, "core03b-majority")?;
    let lost = minority_put_fails(&cluster, old, "core03b-old-leader")?;
    println!("old leader's view: {}", describe(&cluster.status(old)?));

    cluster.heal();
    let healing = Instant::now();
    let statuses = cluster.wait_converged(Duration::from_secs(30))?;
    println!("healed; converged in {:?}", healing.elapsed());
    for status in &statuses {
        println!("  {}", describe(status));
    }
    assert_on_node(&cluster, old, &written)?;
    // A write that timed out has no defined outcome; say what became of it.
    let client = cluster.client()?;
    let fate = cluster.block_on(client.read("t1", &lost, Consistency::Linearizable))?;
    println!("the old leader's timed-out put is {}", if fate.is_some() { "present" } else { "absent" });

    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
