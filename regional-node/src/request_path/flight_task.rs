//! The leader's work for a flight, on a task of its own so that it lands even if its client leaves:
//! the core's entry or a paraphrase's, else a generation through the core; a stale answer when no core
//! node can be reached.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use proto::cache::complete_event::Event;
use proto::cache::{CompleteDone, CompleteEvent, CompleteRequest};
use shared::completion::CachedCompletion;
use shared::server_timing::ServerTiming;
use tonic::Streaming;

use super::{elapsed_ms, Admitted, ClassTtl, RequestPath, X_CACHE_MISS, X_CACHE_STALE};
use crate::admission::predicted_cost;
use crate::clock::now_ms;
use crate::core_cache_client::STREAM_IDLE_TIMEOUT;
use crate::flight::{Flight, Outcome, Piece};
use crate::metrics::{AnsweredBy, CoreCall};
use crate::semantic::tier::EmbeddedQuestion;
use crate::RegionalError;

/// TTL asked of the core for an answer that must not be cached: the core commits every answer it
/// generates, and 0 would mean the tenant's default TTL (or none), so the entry is made to expire at once.
pub const UNCACHED_CORE_TTL_S: u64 = 1;

/// One flight's leader.
pub(super) struct FlightTask {
    path: Arc<RequestPath>,
    admitted: Admitted,
    flight: Arc<Flight>,
    /// Whether a delta went out (a stale answer can no longer replace the stream).
    streamed: AtomicBool,
}

impl Drop for FlightTask {
    /// A task that panicked, or was dropped before it landed, must not leave its key in the air: the
    /// followers would wait for good, and every later request for the key with them.
    fn drop(&mut self) {
        self.path.flights.abandon(self.admitted.key.as_str(), &self.flight);
    }
}

impl FlightTask {
    pub(super) fn new(path: Arc<RequestPath>, admitted: Admitted, flight: Arc<Flight>) -> Self {
        Self { path, admitted, flight, streamed: AtomicBool::new(false) }
    }

    /// Flies, lands the flight with what came of it, and takes it out of the air.
    pub(super) async fn run(self) {
        let outcome = self.fly().await;
        if outcome.as_ref().is_err_and(RegionalError::is_core_failure) {
            self.path.metrics.core_errors.inc();
        }
        if let Err(RegionalError::ModelVersionMoved(_)) = &outcome {
            // Refused after the answer began to stream (a core node that had not applied the bump let
            // the generation start): the next request learns the versions.
            self.path.models.refresh_soon();
        }
        // Out of the air before it lands: a request that follows one that saw the landing starts a
        // new flight instead of joining this one and getting its outcome again.
        self.path.flights.land(self.admitted.key.as_str(), &self.flight);
        self.flight.land(outcome.map_err(|e| e.to_request_error()));
    }

    /// The answer from the core, else (when no core node can be reached and nothing was streamed yet)
    /// the entry this node still holds within its stale grace, marked `STALE`.
    async fn fly(&self) -> Result<Outcome, RegionalError> {
        match self.fly_to_core().await {
            Err(error @ (RegionalError::CoreUnavailable(_) | RegionalError::CircuitOpen { .. }))
                if self.admitted.caching.lookup && !self.streamed.load(Ordering::Acquire) =>
            {
                let key = &self.admitted.key;
                let stale = self.path.cache.get_stale(key.as_str(), now_ms());
                // Only a view that caught up since the start vouches for what it has not invalidated;
                // invalidations made during the outage itself cannot reach it (README: STALE).
                let view = &self.path.view;
                let ours = |entry: &Arc<CachedCompletion>| entry.tenant == self.admitted.tenant;
                let Some(entry) =
                    stale.filter(|entry| ours(entry) && view.caught_up() && view.not_invalidated(entry))
                else {
                    return Err(error);
                };
                tracing::info!(%key, %error, "core out of reach: serving a stale answer");
                self.path.metrics.stale_served.inc();
                let mut timing = ServerTiming::default();
                timing.push_ms("regional", elapsed_ms(self.admitted.started));
                Ok(Outcome { entry, x_cache: X_CACHE_STALE, timing, semantic: None })
            }
            other => other,
        }
    }

    /// Core lookup, then the semantic tier, then generation (once admitted).
    async fn fly_to_core(&self) -> Result<Outcome, RegionalError> {
        let (path, admitted) = (&self.path, &self.admitted);
        let (found, question) = path.find_cached(admitted).await?;
        if let Some(outcome) = found {
            return Ok(outcome);
        }
        let lookup_ms = elapsed_ms(admitted.started);
        let _ticket = path.admission.admit(&admitted.tenant, predicted_cost(&admitted.request)).await?;
        path.metrics.misses.inc();
        match self.generate(admitted, question.as_ref(), lookup_ms).await {
            // The core moved the model to a version this node had not learned yet, and refused before
            // generating anything: learn the versions and generate once more under the new one (the
            // key, and the semantic partition, are the new version's; the old question is not indexed).
            Err(RegionalError::ModelVersionMoved(message)) if !self.streamed.load(Ordering::Acquire) => {
                if !path.models.refresh(&path.core).await.unwrap_or(false) {
                    return Err(RegionalError::ModelVersionMoved(message));
                }
                let Some(moved) = admitted.at_current_version(&path.models.current()) else {
                    return Err(RegionalError::ModelVersionMoved(message));
                };
                tracing::info!(model = %moved.request.model.name, version = moved.request.model.version, "generating under the model's new version");
                self.generate(&moved, None, lookup_ms).await
            }
            other => other,
        }
    }

    /// Generates `admitted` through the core, publishing the deltas to the flight, and keeps the answer
    /// (indexing `question` for paraphrases).
    async fn generate(
        &self,
        admitted: &Admitted,
        question: Option<&EmbeddedQuestion>,
        lookup_ms: f64,
    ) -> Result<Outcome, RegionalError> {
        let path = &self.path;
        let generate_started = Instant::now();
        path.metrics.core_calls.get(CoreCall::Complete).inc();
        // Generations are what a slow request is usually waiting for: each is logged with its trace.
        tracing::info!(trace_id = %admitted.trace.trace_id(), tenant = %admitted.tenant, key = %admitted.key, "generating at the core");
        let mut events = path.core.complete(complete_request(admitted), &admitted.trace).await?;
        while let Some(event) = next_event(&mut events).await? {
            match event.event {
                Some(Event::ChoiceDone(choice)) => {
                    self.flight.choice_end(choice.index, &choice.finish_reason)
                }
                Some(Event::Delta(delta)) => {
                    self.streamed.store(true, Ordering::Release);
                    let logprobs = admitted
                        .request
                        .sampling
                        .logprobs
                        .map(|_| delta.logprobs.into_iter().map(Into::into).collect());
                    self.flight.delta(Piece { choice: delta.index, text: delta.text, logprobs });
                    // Every client of the flight left: stop streaming here. The core finishes and
                    // keeps the answer, so the next request for the key finds it there.
                    if !self.flight.has_subscribers() {
                        path.metrics.flights_abandoned.inc();
                        let left = shared::RequestError::upstream(502, "every client of the flight left");
                        return Err(RegionalError::Request(left));
                    }
                }
                Some(Event::AutoChosen(chosen)) => {
                    tracing::info!(trace_id = %admitted.trace.trace_id(), model = %chosen.model, version = chosen.model_version, "auto chose the model");
                    self.flight.chosen_by_auto(&chosen.model);
                }
                Some(Event::Fallback(fallback)) => {
                    tracing::warn!(trace_id = %admitted.trace.trace_id(), model = %admitted.request.model.name, fallback = %fallback.model, reason = %fallback.reason, "the core answers with the fallback model");
                    path.metrics.fallbacks.inc();
                    self.flight.fall_back_to(&fallback.model);
                }
                Some(Event::Done(done)) => {
                    let entry = done
                        .entry
                        .clone()
                        .map(CachedCompletion::from)
                        .ok_or_else(|| RegionalError::Core("completion without an entry".into()))?
                        .answering(admitted.query());
                    if admitted.caching.store {
                        path.remember(entry.clone());
                        // The question was embedded in the asked model's partition; a fallback's answer
                        // is not that model's, so it is found by its own key only.
                        if self.flight.fallback_model().is_none() {
                            path.index_question(question, &entry.tenant, &entry.key);
                        }
                    }
                    let mut timing = ServerTiming::default();
                    timing
                        .push_ms("regional", elapsed_ms(admitted.started))
                        .push_ms("core-lookup", lookup_ms)
                        .push_ms("core", elapsed_ms(generate_started));
                    push_core_timings(&mut timing, &done);
                    path.metrics
                        .latency
                        .get(AnsweredBy::Miss)
                        .observe(admitted.started.elapsed().as_secs_f64());
                    return Ok(Outcome {
                        entry: Arc::new(entry),
                        x_cache: X_CACHE_MISS,
                        timing,
                        semantic: None,
                    });
                }
                None => {}
            }
        }
        Err(RegionalError::Core("the completion stream ended without a result".into()))
    }
}

/// The core's request for `admitted`: stored for its class's TTL unless its caching forbids storing, and
/// answered from the core's state only when its caching allows a lookup.
pub(super) fn complete_request(admitted: &Admitted) -> CompleteRequest {
    let ClassTtl { class, ttl_s } = admitted.class;
    let ttl_s = if admitted.caching.store { ttl_s } else { UNCACHED_CORE_TTL_S };
    let mut request = CompleteRequest::for_request(
        &admitted.tenant,
        &admitted.key,
        &admitted.request,
        class.as_str(),
        ttl_s,
    );
    request.fresh = !admitted.caching.lookup;
    request.no_store = !admitted.caching.store;
    request
}

/// The next event of a completion stream, failing if the core stays silent too long.
pub(super) async fn next_event(
    events: &mut Streaming<CompleteEvent>,
) -> Result<Option<CompleteEvent>, RegionalError> {
    match tokio::time::timeout(STREAM_IDLE_TIMEOUT, events.message()).await {
        Ok(event) => Ok(event?),
        Err(_) => {
            Err(RegionalError::CoreUnavailable("the core went silent in the middle of a completion".into()))
        }
    }
}

fn push_core_timings(timing: &mut ServerTiming, done: &CompleteDone) {
    if let Some(t) = &done.timings {
        timing
            .push_micros("pod-queue", t.queue_us)
            .push_micros("pod-prefill", t.prefill_us)
            .push_micros("pod-decode", t.decode_us);
    }
    timing.push_micros("raft-commit", done.commit_us);
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use shared::content_class::{ContentClass, TtlPolicy};
    use shared::models::ModelRef;
    use shared::normalize::{ChatRole, Message, NormalizedRequest, Sampling};

    use super::*;
    use crate::request_path::admitted::Directives;

    fn core_request(text: &str, policy: &TtlPolicy) -> CompleteRequest {
        let request = NormalizedRequest {
            model: ModelRef { name: "m".into(), version: 3 },
            messages: vec![Message { role: ChatRole::User, content: text.into() }],
            sampling: Sampling::greedy(16),
            delivery: shared::openai::Delivery::Whole,
            api: shared::model_spec::ModelApi::Chat,
            echo: false,
            tags: Vec::new(),
        };
        complete_request(&Admitted::new(
            "t".into(),
            request,
            policy,
            false,
            Directives::default(),
            Instant::now(),
        ))
    }

    #[test]
    fn the_core_gets_the_class_and_its_ttl() {
        let policy = TtlPolicy { volatile_s: 120, default_s: 1_800, stable_s: 7 * 86_400 };
        let stable = core_request("What is a monad?", &policy);
        assert_eq!((stable.content_class.as_str(), stable.ttl_s), ("stable", 604_800));
        let volatile = core_request("EUR to USD exchange rate", &policy);
        assert_eq!((volatile.content_class.as_str(), volatile.ttl_s), ("volatile", 120));
        let default = core_request("Write a haiku about autumn", &policy);
        assert_eq!((default.content_class.as_str(), default.ttl_s), ("default", 1_800));
        assert_eq!(default.model_version, 3);
    }

    #[test]
    fn realtime_answers_expire_at_the_core_at_once() {
        let realtime = core_request("What's the weather right now?", &TtlPolicy::default());
        assert_eq!(realtime.content_class, ContentClass::Realtime.as_str());
        assert_eq!(realtime.ttl_s, UNCACHED_CORE_TTL_S);
        assert_ne!(realtime.ttl_s, 0, "0 would take the tenant's default TTL at the core");
        assert!(realtime.fresh && realtime.no_store, "never answered from, nor stored at, the core");
    }
}
