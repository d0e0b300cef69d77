//! The semantic tier as the request path uses it: the embedder, the per-partition indexes, the
//! similarity threshold of each content class, and the online audit that raises a tenant's threshold
//! when its hits disagree with fresh answers too often ([`crate::semantic::audit`]).

use std::fmt;
use std::sync::Arc;

use shared::cache_key::SemanticQuery;
use shared::content_class::ContentClass;
use shared::small_embedding::SmallEmbedder;

use crate::semantic::audit::{AuditSettings, SemanticAudit};
use crate::semantic::cache::{SemanticCache, SemanticHit, SemanticLimits, Space};
use crate::semantic::embedding::{cosine, SentenceEmbedder};
use crate::semantic::experiment::Experiments;
use crate::RegionalError;

pub use shared::content_class::SemanticThresholds;

/// The embedder, the indexes and the thresholds.
pub struct SemanticTier {
    embedder: SentenceEmbedder,
    /// The edge's small embedding, when the node has its table: tried before MiniLM.
    small: Option<Arc<SmallEmbedder>>,
    cache: SemanticCache,
    thresholds: SemanticThresholds,
    audit: SemanticAudit,
    /// Tenants' experiments of their thresholds.
    experiments: Experiments,
    /// Longest question, in words, the tier embeds, indexes and looks up.
    max_words: usize,
    /// Whether questions are embedded with MiniLM too when the small table is there.
    minilm_lookups: bool,
}

impl fmt::Debug for SemanticTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemanticTier")
            .field("questions", &self.cache.len())
            .field("thresholds", &self.thresholds)
            .finish_non_exhaustive()
    }
}

/// A question embedded for one request: looked up before generation, indexed after it.
#[derive(Debug, Clone)]
pub struct EmbeddedQuestion {
    /// The request's partition.
    pub partition: String,
    /// The last user turn.
    pub question: String,
    /// Its MiniLM embedding, unless the tier matches by the small embedding alone.
    pub embedding: Option<Vec<f32>>,
    /// Its small embedding, when the tier has the table.
    pub small: Option<Vec<f32>>,
}

impl EmbeddedQuestion {
    fn query(&self) -> SemanticQuery<'_> {
        SemanticQuery { partition: self.partition.clone(), question: &self.question }
    }
}

impl SemanticTier {
    /// A tier with the given models, bounds, thresholds and audit.
    pub fn new(
        embedder: SentenceEmbedder,
        small: Option<Arc<SmallEmbedder>>,
        limits: SemanticLimits,
        thresholds: SemanticThresholds,
        audit: AuditSettings,
    ) -> Self {
        let cache = SemanticCache::new(limits, small.as_ref().map(|s| s.dims()));
        Self {
            embedder,
            small,
            cache,
            thresholds,
            audit: SemanticAudit::new(audit),
            experiments: Experiments::default(),
            max_words: usize::MAX,
            minilm_lookups: true,
        }
    }

    /// With each tenant's experiment of its thresholds (`--semantic-experiment`).
    pub fn with_experiments(mut self, experiments: Experiments) -> Self {
        self.experiments = experiments;
        self
    }

    /// The tenants' experiments of their thresholds, and their arms' counts.
    pub fn experiments(&self) -> &Experiments {
        &self.experiments
    }

    /// With `false` and the small table, questions are embedded, indexed and matched by the small
    /// embedding alone (at [`SemanticThresholds::SMALL_ONLY`]): a miss then costs microseconds instead
    /// of a MiniLM forward, and MiniLM runs only for the audit. With `true` (or without the table)
    /// MiniLM is searched when the small embedding finds nothing.
    pub fn with_minilm_lookups(mut self, on: bool) -> Self {
        self.minilm_lookups = on;
        self
    }

    /// Whether requests' questions are embedded with MiniLM.
    pub fn embeds_with_minilm(&self) -> bool {
        self.minilm_lookups || self.small.is_none()
    }

    /// Leaves questions of more than `words` words to the exact tiers: a long prompt (a document to
    /// summarise, code to fix) is seldom asked again in other words, and embedding it costs every miss
    /// a MiniLM forward over its length.
    pub fn with_max_words(mut self, words: usize) -> Self {
        self.max_words = words;
        self
    }

    /// The small-embedding table, when the tier has one.
    pub fn small_table(&self) -> Option<&Arc<SmallEmbedder>> {
        self.small.as_ref()
    }

    /// `query`'s question with its small embedding (microseconds, no MiniLM), or `None` when the tier
    /// leaves it to the exact tiers (more than its word limit).
    pub fn question(&self, query: &SemanticQuery<'_>) -> Option<EmbeddedQuestion> {
        at_most_words(query.question, self.max_words).then(|| EmbeddedQuestion {
            partition: query.partition.clone(),
            question: query.question.to_owned(),
            embedding: None,
            small: self.small.as_ref().and_then(|s| s.embed(query.question)),
        })
    }

    /// The best verified match of `question` found by its small embedding, at the small embedding's
    /// gate of `class` for `tenant` (lower for a unit conversion, [`SemanticThresholds::gate`]); `None`
    /// without the table.
    pub async fn quick_lookup(
        self: &Arc<Self>,
        question: &EmbeddedQuestion,
        tenant: &str,
        class: ContentClass,
        delta: f32,
    ) -> Option<SemanticHit> {
        question.small.as_ref()?;
        let thresholds = if self.embeds_with_minilm() {
            SemanticThresholds::SMALL_EMBEDDING
        } else {
            SemanticThresholds::SMALL_ONLY
        };
        let threshold = self.raised(
            thresholds.gate(class, near_miss::asks_conversion(&question.question)),
            tenant,
            class,
        )?;
        let threshold = (threshold + delta).clamp(0.0, 1.0);
        self.blocking_lookup(question.clone(), Space::Small, threshold).await
    }

    /// A lookup in `space` on a blocking thread: the verifier's comparisons of up to
    /// [`CANDIDATES`](super::cache) questions take the time of a few forward passes' worth of string
    /// work, and must not hold up the runtime's workers (every tenant's requests share them).
    async fn blocking_lookup(
        self: &Arc<Self>,
        question: EmbeddedQuestion,
        space: Space,
        threshold: f32,
    ) -> Option<SemanticHit> {
        let tier = Arc::clone(self);
        let found = tokio::task::spawn_blocking(move || {
            let embedding = match space {
                Space::Small => question.small.as_deref()?,
                Space::Full => question.embedding.as_deref()?,
            };
            tier.cache.lookup(&question.query(), space, embedding, threshold)
        })
        .await;
        found.unwrap_or_else(|error| {
            tracing::warn!(%error, "a semantic lookup task failed");
            None
        })
    }

    /// The threshold of `class`, `None` when that class never hits semantically.
    pub fn threshold(&self, class: ContentClass) -> Option<f32> {
        self.thresholds.of(class)
    }

    /// `tenant`'s threshold of `class`: the configured one, raised as far as the audits raised it.
    pub fn threshold_for(&self, tenant: &str, class: ContentClass) -> Option<f32> {
        self.raised(self.threshold(class), tenant, class)
    }

    /// `base` raised as far as the audits raised `tenant`'s threshold of `class`.
    fn raised(&self, base: Option<f32>, tenant: &str, class: ContentClass) -> Option<f32> {
        base.map(|t| (t + self.audit.raised(tenant, class)).min(1.0))
    }

    /// The online audit of this tier's hits.
    pub fn audit(&self) -> &SemanticAudit {
        &self.audit
    }

    /// Cosine similarity of two texts' embeddings (two answers, for the audit), on a blocking thread.
    pub async fn similarity(self: &Arc<Self>, a: String, b: String) -> Result<f32, RegionalError> {
        let tier = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let embeddings = tier
                .embedder
                .embed(&[a.as_str(), b.as_str()])
                .map_err(|e| RegionalError::Embedding(e.to_string()))?;
            match embeddings.as_slice() {
                [x, y] => Ok(cosine(x, y)),
                _ => Err(RegionalError::Embedding("expected two embeddings".into())),
            }
        })
        .await
        .map_err(|e| RegionalError::Embedding(format!("embedding task: {e}")))?
    }

    /// `question` with its MiniLM embedding added on a blocking thread (a forward takes milliseconds),
    /// when the tier embeds with MiniLM; as it is otherwise.
    pub async fn with_minilm(
        self: &Arc<Self>,
        mut question: EmbeddedQuestion,
    ) -> Result<EmbeddedQuestion, RegionalError> {
        if !self.embeds_with_minilm() || question.embedding.is_some() {
            return Ok(question);
        }
        let tier = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let mut embeddings = tier
                .embedder
                .embed(&[question.question.as_str()])
                .map_err(|e| RegionalError::Embedding(e.to_string()))?;
            question.embedding =
                Some(embeddings.pop().ok_or_else(|| RegionalError::Embedding("no embedding".into()))?);
            Ok(question)
        })
        .await
        .map_err(|e| RegionalError::Embedding(format!("embedding task: {e}")))?
    }

    /// The best verified match of `question` by its MiniLM embedding at `threshold`; `None` when the
    /// tier matches by the small embedding alone.
    pub async fn lookup(
        self: &Arc<Self>,
        question: &EmbeddedQuestion,
        threshold: f32,
    ) -> Option<SemanticHit> {
        question.embedding.as_ref()?;
        self.blocking_lookup(question.clone(), Space::Full, threshold).await
    }

    /// Indexes `question` as answered by the entry `key`.
    pub fn insert(&self, question: &EmbeddedQuestion, tenant: &str, key: &str) -> Result<(), RegionalError> {
        self.cache.insert(
            &question.query(),
            tenant,
            question.embedding.as_deref(),
            question.small.as_deref(),
            key,
        )
    }

    /// Questions indexed.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Bytes the indexed questions cost, as the tier's bound counts them.
    pub fn bytes(&self) -> u64 {
        self.cache.bytes("").0
    }
}

/// Whether `text` has at most `limit` words, counted as the verifier reads them: whitespace-separated
/// words and every run of letters or digits within them (`a;b;c` is three), so that punctuation cannot
/// slip a long question past the limit.
fn at_most_words(text: &str, limit: usize) -> bool {
    let spaced = text.split_whitespace().nth(limit).is_none();
    spaced && text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).nth(limit).is_none()
}

#[cfg(test)]
mod tests {
    use super::at_most_words;

    #[test]
    fn the_word_limit_counts_whitespace_separated_words() {
        assert!(at_most_words("how do I  sort\na list", 6));
        assert!(!at_most_words("how do I sort a list", 4));
        assert!(at_most_words("", 0) && !at_most_words("hi", 0));
        assert!(at_most_words(&"word ".repeat(1000), usize::MAX));
        assert!(!at_most_words(&"a;".repeat(500), 48), "punctuation does not join words");
        assert!(at_most_words("what's 2+2?", 4));
    }
}
