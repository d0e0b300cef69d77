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

    let invalidate =
        |scope| Pb::Invalidate(proto::core::Invalidate { scope: Some(scope), key_tenant: "dev".into() });
    let store = store_client(&cluster);
    store
        .write("i1", invalidate(proto::core::invalidate::Scope::Key("k1".into())))
        .await
        .expect("invalidate");
    store
        .write("i2", invalidate(proto::core::invalidate::Scope::Tenant("dev".into())))
        .await
        .expect("invalidate");
    let bump = Pb::BumpModelVersion(proto::core::BumpModelVersion { model: "fake".into(), version: 0 });
    store.write("b1", bump).await.expect("bump");

    let batches = watch_until(cluster.addrs[&follower], resync.revision, 3).await;
    let changes: Vec<shared::changes::Revised> = batches.into_iter().flat_map(|b| b.changes).collect();
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

    // Another node has the same rows at the same revisions: a watcher resumes there from its revision.
    let other = (1..=3).find(|id| *id != follower).expect("another node");
    let resumed = watch_until(cluster.addrs[&other], changes[0].revision, 2).await;
    let rest: Vec<shared::changes::Revised> = resumed.into_iter().flat_map(|b| b.changes).collect();
    assert_eq!(rest, changes[1..].to_vec());

    // A completion asked not to be stored is answered and not kept.
    let mut request = complete_request("unstored", "hello");
    request.no_store = true;
    request.model_version = 2;
    let secret = credential();
    let mut stream = client(cluster.addrs[&leader])
        .await
        .complete(secret.request(request))
        .await
        .expect("complete")
        .into_inner();
    while stream.message().await.expect("stream").is_some() {}
    assert_eq!(lookup(cluster.addrs[&leader], "unstored").await, None);
    for (_, node) in nodes {
        node.stop().await;
    }
}
