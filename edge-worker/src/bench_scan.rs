//! `GET /v1/edge/bench/scan?entries=N&queries=Q` (tier secret only): builds a synthetic hot set of N
//! entries in one partition and runs Q semantic lookups against it, so that `mesh bench edge` can time
//! the int8 scan inside workerd. The time is taken from outside (the request with Q lookups minus the
//! one with none), because workerd's clocks stand still while a worker computes.
//!
//! `GET /v1/edge/bench/verify?answers=N&check=1` signs N synthetic answers and, with `check=1`, checks
//! each signature as the edge checks fills and hot entries; the difference of the two times is N checks.

use shared::completion::{AnsweredQuestion, CachedCompletion};
use shared::hot_set::{encode_embedding, HotEntry, HotSet as WireHotSet};
use shared::small_embedding::SmallEmbedder;

use crate::hot_set::{HotSetLimits, IsolateHotSet};

/// Largest synthetic set.
pub const MAX_ENTRIES: usize = 100_000;
/// Most lookups per request.
pub const MAX_QUERIES: usize = 10_000;

/// Runs the lookups; returns how many found a match (none: the threshold is above every synthetic
/// similarity, so each lookup scans the whole partition and verifies nothing).
pub fn run(embedder: &SmallEmbedder, entries: usize, queries: usize) -> usize {
    let dims = embedder.dims();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut vector = || -> Vec<i8> {
        (0..dims)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 56) as u8 as i8
            })
            .collect()
    };
    let set_entries = (0..entries)
        .map(|i| HotEntry {
            entry: CachedCompletion {
                key: format!("v1:bench{i}"),
                tenant: "bench".into(),
                model: "m".into(),
                model_version: 1,
                content: String::new(),
                finish_reason: "stop".into(),
                prompt_tokens: 0,
                completion_tokens: 0,
                etag: String::new(),
                created_ms: 0,
                ttl_s: 0,
                signature: String::new(),
                question: Some(AnsweredQuestion { partition: "p".into(), text: format!("question {i}") }),
                tags: Vec::new(),
            },
            embedding: Some(encode_embedding(&vector())),
        })
        .collect();
    let mut set =
        IsolateHotSet::new(HotSetLimits { per_tenant: entries.max(1), total: entries.max(1) }, dims);
    set.apply(
        WireHotSet {
            version: "bench".into(),
            snapshot: true,
            table: Some(embedder.id().to_owned()),
            entries: set_entries,
            removed: Vec::new(),
        },
        Some(embedder),
    );
    let probes: Vec<Vec<i8>> = (0..queries.min(64)).map(|_| vector()).collect();
    (0..queries)
        .filter(|q| set.nearest("p", &probes[q % probes.len()], "a question", 1.01, 1).is_some())
        .count()
}

/// Most answers per verification request.
pub const MAX_ANSWERS: usize = 20_000;

/// Signs `answers` synthetic 1 KiB answers with a fixed key and, when `check`, verifies each as the
/// edge does; returns how many verified.
pub fn verify(answers: usize, check: bool) -> usize {
    use shared::answer_signature::AnswerSigner;
    let signer = AnswerSigner::from_seed(*b"edge bench: answer verification!");
    let verifier = signer.verifier();
    let content = "An answer of about one kibibyte. ".repeat(32);
    let mut verified = 0;
    for i in 0..answers {
        let mut entry = CachedCompletion {
            key: format!("v1:{i:064x}"),
            tenant: "bench".into(),
            model: "m".into(),
            model_version: 1,
            etag: CachedCompletion::etag_of(&content, "stop"),
            content: content.clone(),
            finish_reason: "stop".into(),
            prompt_tokens: 40,
            completion_tokens: 240,
            created_ms: i as i64,
            ttl_s: 86_400,
            question: None,
            signature: String::new(),
            tags: Vec::new(),
        };
        signer.sign(&mut entry);
        if check && verifier.verify(&entry).is_ok() {
            verified += 1;
        }
    }
    verified
}
