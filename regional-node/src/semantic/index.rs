//! A partition's HNSW index (usearch, cosine): the parameters every partition's index is built with,
//! and what a question and a partition cost in memory, as the tier's byte bound counts them. Both were
//! measured with `mesh bench semantic-index`.

use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use crate::semantic::embedding::EMBEDDING_DIM;
use crate::RegionalError;

/// Links per vector of a partition's HNSW index (usearch's default is 16). With 32, and the two
/// expansions below, `mesh bench semantic-index` found the nearest of 1,000 held-out ShareGPT questions
/// among 100,000 in the small embedding's space for 0.992 of them at 2.5 ms p99 on 2 cores; with the
/// defaults (16, 128, 64), 0.902 at 0.5 ms. Its memory at 100,000: 1,182 bytes a question against 847.
const CONNECTIVITY: usize = 32;
/// Candidates kept while a question is added (usearch's default is 128).
const EXPANSION_ADD: usize = 256;
/// Candidates kept while searching (usearch's default is 64).
const EXPANSION_SEARCH: usize = 256;
/// Links an HNSW index keeps per vector at its base layer (twice the connectivity), at 8 bytes each.
const LINK_BYTES: u64 = 2 * CONNECTIVITY as u64 * 8;
/// The maps' and queue's own bytes per question (labels, string headers, hash table slots).
const BOOKKEEPING_BYTES: u64 = 128;
/// Resident bytes of one partition's index before its questions: `mesh bench semantic-index` measured
/// about 84 KiB for each small-embedding index (1,000 partitions of 10 questions took 9,042 bytes a
/// question, 200 of 100 took 1,510), rounded up. Without it, many small partitions cost ten times what
/// the byte bound counted.
const INDEX_BYTES: u64 = 96 * 1024;

/// What one partition costs before its questions: an index for each space it is searched in.
pub fn partition_bytes(small_dims: Option<usize>) -> u64 {
    INDEX_BYTES * (1 + u64::from(small_dims.is_some()))
}

/// What one indexed question costs: its text and key, each embedding it is indexed by (4 bytes a
/// dimension) and that index's links, and the bookkeeping around it. An estimate of the allocations,
/// not a measurement (an index's capacity grows by doubling).
pub fn question_bytes(question: &str, key: &str, full: bool, small_dims: Option<usize>) -> u64 {
    let vector = |dims: usize| dims as u64 * 4 + LINK_BYTES;
    (question.len() + key.len()) as u64
        + if full { vector(EMBEDDING_DIM) } else { 0 }
        + small_dims.map_or(0, vector)
        + BOOKKEEPING_BYTES
}

/// An empty HNSW index of `dimensions`-long vectors compared by cosine, as every partition holds.
pub fn cosine_index(dimensions: usize) -> Result<Index, RegionalError> {
    let options = IndexOptions {
        dimensions,
        metric: MetricKind::Cos,
        quantization: ScalarKind::F32,
        connectivity: CONNECTIVITY,
        expansion_add: EXPANSION_ADD,
        expansion_search: EXPANSION_SEARCH,
        ..Default::default()
    };
    Index::new(&options).map_err(usearch_error)
}

pub(crate) fn usearch_error(error: impl std::fmt::Display) -> RegionalError {
    RegionalError::Embedding(format!("usearch: {error}"))
}
