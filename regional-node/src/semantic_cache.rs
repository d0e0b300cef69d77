//! The semantic tier (L2): the questions this node has answered, embedded with all-MiniLM-L6-v2 and
//! indexed with usearch (HNSW, cosine), one index per partition ([`SemanticQuery::partition`]).
//!
//! A lookup embeds the new question, takes the nearest few cached questions of its partition, and
//! returns the closest one that is at least the content class's threshold AND passes the near-miss
//! verifier ([`shared::near_miss::verify`]): a threshold alone serves "from the server to my laptop"
//! for "from my laptop to the server" (cosine 0.999). The hit names the cached entry's key; the
//! caller fetches the entry from the exact tier or the core, so an invalidated or expired entry is
//! never served through its paraphrases.
//!
//! Bounded: each partition keeps its newest [`SemanticLimits::per_partition`] questions, and the
//! least recently used partitions are dropped past [`SemanticLimits::partitions`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use shared::cache_key::SemanticQuery;
use shared::near_miss::verify;
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use crate::embedding::EMBEDDING_DIM;
use crate::RegionalError;

/// Nearest cached questions checked per lookup: the closest may be a near miss that the verifier
/// refuses while the next one is a true paraphrase.
const CANDIDATES: usize = 4;

/// How much the tier holds.
#[derive(Debug, Clone, Copy)]
pub struct SemanticLimits {
    /// Questions per partition (the oldest go first).
    pub per_partition: usize,
    /// Partitions (the least recently used go first).
    pub partitions: usize,
}

/// A semantic hit: the cached question's entry key and how similar it is.
#[derive(Debug, Clone, PartialEq)]
pub struct SemanticHit {
    /// Key of the cached entry that answers the matched question.
    pub key: String,
    /// Cosine similarity of the two questions' embeddings.
    pub similarity: f32,
}

/// One partition's index and what its labels stand for.
struct Partition {
    index: Index,
    /// Label -> (entry key, question).
    questions: HashMap<u64, (String, String)>,
    /// Labels, oldest first.
    order: VecDeque<u64>,
    next_label: u64,
    last_used: u64,
}

/// Every partition of this node.
pub struct SemanticCache {
    limits: SemanticLimits,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    partitions: HashMap<String, Partition>,
    clock: u64,
}

impl SemanticCache {
    /// An empty tier.
    pub fn new(limits: SemanticLimits) -> Self {
        Self { limits, state: Mutex::new(State::default()) }
    }

    /// The closest cached question of `query`'s partition that is at least `threshold` similar
    /// and that the verifier accepts.
    pub fn lookup(
        &self,
        query: &SemanticQuery<'_>,
        embedding: &[f32],
        threshold: f32,
    ) -> Option<SemanticHit> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.clock += 1;
        let clock = state.clock;
        let partition = state.partitions.get_mut(&query.partition)?;
        partition.last_used = clock;
        let matches = partition.index.search(embedding, CANDIDATES).ok()?;
        matches.keys.iter().zip(&matches.distances).find_map(|(label, distance)| {
            let similarity = 1.0 - distance;
            let (key, question) = partition.questions.get(label)?;
            (similarity >= threshold && verify(question, query.question).is_ok())
                .then(|| SemanticHit { key: key.clone(), similarity })
        })
    }

    /// Indexes `query`'s question, answered by the entry `key`.
    pub fn insert(
        &self,
        query: &SemanticQuery<'_>,
        embedding: &[f32],
        key: &str,
    ) -> Result<(), RegionalError> {
        if embedding.len() != EMBEDDING_DIM || embedding.iter().any(|v| !v.is_finite()) {
            return Err(RegionalError::Embedding("an embedding must be 384 finite values".into()));
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.clock += 1;
        let clock = state.clock;
        if !state.partitions.contains_key(&query.partition) {
            if state.partitions.len() >= self.limits.partitions {
                let oldest = state.partitions.iter().min_by_key(|(_, p)| p.last_used).map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    state.partitions.remove(&oldest);
                }
            }
            state.partitions.insert(query.partition.clone(), Partition::new()?);
        }
        let partition = state.partitions.get_mut(&query.partition).expect("inserted above");
        partition.last_used = clock;
        partition.add(embedding, key, query.question, self.limits.per_partition)
    }

    /// Questions held, over all partitions.
    pub fn len(&self) -> usize {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.partitions.values().map(|p| p.questions.len()).sum()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Partition {
    fn new() -> Result<Self, RegionalError> {
        let options = IndexOptions {
            dimensions: EMBEDDING_DIM,
            metric: MetricKind::Cos,
            quantization: ScalarKind::F32,
            ..Default::default()
        };
        let index = Index::new(&options).map_err(usearch_error)?;
        Ok(Self { index, questions: HashMap::new(), order: VecDeque::new(), next_label: 0, last_used: 0 })
    }

    fn add(
        &mut self,
        embedding: &[f32],
        key: &str,
        question: &str,
        limit: usize,
    ) -> Result<(), RegionalError> {
        while self.order.len() >= limit.max(1) {
            let Some(oldest) = self.order.pop_front() else { break };
            self.index.remove(oldest).map_err(usearch_error)?;
            self.questions.remove(&oldest);
        }
        if self.index.size() + 1 > self.index.capacity() {
            self.index.reserve((self.index.capacity() * 2).max(16)).map_err(usearch_error)?;
        }
        let label = self.next_label;
        self.next_label += 1;
        self.index.add(label, embedding).map_err(usearch_error)?;
        self.questions.insert(label, (key.to_string(), question.to_string()));
        self.order.push_back(label);
        Ok(())
    }
}

fn usearch_error(error: impl std::fmt::Display) -> RegionalError {
    RegionalError::Embedding(format!("usearch: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unit vector leaning towards axis `axis` by `lean` (cosine with the pure axis is `lean`).
    fn vector(axis: usize, lean: f32) -> Vec<f32> {
        let mut v = vec![0.0; EMBEDDING_DIM];
        v[axis] = lean;
        v[EMBEDDING_DIM - 1] = (1.0 - lean * lean).sqrt();
        v
    }

    fn query<'a>(partition: &str, question: &'a str) -> SemanticQuery<'a> {
        SemanticQuery { partition: partition.into(), question }
    }

    #[test]
    fn a_close_paraphrase_hits_and_a_near_miss_or_another_partition_does_not() {
        let cache = SemanticCache::new(SemanticLimits { per_partition: 8, partitions: 4 });
        let cached = query("p", "How can I purchase a car?");
        cache.insert(&cached, &vector(0, 1.0), "v1:car").expect("insert");
        let hit = cache.lookup(&query("p", "How can I buy a car?"), &vector(0, 0.99), 0.95).expect("a hit");
        assert_eq!(hit.key, "v1:car");
        assert!((hit.similarity - 0.99).abs() < 1e-3, "{}", hit.similarity);
        assert_eq!(cache.lookup(&query("p", "How can I buy a car?"), &vector(0, 0.90), 0.95), None);
        assert_eq!(cache.lookup(&query("p", "How can I sell a car?"), &vector(0, 0.99), 0.95), None);
        assert_eq!(cache.lookup(&query("q", "How can I buy a car?"), &vector(0, 0.99), 0.95), None);
    }

    #[test]
    fn partitions_and_questions_are_bounded() {
        let cache = SemanticCache::new(SemanticLimits { per_partition: 2, partitions: 2 });
        for (i, partition) in ["a", "a", "a", "b", "c"].iter().enumerate() {
            cache
                .insert(&query(partition, "What is rust?"), &vector(i, 1.0), &format!("k{i}"))
                .expect("insert");
        }
        // "a" kept its 2 newest, then was the least recently used when "c" came.
        assert_eq!(cache.len(), 2);
        assert!(cache.lookup(&query("a", "What is rust?"), &vector(2, 1.0), 0.9).is_none());
        assert!(cache.lookup(&query("c", "What is rust?"), &vector(4, 1.0), 0.9).is_some());
    }

    #[test]
    fn bad_embeddings_are_refused() {
        let cache = SemanticCache::new(SemanticLimits { per_partition: 2, partitions: 2 });
        let mut nan = vector(0, 1.0);
        nan[3] = f32::NAN;
        assert!(cache.insert(&query("a", "q"), &nan, "k").is_err());
        assert!(cache.insert(&query("a", "q"), &[1.0; 3], "k").is_err());
        assert!(cache.is_empty());
    }
}
