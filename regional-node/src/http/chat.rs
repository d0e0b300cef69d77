//! `POST /v1/chat/completions`: regional cache, then the core's state, then generation through the core.
//!
//! Each request is classified ([`shared::content_class`]) and cached for its class's TTL. A realtime
//! request is never answered from a cache and its answer is never stored here; it is still generated
//! through the core, which always commits what it generates, so it is sent with [`UNCACHED_CORE_TTL_S`]
//! and expires there at once (TTL 0 would mean the tenant's default, or no expiry).

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use proto::cache::complete_event::Event;
use proto::cache::{CompleteDone, CompleteEvent, CompleteRequest};
use shared::cache_key::{CacheKey, SemanticQuery};
use shared::completion::{CachedCompletion, StreamHead};
use shared::content_class::classify;
use shared::normalize::{normalize, NormalizedRequest};
use shared::openai::{parse_chat_request, SSE_DONE};
use shared::server_timing::ServerTiming;
use shared::{RequestError, MAX_REQUEST_BYTES};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tracing::Instrument as _;

use super::respond::{
    cache_headers, entry_response, mark_coalesced, semantic_headers, with_headers, ClassTtl, EVENT_STREAM,
    X_CACHE_SEMANTIC, X_CACHE_STALE,
};
use crate::admission::predicted_cost;
use crate::caller::resolve_tenant;
use crate::core_client::STREAM_IDLE_TIMEOUT;
use crate::error::error_response;
use crate::flight::{Flight, FlightItem, Joined, Outcome, Subscription};
use crate::semantic_cache::SemanticHit;
use crate::semantic_tier::EmbeddedQuestion;
use crate::server::{now_ms, AppState};
use crate::RegionalError;

/// A request that passed authentication and validation.
struct Admitted {
    tenant: String,
    request: NormalizedRequest,
    key: CacheKey,
    /// The request's content class and the TTL it gets.
    class: ClassTtl,
    /// `Cache-Control: only-if-cached`: answer from a cache or not at all (504), never generate.
    only_if_cached: bool,
}

/// The handler.
pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    state.metrics.requests.inc();
    let admitted = match admit(&state, &headers, body).await {
        Ok(admitted) => admitted,
        Err(error) => {
            state.metrics.rejected.inc();
            return error_response(&error);
        }
    };
    let span = tracing::debug_span!(
        "chat",
        tenant = %admitted.tenant,
        key = %admitted.key,
        class = admitted.class.class.as_str()
    );
    match answer(&state, admitted, started).instrument(span).await {
        Ok(response) => response,
        Err(error) => {
            if matches!(error, RegionalError::CoreUnavailable(_) | RegionalError::Core(_)) {
                state.metrics.core_errors.inc();
            }
            error.into_response()
        }
    }
}

async fn admit(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Admitted, RequestError> {
    let tenant = resolve_tenant(headers, &state.settings.tenants, &state.settings.tier_secret)?;
    let bytes = axum::body::to_bytes(body, MAX_REQUEST_BYTES)
        .await
        .map_err(|_| RequestError::too_large(MAX_REQUEST_BYTES))?;
    let parsed = parse_chat_request(&bytes, MAX_REQUEST_BYTES)?;
    let request = normalize(&parsed, &state.settings.models, &state.limits)?;
    let key = CacheKey::derive(&tenant, &request);
    let class = ClassTtl::new(classify(&request), &state.settings.ttl);
    let only_if_cached = headers
        .get_all(axum::http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|directive| directive.trim().eq_ignore_ascii_case("only-if-cached"));
    Ok(Admitted { tenant, request, key, class, only_if_cached })
}

async fn answer(
    state: &Arc<AppState>,
    admitted: Admitted,
    started: Instant,
) -> Result<Response, RegionalError> {
    let Admitted { tenant, request, key, class, only_if_cached } = admitted;
    let (cached, hot) = if class.cacheable() {
        let hot = Some(state.replication.touch(key.as_str()));
        (state.cache.get(key.as_str(), now_ms()), hot)
    } else {
        (None, None)
    };
    if let Some(entry) = cached {
        if let Some(hot) = hot {
            state.replication.offer(&entry, Some(hot), now_ms());
        }
        state.metrics.hits_regional.inc();
        let mut timing = ServerTiming::default();
        timing.push_ms("regional", elapsed_ms(started));
        state.metrics.latency_hit_regional.observe(started.elapsed().as_secs_f64());
        return Ok(entry_response(
            &entry,
            request.stream,
            cache_headers("HIT-REGIONAL", key.as_str(), &timing, class, Some(&entry)),
        ));
    }

    if only_if_cached {
        // Looks, never generates, and so never leads or follows a flight that might.
        let (found, _) = find_cached(state, &tenant, &request, &key, class, started).await?;
        let outcome = found.ok_or_else(|| {
            RequestError::gateway_timeout("not cached, and the request said only-if-cached")
        })?;
        return Ok(outcome_response(&outcome, request.stream, &key, class, false));
    }

    // Identical concurrent misses share one flight to the core; an answer that must not be cached
    // (realtime) is generated for each request.
    let (flight, leader) = if class.cacheable() {
        match state.flights.join(key.as_str()) {
            Joined::Leader(flight) => (flight, true),
            Joined::Follower(flight) => (flight, false),
        }
    } else {
        (Arc::new(Flight::new()), true)
    };
    if leader {
        let task = FlightTask {
            state: Arc::clone(state),
            tenant,
            request: request.clone(),
            key: key.clone(),
            class,
            started,
            flight: Arc::clone(&flight),
            streamed: AtomicBool::new(false),
        };
        tokio::spawn(task.run());
    } else {
        state.metrics.coalesced.inc();
    }
    respond(flight.subscribe(), &request, &key, class, !leader).await
}

/// The core's entry under the key, else a verified paraphrase's; also the request's embedded
/// question, for indexing once the answer exists.
async fn find_cached(
    state: &AppState,
    tenant: &str,
    request: &NormalizedRequest,
    key: &CacheKey,
    class: ClassTtl,
    started: Instant,
) -> Result<(Option<Outcome>, Option<EmbeddedQuestion>), RegionalError> {
    if !class.cacheable() {
        return Ok((None, None));
    }
    let lookup_started = Instant::now();
    state.metrics.core_lookups.inc();
    let found = state.core.lookup(key.as_str(), tenant).await?;
    let lookup_ms = elapsed_ms(lookup_started);
    if let Some(entry) = found.filter(|e| !e.is_expired(now_ms()) && e.key == key.as_str()) {
        let entry = entry.answering(SemanticQuery::derive(tenant, request));
        state.remember(entry.clone());
        state.metrics.hits_core.inc();
        let mut timing = ServerTiming::default();
        timing.push_ms("regional", elapsed_ms(started)).push_ms("core-lookup", lookup_ms);
        state.metrics.latency_hit_core.observe(started.elapsed().as_secs_f64());
        let outcome = Outcome { entry: Arc::new(entry), x_cache: "HIT-CORE", timing, semantic: None };
        return Ok((Some(outcome), None));
    }
    let question = embedded_question(state, tenant, request, class).await;
    let Some(embedded) = &question else { return Ok((None, None)) };
    let found = semantic_hit(state, tenant, class, embedded).await?.map(|(entry, hit)| {
        let mut timing = ServerTiming::default();
        timing.push_ms("regional", elapsed_ms(started)).push_ms("core-lookup", lookup_ms);
        state.metrics.latency_hit_semantic.observe(started.elapsed().as_secs_f64());
        Outcome { entry, x_cache: X_CACHE_SEMANTIC, timing, semantic: Some(hit) }
    });
    Ok((found, question))
}

/// The request's last user turn, embedded, when the semantic tier is on and the request may be
/// answered semantically; an embedding failure only skips the tier.
async fn embedded_question(
    state: &AppState,
    tenant: &str,
    request: &NormalizedRequest,
    class: ClassTtl,
) -> Option<EmbeddedQuestion> {
    let tier = state.semantic.as_ref()?;
    tier.threshold(class.class).filter(|_| class.cacheable())?;
    let query = SemanticQuery::derive(tenant, request)?;
    match tier.embed(&query).await {
        Ok(question) => Some(question),
        Err(error) => {
            tracing::warn!(%error, "semantic tier skipped");
            None
        }
    }
}

/// The live entry of a cached paraphrase that passes the class's threshold and the verifier (from
/// the exact cache, else from the core), with what matched.
async fn semantic_hit(
    state: &AppState,
    tenant: &str,
    class: ClassTtl,
    question: &EmbeddedQuestion,
) -> Result<Option<(Arc<CachedCompletion>, SemanticHit)>, RegionalError> {
    let Some(tier) = &state.semantic else { return Ok(None) };
    let Some(threshold) = tier.threshold(class.class) else { return Ok(None) };
    let Some(hit) = tier.lookup(question, threshold) else {
        state.metrics.semantic_misses.inc();
        return Ok(None);
    };
    let now = now_ms();
    let entry = match state.cache.get(&hit.key, now) {
        Some(entry) => Some(entry),
        None => {
            state.metrics.core_lookups.inc();
            let found = state.core.lookup(&hit.key, tenant).await?;
            found.filter(|e| !e.is_expired(now) && e.key == hit.key).map(|entry| {
                state.remember(entry.clone());
                Arc::new(entry)
            })
        }
    };
    match entry {
        Some(entry) => {
            state.metrics.hits_semantic.inc();
            Ok(Some((entry, hit)))
        }
        None => {
            state.metrics.semantic_misses.inc();
            Ok(None)
        }
    }
}

/// Indexes a generated answer's question, so that its paraphrases hit.
fn index_question(state: &AppState, question: Option<&EmbeddedQuestion>, key: &str) {
    if let (Some(tier), Some(question)) = (&state.semantic, question) {
        if let Err(error) = tier.insert(question, key) {
            tracing::warn!(%error, "question not indexed");
        }
    }
}

/// A flight's answer as this request asked for it.
fn outcome_response(
    outcome: &Outcome,
    stream: bool,
    key: &CacheKey,
    class: ClassTtl,
    coalesced: bool,
) -> Response {
    let mut headers =
        cache_headers(outcome.x_cache, key.as_str(), &outcome.timing, class, Some(&outcome.entry));
    if let Some(hit) = &outcome.semantic {
        semantic_headers(&mut headers, hit);
    }
    if coalesced {
        mark_coalesced(&mut headers);
    }
    entry_response(&outcome.entry, stream, headers)
}

/// Answers one request from its flight: the whole answer once it has landed, or (streaming, when
/// the flight generates) each delta as it comes.
async fn respond(
    mut subscription: Subscription,
    request: &NormalizedRequest,
    key: &CacheKey,
    class: ClassTtl,
    coalesced: bool,
) -> Result<Response, RegionalError> {
    if !request.stream {
        let outcome = subscription.landed().await?;
        return Ok(outcome_response(&outcome, false, key, class, coalesced));
    }
    let first = match subscription.next().await {
        Some(FlightItem::Landed(outcome)) => {
            return Ok(outcome_response(&outcome?, true, key, class, coalesced));
        }
        Some(FlightItem::Delta(text)) => text,
        None => return Err(RequestError::upstream(502, "the answer's flight ended without one").into()),
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    let head =
        StreamStart { id: key.completion_id(), created: now_ms() / 1000, model: request.model.name.clone() };
    tokio::spawn(head.relay(first, subscription, tx));
    let mut headers = cache_headers("MISS", key.as_str(), &ServerTiming::default(), class, None);
    if coalesced {
        mark_coalesced(&mut headers);
    }
    Ok(with_headers(StatusCode::OK, EVENT_STREAM, Body::from_stream(ReceiverStream::new(rx)), headers))
}

/// The leader's work for a flight, on a task of its own so that it lands even if its client leaves.
struct FlightTask {
    state: Arc<AppState>,
    tenant: String,
    request: NormalizedRequest,
    key: CacheKey,
    class: ClassTtl,
    started: Instant,
    flight: Arc<Flight>,
    /// Whether a delta went out (a stale answer can no longer replace the stream).
    streamed: AtomicBool,
}

impl FlightTask {
    async fn run(self) {
        let outcome = self.fly().await;
        if let Err(error) = &outcome {
            if matches!(error, RegionalError::CoreUnavailable(_) | RegionalError::Core(_)) {
                self.state.metrics.core_errors.inc();
            }
        }
        self.flight.land(outcome.map_err(|e| e.to_request_error()));
        self.state.flights.land(self.key.as_str(), &self.flight);
    }

    /// The answer from the core, else (when no core node can be reached and nothing was streamed yet)
    /// the entry this node still holds within its stale grace, marked `STALE`.
    async fn fly(&self) -> Result<Outcome, RegionalError> {
        match self.fly_to_core().await {
            Err(error @ (RegionalError::CoreUnavailable(_) | RegionalError::CircuitOpen { .. }))
                if self.class.cacheable() && !self.streamed.load(Ordering::Acquire) =>
            {
                let Some(entry) = self.state.cache.get_stale(self.key.as_str(), now_ms()) else {
                    return Err(error);
                };
                tracing::info!(key = %self.key, %error, "core out of reach: serving a stale answer");
                self.state.metrics.stale_served.inc();
                let mut timing = ServerTiming::default();
                timing.push_ms("regional", elapsed_ms(self.started));
                Ok(Outcome { entry, x_cache: X_CACHE_STALE, timing, semantic: None })
            }
            other => other,
        }
    }

    /// Core lookup, then the semantic tier, then generation (once admitted).
    async fn fly_to_core(&self) -> Result<Outcome, RegionalError> {
        let (state, class) = (&self.state, self.class);
        let (found, question) =
            find_cached(state, &self.tenant, &self.request, &self.key, class, self.started).await?;
        if let Some(outcome) = found {
            return Ok(outcome);
        }
        let lookup_ms = elapsed_ms(self.started);
        let _ticket = state.admission.admit(predicted_cost(&self.request)).await?;
        state.metrics.misses.inc();
        let generate_started = Instant::now();
        state.metrics.core_completions.inc();
        let mut events =
            state.core.complete(complete_request(&self.tenant, &self.key, &self.request, class)).await?;
        while let Some(event) = next_event(&mut events).await? {
            match event.event {
                Some(Event::Delta(delta)) => {
                    self.streamed.store(true, Ordering::Release);
                    self.flight.delta(&delta.text);
                }
                Some(Event::Done(done)) => {
                    let entry = done
                        .entry
                        .clone()
                        .map(CachedCompletion::from)
                        .ok_or_else(|| RegionalError::Core("completion without an entry".into()))?
                        .answering(SemanticQuery::derive(&self.tenant, &self.request));
                    if class.cacheable() {
                        state.remember(entry.clone());
                        index_question(state, question.as_ref(), &entry.key);
                    }
                    let mut timing = ServerTiming::default();
                    timing
                        .push_ms("regional", elapsed_ms(self.started))
                        .push_ms("core-lookup", lookup_ms)
                        .push_ms("core", elapsed_ms(generate_started));
                    push_core_timings(&mut timing, &done);
                    state.metrics.latency_miss.observe(self.started.elapsed().as_secs_f64());
                    return Ok(Outcome { entry: Arc::new(entry), x_cache: "MISS", timing, semantic: None });
                }
                None => {}
            }
        }
        Err(RegionalError::Core("the completion stream ended without a result".into()))
    }
}

/// What a streamed answer's chunks carry.
struct StreamStart {
    id: String,
    created: i64,
    model: String,
}

impl StreamStart {
    /// Sends a flight's deltas as OpenAI SSE chunks, then the finish chunk and `[DONE]` (or an
    /// error event if the flight failed).
    async fn relay(
        self,
        first: Arc<str>,
        mut subscription: Subscription,
        tx: mpsc::Sender<Result<Bytes, Infallible>>,
    ) {
        let head = StreamHead { id: &self.id, created: self.created, model: &self.model };
        let send = |text: String| {
            let tx = tx.clone();
            async move { tx.send(Ok(Bytes::from(text))).await.is_ok() }
        };
        if !send(head.role_chunk()).await || !send(head.content_chunk(&first)).await {
            return;
        }
        while let Some(item) = subscription.next().await {
            match item {
                FlightItem::Delta(text) => {
                    if !send(head.content_chunk(&text)).await {
                        return;
                    }
                }
                FlightItem::Landed(Ok(outcome)) => {
                    send(head.finish_chunk(&outcome.entry.finish_reason)).await;
                    send(SSE_DONE.to_owned()).await;
                    return;
                }
                FlightItem::Landed(Err(error)) => {
                    send(format!("data: {}\n\n", error.to_json())).await;
                    return;
                }
            }
        }
        let error = RequestError::upstream(502, "the completion stream was interrupted");
        send(format!("data: {}\n\n", error.to_json())).await;
    }
}

/// TTL asked of the core for an answer that must not be cached: the core commits every answer it
/// generates, and 0 would mean the tenant's default TTL (or none), so the entry is made to expire at once.
pub const UNCACHED_CORE_TTL_S: u64 = 1;

fn complete_request(
    tenant: &str,
    key: &CacheKey,
    request: &NormalizedRequest,
    class: ClassTtl,
) -> CompleteRequest {
    let ttl_s = if class.cacheable() { class.ttl_s } else { UNCACHED_CORE_TTL_S };
    CompleteRequest::for_request(tenant, key, request, class.class.as_str(), ttl_s)
}

/// The next event of a completion stream, failing if the core stays silent too long.
async fn next_event(events: &mut Streaming<CompleteEvent>) -> Result<Option<CompleteEvent>, RegionalError> {
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

fn elapsed_ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use shared::content_class::{ContentClass, TtlPolicy};
    use shared::models::ModelRef;
    use shared::normalize::{Message, Role, Sampling};

    use super::*;

    fn request(text: &str) -> NormalizedRequest {
        NormalizedRequest {
            model: ModelRef { name: "m".into(), version: 3 },
            messages: vec![Message { role: Role::User, content: text.into() }],
            sampling: Sampling { max_tokens: 16, temperature: 0.0, top_p: 1.0, seed: None, stop: vec![] },
            stream: false,
        }
    }

    fn core_request(text: &str, policy: &TtlPolicy) -> CompleteRequest {
        let request = request(text);
        let key = CacheKey::derive("t", &request);
        complete_request("t", &key, &request, ClassTtl::new(classify(&request), policy))
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
    }
}
