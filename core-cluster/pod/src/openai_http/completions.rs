//! `POST /v1/chat/completions` and `POST /v1/completions`: one path for both. It reads the body within
//! the mesh's limits, parses and normalizes it as every tier does (a text completion becomes one user
//! message whose API is [`ModelApi::Completions`]), refuses what this API cannot honour, and submits the
//! generation the way the core's gRPC `Generate` arrives (a text completion with `raw_prompt` set, so the
//! pod continues its prompt without the chat template). [`respond`](super::respond) renders what comes
//! back in the shape the request's [`Rendering`](shared::completion::Rendering) asks for.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use proto::inference as pb;
use shared::model_spec::ModelApi;
use shared::normalize::{normalize, Limits, NormalizedRequest, Sampling};
use shared::openai::parse_chat_request;
use shared::text_completion::{normalize_completion, parse_completion_request, text_completion_id};
use shared::trace::TRACEPARENT;
use shared::{RequestError, MAX_REQUEST_BYTES};
use tracing::Instrument as _;

use super::errors::{error_response, generation_refused};
use super::respond::{self, Head};
use super::{unix_seconds, ApiState, HTTP_TENANT};
use crate::request::GenerationRequest;

/// Longest a client may take to send its body once its headers are in.
const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(&state, &headers, body, ModelApi::Chat).await
}

/// `POST /v1/completions`.
pub async fn completions(State(state): State<Arc<ApiState>>, headers: HeaderMap, body: Body) -> Response {
    handle(&state, &headers, body, ModelApi::Completions).await
}

/// A request to `api`'s route, answered or refused in OpenAI's shape.
async fn handle(state: &ApiState, headers: &HeaderMap, body: Body, api: ModelApi) -> Response {
    let incoming = headers.get(TRACEPARENT).and_then(|v| v.to_str().ok());
    let trace = daemon_runtime::trace_context::continue_or_start(incoming);
    let chat_id =
        format!("chatcmpl-{}", shared::hex::encode(&daemon_runtime::trace_context::random_bytes::<12>()));
    // The id the client sees (`cmpl-...` for a text completion) is also the generation's request id.
    let id = match api {
        ModelApi::Chat => chat_id,
        ModelApi::Completions => text_completion_id(&chat_id),
    };
    let span = tracing::info_span!(
        "openai_generate",
        api = api.as_str(),
        request_id = %id,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
        parent_span_id = tracing::field::Empty
    );
    let caller = incoming.and_then(shared::trace::TraceParent::parse);
    daemon_runtime::trace_context::record_span(&span, &trace, caller.as_ref());
    let content_type = headers.get(axum::http::header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or("?"));
    if let Err(refused) = shared::openai::check_json_content_type(content_type) {
        return error_response(&refused);
    }
    async {
        match answer(state, api, id, body).await {
            Ok(response) => response,
            Err(refused) => {
                tracing::debug!(status = refused.status, error = %refused.message, "completion refused");
                error_response(&refused)
            }
        }
    }
    .instrument(span)
    .await
}

/// Admits the request, queues it, and answers in the way it asked for.
async fn answer(state: &ApiState, api: ModelApi, id: String, body: Body) -> Result<Response, RequestError> {
    // A request refused here counts as refused, as a gRPC one that does not parse does.
    let (normalized, generation) =
        admit(state, api, &id, body).await.inspect_err(|e| state.service.note_rejected(&e.message))?;
    tracing::info!("generation accepted");
    let head = Head::new(id, unix_seconds(), state.model_name().to_owned(), normalized.rendering());
    let events = state.service.submit(generation).await.map_err(|e| generation_refused(e, api))?;
    respond::answer(head, events).await
}

/// The request as every tier normalizes it, and the generation it asks for, as the pod's gRPC
/// conversion reads the core's request for it.
async fn admit(
    state: &ApiState,
    api: ModelApi,
    id: &str,
    body: Body,
) -> Result<(NormalizedRequest, GenerationRequest), RequestError> {
    let bytes = daemon_runtime::request_body::read_body(body, MAX_REQUEST_BYTES, BODY_DEADLINE).await?;
    let normalized = normalized(state, api, &bytes)?;
    refuse_unserved(&normalized.sampling)?;
    let wire = pb::GenerateRequest::for_request(id.to_owned(), HTTP_TENANT, &normalized);
    let generation = GenerationRequest::try_from(wire)?;
    Ok((normalized, generation))
}

/// Parses the body as `api`'s request and normalizes it against the served model.
fn normalized(state: &ApiState, api: ModelApi, bytes: &[u8]) -> Result<NormalizedRequest, RequestError> {
    let limits = Limits::default();
    match api {
        ModelApi::Chat => {
            let request = parse_chat_request(bytes, MAX_REQUEST_BYTES)?;
            normalize(&request, state.models_for(&request.model)?, &limits)
        }
        ModelApi::Completions => {
            let request = parse_completion_request(bytes, MAX_REQUEST_BYTES)?;
            normalize_completion(&request, state.models_for(&request.model)?, &limits)
        }
    }
}

/// Parameters the normalizer accepts but this API does not serve: one choice, no log-probabilities.
fn refuse_unserved(sampling: &Sampling) -> Result<(), RequestError> {
    if sampling.n != 1 {
        return Err(RequestError::invalid_param("n", "this server returns one choice: `n` must be 1"));
    }
    if sampling.logprobs.is_some() {
        return Err(RequestError::invalid_param("logprobs", "`logprobs` is not supported by this server"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::normalize::Sampling;

    #[test]
    fn one_choice_without_log_probabilities_is_all_this_api_serves() {
        assert_eq!(refuse_unserved(&Sampling::greedy(8)), Ok(()));
        let two = Sampling { n: 2, ..Sampling::greedy(8) };
        assert_eq!(refuse_unserved(&two).map_err(|e| e.param), Err(Some("n".to_owned())));
        let logged = Sampling { logprobs: Some(0), ..Sampling::greedy(8) };
        assert_eq!(refuse_unserved(&logged).map_err(|e| e.param), Err(Some("logprobs".to_owned())));
    }
}
