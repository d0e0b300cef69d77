//! A core follower's disk starts failing its syncs (`EIO` from `fdatasync`) under writes: the other two
//! nodes keep committing; the follower's log fails stop and, restarted in the same boot, refuses to open
//! (the page cache may still hold what never reached the disk); after a power cut (what a reboot reads is
//! what the disk holds) it starts, catches up, and every acknowledged put reads back from it.

use std::time::Duration;

use core_client::Consistency;
use mesh_harness::core_cluster::{test_dir, CoreCluster, CoreClusterSpec};
use mesh_harness::poll::poll_every;

use crate::lazy_fs::LazyFs;

/// Puts `count` answers named `prefix/i` one after another; each must be acknowledged.
fn put(cluster: &CoreCluster, prefix: &str, count: usize) -> anyhow::Result<Vec<(String, String)>> {
    cluster.put_numbered(&cluster.client()?, prefix, count)
}

#[test]
fn a_follower_whose_syncs_fail_stops_and_refuses_its_log_until_a_reboot() -> anyhow::Result<()> {
    let dir = test_dir("mesh-test-core-failed-sync")?;
    let failing: u64 = 2;
    // Node 2's data directory is its own disk; the others are on the host's.
    let mut disk = LazyFs::mount(&dir.join("disks").join(format!("core-{failing}")))?;
    let spec = CoreClusterSpec { data_root: Some(dir.join("disks")), ..CoreClusterSpec::new(3, &dir) };
    let mut cluster = CoreCluster::start_with(spec)?;
    let leader = cluster.wait_leader(Duration::from_secs(30))?;
    if leader == failing {
        // The failing disk belongs to a follower here: move the lead elsewhere by restarting node 2.
        cluster.kill(failing);
        cluster.wait_leader_among(&[1, 3], Duration::from_secs(30))?;
        cluster.start_node(failing)?;
    }
    let mut written = put(&cluster, "before", 30)?;

    disk.fail_syncs(true);
    written.extend(put(&cluster, "failing", 30)?);
    println!("node {failing}'s disk fails its syncs; 30 more puts acknowledged by the other two");
    // The majority acknowledges without it: wait until it has tried a sync and failed stop.
    poll_every(
        Duration::from_millis(50),
        Duration::from_secs(20),
        "the follower's log failing stop",
        || Ok(cluster.log_tail(failing).contains("the log accepts no more writes").then_some(())),
    )?;

    // Restarted in the same boot, it refuses its log.
    cluster.kill(failing);
    disk.fail_syncs(false);
    let refused = cluster.start_node(failing);
    assert!(refused.is_err(), "node {failing} reopened a log whose sync failed in this boot");
    let log = cluster.log_tail(failing);
    assert!(log.contains("sync failed") || log.contains("SYNC-FAILED"), "the log says why:\n{log}");
    written.extend(put(&cluster, "meanwhile", 10)?);

    // A reboot: what it reads now is what the disk holds.
    cluster.kill(failing);
    let syncs = disk.power_cut()?;
    cluster.start_node(failing)?;
    let statuses = cluster.wait_converged(Duration::from_secs(60))?;
    println!(
        "after the reboot ({syncs} syncs seen) node {failing} caught up: {} entries",
        statuses[0].entries
    );
    let own = cluster.client_for(&[failing])?;
    let wrong: Vec<String> = cluster.block_on(async {
        let mut wrong = Vec::new();
        for (key, content) in &written {
            match own.read("t1", key, Consistency::Local).await {
                Ok(Some(found)) if &found.content == content => {}
                other => wrong.push(format!("{key}: {:?}", other.map(|f| f.is_some()))),
            }
        }
        wrong
    });
    assert!(
        wrong.is_empty(),
        "node {failing} misses {} acknowledged puts: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    drop(cluster);
    drop(disk);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
