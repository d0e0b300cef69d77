//! The change feed: invalidations streamed in revision order, and a watcher resuming on another node.

use super::*;

/// The change feed after `after` on the node at `addr`, as batches, until `want` changes arrived.
async fn watch_until(addr: SocketAddr, after: u64, want: usize) -> Vec<shared::changes::Changes> {
    let secret = credential();
    let request = secret.request(proto::cache::WatchRequest { after_revision: after });
    let mut stream = client(addr).await.watch(request).await.expect("watch").into_inner();
    let mut batches = Vec::new();
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen < want || batches.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = tokio::time::timeout(left, stream.message()).await.expect("in time").expect("event");
        let batch = shared::changes::Changes::try_from(event.expect("open")).expect("valid");
        seen += batch.changes.len();
        batches.push(batch);
    }
    batches
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_change_feed_streams_invalidations_and_resumes_on_another_node() {
    use proto::core::write_request::Command as Pb;
    use shared::changes::Change;
    let cluster = new_cluster(FakePod::default(), RaftTuning::default()).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");

    // A new watcher starts from a resync: the models and the revision it stands at.
    let first = watch_until(cluster.addrs[&follower], 0, 0).await;
    let resync = first[0].resync.clone().expect("a watcher at 0 resyncs");
    assert_eq!(resync.models, vec![("fake".to_owned(), 1)]);

    let invalidate = |scope| {
        Pb::Invalidate(proto::core::Invalidate {
            scope: Some(scope),
            key_tenant: "dev".into(),
            refresh: false,
        })
    };
    let store = store_client(&cluster);
    store
        .write("i1", invalidate(proto::core::invalidate::Scope::Key("k1".into())))
        .await
        .expect("invalidate");
    store
        .write("i2", invalidate(proto::core::invalidate::Scope::Tenant("dev".into())))
        .await
        .expect("invalidate");
    let bump =
        Pb::BumpModelVersion(proto::core::BumpModelVersion { model: "fake".into(), ..Default::default() });
    store.write("b1", bump).await.expect("bump");

    let batches = watch_until(cluster.addrs[&follower], resync.revision, 3).await;
    let changes: Vec<shared::changes::Revised> = batches.iter().flat_map(|b| b.changes.clone()).collect();
    let kinds: Vec<&Change> = changes.iter().map(|r| &r.change).collect();
    assert_eq!(
        kinds,
        vec![
            &Change::Key { tenant: "dev".into(), key: "k1".into() },
            &Change::Tenant { tenant: "dev".into() },
            &Change::ModelCurrent { model: "fake".into(), version: 2 },
        ]
    );
    assert!(changes.windows(2).all(|w| w[0].revision < w[1].revision && w[0].at_ms <= w[1].at_ms));
    // Every event says how long ago a leader confirmed the node's state; a short backlog arrives at head.
    assert!(first.iter().chain(&batches).all(|b| b.confirmed_age_ms.is_some_and(|age| age < 5_000)));
    assert!(batches.last().is_some_and(|b| b.at_head));
    // And the log time as the node reckons it, by which other tiers set their clocks to the core's.
    let wall = crate::node::state_machine::now_ms();
    assert!(
        batches.iter().all(|b| b.core_time_ms.is_some_and(|t| (wall - 10_000..=wall + 1_000).contains(&t))),
        "{batches:?}"
    );

    // Another node has the same rows at the same revisions: a watcher resumes there from its revision.
    let other = (1..=3).find(|id| *id != follower).expect("another node");
    let resumed = watch_until(cluster.addrs[&other], changes[0].revision, 2).await;
    let rest: Vec<shared::changes::Revised> = resumed.into_iter().flat_map(|b| b.changes).collect();
    assert_eq!(rest, changes[1..].to_vec());

    // A completion asked not to be stored is answered and not kept.
    let mut request = complete_request_at("hello", 2);
    request.no_store = true;
    let unstored = request.key.clone();
    let secret = credential();
    let mut stream = client(cluster.addrs[&leader])
        .await
        .complete(secret.request(request))
        .await
        .expect("complete")
        .into_inner();
    while stream.message().await.expect("stream").is_some() {}
    assert_eq!(lookup(cluster.addrs[&leader], &unstored).await, None);
    for (_, node) in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_cut_off_from_the_majority_ends_its_feed_streams() {
    let cluster = new_cluster(FakePod::default(), RaftTuning::default()).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    let kept = (1..=3).find(|id| *id != leader).expect("a follower");
    let secret = credential();
    let request = secret.request(proto::cache::WatchRequest { after_revision: 0 });
    let mut stream = client(cluster.addrs[&kept]).await.watch(request).await.expect("watch").into_inner();
    assert!(stream.message().await.expect("open").is_some(), "the resync");

    // The other two stop: no leader confirms the kept node's state any more, so what it would say next
    // ("nothing happened since") is no longer its to say. Progress events stop and the stream ends.
    for id in (1..=3).filter(|id| *id != kept) {
        nodes.remove(&id).expect("running").stop().await;
    }
    ends_unavailable_within_the_serving_bound(&mut stream).await;
    for (_, node) in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_removed_from_the_cluster_and_left_running_ends_its_feed_streams() {
    let cluster = new_cluster(FakePod::default(), RaftTuning::default()).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    // The leader is the node removed, as in the README's procedure for retiring a node: it keeps
    // running, and a regional node following its feed must learn that it no longer speaks for the cluster.
    let removed = wait_for_leader(&cluster, &[1, 2, 3]).await;
    let secret = credential();
    let request = secret.request(proto::cache::WatchRequest { after_revision: 0 });
    let mut stream = client(cluster.addrs[&removed]).await.watch(request).await.expect("watch").into_inner();
    assert!(stream.message().await.expect("open").is_some(), "the resync");

    let voters: Vec<NodeId> = (1..=3).filter(|id| *id != removed).collect();
    store_client(&cluster)
        .change_membership(voters.clone(), vec![removed])
        .await
        .expect("membership changed");
    ends_unavailable_within_the_serving_bound(&mut stream).await;

    // A new stream on the removed node is refused; the remaining nodes serve the feed.
    let request = secret.request(proto::cache::WatchRequest { after_revision: 0 });
    let refused = client(cluster.addrs[&removed]).await.watch(request).await.expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    // It serves no completion from its frozen state either, and no longer names itself leader.
    let refused = client(cluster.addrs[&removed])
        .await
        .complete(secret.request(complete_request("hello")))
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    let (_, health) = http_get(cluster.addrs[&removed], "/healthz").await.expect("healthz");
    let health: serde_json::Value = serde_json::from_str(&health).expect("healthz JSON");
    assert_ne!(health["leader"].as_u64(), Some(removed), "{health}");
    // The remaining voters elect one of themselves once the removed leader steps down.
    let deadline = Instant::now() + Duration::from_secs(20);
    let kept = loop {
        let leader = wait_for_leader(&cluster, &voters).await;
        if voters.contains(&leader) {
            break leader;
        }
        assert!(Instant::now() < deadline, "the remaining voters elected no leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!watch_until(cluster.addrs[&kept], 0, 0).await.is_empty());
    for (_, node) in nodes {
        node.stop().await;
    }
}

/// Reads `stream` until it ends, and checks it ended with `Unavailable` within the serving bound
/// (plus the time to notice) of now.
async fn ends_unavailable_within_the_serving_bound(stream: &mut tonic::Streaming<proto::cache::WatchEvent>) {
    let cut = Instant::now();
    let deadline = cut + Duration::from_secs(15);
    let ended = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.message()).await.expect("the stream ends within 15 s") {
            Ok(Some(_progress)) => continue,
            Ok(None) => break None,
            Err(status) => break Some(status),
        }
    };
    let status = ended.expect("ended with an error, not a clean end");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    let bound = Duration::from_millis(crate::node::context::SERVING_STALENESS_MS) + Duration::from_secs(3);
    assert!(cut.elapsed() < bound, "ended {:?} after the cut", cut.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_longer_than_one_batch_is_not_at_head_until_its_end() {
    use proto::core::write_request::Command as Pb;
    let cluster = new_cluster(FakePod::default(), RaftTuning::default()).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    let start = watch_until(cluster.addrs[&leader], 0, 0).await[0].revision;
    let store = store_client(&cluster);
    // One at a time, so that each is a feed row of its own (concurrent writes share group commits).
    for i in 0..300 {
        let scope = proto::core::invalidate::Scope::Key(format!("k{i}"));
        let invalidate = Pb::Invalidate(proto::core::Invalidate {
            scope: Some(scope),
            key_tenant: "dev".into(),
            refresh: false,
        });
        store.write(&format!("backlog-{i}"), invalidate).await.expect("invalidate");
    }
    let batches = watch_until(cluster.addrs[&leader], start, 300).await;
    assert!(!batches[0].at_head, "the first batch carries part of the backlog only");
    assert!(batches.last().is_some_and(|b| b.at_head), "the last one reaches the node's state");
    for (_, node) in nodes {
        node.stop().await;
    }
}
