//! Commits from any node, a dead follower, a full restart, and followers catching up from a snapshot
//! or a backlog of large entries.

use std::sync::atomic::Ordering;

use tonic::Code;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_commits_survives_a_dead_follower_and_restarts() {
    let pod = FakePod::default();
    let cluster = new_cluster(pod.clone(), RaftTuning::default()).await;

    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");

    // A write from a follower is forwarded to the leader, committed, and readable everywhere.
    let (streamed, done) =
        complete(cluster.addrs[&follower], complete_request("hi")).await.expect("complete");
    assert_eq!(streamed, "echo: hi");
    let entry = done.entry.expect("entry");
    assert_eq!(entry.content, "echo: hi");
    assert_eq!(entry.etag, shared::completion::CachedCompletion::etag_of("echo: hi", "stop"));
    assert!(done.commit_us > 0);
    assert_eq!(done.timings.map(|t| t.ttft_us), Some(4));
    wait_for_entry(&cluster, &[1, 2, 3], &key_of("hi"), "echo: hi").await;

    // A second request for the key is answered from the state machine, without the pod.
    let (streamed, done) = complete(cluster.addrs[&leader], complete_request("hi")).await.expect("hit");
    assert_eq!((streamed.as_str(), done.commit_us), ("", 0));
    assert_eq!(pod.calls.load(Ordering::SeqCst), 1);

    // Calls without the secret, and bad input, are refused.
    let unauthenticated = client(cluster.addrs[&leader])
        .await
        .lookup(LookupRequest { key: key_of("hi"), tenant: "dev".into() })
        .await;
    assert_eq!(unauthenticated.map_err(|s| s.code()).err(), Some(Code::Unauthenticated));
    assert_eq!(
        complete(cluster.addrs[&leader], CompleteRequest { key: String::new(), ..complete_request("hi") })
            .await
            .map_err(|s| s.code())
            .err(),
        Some(Code::InvalidArgument)
    );
    assert_eq!(lookup(cluster.addrs[&leader], "nope").await, None);
    let (status, metrics) = http_get(cluster.addrs[&leader], "/metrics").await.expect("metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains("mesh_core_cache_requests_total{rpc=\"complete\",result=\"hit\"} 1"),
        "{metrics}"
    );
    // The write-ahead log synced, and each sync covered at least one write.
    let sample = |name: &str| {
        metrics.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    let (syncs, writes) =
        (sample("mesh_core_wal_syncs_total "), sample("mesh_core_wal_synced_writes_total "));
    assert!(syncs > 0.0 && writes >= syncs, "syncs {syncs}, writes {writes}");
    assert!(metrics.contains("\nmesh_core_commits_held_back_total "), "{metrics}");

    // With one follower dead, the other two still commit.
    let dead = (1..=3).find(|id| *id != leader && *id != follower).expect("another follower");
    nodes.remove(&dead).expect("running").stop().await;
    let (_, done) = complete(cluster.addrs[&follower], complete_request("again"))
        .await
        .expect("complete with a dead follower");
    assert_eq!(done.entry.map(|e| e.content).as_deref(), Some("echo: again"));

    // Everything stops; everything restarts from its data dir and still has both entries.
    for (_, node) in std::mem::take(&mut nodes) {
        node.stop().await;
    }
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    wait_for_leader(&cluster, &[1, 2, 3]).await;
    wait_for_entry(&cluster, &[1, 2, 3], &key_of("hi"), "echo: hi").await;
    wait_for_entry(&cluster, &[1, 2, 3], &key_of("again"), "echo: again").await;
    let (_, done) = complete(cluster.addrs[&dead], complete_request("after restart"))
        .await
        .expect("complete after restart");
    assert_eq!(done.entry.map(|e| e.content).as_deref(), Some("echo: after restart"));
    for (_, node) in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_that_missed_purged_logs_catches_up_from_a_snapshot() {
    let tuning = RaftTuning { snapshot_logs: 4, logs_kept_after_snapshot: 0, ..RaftTuning::default() };
    let cluster = new_cluster(FakePod::default(), tuning).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    let lagging = (1..=3).find(|id| *id != leader).expect("a follower");
    nodes.remove(&lagging).expect("running").stop().await;

    // Enough writes for the leader to snapshot and purge everything the stopped follower lacks.
    for i in 0..12 {
        complete(cluster.addrs[&leader], complete_request(&format!("n{i}"))).await.expect("complete");
    }
    nodes.insert(lagging, cluster.start(lagging).await);
    wait_for_entry(&cluster, &[lagging], &key_of("n0"), "echo: n0").await;
    wait_for_entry(&cluster, &[lagging], &key_of("n11"), "echo: n11").await;
    let (_, metrics) = http_get(cluster.addrs[&lagging], "/metrics").await.expect("metrics");
    let installs = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mesh_core_rpc_requests_total{rpc=\"install_snapshot\"} "))
        .and_then(|v| v.parse::<f64>().ok());
    assert!(installs.is_some_and(|n| n >= 1.0), "the follower caught up without a snapshot: {installs:?}");
    for (_, node) in nodes {
        node.stop().await;
    }
}
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_far_behind_on_large_entries_catches_up() {
    let cluster = new_cluster(FakePod::default(), RaftTuning::default()).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    let client = store_client(&cluster);
    wait_for_seeding(&client).await;
    let lagging = (1..=3).find(|id| *id != leader).expect("a follower");
    nodes.remove(&lagging).expect("running").stop().await;

    // More than the largest gRPC message between nodes, in entries near the value limit: the backlog only
    // reaches the follower if AppendEntries is split by bytes.
    let value_bytes = crate::node::apply::MAX_VALUE_BYTES as usize - 4096;
    let count = crate::node::raft::peers::MAX_RAFT_MESSAGE_BYTES / value_bytes + 6;
    for i in 0..count {
        let content = format!("{i:04}").repeat(value_bytes / 4);
        client
            .put(&format!("big-{i}"), entry(&format!("big{i}"), "dev", "fake", &content), "")
            .await
            .expect("put");
    }
    nodes.insert(lagging, cluster.start(lagging).await);
    let last = count - 1;
    wait_for_entry(
        &cluster,
        &[lagging],
        &format!("big{last}"),
        &format!("{last:04}").repeat(value_bytes / 4),
    )
    .await;
    wait_for_entry(&cluster, &[lagging], "big0", &"0000".repeat(value_bytes / 4)).await;
    for (_, node) in nodes {
        node.stop().await;
    }
}
