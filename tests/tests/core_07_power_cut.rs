//! A power cut under every core node at once, above the write-ahead log: each node's data directory is
//! on a file system that loses whatever was not synced, in every file (the log's, the state database's,
//! the content log's, the snapshots') and in every directory. Three writers put answers while the nodes
//! snapshot often; at a seeded moment every node is killed and the power cut. After the restart the
//! nodes converge on one state, and every put that was acknowledged before the cut reads back.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use core_client::Consistency;
use mesh_harness::core_cluster::{entry, test_dir, CoreCluster, CoreClusterSpec};
use mesh_harness::seeded::SeededRng;

use crate::lazy_fs::LazyFs;

const WRITERS: usize = 3;

#[test]
fn every_acknowledged_put_survives_a_power_cut_that_drops_every_unsynced_write() -> anyhow::Result<()> {
    let seed: u64 = std::env::var("MESH_POWER_CUT_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let dir = test_dir("mesh-test-core-power-cut")?;
    let mut disk = LazyFs::mount(&dir.join("disk"))?;
    let spec = CoreClusterSpec {
        data_root: Some(dir.join("disk")),
        // Snapshots every few dozen entries, and a short log behind them, so the cut finds snapshot
        // files, purged segments and the content log in every state.
        extra_args: [
            "--snapshot-logs",
            "40",
            "--snapshot-log-bytes",
            "16384",
            "--logs-kept-after-snapshot",
            "10",
        ]
        .map(str::to_owned)
        .to_vec(),
        ..CoreClusterSpec::new(3, &dir)
    };
    let mut cluster = CoreCluster::start_with(spec)?;
    // The harness made the data directories; as an operator's would be, they are durable before any
    // node relies on them (a node syncs a data directory's parent only when it creates it).
    std::fs::File::open(dir.join("disk"))?.sync_all()?;
    let client = cluster.client()?;

    let acknowledged = Arc::new(Mutex::new(BTreeMap::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (client, acknowledged, stop) = (client.clone(), Arc::clone(&acknowledged), Arc::clone(&stop));
            cluster.runtime().spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let content = format!("writer {w} answer {i} {}", "x".repeat(300));
                    let put = entry("t1", &format!("cut/{w}/{i}"), &content);
                    let key = put.key.clone();
                    if client.put(&format!("cut-{w}-{i}"), put, "default").await.is_ok() {
                        acknowledged.lock().expect("acknowledged").insert(key, content);
                    }
                    i += 1;
                }
            })
        })
        .collect();

    // The cut comes at a seeded moment while the writers run.
    let mut rng = SeededRng::new(seed);
    // Deliberate: the writers' time before the cut, 3 to 6 s.
    std::thread::sleep(Duration::from_millis(3_000 + rng.below(3_000) as u64));
    cluster.kill_all();
    let syncs = disk.power_cut()?;
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.abort();
    }
    let acknowledged = acknowledged.lock().expect("acknowledged").clone();
    println!("power cut after {} acknowledged puts and {syncs} syncs (seed {seed})", acknowledged.len());
    anyhow::ensure!(acknowledged.len() > 20, "too few puts before the cut to check anything");

    let restarting = Instant::now();
    cluster.start_all()?;
    let statuses = cluster.wait_converged(Duration::from_secs(60))?;
    println!("restarted and converged in {:?}: {} entries", restarting.elapsed(), statuses[0].entries);
    let client = cluster.client()?;
    let lost: Vec<String> = cluster.block_on(async {
        let mut lost = Vec::new();
        for (key, content) in &acknowledged {
            match client.read("t1", key, Consistency::Linearizable).await {
                Ok(Some(found)) if &found.content == content => {}
                other => lost.push(format!("{key}: {:?}", other.map(|f| f.map(|f| f.content.len())))),
            }
        }
        lost
    });
    assert!(lost.is_empty(), "{} acknowledged puts lost, e.g. {:?}", lost.len(), &lost[..lost.len().min(5)]);
    println!("all {} acknowledged puts read back", acknowledged.len());
    drop(cluster);
    drop(disk);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
