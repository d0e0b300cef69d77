//! The semantic tier (L2): the questions this node has answered, embedded with all-MiniLM-L6-v2 and
//! indexed with usearch (HNSW, cosine), one index per partition ([`SemanticQuery::partition`]).
//!
//! A lookup embeds the new question, takes the nearest few cached questions of its partition, and
//! returns the closest one that is at least the content class's threshold AND passes the near-miss
//! verifier ([`near_miss::verify`]): a threshold alone serves "from the server to my laptop"
//! for "from my laptop to the server" (cosine 0.999). The hit names the cached entry's key; the
//! caller fetches the entry from the exact tier or the core, so an invalidated or expired entry is
//! never served through its paraphrases.
//!
//! Each question may also be indexed by its small embedding (the edge's distilled table, microseconds
//! to compute): [`SemanticCache::lookup`] searches either space ([`Space`]), so the request path can
//! try the cheap one first and embed with MiniLM only when it finds nothing there.
//!
//! Bounded: each partition keeps its newest [`SemanticLimits::per_partition`] questions, and the
//! least recently used partitions are dropped past [`SemanticLimits::partitions`]. Bytes are bounded
//! too ([`SemanticLimits::bytes`], each question counted at [`question_bytes`] and each partition at
//! [`partition_bytes`]): a tenant at its share of
//! them makes room among its own questions, and past the total the least recently used partition of
//! any tenant gives up its oldest questions.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use near_miss::verify;
use shared::cache_key::SemanticQuery;
use usearch::Index;

use crate::semantic::embedding::EMBEDDING_DIM;
use crate::semantic::index::{cosine_index, usearch_error};
use crate::semantic::index::{partition_bytes, question_bytes};
use crate::RegionalError;

/// Nearest cached questions checked per lookup: the closest may be a near miss that the verifier
/// refuses while the next one is a true paraphrase.
pub const CANDIDATES: usize = 4;

/// How much the tier holds.
#[derive(Debug, Clone, Copy)]
pub struct SemanticLimits {
    /// Questions per partition (the oldest go first).
    pub per_partition: usize,
    /// Partitions (the least recently used go first).
    pub partitions: usize,
    /// Share (0..=1] of the partitions, and of the bytes, one tenant may hold: a tenant at its share
    /// makes room among its own, never another tenant's.
    pub tenant_share: f64,
    /// Bytes of questions, embeddings and index links the tier holds, as [`question_bytes`] counts
    /// them; 0: no bound but the counts.
    pub bytes: u64,
}

impl SemanticLimits {
    fn tenant_partitions(&self) -> usize {
        ((self.partitions as f64 * self.tenant_share.clamp(0.0, 1.0)).ceil() as usize).max(1)
    }

    fn tenant_bytes(&self) -> u64 {
        (self.bytes as f64 * self.tenant_share.clamp(0.0, 1.0)).ceil() as u64
    }
}

/// A semantic hit: the cached question's entry key and how similar it is.
#[derive(Debug, Clone, PartialEq)]
pub struct SemanticHit {
    /// Key of the cached entry that answers the matched question.
    pub key: String,
    /// Cosine similarity of the two questions' embeddings.
    pub similarity: f32,
}

/// Which embedding a lookup compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    /// all-MiniLM-L6-v2's 384 dimensions.
    Full,
    /// The small (distilled) embedding.
    Small,
}

/// One partition's index and what its labels stand for.
struct Partition {
    index: Index,
    /// The same questions by their small embeddings, when the tier has the table.
    small_index: Option<Index>,
    /// Label -> (entry key, question).
    questions: HashMap<u64, (String, String)>,
    /// Label -> what the question costs ([`question_bytes`]).
    costs: HashMap<u64, u64>,
    /// Their sum, and the partition's own ([`partition_bytes`]).
    bytes: u64,
    /// Labels, oldest first.
    order: VecDeque<u64>,
    next_label: u64,
    last_used: u64,
    /// The tenant whose questions these are.
    tenant: String,
}

/// Every partition of this node.
pub struct SemanticCache {
    limits: SemanticLimits,
    /// Dimensions of the small embeddings, when questions are indexed by them too.
    small_dims: Option<usize>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    partitions: HashMap<String, Partition>,
    /// Partitions each tenant holds.
    per_tenant: HashMap<String, usize>,
    /// Bytes each tenant's questions cost.
    tenant_bytes: HashMap<String, u64>,
    /// Bytes all questions cost.
    bytes: u64,
    clock: u64,
}

impl State {
    /// Drops the oldest question of the least recently used partition among those `eligible` admits
    /// (an emptied partition goes too); false when none has a question.
    fn evict_oldest(&mut self, eligible: impl Fn(&Partition) -> bool) -> Result<bool, RegionalError> {
        let Some(name) = self
            .partitions
            .iter()
            .filter(|(_, p)| eligible(p) && !p.order.is_empty())
            .min_by_key(|(_, p)| p.last_used)
            .map(|(name, _)| name.clone())
        else {
            return Ok(false);
        };
        let partition = self.partitions.get_mut(&name).expect("found above");
        let freed = partition.drop_oldest()?;
        let (tenant, emptied) = (partition.tenant.clone(), partition.order.is_empty());
        self.bytes = self.bytes.saturating_sub(freed);
        if let Some(bytes) = self.tenant_bytes.get_mut(&tenant) {
            *bytes = bytes.saturating_sub(freed);
        }
        if emptied {
            self.remove_partition(&name);
        }
        Ok(true)
    }

    /// Adds an empty `partition` as `name`, counting its own bytes.
    fn add_partition(&mut self, name: &str, partition: Partition) {
        let (tenant, bytes) = (partition.tenant.clone(), partition.bytes);
        self.partitions.insert(name.to_owned(), partition);
        *self.per_tenant.entry(tenant.clone()).or_default() += 1;
        self.bytes += bytes;
        *self.tenant_bytes.entry(tenant).or_default() += bytes;
    }

    /// Removes partition `name` and what it counted.
    fn remove_partition(&mut self, name: &str) {
        if let Some(removed) = self.partitions.remove(name) {
            if let Some(count) = self.per_tenant.get_mut(&removed.tenant) {
                *count = count.saturating_sub(1);
            }
            self.bytes = self.bytes.saturating_sub(removed.bytes);
            if let Some(bytes) = self.tenant_bytes.get_mut(&removed.tenant) {
                *bytes = bytes.saturating_sub(removed.bytes);
            }
        }
    }
}

impl SemanticCache {
    /// An empty tier; with `small_dims`, questions are indexed by their small embeddings too.
    pub fn new(limits: SemanticLimits, small_dims: Option<usize>) -> Self {
        Self { limits, small_dims, state: Mutex::new(State::default()) }
    }

    /// The closest cached question of `query`'s partition, compared in `space`, that is at least
    /// `threshold` similar and that the verifier accepts.
    pub fn lookup(
        &self,
        query: &SemanticQuery<'_>,
        space: Space,
        embedding: &[f32],
        threshold: f32,
    ) -> Option<SemanticHit> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.clock += 1;
        let clock = state.clock;
        let partition = state.partitions.get_mut(&query.partition)?;
        partition.last_used = clock;
        let index = match space {
            Space::Full => &partition.index,
            Space::Small => partition.small_index.as_ref()?,
        };
        let matches = index.search(embedding, CANDIDATES).ok()?;
        let candidates: Vec<(String, String, f32)> = matches
            .keys
            .iter()
            .zip(&matches.distances)
            .filter_map(|(label, distance)| {
                let similarity = 1.0 - distance;
                let (key, question) = partition.questions.get(label)?;
                (similarity >= threshold).then(|| (key.clone(), question.clone(), similarity))
            })
            .collect();
        // The verifier runs after the lock is released: one request's comparison never holds up
        // another's lookup or insert.
        drop(state);
        candidates.into_iter().find_map(|(key, question, similarity)| {
            verify(&question, query.question).is_ok().then_some(SemanticHit { key, similarity })
        })
    }

    /// Indexes `query`'s question of `tenant`, answered by the entry `key`, by its MiniLM embedding
    /// and its small embedding, whichever are given (the small one when the tier indexes them); at
    /// least one must be.
    pub fn insert(
        &self,
        query: &SemanticQuery<'_>,
        tenant: &str,
        embedding: Option<&[f32]>,
        small: Option<&[f32]>,
        key: &str,
    ) -> Result<(), RegionalError> {
        if embedding.is_some_and(|e| e.len() != EMBEDDING_DIM || e.iter().any(|v| !v.is_finite())) {
            return Err(RegionalError::Embedding("an embedding must be 384 finite values".into()));
        }
        let small = match (small, self.small_dims) {
            (Some(small), Some(dims)) if small.len() == dims && small.iter().all(|v| v.is_finite()) => {
                Some(small)
            }
            _ => None,
        };
        if embedding.is_none() && small.is_none() {
            return Err(RegionalError::Embedding("no embedding of the question to index".into()));
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.clock += 1;
        let clock = state.clock;
        if !state.partitions.contains_key(&query.partition) {
            let own = state.per_tenant.get(tenant).copied().unwrap_or(0);
            // A tenant at its share makes room among its own partitions; otherwise the least recently
            // used of all goes.
            let victim = if own >= self.limits.tenant_partitions() {
                state.partitions.iter().filter(|(_, p)| p.tenant == tenant).min_by_key(|(_, p)| p.last_used)
            } else if state.partitions.len() >= self.limits.partitions {
                state.partitions.iter().min_by_key(|(_, p)| p.last_used)
            } else {
                None
            };
            if let Some(victim) = victim.map(|(k, _)| k.clone()) {
                state.remove_partition(&victim);
            }
            state.add_partition(&query.partition, Partition::new(self.small_dims, tenant)?);
        }
        let cost = question_bytes(query.question, key, embedding.is_some(), small.map(<[f32]>::len));
        if self.limits.bytes > 0 {
            // The tenant's own questions make room for its share first, then any tenant's for the total.
            let tenant_cap = self.limits.tenant_bytes();
            while state.tenant_bytes.get(tenant).copied().unwrap_or(0) + cost > tenant_cap {
                if !state.evict_oldest(|p| p.tenant == tenant)? {
                    break;
                }
            }
            while state.bytes + cost > self.limits.bytes {
                if !state.evict_oldest(|_| true)? {
                    break;
                }
            }
            // Eviction may have emptied (and removed) the question's own partition.
            if !state.partitions.contains_key(&query.partition) {
                state.add_partition(&query.partition, Partition::new(self.small_dims, tenant)?);
            }
        }
        let partition = state.partitions.get_mut(&query.partition).expect("inserted above");
        partition.last_used = clock;
        let freed = partition.add(embedding, small, key, query.question, self.limits.per_partition, cost)?;
        state.bytes = state.bytes.saturating_sub(freed) + cost;
        let tenant_bytes = state.tenant_bytes.entry(tenant.to_owned()).or_default();
        *tenant_bytes = tenant_bytes.saturating_sub(freed) + cost;
        Ok(())
    }

    /// Bytes the questions cost ([`question_bytes`]), in all and of `tenant`.
    pub fn bytes(&self, tenant: &str) -> (u64, u64) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (state.bytes, state.tenant_bytes.get(tenant).copied().unwrap_or(0))
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
    fn new(small_dims: Option<usize>, tenant: &str) -> Result<Self, RegionalError> {
        let index = cosine_index(EMBEDDING_DIM)?;
        let small_index = small_dims.map(cosine_index).transpose()?;
        Ok(Self {
            index,
            small_index,
            questions: HashMap::new(),
            costs: HashMap::new(),
            bytes: partition_bytes(small_dims),
            order: VecDeque::new(),
            next_label: 0,
            last_used: 0,
            tenant: tenant.to_owned(),
        })
    }

    /// Drops the oldest question; returns what it cost (0 when there was none).
    fn drop_oldest(&mut self) -> Result<u64, RegionalError> {
        let Some(oldest) = self.order.pop_front() else { return Ok(0) };
        self.index.remove(oldest).map_err(usearch_error)?;
        if let Some(small_index) = &self.small_index {
            small_index.remove(oldest).map_err(usearch_error)?;
        }
        self.questions.remove(&oldest);
        let cost = self.costs.remove(&oldest).unwrap_or(0);
        self.bytes = self.bytes.saturating_sub(cost);
        Ok(cost)
    }

    /// Adds a question that costs `cost`, dropping the oldest past `limit`; returns the bytes dropped.
    fn add(
        &mut self,
        embedding: Option<&[f32]>,
        small: Option<&[f32]>,
        key: &str,
        question: &str,
        limit: usize,
        cost: u64,
    ) -> Result<u64, RegionalError> {
        let mut freed = 0;
        while self.order.len() >= limit.max(1) {
            freed += self.drop_oldest()?;
        }
        for index in std::iter::once(&self.index).chain(self.small_index.as_ref()) {
            if index.size() + 1 > index.capacity() {
                index.reserve((index.capacity() * 2).max(16)).map_err(usearch_error)?;
            }
        }
        let label = self.next_label;
        self.next_label += 1;
        if let Some(embedding) = embedding {
            self.index.add(label, embedding).map_err(usearch_error)?;
        }
        if let (Some(small_index), Some(small)) = (&self.small_index, small) {
            small_index.add(label, small).map_err(usearch_error)?;
        }
        self.questions.insert(label, (key.to_string(), question.to_string()));
        self.costs.insert(label, cost);
        self.bytes += cost;
        self.order.push_back(label);
        Ok(freed)
    }
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
        let cache = SemanticCache::new(
            SemanticLimits { per_partition: 8, partitions: 4, tenant_share: 1.0, bytes: 0 },
            None,
        );
        let cached = query("p", "How can I purchase a car?");
        cache.insert(&cached, "t", Some(&vector(0, 1.0)), None, "v1:car").expect("insert");
        let hit = cache
            .lookup(&query("p", "How can I buy a car?"), Space::Full, &vector(0, 0.99), 0.95)
            .expect("a hit");
        assert_eq!(hit.key, "v1:car");
        assert!((hit.similarity - 0.99).abs() < 1e-3, "{}", hit.similarity);
        assert_eq!(
            cache.lookup(&query("p", "How can I buy a car?"), Space::Full, &vector(0, 0.90), 0.95),
            None
        );
        assert_eq!(
            cache.lookup(&query("p", "How can I sell a car?"), Space::Full, &vector(0, 0.99), 0.95),
            None
        );
        assert_eq!(
            cache.lookup(&query("q", "How can I buy a car?"), Space::Full, &vector(0, 0.99), 0.95),
            None
        );
    }

    #[test]
    fn the_small_space_finds_what_was_indexed_by_its_small_embedding_and_evicts_with_it() {
        let small = |axis: usize, lean: f32| {
            let mut v = vec![0.0; 8];
            v[axis] = lean;
            v[7] = (1.0 - lean * lean).sqrt();
            v
        };
        let cache = SemanticCache::new(
            SemanticLimits { per_partition: 1, partitions: 4, tenant_share: 1.0, bytes: 0 },
            Some(8),
        );
        let cached = query("p", "How can I purchase a car?");
        cache.insert(&cached, "t", Some(&vector(0, 1.0)), Some(&small(0, 1.0)), "v1:car").expect("insert");
        let asked = query("p", "How can I buy a car?");
        let hit =
            cache.lookup(&asked, Space::Small, &small(0, 0.98), 0.9).expect("a hit by the small embedding");
        assert_eq!(hit.key, "v1:car");
        assert_eq!(cache.lookup(&asked, Space::Small, &small(1, 1.0), 0.9), None, "not similar");
        // A wrong-length small embedding indexes the question in the full space only.
        cache
            .insert(&query("p", "What is rust?"), "t", Some(&vector(1, 1.0)), Some(&[1.0; 3]), "v1:rust")
            .expect("insert");
        assert_eq!(
            cache.lookup(&asked, Space::Small, &small(0, 0.98), 0.9),
            None,
            "evicted from both spaces"
        );
        assert!(cache.lookup(&query("p", "What is rust?"), Space::Full, &vector(1, 1.0), 0.9).is_some());
        let no_small = SemanticCache::new(
            SemanticLimits { per_partition: 1, partitions: 4, tenant_share: 1.0, bytes: 0 },
            None,
        );
        no_small.insert(&cached, "t", Some(&vector(0, 1.0)), Some(&small(0, 1.0)), "v1:car").expect("insert");
        assert_eq!(no_small.lookup(&asked, Space::Small, &small(0, 1.0), 0.9), None);
    }

    #[test]
    fn bytes_are_bounded_and_a_tenant_at_its_share_gives_up_its_own_questions() {
        // Each question here has a partition of its own, which costs its index's bytes too.
        let cost = question_bytes("What is rust?", "k-quiet", true, None) + partition_bytes(None);
        let limits = SemanticLimits { per_partition: 64, partitions: 64, tenant_share: 0.5, bytes: 4 * cost };
        let cache = SemanticCache::new(limits, None);
        cache
            .insert(&query("quiet", "What is rust?"), "quiet", Some(&vector(0, 1.0)), None, "k-quiet")
            .expect("insert");
        for i in 1..=6 {
            let partition = format!("flood-{i}");
            let (key, embedding) = (format!("k-fld-{i}"), vector(i, 1.0));
            cache
                .insert(&query(&partition, "What is rust?"), "flood", Some(&embedding), None, &key)
                .expect("insert");
        }
        // The flood holds its share, two questions' worth (its newest two), and the quiet tenant's stays.
        let (total, quiet) = cache.bytes("quiet");
        assert_eq!(quiet, cost);
        assert_eq!(cache.bytes("flood").1, 2 * cost, "keys of the same length cost the same");
        assert_eq!(cache.len(), 3);
        assert!(total <= 4 * cost);
        assert!(cache.lookup(&query("quiet", "What is rust?"), Space::Full, &vector(0, 1.0), 0.9).is_some());
        assert!(cache
            .lookup(&query("flood-6", "What is rust?"), Space::Full, &vector(6, 1.0), 0.9)
            .is_some());
        assert!(cache
            .lookup(&query("flood-1", "What is rust?"), Space::Full, &vector(1, 1.0), 0.9)
            .is_none());
        // Questions past the total, within a tenant's share, take the least recently used of anyone's.
        let two = SemanticLimits { per_partition: 64, partitions: 64, tenant_share: 1.0, bytes: 2 * cost };
        let cache = SemanticCache::new(two, None);
        for (i, tenant) in ["a", "b", "c"].iter().enumerate() {
            let key = format!("k-quie{i}");
            cache
                .insert(&query(tenant, "What is rust?"), tenant, Some(&vector(i, 1.0)), None, &key)
                .expect("insert");
        }
        assert_eq!((cache.len(), cache.bytes("a").1), (2, 0), "a's question, the oldest, went");
    }

    #[test]
    fn partitions_and_questions_are_bounded() {
        let cache = SemanticCache::new(
            SemanticLimits { per_partition: 2, partitions: 2, tenant_share: 1.0, bytes: 0 },
            None,
        );
        for (i, partition) in ["a", "a", "a", "b", "c"].iter().enumerate() {
            cache
                .insert(
                    &query(partition, "What is rust?"),
                    "t",
                    Some(&vector(i, 1.0)),
                    None,
                    &format!("k{i}"),
                )
                .expect("insert");
        }
        // "a" kept its 2 newest, then was the least recently used when "c" came.
        assert_eq!(cache.len(), 2);
        assert!(cache.lookup(&query("a", "What is rust?"), Space::Full, &vector(2, 1.0), 0.9).is_none());
        assert!(cache.lookup(&query("c", "What is rust?"), Space::Full, &vector(4, 1.0), 0.9).is_some());
    }

    #[test]
    fn a_tenant_opening_partitions_drops_its_own_not_anothers() {
        let cache = SemanticCache::new(
            SemanticLimits { per_partition: 4, partitions: 4, tenant_share: 0.5, bytes: 0 },
            None,
        );
        cache
            .insert(&query("quiet", "What is rust?"), "quiet", Some(&vector(0, 1.0)), None, "k-quiet")
            .expect("insert");
        // One system prompt after another: a new partition each time, far more than its share.
        for i in 1..20 {
            let partition = format!("flood-{i}");
            cache
                .insert(&query(&partition, "What is rust?"), "flood", Some(&vector(i, 1.0)), None, "k")
                .expect("insert");
        }
        let hit = cache.lookup(&query("quiet", "What is rust?"), Space::Full, &vector(0, 1.0), 0.9);
        assert_eq!(hit.map(|h| h.key).as_deref(), Some("k-quiet"), "the quiet tenant's partition stays");
        assert_eq!(cache.len(), 3, "the flood holds its share, 2 of 4 partitions");
    }

    #[test]
    fn bad_embeddings_are_refused() {
        let cache = SemanticCache::new(
            SemanticLimits { per_partition: 2, partitions: 2, tenant_share: 1.0, bytes: 0 },
            None,
        );
        let mut nan = vector(0, 1.0);
        nan[3] = f32::NAN;
        assert!(cache.insert(&query("a", "q"), "t", Some(&nan), None, "k").is_err());
        assert!(cache.insert(&query("a", "q"), "t", Some(&[1.0; 3]), None, "k").is_err());
        assert!(cache.insert(&query("a", "q"), "t", None, None, "k").is_err(), "nothing to index");
        assert!(cache.is_empty());
    }

    #[test]
    fn a_question_indexed_by_its_small_embedding_alone_is_found_in_that_space_only() {
        let small = |axis: usize| {
            let mut v = vec![0.0; 8];
            v[axis] = 1.0;
            v
        };
        let cache = SemanticCache::new(
            SemanticLimits { per_partition: 2, partitions: 2, tenant_share: 1.0, bytes: 0 },
            Some(8),
        );
        let cached = query("p", "How can I purchase a car?");
        cache.insert(&cached, "t", None, Some(&small(0)), "v1:car").expect("insert");
        let asked = query("p", "How can I buy a car?");
        assert_eq!(
            cache.lookup(&asked, Space::Small, &small(0), 0.9).map(|h| h.key).as_deref(),
            Some("v1:car")
        );
        assert_eq!(cache.lookup(&asked, Space::Full, &vector(0, 1.0), 0.5), None);
        // The oldest leaves both spaces, though it was in one.
        cache
            .insert(&query("p", "What is rust?"), "t", Some(&vector(1, 1.0)), Some(&small(1)), "k1")
            .expect("insert");
        cache.insert(&query("p", "What is go?"), "t", None, Some(&small(2)), "k2").expect("insert");
        assert_eq!(cache.lookup(&asked, Space::Small, &small(0), 0.9), None);
        assert_eq!(cache.len(), 2);
    }
}
