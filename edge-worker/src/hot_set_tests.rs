use shared::completion::{AnsweredQuestion, CachedCompletion};
use shared::hot_set::{HotEntry, HotSet as WireHotSet};
use shared::small_embedding::SmallEmbedder;

use super::*;

const WORDS: &[&str] = &[
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "what", "is", "3", "times", "7", "8", "?", "copy", "a", "file",
    "from", "my", "laptop", "to", "the", "server", "capital", "of", "france", "tell", "me",
];
const DIMS: usize = 16;

/// A table whose rows are fixed pseudo-random vectors, one per word.
fn embedder() -> SmallEmbedder {
    let vocab: String = WORDS.iter().map(|w| format!("{w}\n")).collect();
    let rows: Vec<f32> =
        (0..WORDS.len() * DIMS).map(|i| ((i * 2_654_435_761) % 1000) as f32 / 500.0 - 1.0).collect();
    SmallEmbedder::from_bytes(&SmallEmbedder::build(DIMS, &vocab, [1; 32], &rows).expect("build"))
        .expect("load")
}

fn entry(key: &str, tenant: &str, partition: &str, question: &str) -> CachedCompletion {
    CachedCompletion {
        tenant: tenant.into(),
        prompt_tokens: 5,
        completion_tokens: 3,
        etag: CachedCompletion::etag_of(question, "stop"),
        created_ms: 1_000,
        ttl_s: 60,
        question: Some(AnsweredQuestion { partition: partition.into(), text: question.into() }),
        ..CachedCompletion::example(key, format!("answer to {question}"))
    }
}

fn snapshot(entries: Vec<CachedCompletion>, table: Option<&str>) -> WireHotSet {
    WireHotSet {
        version: "1.1".into(),
        snapshot: true,
        table: table.map(str::to_owned),
        entries: entries.into_iter().map(|entry| HotEntry { entry, embedding: None }).collect(),
        removed: Vec::new(),
    }
}

fn limits() -> HotSetLimits {
    HotSetLimits { per_tenant: 100, total: 1000 }
}

fn find(
    set: &IsolateHotSet,
    e: &SmallEmbedder,
    partition: &str,
    question: &str,
    threshold: f32,
) -> Option<String> {
    let query = e.embed_i8(question).expect("embedding");
    set.nearest(partition, &query, question, threshold, 2_000).map(|m| m.entry.key.clone())
}

#[test]
fn a_hot_question_is_found_in_its_partition_only_and_near_misses_are_refused() {
    let e = embedder();
    let mut set = IsolateHotSet::new(limits(), DIMS);
    let applied = set.apply(
        snapshot(
            vec![
                entry("k1", "t", "P", "What is 3 times 7?"),
                entry("k2", "t", "P", "Copy a file from my laptop to the server"),
                entry("k3", "t", "Q", "Tell me the capital of France"),
            ],
            None,
        ),
        Some(&e),
    );
    assert_eq!((applied.upserted, set.len(), set.version()), (3, 3, Some("1.1")));

    assert_eq!(find(&set, &e, "P", "What is 3 times 7?", 0.99).as_deref(), Some("k1"));
    // Another partition (another conversation, model or tenant) never answers.
    assert_eq!(find(&set, &e, "Q", "What is 3 times 7?", 0.0), None);
    // Close in embedding space but a different number, or the reversed direction: the verifier refuses.
    assert_eq!(find(&set, &e, "P", "What is 3 times 8?", 0.0), None);
    assert_eq!(find(&set, &e, "P", "Copy a file from the server to my laptop", 0.0), None);
    // Exact lookups by key, for the owning tenant only, while live.
    assert!(set.get("k3", "t", 2_000).is_some());
    assert!(set.get("k3", "other", 2_000).is_none());
    assert!(set.get("k3", "t", 1_000 + 60_000).is_none());
}

#[test]
fn deltas_upsert_and_remove_and_snapshots_replace() {
    let e = embedder();
    let mut set = IsolateHotSet::new(limits(), DIMS);
    set.apply(snapshot(vec![entry("k1", "t", "P", "What is 3 times 7?")], None), Some(&e));
    let delta = WireHotSet {
        version: "1.2".into(),
        snapshot: false,
        table: None,
        entries: vec![HotEntry {
            entry: entry("k2", "t", "P", "Tell me the capital of France"),
            embedding: None,
        }],
        removed: vec!["k1".into(), "never-held".into()],
    };
    let applied = set.apply(delta, Some(&e));
    assert_eq!((applied.upserted, applied.removed, set.version()), (1, 1, Some("1.2")));
    assert_eq!(find(&set, &e, "P", "What is 3 times 7?", 0.99), None);
    assert_eq!(find(&set, &e, "P", "Tell me the capital of France", 0.99).as_deref(), Some("k2"));

    set.apply(snapshot(vec![entry("k3", "t", "P", "What is 3 times 8?")], None), Some(&e));
    assert_eq!((set.len(), set.get("k2", "t", 2_000).is_none()), (1, true));
}

#[test]
fn bounds_evict_the_oldest_entries_of_the_tenant_then_of_the_set() {
    let e = embedder();
    let mut set = IsolateHotSet::new(HotSetLimits { per_tenant: 2, total: 3 }, DIMS);
    let entries = vec![
        entry("a1", "a", "P", "What is 3 times 7?"),
        entry("a2", "a", "P", "What is 3 times 8?"),
        entry("a3", "a", "P", "Tell me the capital of France"),
        entry("b1", "b", "Q", "What is 3 times 7?"),
        entry("c1", "c", "R", "What is 3 times 7?"),
    ];
    set.apply(snapshot(entries, None), Some(&e));
    let held: Vec<bool> =
        ["a1", "a2", "a3", "b1", "c1"].iter().map(|k| set.get(k, &k[..1], 2_000).is_some()).collect();
    assert_eq!(held, [false, false, true, true, true]);
    // The partition scan forgot the evicted rows too, and still finds the survivor.
    assert_eq!(find(&set, &e, "P", "What is 3 times 7?", 0.0), None);
    assert_eq!(find(&set, &e, "P", "Tell me the capital of France", 0.99).as_deref(), Some("a3"));
    // The row that moved into an evicted one is still the survivor's own (the KV snapshot reads it).
    let mut restored = IsolateHotSet::new(limits(), DIMS);
    restored.apply(set.snapshot(10, Some(e.id())), Some(&e));
    assert_eq!(find(&restored, &e, "P", "Tell me the capital of France", 0.99).as_deref(), Some("a3"));
}

#[test]
fn a_snapshot_for_kv_restores_the_same_answers_with_or_without_the_same_table() {
    let e = embedder();
    let mut set = IsolateHotSet::new(limits(), DIMS);
    set.apply(
        snapshot(
            vec![
                entry("k1", "t", "P", "What is 3 times 7?"),
                entry("k2", "t", "P", "Tell me the capital of France"),
            ],
            None,
        ),
        Some(&e),
    );
    let saved = set.snapshot(10, Some(e.id()));
    assert_eq!(saved.entries.len(), 2);
    assert!(saved.entries.iter().all(|h| h.embedding.is_some()));
    for table in [Some(e.id()), Some("another-table"), None] {
        let mut restored = IsolateHotSet::new(limits(), DIMS);
        restored.apply(WireHotSet { table: table.map(str::to_owned), ..saved.clone() }, Some(&e));
        assert_eq!(find(&restored, &e, "P", "Tell me the capital of France", 0.99).as_deref(), Some("k2"));
    }
    // Without a table the set still answers exact lookups.
    let mut exact_only = IsolateHotSet::new(limits(), 0);
    exact_only.apply(saved, None);
    assert!(exact_only.get("k1", "t", 2_000).is_some());
    assert_eq!(exact_only.nearest("P", &[], "What is 3 times 7?", 0.0, 2_000).map(|m| m.similarity), None);
}
