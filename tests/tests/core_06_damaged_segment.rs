//! A sector of synced records zeroed in the middle of a core node's last write-ahead-log segment (a
//! latent sector error that reads back as zeros, or a trimmed block): the node refuses to start, naming
//! the damage, rather than cutting every later acknowledged entry and vote as if they were a torn tail;
//! the other two nodes keep committing meanwhile.

use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use mesh_harness::core_cluster::{entry, test_dir, CoreCluster};

const PUTS: usize = 60;

/// The newest segment of the log in `wal_dir` that holds records (the log may have created the next one,
/// still all zeros).
fn last_segment(wal_dir: &Path) -> anyhow::Result<PathBuf> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(wal_dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    segments.sort();
    segments
        .into_iter()
        .rev()
        .find(|p| std::fs::read(p).is_ok_and(|bytes| bytes.iter().any(|b| *b != 0)))
        .context("no segment with records")
}

/// Zeroes the 512-byte sector halfway through what `segment` holds (segments are created zero-filled, so
/// the written part ends at its last non-zero byte); returns the sector's offset.
fn zero_a_sector_midway(segment: &Path) -> anyhow::Result<u64> {
    let bytes = std::fs::read(segment)?;
    let written = bytes.iter().rposition(|b| *b != 0).context("an empty segment")? as u64;
    anyhow::ensure!(written > 8 * 512, "only {written} bytes written");
    let offset = written / 2 / 512 * 512;
    let file = std::fs::OpenOptions::new().write(true).open(segment)?;
    file.write_all_at(&[0u8; 512], offset)?;
    file.sync_all()?;
    Ok(offset)
}

#[test]
fn a_zeroed_sector_of_synced_records_stops_the_node_instead_of_cutting_its_log() -> anyhow::Result<()> {
    let dir = test_dir("mesh-test-core-damaged-segment")?;
    let mut cluster = CoreCluster::start(3, &dir)?;
    let client = cluster.client()?;
    let leader = cluster.wait_leader(std::time::Duration::from_secs(30))?;
    cluster.block_on(async {
        for i in 0..PUTS {
            client
                .put(&format!("damage-{i}"), entry("t1", &format!("damage/{i}"), &"x".repeat(200)), "default")
                .await?;
        }
        anyhow::Ok(())
    })?;
    let follower = cluster.ids().into_iter().find(|id| *id != leader).context("a follower")?;
    cluster.wait_converged(std::time::Duration::from_secs(30))?;
    cluster.kill(follower);

    let wal = cluster.data_dir(follower).context("its data directory")?.join("wal");
    let segment = last_segment(&wal)?;
    let offset = zero_a_sector_midway(&segment)?;
    println!("zeroed 512 bytes at offset {offset} of {}", segment.display());

    let refused = cluster.start_node(follower);
    let why = format!("{refused:?}");
    assert!(refused.is_err(), "node {follower} started on a damaged log");
    assert!(why.contains("exited during start-up"), "{why}");
    let log = cluster.log_tail(follower);
    assert!(log.contains("damage") || log.contains("corrupt"), "the log names the damage:\n{log}");

    // The other two still commit.
    cluster.block_on(client.put("after-damage", entry("t1", "after", "still here"), "default"))?;
    println!("node {follower} refused to start; the other two committed a write meanwhile");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
