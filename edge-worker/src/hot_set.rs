//! The hot set held in one isolate: the regional tier's hottest answers (`/v1/hotset`, applied as
//! snapshots and deltas), answerable by key (an exact hit this data center never saw) and by
//! paraphrase (the small-embedding semantic tier).
//!
//! Each semantic partition keeps its questions' int8 embeddings in one contiguous run, so a lookup is
//! a scan of the request's partition only ([`crate::dot`], simd128 in wasm). A candidate at or above
//! the content class's threshold must also pass [`near_miss::verify`], the regional tier's
//! second check, before its answer is served. Bounded: past [`HotSetLimits`] the oldest entries of the
//! tenant, then of the whole set, leave first.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use near_miss::verify;
use shared::completion::CachedCompletion;
use shared::hot_set::{encode_embedding, HotEntry, HotSet as WireHotSet};
use shared::small_embedding::SmallEmbedder;

use crate::dot::dot;

/// Candidates above the threshold that are verified before giving up (the closest may be a near miss
/// while the next is a true paraphrase).
const CANDIDATES: usize = 8;

/// How much one isolate holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HotSetLimits {
    /// Entries of one tenant.
    pub per_tenant: usize,
    /// Entries in all.
    pub total: usize,
}

/// A semantic hit: the cached entry and how similar its question is.
#[derive(Clone, Debug)]
pub struct SemanticMatch {
    /// The answer to serve.
    pub entry: Rc<CachedCompletion>,
    /// Cosine of the two questions' small embeddings.
    pub similarity: f32,
}

/// What applying a hot-set response changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Entries added or replaced.
    pub upserted: usize,
    /// Entries removed (named by the response or evicted by the bounds).
    pub removed: usize,
}

struct Held {
    entry: Rc<CachedCompletion>,
    /// The partition whose scan includes it and its row there, when it has a question and an embedding.
    row: Option<(String, usize)>,
    order: u64,
}

#[derive(Default)]
struct Partition {
    keys: Vec<String>,
    vectors: Vec<i8>,
    norms: Vec<f32>,
}

/// The isolate's hot set.
pub struct IsolateHotSet {
    limits: HotSetLimits,
    dims: usize,
    version: Option<String>,
    held: HashMap<String, Held>,
    partitions: HashMap<String, Partition>,
    order: BTreeMap<u64, String>,
    tenant_order: HashMap<String, BTreeMap<u64, String>>,
    next: u64,
}

impl IsolateHotSet {
    /// An empty set for embeddings of `dims` (0: exact lookups only).
    pub fn new(limits: HotSetLimits, dims: usize) -> Self {
        Self {
            limits,
            dims,
            version: None,
            held: HashMap::new(),
            partitions: HashMap::new(),
            order: BTreeMap::new(),
            tenant_order: HashMap::new(),
            next: 0,
        }
    }

    /// The version of the last response applied: the `since` of the next pull.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Applies a snapshot (replacing everything) or a delta. Embeddings come from the response when it
    /// was made with the same table as `embedder`, else `embedder` computes them from the questions.
    pub fn apply(&mut self, set: WireHotSet, embedder: Option<&SmallEmbedder>) -> Applied {
        let mut applied = Applied::default();
        if set.snapshot {
            applied.removed = self.held.len();
            *self = Self::new(self.limits, self.dims);
        }
        let same_table = embedder.is_some_and(|e| set.table.as_deref() == Some(e.id()));
        for hot in set.entries {
            let embedding = if same_table { hot.embedding_i8() } else { None }.or_else(|| {
                let question = hot.entry.question.as_ref()?;
                embedder?.embed_i8(&question.text)
            });
            applied.removed += self.upsert(hot.entry, embedding);
            applied.upserted += 1;
        }
        for key in &set.removed {
            applied.removed += usize::from(self.remove(key));
        }
        self.version = Some(set.version);
        applied
    }

    /// The entry under `key`, whoever owns it and whether or not it expired.
    pub fn get_any(&self, key: &str) -> Option<&CachedCompletion> {
        self.held.get(key).map(|held| held.entry.as_ref())
    }

    /// The live entry under `key`, if it belongs to `tenant`.
    pub fn get(&self, key: &str, tenant: &str, now_ms: i64) -> Option<Rc<CachedCompletion>> {
        let held = self.held.get(key)?;
        (held.entry.tenant == tenant && !held.entry.is_expired(now_ms)).then(|| Rc::clone(&held.entry))
    }

    /// The closest live entry of `partition` whose question is at least `threshold` similar to `query`
    /// (the small embedding of `question`) and that the near-miss verifier accepts for `question`.
    pub fn nearest(
        &self,
        partition: &str,
        query: &[i8],
        question: &str,
        threshold: f32,
        now_ms: i64,
    ) -> Option<SemanticMatch> {
        let part = self.partitions.get(partition)?;
        let query_norm = norm(query);
        if query.len() != self.dims || query_norm == 0.0 {
            return None;
        }
        let mut candidates: Vec<(f32, usize)> = part
            .vectors
            .chunks_exact(self.dims)
            .zip(&part.norms)
            .enumerate()
            .filter_map(|(i, (vector, &n))| {
                let similarity = dot(vector, query) as f32 / (n * query_norm);
                (similarity >= threshold).then_some((similarity, i))
            })
            .collect();
        candidates.sort_by(|a, b| b.0.total_cmp(&a.0));
        candidates.into_iter().take(CANDIDATES).find_map(|(similarity, i)| {
            let held = self.held.get(&part.keys[i])?;
            let cached = held.entry.question.as_ref()?;
            (!held.entry.is_expired(now_ms) && verify(&cached.text, question).is_ok())
                .then(|| SemanticMatch { entry: Rc::clone(&held.entry), similarity })
        })
    }

    /// At most `max` of the most recently added entries as a snapshot with their embeddings, made with
    /// the table `table_id` (for KV, so a cold isolate starts warm).
    pub fn snapshot(&self, max: usize, table_id: Option<&str>) -> WireHotSet {
        let mut entries: Vec<HotEntry> = self
            .order
            .values()
            .rev()
            .take(max)
            .filter_map(|key| {
                let held = self.held.get(key)?;
                let embedding = held.row.as_ref().and_then(|(p, i)| {
                    let part = self.partitions.get(p)?;
                    Some(encode_embedding(&part.vectors[i * self.dims..(i + 1) * self.dims]))
                });
                Some(HotEntry { entry: (*held.entry).clone(), embedding })
            })
            .collect();
        entries.reverse();
        WireHotSet {
            version: self.version.clone().unwrap_or_default(),
            snapshot: true,
            table: table_id.map(str::to_owned),
            entries,
            removed: Vec::new(),
        }
    }

    /// Adds or replaces `entry`; returns how many entries the bounds evicted.
    fn upsert(&mut self, entry: CachedCompletion, embedding: Option<Vec<i8>>) -> usize {
        let key = entry.key.clone();
        self.remove(&key);
        let row = match (&entry.question, embedding) {
            (Some(question), Some(vector)) if vector.len() == self.dims && norm(&vector) > 0.0 => {
                let part = self.partitions.entry(question.partition.clone()).or_default();
                part.keys.push(key.clone());
                part.norms.push(norm(&vector));
                part.vectors.extend_from_slice(&vector);
                Some((question.partition.clone(), part.keys.len() - 1))
            }
            _ => None,
        };
        self.next += 1;
        let order = self.next;
        self.order.insert(order, key.clone());
        let tenant = entry.tenant.clone();
        self.tenant_order.entry(tenant.clone()).or_default().insert(order, key.clone());
        self.held.insert(key, Held { entry: Rc::new(entry), row, order });
        let mut evicted = 0;
        while self.tenant_order.get(&tenant).is_some_and(|o| o.len() > self.limits.per_tenant) {
            let oldest = self.tenant_order.get(&tenant).and_then(|o| o.values().next().cloned());
            evicted += oldest.map_or(0, |k| usize::from(self.remove(&k)));
        }
        while self.held.len() > self.limits.total {
            let oldest = self.order.values().next().cloned();
            evicted += oldest.map_or(0, |k| usize::from(self.remove(&k)));
        }
        evicted
    }

    /// Removes `key` (the core invalidated it, or the set moved on); true if it was held.
    pub fn remove(&mut self, key: &str) -> bool {
        let Some(held) = self.held.remove(key) else { return false };
        self.order.remove(&held.order);
        if let Some(orders) = self.tenant_order.get_mut(&held.entry.tenant) {
            orders.remove(&held.order);
            if orders.is_empty() {
                self.tenant_order.remove(&held.entry.tenant);
            }
        }
        if let Some((name, i)) = &held.row {
            let i = *i;
            if let Some(part) = self.partitions.get_mut(name) {
                // The last row moves into the freed one; its entry learns its new row.
                let last = part.keys.len() - 1;
                part.keys.swap_remove(i);
                part.norms.swap_remove(i);
                if i != last {
                    let (dst, src) = (i * self.dims, last * self.dims);
                    part.vectors.copy_within(src..src + self.dims, dst);
                    if let Some((_, row)) = self.held.get_mut(&part.keys[i]).and_then(|h| h.row.as_mut()) {
                        *row = i;
                    }
                }
                part.vectors.truncate(last * self.dims);
                if part.keys.is_empty() {
                    self.partitions.remove(name);
                }
            }
        }
        true
    }
}

fn norm(vector: &[i8]) -> f32 {
    (dot(vector, vector) as f32).sqrt()
}

#[cfg(test)]
#[path = "hot_set_tests.rs"]
mod tests;
