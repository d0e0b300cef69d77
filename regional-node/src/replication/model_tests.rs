//! A model of regional replication driving the real code: [`Replication::offer`], `invalidate`,
//! `merge_remote` (through the wire form), acknowledgements and `sweep` (tombstone collection, with
//! clocks far past the collection grace), with each node's [`Cutoffs`] view of the core's feed as the
//! [`Applier`] that decides what a merge may keep. Writes race invalidations on three nodes, deltas
//! arrive reordered, twice, or never, the feed reaches each node late, and after the tombstones are
//! collected every old delta arrives again.
//!
//! Invariants: once a node has the invalidation (it acknowledged it, or the feed brought it), it never
//! serves an answer created at or before it; at the end every node serves the same answers, and the
//! stores converge.

use std::sync::{Mutex, PoisonError};

use proptest::prelude::*;
use shared::changes::{Change, Revised};
use shared::completion::CachedCompletion;
use shared::cutoffs::Cutoffs;

use super::record::{Record, Resolved};
use super::store::COLLECTED_GRACE_MS;
use super::{wire, Applier, Replication, ReplicationSettings};

const KEYS: [&str; 3] = ["k0", "k1", "k2"];

/// A node's feed view, as the request path holds it.
#[derive(Default)]
struct View(Mutex<Cutoffs>);

impl View {
    fn cut(&self, key: &str, at_ms: i64) {
        let mut cutoffs = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let revision = cutoffs.revision();
        let change = Change::Key { tenant: "acme".into(), key: key.into() };
        cutoffs.apply(&Revised { revision, at_ms, change });
    }

    fn admits(&self, entry: &CachedCompletion) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).admits(entry)
    }
}

impl Applier for View {
    fn apply(&self, _key: &str, _record: &Record) {}

    fn admits(&self, entry: &CachedCompletion) -> bool {
        View::admits(self, entry)
    }
}

struct Node {
    replication: Replication,
    view: View,
    /// Invalidations (key, core time) the feed has yet to bring.
    feed: Vec<(String, i64)>,
}

impl Node {
    fn new(id: &str) -> Self {
        let settings = ReplicationSettings {
            node_id: id.into(),
            peers: vec!["http://127.0.0.1:1".into(), "http://127.0.0.1:2".into()],
            min_lookups: 1,
            anti_entropy_interval: std::time::Duration::from_secs(1),
            identity: daemon_runtime::TierIdentity::insecure_secret("a-development-secret-of-32-bytes!")
                .expect("credential"),
            tenant_bytes: usize::MAX,
            answer_verifier: None,
        };
        Self {
            replication: Replication::new(settings, None).expect("replication"),
            view: View::default(),
            feed: Vec::new(),
        }
    }

    /// The answer this node would serve under `key`.
    fn serves(&self, key: &str) -> Option<CachedCompletion> {
        let record = self.replication.store().get(key)?;
        match record.resolve() {
            Some(Resolved::Live(entry)) if self.view.admits(entry) => Some(entry.clone()),
            _ => None,
        }
    }

    /// The feed brings an invalidation: the view learns it and the key is tombstoned, as
    /// `RequestPath::apply_changes` does.
    fn learn(&self, key: &str, at_ms: i64) {
        self.view.cut(key, at_ms);
        self.replication.invalidate(key, "acme", at_ms);
    }

    fn deliver_feed(&mut self) {
        for (key, at) in std::mem::take(&mut self.feed) {
            self.learn(&key, at);
        }
    }
}

#[derive(Clone, Debug)]
enum Step {
    /// The core generated an answer; `node` keeps it.
    Write { node: usize, key: usize },
    /// `node` invalidates `key` at the core (and applies it at once); the feed tells the others later.
    Invalidate { node: usize, key: usize },
    /// A delta from the history reaches `to`.
    Deliver { pick: prop::sample::Index, to: usize },
    /// The feed reaches `node`.
    Feed { node: usize },
    /// The peers acknowledge what they hold the same as `node` (by digest, as the links do); it
    /// collects the tombstones every peer acknowledged.
    Collect { node: usize },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..3usize, 0..3usize).prop_map(|(node, key)| Step::Write { node, key }),
        2 => (0..3usize, 0..3usize).prop_map(|(node, key)| Step::Invalidate { node, key }),
        4 => (any::<prop::sample::Index>(), 0..3usize).prop_map(|(pick, to)| Step::Deliver { pick, to }),
        1 => (0..3usize).prop_map(|node| Step::Feed { node }),
        1 => (0..3usize).prop_map(|node| Step::Collect { node }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn an_invalidation_holds_on_every_node_that_knows_it_and_all_converge(
        steps in prop::collection::vec(step(), 1..40),
    ) {
        let mut nodes = [Node::new("a"), Node::new("b"), Node::new("c")];
        let mut core_ms = 1_000i64;
        let mut now_ms = 0i64;
        let mut deltas: Vec<proto::replication::Record> = Vec::new();
        // Per key, the latest acknowledged invalidation.
        let mut invalidated: [Option<i64>; 3] = [None; 3];
        let mut contents = 0u32;
        for step in &steps {
            now_ms += COLLECTED_GRACE_MS; // every collection is long past the grace
            match step.clone() {
                Step::Write { node, key } => {
                    core_ms += 1;
                    contents += 1;
                    let entry = super::record::tests::answer(KEYS[key], &format!("c{contents}"), core_ms);
                    if nodes[node].view.admits(&entry) {
                        nodes[node].replication.offer(&entry, Some(true), now_ms);
                    }
                }
                Step::Invalidate { node, key } => {
                    core_ms += 1;
                    invalidated[key] = Some(core_ms);
                    nodes[node].learn(KEYS[key], core_ms);
                    for (other, n) in nodes.iter_mut().enumerate() {
                        if other != node {
                            n.feed.push((KEYS[key].into(), core_ms));
                        }
                    }
                }
                Step::Deliver { pick, to } => {
                    if !deltas.is_empty() {
                        let delta = pick.get(&deltas).clone();
                        nodes[to].replication.merge_remote(delta, &nodes[to].view).expect("a valid record");
                    }
                }
                Step::Feed { node } => nodes[node].deliver_feed(),
                Step::Collect { node } => {
                    let store = nodes[node].replication.store();
                    let peers = (0..3).filter(|p| *p != node);
                    for (index, peer) in peers.enumerate() {
                        for key in KEYS {
                            let digest = store.digest_of(key);
                            if digest.is_some() && digest == nodes[peer].replication.store().digest_of(key) {
                                store.acknowledged(key, digest.unwrap_or_default(), index);
                            }
                        }
                    }
                    store.sweep(now_ms);
                }
            }
            for n in &nodes {
                for key in KEYS {
                    if let Some(record) = n.replication.store().get(key) {
                        deltas.push(wire::to_wire(key, &record));
                    }
                }
            }
            // A node that knows an invalidation never serves what it covers.
            for n in &nodes {
                for (index, key) in KEYS.iter().enumerate() {
                    if let (Some(served), Some(at)) = (n.serves(key), invalidated[index]) {
                        let knows = !n.feed.iter().any(|(k, t)| k == key && *t == at);
                        prop_assert!(!knows || served.created_ms > at, "{key} served past its invalidation");
                    }
                }
            }
        }
        // The feed reaches everyone; every old delta arrives again; anti-entropy runs.
        for n in &mut nodes {
            n.deliver_feed();
        }
        for delta in &deltas {
            for n in &nodes {
                n.replication.merge_remote(delta.clone(), &n.view).expect("a valid record");
            }
        }
        for _ in 0..2 {
            for (x, y) in [(0, 1), (1, 2), (2, 0), (1, 0), (2, 1), (0, 2)] {
                for key in KEYS {
                    if let Some(record) = nodes[x].replication.store().get(key) {
                        nodes[y].replication.merge_remote(wire::to_wire(key, &record), &nodes[y].view).expect("a valid record");
                    }
                }
            }
        }
        for (index, key) in KEYS.iter().enumerate() {
            let served: Vec<Option<CachedCompletion>> = nodes.iter().map(|n| n.serves(key)).collect();
            prop_assert_eq!(&served[0], &served[1], "{} differs", key);
            prop_assert_eq!(&served[0], &served[2], "{} differs", key);
            if let (Some(entry), Some(at)) = (&served[0], invalidated[index]) {
                prop_assert!(entry.created_ms > at, "{key} came back after its invalidation");
            }
        }
    }
}
