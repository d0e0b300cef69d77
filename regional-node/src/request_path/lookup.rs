//! Looking for an answer without generating one: the core's entry under the key, else a verified
//! paraphrase's entry from the semantic tier.

use std::sync::Arc;
use std::time::Instant;

use shared::completion::CachedCompletion;
use shared::server_timing::ServerTiming;
use shared::RequestError;

use super::{elapsed_ms, Admitted, RequestPath, X_CACHE_CORE, X_CACHE_SEMANTIC};
use crate::clock::now_ms;
use crate::flight::Outcome;
use crate::metrics::{AnsweredBy, CoreCall, HitTier};
use crate::semantic::cache::SemanticHit;
use crate::semantic::tier::EmbeddedQuestion;
use crate::RegionalError;

impl RequestPath {
    /// The core's entry under the key, else a verified paraphrase's; also the request's embedded
    /// question, for indexing once the answer exists.
    pub(super) async fn find_cached(
        &self,
        admitted: &Admitted,
    ) -> Result<(Option<Outcome>, Option<EmbeddedQuestion>), RegionalError> {
        if !admitted.caching.lookup {
            return Ok((None, None));
        }
        let key = admitted.key.as_str();
        let lookup_started = Instant::now();
        self.core_lookups.take(&admitted.tenant, lookup_started).map_err(|retry_after_s| {
            self.metrics.lookups_refused.inc();
            RegionalError::Request(RequestError::overloaded(
                "too many cache lookups from this tenant",
                retry_after_s,
            ))
        })?;
        self.metrics.core_calls.get(CoreCall::Lookup).inc();
        let found = self.core.lookup(key, &admitted.tenant).await?;
        let lookup_ms = elapsed_ms(lookup_started);
        // A core node behind this node's view of the feed may still hold what the feed invalidated.
        let found = found.filter(|e| !e.is_expired(now_ms()) && e.key == key && self.view.admits(e));
        if let Some(entry) = found {
            let entry = entry.answering(admitted.query());
            self.remember(entry.clone());
            self.metrics.hits.get(HitTier::Core).inc();
            self.metrics.tokens_avoided.add(entry.completion_tokens.into());
            let mut timing = ServerTiming::default();
            timing.push_ms("regional", elapsed_ms(admitted.started)).push_ms("core-lookup", lookup_ms);
            self.metrics.latency.get(AnsweredBy::Core).observe(admitted.started.elapsed().as_secs_f64());
            let outcome = Outcome { entry: Arc::new(entry), x_cache: X_CACHE_CORE, timing, semantic: None };
            return Ok((Some(outcome), None));
        }
        let Some(question) = self.semantic_question(admitted) else { return Ok((None, None)) };
        // A tenant trying its thresholds two ways: the request's arm, and what it adds to them.
        let arm = self.semantic.as_ref().and_then(|t| t.experiments().arm(&admitted.tenant, &admitted.key));
        let delta = arm.map_or(0.0, |(_, delta)| delta);
        // A paraphrase found by the small embedding is served without running MiniLM at all.
        let quick = match self.quick_hit(admitted, &question, delta).await {
            Some(hit) => self.entry_of(admitted, hit).await?,
            None => None,
        };
        let (found, question) = match quick {
            Some(found) => (Some(found), None),
            None => match self.with_minilm(admitted, question).await {
                Some(embedded) => (self.semantic_hit(admitted, &embedded, delta).await?, Some(embedded)),
                None => (None, None),
            },
        };
        if let (Some(tier), Some((arm, _))) = (&self.semantic, arm) {
            tier.experiments().record_lookup(&admitted.tenant, arm, found.is_some());
        }
        let found = found.map(|(entry, hit)| {
            self.audit_hit(admitted, &entry, arm.map(|(arm, _)| arm));
            let mut timing = ServerTiming::default();
            timing.push_ms("regional", elapsed_ms(admitted.started)).push_ms("core-lookup", lookup_ms);
            self.metrics.latency.get(AnsweredBy::Semantic).observe(admitted.started.elapsed().as_secs_f64());
            Outcome { entry, x_cache: X_CACHE_SEMANTIC, timing, semantic: Some(hit) }
        });
        Ok((found, question))
    }

    /// The request's last user turn with its small embedding, when the semantic tier is on, the request
    /// may be answered semantically and the tier covers the question.
    fn semantic_question(&self, admitted: &Admitted) -> Option<EmbeddedQuestion> {
        let tier = self.semantic.as_ref()?;
        tier.threshold_for(&admitted.tenant, admitted.class.class).filter(|_| admitted.caching.lookup)?;
        tier.question(&admitted.query()?)
    }

    /// `question` with its MiniLM embedding when the tier uses one, the forward run within the tenant's
    /// share ([`super::embedding_share`]); an embedding failure only skips the tier.
    async fn with_minilm(&self, admitted: &Admitted, question: EmbeddedQuestion) -> Option<EmbeddedQuestion> {
        let tier = self.semantic.as_ref()?;
        let _forward = match question.embedding.is_some() || !tier.embeds_with_minilm() {
            true => None,
            false => self.embedding_share.take(&admitted.tenant).await,
        };
        match tier.with_minilm(question).await {
            Ok(question) => Some(question),
            Err(error) => {
                tracing::warn!(%error, "semantic tier skipped");
                None
            }
        }
    }

    /// A cached paraphrase found by the question's small embedding that the verifier accepts.
    async fn quick_hit(
        &self,
        admitted: &Admitted,
        question: &EmbeddedQuestion,
        delta: f32,
    ) -> Option<SemanticHit> {
        self.semantic.as_ref()?.quick_lookup(question, &admitted.tenant, admitted.class.class, delta).await
    }

    /// The live entry of a cached paraphrase that passes the class's threshold (moved by `delta`, the
    /// request's experiment arm's) and the verifier (from the exact cache, else from the core), with
    /// what matched.
    async fn semantic_hit(
        &self,
        admitted: &Admitted,
        question: &EmbeddedQuestion,
        delta: f32,
    ) -> Result<Option<(Arc<CachedCompletion>, SemanticHit)>, RegionalError> {
        let Some(tier) = &self.semantic else { return Ok(None) };
        let Some(threshold) = tier.threshold_for(&admitted.tenant, admitted.class.class) else {
            return Ok(None);
        };
        let threshold = (threshold + delta).clamp(0.0, 1.0);
        let Some(hit) = tier.lookup(question, threshold).await else {
            self.metrics.semantic_misses.inc();
            return Ok(None);
        };
        let found = self.entry_of(admitted, hit).await?;
        if found.is_none() {
            self.metrics.semantic_misses.inc();
        }
        Ok(found)
    }

    /// The live entry `hit` names (from the exact cache, else from the core), counted as a semantic
    /// hit when there is one.
    async fn entry_of(
        &self,
        admitted: &Admitted,
        hit: SemanticHit,
    ) -> Result<Option<(Arc<CachedCompletion>, SemanticHit)>, RegionalError> {
        let now = now_ms();
        let entry = match self.cached(&hit.key, &admitted.tenant, now) {
            Some(entry) => Some(entry),
            None => {
                self.metrics.core_calls.get(CoreCall::Lookup).inc();
                let found = self.core.lookup(&hit.key, &admitted.tenant).await?;
                let admitted_entry =
                    |e: &CachedCompletion| !e.is_expired(now) && e.key == hit.key && self.view.admits(e);
                found.filter(admitted_entry).map(|entry| {
                    self.remember(entry.clone());
                    Arc::new(entry)
                })
            }
        };
        if let Some(entry) = &entry {
            self.metrics.hits.get(HitTier::Semantic).inc();
            self.metrics.tokens_avoided.add(entry.completion_tokens.into());
        }
        Ok(entry.map(|entry| (entry, hit)))
    }

    /// Indexes a generated answer's question, so that its paraphrases hit.
    pub(super) fn index_question(&self, question: Option<&EmbeddedQuestion>, tenant: &str, key: &str) {
        if let (Some(tier), Some(question)) = (&self.semantic, question) {
            if let Err(error) = tier.insert(question, tenant, key) {
                tracing::warn!(%error, "question not indexed");
            }
        }
    }
}
