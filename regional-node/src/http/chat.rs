//! `POST /v1/chat/completions`: authenticates, parses and normalizes the request, has the
//! [`RequestPath`] answer it, and renders the answer as OpenAI JSON or server-sent events.
//!
//! Each request is classified ([`shared::content_class`]) and cached for its class's TTL; the path
//! decides every tier (see [`crate::request_path`]).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use shared::completion::StreamHead;
use shared::normalize::normalize;
use shared::openai::{parse_chat_request, Delivery, SSE_DONE};
use shared::server_timing::ServerTiming;
use shared::{RequestError, MAX_REQUEST_BYTES};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument as _;

use super::respond::{
    cache_headers, entry_response, mark_coalesced, semantic_headers, with_headers, Labels, EVENT_STREAM,
};
use crate::caller::resolve_tenant;
use crate::error::error_response;
use crate::flight::{FlightItem, Outcome, Subscription};
use crate::request_path::{Admitted, Answered, Directives, X_CACHE_MISS};
use crate::server::{now_ms, AppState};
use crate::RegionalError;

/// The handler.
pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    peer: Option<axum::Extension<proto::PeerRole>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let metrics = state.path().metrics();
    metrics.requests.inc();
    let admitted =
        match admit(&state, peer.as_ref().map(|axum::Extension(p)| p), &headers, body, started).await {
            Ok(admitted) => admitted,
            Err(error) => {
                metrics.rejected.inc();
                return error_response(&error);
            }
        };
    let span = tracing::debug_span!(
        "chat",
        trace_id = %admitted.trace.trace_id(),
        tenant = %admitted.tenant,
        key = %admitted.key,
        class = admitted.class.class.as_str()
    );
    let key = admitted.key.clone();
    let class = Labels { class: admitted.class, store: admitted.caching.store };
    // What a streamed answer's chunks carry, made only for a request that streams.
    let delivery = admitted.request.delivery;
    let head = delivery.is_stream().then(|| StreamStart {
        id: key.completion_id(),
        created: now_ms() / 1000,
        model: admitted.request.model.name.clone(),
        usage: delivery.streams_usage(),
    });
    let answered = state.path().answer(admitted).instrument(span).await;
    let response = match answered {
        Ok(Answered::Ready(outcome)) => Ok(outcome_response(&outcome, delivery, key.as_str(), class, false)),
        Ok(Answered::Flight { subscription, coalesced }) => {
            respond(subscription, delivery, head, key.as_str(), class, coalesced).await
        }
        Err(error) => Err(error),
    };
    response.unwrap_or_else(|error| {
        if error.is_core_failure() {
            metrics.core_errors.inc();
        }
        error.into_response()
    })
}

async fn admit(
    state: &AppState,
    peer: Option<&proto::PeerRole>,
    headers: &HeaderMap,
    body: Body,
    started: Instant,
) -> Result<Admitted, RequestError> {
    let settings = state.settings();
    let tenant = resolve_tenant(headers, peer, &settings.tenants, &settings.identity)?;
    let bytes = super::body::read_body(body, MAX_REQUEST_BYTES, settings.config.http_body_timeout()).await?;
    let parsed = parse_chat_request(&bytes, MAX_REQUEST_BYTES)?;
    let request = normalize(&parsed, &state.path().models().current(), state.limits())?;
    let cache_control: Vec<&str> =
        headers.get_all(axum::http::header::CACHE_CONTROL).iter().filter_map(|v| v.to_str().ok()).collect();
    let directives = Directives::parse(Some(&cache_control.join(",")));
    let cache_sampled = state.path().view().caches_sampled(&tenant);
    let traceparent = headers.get(shared::trace::TRACEPARENT).and_then(|v| v.to_str().ok());
    Ok(Admitted::new(tenant, request, &settings.ttl, cache_sampled, directives, started).traced(traceparent))
}

/// A whole answer as this request asked for it.
fn outcome_response(
    outcome: &Outcome,
    delivery: Delivery,
    key: &str,
    class: Labels,
    coalesced: bool,
) -> Response {
    let mut headers = cache_headers(outcome.x_cache, key, &outcome.timing, class, Some(&outcome.entry));
    if let Some(hit) = &outcome.semantic {
        semantic_headers(&mut headers, hit);
    }
    if coalesced {
        mark_coalesced(&mut headers);
    }
    entry_response(&outcome.entry, delivery, headers)
}

/// Answers one request from its flight: the whole answer once it has landed, or (streaming, `head`
/// given, when the flight generates) each delta as it comes.
async fn respond(
    mut subscription: Subscription,
    delivery: Delivery,
    head: Option<StreamStart>,
    key: &str,
    class: Labels,
    coalesced: bool,
) -> Result<Response, RegionalError> {
    let Some(head) = head else {
        let outcome = subscription.landed().await?;
        return Ok(outcome_response(&outcome, delivery, key, class, coalesced));
    };
    let first = match subscription.next().await {
        Some(FlightItem::Landed(outcome)) => {
            return Ok(outcome_response(&outcome?, delivery, key, class, coalesced));
        }
        Some(FlightItem::Delta(text)) => text,
        None => return Err(RequestError::upstream(502, "the answer's flight ended without one").into()),
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    tokio::spawn(head.relay(first, subscription, tx));
    let mut headers = cache_headers(X_CACHE_MISS, key, &ServerTiming::default(), class, None);
    if coalesced {
        mark_coalesced(&mut headers);
    }
    Ok(with_headers(StatusCode::OK, EVENT_STREAM, Body::from_stream(ReceiverStream::new(rx)), headers))
}

/// What a streamed answer's chunks carry.
struct StreamStart {
    id: String,
    created: i64,
    model: String,
    /// Whether the stream ends with a usage chunk.
    usage: bool,
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
                    if self.usage {
                        send(head.usage_chunk(outcome.entry.usage())).await;
                    }
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
