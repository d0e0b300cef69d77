//! Completions: a generation nobody will store ends with its caller, and a model version bump stales
//! the old entries and regenerates the hottest.

use std::sync::atomic::Ordering;

use proto::core::write_outcome;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_generation_nobody_will_store_ends_when_its_caller_hangs_up() {
    let pod = FakePod::default();
    let cluster = new_cluster(pod.clone(), RaftTuning::default()).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    let mut request = complete_request("slow answer");
    request.no_store = true;
    let mut stream =
        client(cluster.addrs[&leader]).await.complete(credential().request(request)).await.expect("complete");
    let first = stream.get_mut().message().await.expect("a first event");
    assert!(matches!(first.and_then(|e| e.event), Some(complete_event::Event::Delta(_))));
    assert_eq!(pod.cancelled.load(Ordering::SeqCst), 0);
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(5);
    while pod.cancelled.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the pod kept generating for a caller that left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (_, node) in nodes {
        node.stop().await;
    }
}
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_version_bump_stales_old_entries_and_regenerates_the_hottest() {
    use proto::core::write_request::Command as Pb;
    let pod = FakePod::default();
    let cluster = new_cluster(pod.clone(), RaftTuning::default()).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    complete(cluster.addrs[&leader], complete_request("hi")).await.expect("complete");
    complete(cluster.addrs[&leader], complete_request("there")).await.expect("complete");
    assert_eq!(lookup(cluster.addrs[&leader], &key_of("hi")).await.as_deref(), Some("echo: hi"));

    let ack = store_client(&cluster)
        .write(
            "bump",
            Pb::BumpModelVersion(proto::core::BumpModelVersion {
                model: "fake".into(),
                ..Default::default()
            }),
        )
        .await
        .expect("bump");
    assert!(matches!(&ack.outcome, Some(write_outcome::Outcome::ModelVersion(m)) if m.version == 2));
    assert_eq!(
        lookup(cluster.addrs[&leader], &key_of("hi")).await,
        None,
        "old-version entries are stale at once"
    );

    // Regenerated under the new version's keys.
    wait_for_entry(&cluster, &[1, 2, 3], &key_at("hi", 2), "echo: hi").await;
    wait_for_entry(&cluster, &[1, 2, 3], &key_at("there", 2), "echo: there").await;
    assert_eq!(pod.calls.load(Ordering::SeqCst), 4, "two generations, then two refreshes");
    for (_, node) in nodes {
        node.stop().await;
    }
}
