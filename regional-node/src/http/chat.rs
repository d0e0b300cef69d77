//! `POST /v1/chat/completions` and `POST /v1/completions`: authenticates, parses and normalizes the
//! request, has the [`RequestPath`] answer it, and renders the answer as OpenAI JSON or server-sent
//! events, in the shape of the API it came through (a text completion is the same normal form, with
//! its own key; see [`shared::text_completion`]).
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
use shared::completion::{Rendering, StreamHead};
use shared::model_spec::ModelApi;
use shared::normalize::{normalize, NormalizedRequest};
use shared::openai::{parse_chat_request, SSE_DONE};
use shared::server_timing::ServerTiming;
use shared::text_completion::{normalize_completion, parse_completion_request};
use shared::trace::TraceParent;
use shared::{RequestError, MAX_REQUEST_BYTES};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument as _;

use super::choices::{Gathered, Shape};
use super::respond::{
    cache_headers, entry_response, mark_coalesced, mark_fallback, semantic_headers, with_headers, Labels,
    EVENT_STREAM,
};
use crate::caller::resolve_tenant;
use crate::clock::now_ms;
use crate::error::error_response;
use crate::flight::{FlightItem, Outcome, Subscription};
use crate::request_path::{Admitted, Answered, Directives, X_CACHE_MISS};
use crate::server::AppState;
use crate::RegionalError;

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    peer: Option<axum::Extension<daemon_runtime::PeerRole>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer(state, peer, headers, body, ModelApi::Chat).await
}

/// `POST /v1/completions`.
pub async fn text_completions(
    State(state): State<Arc<AppState>>,
    peer: Option<axum::Extension<daemon_runtime::PeerRole>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer(state, peer, headers, body, ModelApi::Completions).await
}

async fn answer(
    state: Arc<AppState>,
    peer: Option<axum::Extension<daemon_runtime::PeerRole>>,
    headers: HeaderMap,
    body: Body,
    api: ModelApi,
) -> Response {
    let started = Instant::now();
    let metrics = state.path().metrics();
    metrics.requests.inc();
    let peer = peer.as_ref().map(|axum::Extension(p)| p);
    let admitted = match admit(&state, peer, &headers, body, api, started).await {
        Ok(admitted) => admitted,
        Err(error) => {
            metrics.rejected.inc();
            return error_response(&error);
        }
    };
    let caller =
        headers.get(shared::trace::TRACEPARENT).and_then(|v| v.to_str().ok()).and_then(TraceParent::parse);
    let span = tracing::debug_span!(
        "chat",
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
        parent_span_id = tracing::field::Empty,
        request_id = headers.get(shared::trace::REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or_default(),
        tenant = %admitted.tenant,
        key = %admitted.key,
        class = admitted.class.class.as_str()
    );
    daemon_runtime::trace_context::record_span(&span, &admitted.trace, caller.as_ref());
    let key = admitted.key.clone();
    let class = Labels { class: admitted.class, store: admitted.caching.store };
    // What a streamed answer's chunks carry, made only for a request that streams.
    let delivery = admitted.request.delivery;
    let model = admitted.request.model.name.clone();
    let shape = Shape::of(&admitted.request.sampling);
    let echo = admitted.request.rendering().echo.map(str::to_owned);
    let rendering = Rendering { echo: echo.as_deref(), ..admitted.request.rendering() };
    let head = delivery.is_stream().then(|| StreamStart {
        id: rendering.completion_id(&key.completion_id()),
        created: now_ms() / 1000,
        model: admitted.request.model.name.clone(),
        usage: delivery.streams_usage(),
        shape,
        api,
        echo: echo.clone(),
    });
    let answered = state.path().answer(admitted).instrument(span).await;
    let reply = Reply { rendering, key: key.as_str(), class, shape, model: &model };
    let response = match answered {
        Ok(Answered::Ready(outcome)) => Ok(reply.outcome_response(&outcome, false)),
        Ok(Answered::Flight { subscription, coalesced }) => {
            reply.respond(subscription, head, coalesced).await
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
    peer: Option<&daemon_runtime::PeerRole>,
    headers: &HeaderMap,
    body: Body,
    api: ModelApi,
    started: Instant,
) -> Result<Admitted, RequestError> {
    let settings = state.settings();
    let tenant = resolve_tenant(headers, peer, &settings.tenants, &settings.identity)?;
    let content_type = headers.get(axum::http::header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or("?"));
    shared::openai::check_json_content_type(content_type)?;
    let bytes =
        daemon_runtime::request_body::read_body(body, MAX_REQUEST_BYTES, settings.config.http_body_timeout())
            .await?;
    let mut request = normalized(state, &bytes, api)?;
    let tags = headers.get(shared::cache_tags::CACHE_TAGS_HEADER).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    request.tags = shared::cache_tags::parse(tags)?;
    let canary = state.path().view().canary(&request.model.name);
    shared::canary::route(&tenant, &mut request, canary);
    let cache_control: Vec<&str> =
        headers.get_all(axum::http::header::CACHE_CONTROL).iter().filter_map(|v| v.to_str().ok()).collect();
    let directives = Directives::parse(Some(&cache_control.join(",")));
    let cache_sampled = state.path().view().caches_sampled(&tenant);
    let traceparent = headers.get(shared::trace::TRACEPARENT).and_then(|v| v.to_str().ok());
    Ok(Admitted::new(tenant, request, &settings.ttl, cache_sampled, directives, started).traced(traceparent))
}

/// The request a body asks for through `api`.
fn normalized(state: &AppState, bytes: &[u8], api: ModelApi) -> Result<NormalizedRequest, RequestError> {
    let models = state.path().models().current();
    match api {
        ModelApi::Chat => normalize(&parse_chat_request(bytes, MAX_REQUEST_BYTES)?, &models, state.limits()),
        ModelApi::Completions => normalize_completion(
            &parse_completion_request(bytes, MAX_REQUEST_BYTES)?,
            &models,
            state.limits(),
        ),
    }
}

/// How a request wants its answer: its rendering, key, labels and the answer's shape.
#[derive(Clone, Copy)]
struct Reply<'a> {
    rendering: Rendering<'a>,
    key: &'a str,
    class: Labels,
    shape: Shape,
    /// The model asked for.
    model: &'a str,
}

impl Reply<'_> {
    fn headers(&self, outcome: &Outcome, coalesced: bool) -> HeaderMap {
        let mut headers =
            cache_headers(outcome.x_cache, self.key, &outcome.timing, self.class, Some(&outcome.entry));
        // `auto` is answered by the model the core chose, under the auto key: not a fallback.
        if outcome.entry.model != self.model && self.model != shared::auto_model::AUTO_MODEL {
            mark_fallback(&mut headers, &outcome.entry.model);
        }
        if let Some(hit) = &outcome.semantic {
            semantic_headers(&mut headers, hit);
        }
        if coalesced {
            mark_coalesced(&mut headers);
        }
        headers
    }

    /// A whole answer that is its entry.
    fn outcome_response(&self, outcome: &Outcome, coalesced: bool) -> Response {
        entry_response(&outcome.entry, self.rendering, self.headers(outcome, coalesced))
    }

    /// Answers one request from its flight: the whole answer once it has landed, or (streaming, `head`
    /// given, when the flight generates) each delta as it comes.
    async fn respond(
        self,
        mut subscription: Subscription,
        head: Option<StreamStart>,
        coalesced: bool,
    ) -> Result<Response, RegionalError> {
        let Some(head) = head else {
            if self.shape.is_entry() {
                let outcome = subscription.landed().await?;
                return Ok(self.outcome_response(&outcome, coalesced));
            }
            // Several sampled choices, or log-probabilities: the pieces make the answer.
            let gathered = Gathered::gather(&mut subscription, self.shape).await?;
            let body = serde_json::to_string(&gathered.to_response(self.shape)).unwrap_or_default();
            let headers = self.headers(&gathered.outcome, coalesced);
            return Ok(with_headers(StatusCode::OK, "application/json", Body::from(body), headers));
        };
        let first = match subscription.next().await {
            Some(FlightItem::Landed(Err(error))) => return Err(error.into()),
            // An answer that is its entry, whole at once (a hit); an answer of several choices or with
            // log-probabilities goes through the relay even when nothing was generated before it landed.
            Some(FlightItem::Landed(Ok(outcome))) if self.shape.is_entry() => {
                return Ok(self.outcome_response(&outcome, coalesced));
            }
            Some(item) => item,
            None => return Err(RequestError::upstream(502, "the answer's flight ended without one").into()),
        };
        // The core says so before anything else when the fallback model answers.
        let fallback = subscription.fallback_model();
        let head = match fallback.clone().or_else(|| subscription.auto_model()) {
            Some(model) => StreamStart { model, ..head },
            None => head,
        };
        let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
        tokio::spawn(head.relay(first, subscription, tx));
        let mut headers = cache_headers(X_CACHE_MISS, self.key, &ServerTiming::default(), self.class, None);
        if coalesced {
            mark_coalesced(&mut headers);
        }
        if let Some(model) = &fallback {
            mark_fallback(&mut headers, model);
        }
        Ok(with_headers(StatusCode::OK, EVENT_STREAM, Body::from_stream(ReceiverStream::new(rx)), headers))
    }
}

/// What a streamed answer's chunks carry.
struct StreamStart {
    id: String,
    created: i64,
    model: String,
    /// Whether the stream ends with a usage chunk.
    usage: bool,
    /// The choices it carries.
    shape: Shape,
    /// The API whose chunks it sends.
    api: ModelApi,
    /// The prompt a text completion's stream starts with.
    echo: Option<String>,
}

impl StreamStart {
    /// Sends a flight's items from `first` on as OpenAI SSE chunks (a role chunk per choice first; each
    /// choice's finish chunk as it ends, or at the landing), then the usage chunk when asked for and
    /// `[DONE]` (or an error event if the flight failed).
    async fn relay(
        self,
        first: FlightItem,
        mut subscription: Subscription,
        tx: mpsc::Sender<Result<Bytes, Infallible>>,
    ) {
        let head = StreamHead {
            id: &self.id,
            created: self.created,
            model: &self.model,
            api: self.api,
            echo: self.echo.as_deref(),
        };
        let shape = self.shape;
        let send = |text: String| {
            let tx = tx.clone();
            async move { tx.send(Ok(Bytes::from(text))).await.is_ok() }
        };
        for index in 0..shape.choices {
            if !send(head.role_chunk(index)).await {
                return;
            }
        }
        let mut next = Some(first);
        loop {
            let item = match next.take() {
                Some(item) => item,
                None => match subscription.next().await {
                    Some(item) => item,
                    None => break,
                },
            };
            match item {
                FlightItem::Delta(piece) => {
                    for index in shape.indexes_of(piece.choice) {
                        if !send(head.content_chunk(index, &piece.text, piece.logprobs.as_deref())).await {
                            return;
                        }
                    }
                }
                FlightItem::ChoiceEnd { choice, finish_reason } => {
                    if !send(head.finish_chunk(choice, &finish_reason)).await {
                        return;
                    }
                }
                FlightItem::Landed(Ok(outcome)) => {
                    // Several generated choices ended one by one; one generated answer ends every copy.
                    if shape.generated() == 1 {
                        for index in 0..shape.copies {
                            send(head.finish_chunk(index, &outcome.entry.finish_reason)).await;
                        }
                    }
                    if self.usage {
                        send(head.usage_chunk(outcome.entry.usage(shape.copies))).await;
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
