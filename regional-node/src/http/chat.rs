//! `POST /v1/chat/completions`: regional cache, then the core's state, then generation through the core.
//!
//! Each request is classified ([`shared::content_class`]) and cached for its class's TTL. A realtime
//! request is never answered from a cache and its answer is never stored here; it is still generated
//! through the core, which always commits what it generates, so it is sent with [`UNCACHED_CORE_TTL_S`]
//! and expires there at once (TTL 0 would mean the tenant's default, or no expiry).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use proto::cache::complete_event::Event;
use proto::cache::{CompleteDone, CompleteEvent, CompleteRequest};
use proto::inference::{ChatMessage, GenerateRequest, Sampling};
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
    cache_headers, entry_response, semantic_headers, with_headers, ClassTtl, EVENT_STREAM, X_CACHE_SEMANTIC,
};
use crate::caller::resolve_tenant;
use crate::core_client::STREAM_IDLE_TIMEOUT;
use crate::error::error_response;
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
    let tenant = resolve_tenant(headers, &state.settings.tenants, &state.settings.tier_secret.0)?;
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
    let cached = if class.cacheable() { state.cache.get(key.as_str(), now_ms()) } else { None };
    if let Some(entry) = cached {
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

    let lookup_started = Instant::now();
    let found = if class.cacheable() { state.core.lookup(key.as_str(), &tenant).await? } else { None };
    let lookup_ms = elapsed_ms(lookup_started);
    if let Some(entry) = found.filter(|e| !e.is_expired(now_ms()) && e.key == key.as_str()) {
        state.remember(entry.clone());
        state.metrics.hits_core.inc();
        let mut timing = ServerTiming::default();
        timing.push_ms("regional", elapsed_ms(started)).push_ms("core-lookup", lookup_ms);
        state.metrics.latency_hit_core.observe(started.elapsed().as_secs_f64());
        return Ok(entry_response(
            &entry,
            request.stream,
            cache_headers("HIT-CORE", key.as_str(), &timing, class, Some(&entry)),
        ));
    }

    let semantic = embedded_question(state, &tenant, &request, class).await;
    if let Some(question) = &semantic {
        if let Some(response) = semantic_hit(state, &tenant, &request, &key, class, question, started).await?
        {
            return Ok(response);
        }
    }

    if only_if_cached {
        return Err(RequestError::gateway_timeout("not cached, and the request said only-if-cached").into());
    }
    state.metrics.misses.inc();
    let generate_started = Instant::now();
    let events = state.core.complete(complete_request(&tenant, &key, &request, class)).await?;
    if request.stream {
        let clock = MissClock { started, lookup_ms };
        return Ok(stream_miss(state, events, &key, &request, class, clock, semantic));
    }
    let done = last_event(events).await?;
    let entry = done
        .entry
        .clone()
        .map(CachedCompletion::from)
        .ok_or_else(|| RegionalError::Core("completion without an entry".into()))?;
    if class.cacheable() {
        state.remember(entry.clone());
        index_question(state, semantic.as_ref(), &entry.key);
    }
    let mut timing = ServerTiming::default();
    timing
        .push_ms("regional", elapsed_ms(started))
        .push_ms("core-lookup", lookup_ms)
        .push_ms("core", elapsed_ms(generate_started));
    push_core_timings(&mut timing, &done);
    state.metrics.latency_miss.observe(started.elapsed().as_secs_f64());
    Ok(entry_response(&entry, false, cache_headers("MISS", key.as_str(), &timing, class, Some(&entry))))
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

/// Answers from the entry of a cached paraphrase, if the semantic tier finds one that passes the
/// class's threshold and the verifier and its entry is still live (here or at the core).
async fn semantic_hit(
    state: &AppState,
    tenant: &str,
    request: &NormalizedRequest,
    key: &CacheKey,
    class: ClassTtl,
    question: &EmbeddedQuestion,
    started: Instant,
) -> Result<Option<Response>, RegionalError> {
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
            let found = state.core.lookup(&hit.key, tenant).await?;
            found.filter(|e| !e.is_expired(now) && e.key == hit.key).map(|entry| {
                state.remember(entry.clone());
                Arc::new(entry)
            })
        }
    };
    let Some(entry) = entry else {
        state.metrics.semantic_misses.inc();
        return Ok(None);
    };
    state.metrics.hits_semantic.inc();
    let mut timing = ServerTiming::default();
    timing.push_ms("regional", elapsed_ms(started));
    state.metrics.latency_hit_semantic.observe(started.elapsed().as_secs_f64());
    let mut headers = cache_headers(X_CACHE_SEMANTIC, key.as_str(), &timing, class, Some(&entry));
    semantic_headers(&mut headers, &hit);
    Ok(Some(entry_response(&entry, request.stream, headers)))
}

/// Indexes a generated answer's question, so that its paraphrases hit.
fn index_question(state: &AppState, question: Option<&EmbeddedQuestion>, key: &str) {
    if let (Some(tier), Some(question)) = (&state.semantic, question) {
        if let Err(error) = tier.insert(question, key) {
            tracing::warn!(%error, "question not indexed");
        }
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
    let sampling = &request.sampling;
    CompleteRequest {
        key: key.as_str().to_owned(),
        model_version: request.model.version,
        ttl_s: if class.cacheable() { class.ttl_s } else { UNCACHED_CORE_TTL_S },
        content_class: class.class.as_str().to_owned(),
        generate: Some(GenerateRequest {
            request_id: key.completion_id(),
            tenant: tenant.to_owned(),
            model: request.model.name.clone(),
            messages: request
                .messages
                .iter()
                .map(|m| ChatMessage { role: m.role.as_str().to_owned(), content: m.content.clone() })
                .collect(),
            sampling: Some(Sampling {
                max_tokens: sampling.max_tokens,
                temperature: sampling.temperature,
                top_p: sampling.top_p,
                seed: sampling.seed,
                stop: sampling.stop.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

/// Reads a completion stream to its `Done` event.
async fn last_event(mut events: Streaming<CompleteEvent>) -> Result<CompleteDone, RegionalError> {
    while let Some(event) = next_event(&mut events).await? {
        if let Some(Event::Done(done)) = event.event {
            return Ok(done);
        }
    }
    Err(RegionalError::Core("the completion stream ended without a result".into()))
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

/// When a miss's request arrived, and how long its core lookup took.
#[derive(Debug, Clone, Copy)]
struct MissClock {
    started: Instant,
    lookup_ms: f64,
}

/// Streams a miss to the client as it is generated. The entry is stored in the regional cache (unless its
/// class is not cacheable) before `[DONE]` is sent, so a client (or the edge) that asks again after the
/// stream ends gets a hit.
fn stream_miss(
    state: &Arc<AppState>,
    events: Streaming<CompleteEvent>,
    key: &CacheKey,
    request: &NormalizedRequest,
    class: ClassTtl,
    clock: MissClock,
    question: Option<EmbeddedQuestion>,
) -> Response {
    let MissClock { started, lookup_ms } = clock;
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    let relay = Relay {
        state: Arc::clone(state),
        id: key.completion_id(),
        created: now_ms() / 1000,
        model: request.model.name.clone(),
        cacheable: class.cacheable(),
        question,
    };
    tokio::spawn(async move { relay.run(events, tx, started).await });
    let mut timing = ServerTiming::default();
    timing.push_ms("regional", elapsed_ms(started)).push_ms("core-lookup", lookup_ms);
    let body = Body::from_stream(ReceiverStream::new(rx));
    with_headers(
        StatusCode::OK,
        EVENT_STREAM,
        body,
        cache_headers("MISS", key.as_str(), &timing, class, None),
    )
}

/// Relays a core completion stream as OpenAI SSE chunks.
struct Relay {
    state: Arc<AppState>,
    id: String,
    created: i64,
    model: String,
    /// Whether the finished entry goes into the regional cache.
    cacheable: bool,
    /// The request's embedded question, indexed once the entry exists.
    question: Option<EmbeddedQuestion>,
}

impl Relay {
    async fn run(
        self,
        mut events: Streaming<CompleteEvent>,
        tx: mpsc::Sender<Result<Bytes, Infallible>>,
        started: Instant,
    ) {
        let head = StreamHead { id: &self.id, created: self.created, model: &self.model };
        // A client that went away stops receiving, but the stream is still read so the entry gets cached.
        let send = |text: String| {
            let tx = tx.clone();
            async move { tx.send(Ok(Bytes::from(text))).await.is_ok() }
        };
        send(head.role_chunk()).await;
        let mut finished = false;
        loop {
            match next_event(&mut events).await.map(|e| e.map(|e| e.event)) {
                Ok(None) => break,
                Ok(Some(Some(Event::Delta(delta)))) => {
                    send(head.content_chunk(&delta.text)).await;
                }
                Ok(Some(Some(Event::Done(done)))) => {
                    if let Some(entry) = done.entry.map(CachedCompletion::from) {
                        if self.cacheable {
                            self.state.remember(entry.clone());
                            index_question(&self.state, self.question.as_ref(), &entry.key);
                        }
                        send(head.finish_chunk(&entry.finish_reason)).await;
                        send(SSE_DONE.to_owned()).await;
                        finished = true;
                    }
                    break;
                }
                Ok(Some(None)) => {}
                Err(error) => {
                    tracing::warn!(%error, "completion stream failed");
                    break;
                }
            }
        }
        if !finished {
            self.state.metrics.core_errors.inc();
            let error = RequestError::upstream(502, "the completion stream was interrupted");
            send(format!("data: {}\n\n", error.to_json())).await;
        }
        self.state.metrics.latency_miss.observe(started.elapsed().as_secs_f64());
    }
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
