//! Core store faults: every node is killed (SIGKILL) at once and started again on its data directory. The
//! state machine comes back exactly as it was: the same digest on every node, every entry readable, and
//! what was invalidated still gone.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use core_client::Consistency;
use mesh_harness::core_cluster::{describe, entry, test_dir, CoreCluster};
use proto::core::invalidate::Scope;
use proto::core::write_request::Command;
use proto::core::Invalidate;

const ENTRIES: usize = 500;
const WRITERS: usize = 8;

/// Entry `i`: its tenant, key and content. One in ten belongs to tenant `t2`.
fn planned(i: usize) -> (&'static str, String, String) {
    let tenant = if i % 10 == 9 { "t2" } else { "t1" };
    let content = format!("core02 answer {i}");
    (tenant, entry(tenant, &format!("core02/{i}"), &content).key, content)
}

/// Whether entry `i` is invalidated: every seventh `t1` entry by key, and all of `t2` by tenant.
fn invalidated(i: usize) -> bool {
    let (tenant, _, _) = planned(i);
    tenant == "t2" || i.is_multiple_of(7)
}

#[test]
fn a_full_restart_keeps_the_state_machine_exactly() -> anyhow::Result<()> {
    let dir = test_dir("core02")?;
    let mut cluster = CoreCluster::start(3, &dir)?;
    let client = cluster.client()?;

    let writing = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let client = client.clone();
            cluster.runtime().spawn(async move {
                let mut errors = Vec::new();
                for i in (w..ENTRIES).step_by(WRITERS) {
                    let (tenant, _, content) = planned(i);
                    let put = entry(tenant, &format!("core02/{i}"), &content);
                    if let Err(e) = client.put(&format!("core02-put-{i}"), put, "default").await {
                        errors.push(format!("put {i}: {e}"));
                    }
                }
                for i in
                    (w..ENTRIES).step_by(WRITERS).filter(|i| i.is_multiple_of(7) && planned(*i).0 == "t1")
                {
                    let scope = Some(Scope::Key(planned(i).1));
                    let command =
                        Command::Invalidate(Invalidate { scope, key_tenant: "t1".into(), refresh: false });
                    if let Err(e) = client.write(&format!("core02-invalidate-{i}"), command).await {
                        errors.push(format!("invalidate {i}: {e}"));
                    }
                }
                errors
            })
        })
        .collect();
    let mut errors = Vec::new();
    for writer in writers {
        errors.extend(cluster.block_on(writer)?);
    }
    let command = Command::Invalidate(Invalidate {
        scope: Some(Scope::Tenant("t2".into())),
        key_tenant: String::new(),
        refresh: false,
    });
    if let Err(e) = cluster.block_on(client.write("core02-invalidate-t2", command)) {
        errors.push(format!("invalidate tenant t2: {e}"));
    }
    assert!(errors.is_empty(), "writes failed without any fault: {errors:?}");
    let gone = (0..ENTRIES).filter(|i| invalidated(*i)).count();
    println!("wrote {ENTRIES} entries, invalidated {gone}, in {:?}", writing.elapsed());

    // Deliberate: two of the leader's ticks, so that a sweep has removed the invalidated entries before
    // the digest is taken (a sweep after the restart would otherwise change it, rightly).
    std::thread::sleep(Duration::from_millis(2_500));
    let before = cluster.wait_converged(Duration::from_secs(30))?;
    for status in &before {
        println!("before: {}", describe(status));
    }
    assert_eq!(before[0].entries, (ENTRIES - gone) as u64, "entries before the restart");

    cluster.kill_all();
    let restarting = Instant::now();
    cluster.start_all()?;
    let after = cluster.wait_converged(Duration::from_secs(30))?;
    println!("killed all three and restarted; converged in {:?}", restarting.elapsed());
    for status in &after {
        println!("after: {}", describe(status));
    }
    for (old, new) in before.iter().zip(&after) {
        assert_eq!(
            new.state_digest, old.state_digest,
            "node {}'s state digest changed over the restart",
            new.id
        );
        assert_eq!(new.entries, old.entries, "node {}'s entry count changed over the restart", new.id);
        assert!(new.applied_index >= old.applied_index, "node {} applied less after the restart", new.id);
    }
    let digests: BTreeSet<&str> = after.iter().map(|s| s.state_digest.as_str()).collect();
    assert_eq!(digests.len(), 1, "nodes disagree after the restart");

    // Every entry reads back on the linearizable path, and from each node's own replica.
    let reading = Instant::now();
    let mut wrong = Vec::new();
    let mut readers = vec![(client.clone(), false, "linearizable".to_owned())];
    for id in cluster.ids() {
        readers.push((cluster.client_for(&[id])?, true, format!("local on node {id}")));
    }
    for (reader, local, how) in readers {
        wrong.extend(cluster.block_on(async {
            let mut wrong = Vec::new();
            for i in 0..ENTRIES {
                let (tenant, key, content) = planned(i);
                let consistency = if local { Consistency::Local } else { Consistency::Linearizable };
                match (reader.read(tenant, &key, consistency).await, invalidated(i)) {
                    (Ok(None), true) => {}
                    (Ok(Some(found)), false) if found.content == content => {}
                    (Ok(found), expected_gone) => wrong.push(format!(
                        "{how}: entry {i} (invalidated: {expected_gone}) read as {:?}",
                        found.map(|f| f.content)
                    )),
                    (Err(e), _) => wrong.push(format!("{how}: entry {i}: read failed: {e}")),
                }
            }
            wrong
        }));
    }
    println!("read {ENTRIES} entries four ways in {:?}", reading.elapsed());
    assert!(
        wrong.is_empty(),
        "{} reads wrong after the restart, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );

    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
