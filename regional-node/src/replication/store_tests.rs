use proptest::prelude::*;

use super::super::anti_entropy::{differing_ranges, to_push};
use super::super::record::{Tombstone, Value};
use super::*;

fn answer(key: &str, content: &str) -> CachedCompletion {
    super::super::record::tests::answer(key, content, 1)
}

fn tomb() -> Value {
    Value::Tombstone(Tombstone { tenant: "acme".into(), invalidated_ms: 1, covers_until_ms: None })
}

fn store(id: &str, peers: usize) -> ReplicaStore {
    ReplicaStore::open(id, peers, None).expect("store opens")
}

/// One anti-entropy round run by `a` toward `b`, as the peer link runs it over gRPC.
fn push_round(a: &ReplicaStore, b: &ReplicaStore) {
    let ranges = differing_ranges(&a.range_digests(), &b.range_digests());
    if ranges.is_empty() {
        return;
    }
    let theirs = b.summaries(&ranges);
    for (key, record) in a.records(&to_push(&a.summaries(&ranges), &theirs)) {
        b.merge(&key, &record, &|_| true);
    }
}

/// A healed link: both sides run their round.
fn reconcile(a: &ReplicaStore, b: &ReplicaStore) {
    push_round(a, b);
    push_round(b, a);
}

fn reads(store: &ReplicaStore, key: &str) -> Option<String> {
    store.get(key).and_then(|r| match r.resolve() {
        Some(Resolved::Live(entry)) => Some(entry.content.clone()),
        _ => None,
    })
}

fn keys(entries: &[CachedCompletion]) -> Vec<&str> {
    entries.iter().map(|e| e.key.as_str()).collect()
}

#[test]
fn the_hot_set_is_served_as_a_snapshot_then_as_deltas() {
    let node = store("a", 0);
    node.write_local("k1", Value::Live(answer("k1", "v1")), 1);
    node.write_local("k2", Value::Live(answer("k2", "v2")), 2);
    let first = node.hot_changes(None, 100, 10);
    assert!(first.snapshot);
    assert_eq!(keys(&first.live), ["k1", "k2"]);
    let v1 = Some(first.version);

    node.write_local("k1", tomb(), 3);
    node.write_local("k3", Value::Live(answer("k3", "v3")), 4);
    let delta = node.hot_changes(v1, 100, 10);
    assert!(!delta.snapshot);
    assert_eq!((keys(&delta.live), delta.removed.clone()), (vec!["k3"], vec!["k1".to_owned()]));

    // With no peers the tombstone is collected at once; the delta still says k1 left.
    assert_eq!(node.sweep(10).collected, 1);
    let after_sweep = node.hot_changes(v1, 100, 10);
    assert_eq!((keys(&after_sweep.live), after_sweep.removed), (vec!["k3"], vec!["k1".to_owned()]));
    // Up to date: nothing new. Brought back: live again, not removed.
    let current = node.hot_changes(Some(after_sweep.version), 100, 10);
    assert!(current.live.is_empty() && current.removed.is_empty() && !current.snapshot);
    node.write_local("k1", Value::Live(answer("k1", "again")), 11);
    let back = node.hot_changes(v1, 100, 12);
    assert_eq!((keys(&back.live), back.removed), (vec!["k3", "k1"], Vec::<String>::new()));
}

#[test]
fn a_version_of_another_epoch_or_the_future_gets_a_bounded_snapshot() {
    let node = store("a", 0);
    for i in 0..5 {
        node.write_local(&format!("k{i}"), Value::Live(answer(&format!("k{i}"), "v")), i);
    }
    let now = node.hot_changes(None, 100, 10).version;
    for since in [
        HotSetVersion { epoch: now.epoch + 1, sequence: 1 },
        HotSetVersion { epoch: now.epoch, sequence: now.sequence + 1 },
    ] {
        let changes = node.hot_changes(Some(since), 3, 10);
        assert!(changes.snapshot);
        // The three most recently changed of the tenant, oldest first.
        assert_eq!(keys(&changes.live), ["k2", "k3", "k4"]);
    }
    // Expired answers are not part of the set.
    let mut expiring = answer("e", "v");
    expiring.ttl_s = 1;
    node.write_local("e", Value::Live(expiring), 20);
    let later = node.hot_changes(Some(now), 100, 5_000);
    assert_eq!((keys(&later.live), later.removed), (Vec::<&str>::new(), vec!["e".to_owned()]));
}

#[test]
fn a_partitioned_write_and_invalidation_converge_after_anti_entropy() {
    let (a, b, c) = (store("a", 2), store("b", 2), store("c", 2));
    let shared = a.write_local("k1", Value::Live(answer("k1", "v1")), 1);
    b.merge("k1", &shared, &|_| true);
    c.merge("k1", &shared, &|_| true);
    // Partition c: a invalidates k1 and writes k2; c writes k3 and rewrites k1 without seeing the tombstone.
    let tombstone = a.write_local("k1", tomb(), 2);
    b.merge("k1", &tombstone, &|_| true);
    a.write_local("k2", Value::Live(answer("k2", "v2")), 3);
    c.write_local("k3", Value::Live(answer("k3", "v3")), 4);
    c.write_local("k1", Value::Live(answer("k1", "rewritten")), 5);
    assert_ne!(a.stats().root, c.stats().root);
    // Heal.
    for (x, y) in [(&a, &b), (&b, &c), (&c, &a)] {
        reconcile(x, y);
    }
    let roots: Vec<u64> = [&a, &b, &c].iter().map(|s| s.stats().root).collect();
    assert!(roots.windows(2).all(|w| w[0] == w[1]), "{roots:?}");
    for s in [&a, &b, &c] {
        assert_eq!(reads(s, "k1"), None, "the invalidation wins over the racing rewrite");
        assert_eq!(reads(s, "k2").as_deref(), Some("v2"));
        assert_eq!(reads(s, "k3").as_deref(), Some("v3"));
    }
}

#[test]
fn a_tombstone_is_collected_only_once_every_peer_acknowledged_it_and_stale_versions_stay_dead() {
    let a = store("a", 2);
    let old = a.write_local("k", Value::Live(answer("k", "old")), 1);
    let tombstone = a.write_local("k", tomb(), 2);
    let digest = tombstone.digest("k");
    a.acknowledged("k", digest, 0);
    assert_eq!(a.sweep(10).collected, 0, "one of two peers acknowledged");
    a.acknowledged("k", digest ^ 1, 1);
    assert_eq!(a.sweep(10).collected, 0, "an acknowledgement of another version does not count");
    a.acknowledged_by_digests(1, &vec![0; RANGES], &HashMap::new());
    assert_eq!(a.sweep(10).collected, 0, "a peer whose digests differ has not seen it");
    let b = store("b", 2);
    b.merge("k", &tombstone, &|_| true);
    a.acknowledged_by_digests(1, &b.range_digests(), &HashMap::new());
    assert_eq!(a.sweep(10).collected, 1, "a peer with the same range digest holds it");
    assert!(a.get("k").is_none());
    assert_eq!(a.merge("k", &old, &|_| true), None, "a stale version in flight is dropped");
    let fresh = a.write_local("k", Value::Live(answer("k", "new")), 3);
    assert_eq!(reads(&a, "k").as_deref(), Some("new"));
    b.merge("k", &fresh, &|_| true);
    assert_eq!(
        reads(&b, "k").as_deref(),
        Some("new"),
        "a write after the collection supersedes the tombstone"
    );
}

#[test]
fn a_tombstone_a_lost_peer_never_acknowledges_goes_once_every_answer_it_covered_has_expired() {
    let a = store("a", 2);
    let covered = CachedCompletion { created_ms: 1_000, ttl_s: 60, ..answer("k", "old") };
    a.write_local("k", Value::Live(covered.clone()), 1_000);
    let tombstone = Tombstone::of("acme", 2_000, [&covered]);
    assert_eq!(tombstone.covers_until_ms, Some(61_000));
    let digest = a.write_local("k", Value::Tombstone(tombstone), 2_000).digest("k");
    a.acknowledged("k", digest, 0);
    // Peer 1 is gone for good: its acknowledgement never comes.
    assert_eq!(a.sweep(60_999).expired + a.sweep(60_999).collected, 0, "an answer it covers may still live");
    assert_eq!(a.sweep(61_000).expired, 1, "nothing left to cover");
    assert!(a.get("k").is_none());
    // An answer that never expires keeps its tombstone until every peer acknowledged it.
    let forever = CachedCompletion { ttl_s: 0, ..covered };
    assert_eq!(Tombstone::of("acme", 2_000, [&forever]).covers_until_ms, None);
}

#[test]
fn an_old_answer_beside_a_collected_tombstone_is_not_merged_back_when_the_node_refuses_it() {
    let node = store("a", 0);
    let tombstone = node.write_local("k", tomb(), 2);
    assert_eq!(node.sweep(10).collected, 1, "no peers: collected at once");
    let mut racing = Record::default();
    racing.write_at("b", 1, Value::Live(answer("k", "old")));
    racing.merge(&tombstone);
    assert!(racing.is_tombstone(), "as sent, the record reads as invalidated");
    let refuses_old = |answer: &CachedCompletion| answer.content != "old";
    assert_eq!(node.merge("k", &racing, &refuses_old), None, "the floor leaves the old answer, refused");
    assert_eq!(reads(&node, "k"), None);
    let mut fresh = Record::default();
    fresh.write_at("b", 2, Value::Live(answer("k", "new")));
    assert!(node.merge("k", &fresh, &refuses_old).is_some(), "an admitted answer still merges");
    assert_eq!(reads(&node, "k").as_deref(), Some("new"));
}

#[test]
fn records_survive_a_reopen_and_the_counter_keeps_growing() {
    let dir = std::env::temp_dir().join(format!("replica-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db = sled::open(&dir).expect("sled opens");
    let first = {
        let s = ReplicaStore::open("a", 1, Some(&db)).expect("opens");
        s.write_local("k", Value::Live(answer("k", "v")), 0);
        s.write_local("j", tomb(), 0);
        s.stats()
    };
    let again = ReplicaStore::open("a", 1, Some(&db)).expect("reopens");
    assert_eq!(again.stats(), first);
    assert_eq!(again.live_answers().len(), 1);
    let record = again.write_local("k", Value::Live(answer("k", "w")), 0);
    assert_eq!(record.clock().get(&"a".to_owned()), 3, "the counter went on from the disk");
    drop(again);
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A step of a random history over three nodes and three keys.
#[derive(Clone, Debug)]
enum Step {
    Write { node: usize, key: usize, content: u8 },
    Invalidate { node: usize, key: usize },
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0usize..3, 0usize..3, 0u8..4).prop_map(|(node, key, content)| Step::Write { node, key, content }),
        1 => (0usize..3, 0usize..3).prop_map(|(node, key)| Step::Invalidate { node, key }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Deltas of a random history are delivered reordered, duplicated and partly lost, then anti-entropy
    /// runs: every node ends with the same state, and a key whose last step was an invalidation reads as
    /// invalidated everywhere, also after its tombstone is collected and stale deltas arrive again.
    #[test]
    fn nodes_converge_under_reordering_duplication_and_loss(
        steps in proptest::collection::vec(arb_step(), 1..24),
        deliveries in proptest::collection::vec((any::<proptest::sample::Index>(), 0usize..3), 0..48),
    ) {
        let nodes = [store("a", 2), store("b", 2), store("c", 2)];
        let keys = ["k0", "k1", "k2"];
        let mut deltas: Vec<(usize, &str, Record)> = Vec::new();
        let mut last_was_invalidation = [false; 3];
        for (time, step) in steps.iter().enumerate() {
            let (node, key, value) = match *step {
                Step::Write { node, key, content } => {
                    last_was_invalidation[key] = false;
                    (node, key, Value::Live(answer(keys[key], &format!("c{content}"))))
                }
                Step::Invalidate { node, key } => {
                    last_was_invalidation[key] = true;
                    (node, key, tomb())
                }
            };
            let record = nodes[node].write_local(keys[key], value, time as i64);
            deltas.push((node, keys[key], record));
            // Some deltas are delivered between steps, in any order, some twice, some never.
            for (pick, to) in deliveries.iter().skip(time * 2).take(2) {
                let (_, key, record) = pick.get(&deltas);
                nodes[*to].merge(key, record, &|_| true);
            }
        }
        for (pick, to) in &deliveries {
            let (_, key, record) = pick.get(&deltas);
            nodes[*to].merge(key, record, &|_| true);
        }
        for _ in 0..2 {
            for (x, y) in [(0, 1), (1, 2), (2, 0)] {
                reconcile(&nodes[x], &nodes[y]);
            }
        }
        let root = nodes[0].stats().root;
        for node in &nodes {
            prop_assert_eq!(node.stats().root, root);
        }
        for (index, key) in keys.iter().enumerate() {
            if last_was_invalidation[index] {
                for node in &nodes {
                    prop_assert_eq!(reads(node, key), None);
                }
            }
        }
        // Every peer acknowledges every tombstone; they are collected; old deltas arrive again.
        for node in &nodes {
            for key in keys {
                if let Some(digest) = node.digest_of(key) {
                    for peer in 0..2 {
                        node.acknowledged(key, digest, peer);
                    }
                }
            }
            node.sweep(1_000);
        }
        for (_, key, record) in &deltas {
            for node in &nodes {
                node.merge(key, record, &|_| true);
            }
        }
        for (index, key) in keys.iter().enumerate() {
            if last_was_invalidation[index] {
                for node in &nodes {
                    prop_assert_eq!(reads(node, key), None);
                }
            }
        }
    }
}
