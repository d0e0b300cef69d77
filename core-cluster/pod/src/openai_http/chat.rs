//! `POST /v1/chat/completions`: reads the body within the mesh's limits, parses and normalizes it as
//! every tier does, refuses what this API cannot honour, and submits the generation the way the core's
//! gRPC `Generate` arrives. [`respond`](super::respond) renders what comes back.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use proto::inference as pb;
use shared::normalize::{normalize, Limits, Sampling};
use shared::openai::{parse_chat_request, Delivery};
use shared::trace::TRACEPARENT;
use shared::{RequestError, MAX_REQUEST_BYTES};
use tracing::Instrument as _;

use super::errors::error_response;
use super::respond::{self, Head};
use super::{unix_seconds, ApiState, HTTP_TENANT};
use crate::request::GenerationRequest;

/// Longest a client may take to send its body once its headers are in.
const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// The handler.
pub async fn chat_completions(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let incoming = headers.get(TRACEPARENT).and_then(|v| v.to_str().ok());
    let trace = daemon_runtime::trace_context::continue_or_start(incoming);
    let id =
        format!("chatcmpl-{}", shared::hex::encode(&daemon_runtime::trace_context::random_bytes::<12>()));
    let span = tracing::info_span!("openai_chat", request_id = %id, trace_id = %trace.trace_id());
    async {
        let head = Head { id, created: unix_seconds(), model: state.model_name().to_owned() };
        match answer(&state, head, body).await {
            Ok(response) => response,
            Err(refused) => {
                tracing::debug!(status = refused.status, error = %refused.message, "chat completion refused");
                error_response(&refused)
            }
        }
    }
    .instrument(span)
    .await
}

/// Admits the request, queues it, and answers in the way it asked for.
async fn answer(state: &ApiState, head: Head, body: Body) -> Result<Response, RequestError> {
    // A request refused here counts as refused, as a gRPC one that does not parse does.
    let (request, delivery) =
        admit(state, &head.id, body).await.inspect_err(|e| state.service.note_rejected(&e.message))?;
    tracing::info!("generation accepted");
    let events = state.service.submit(request).await?;
    match delivery {
        Delivery::Whole => respond::whole(head, events).await,
        Delivery::Stream { usage } => respond::stream(head, events, usage).await,
    }
}

/// The generation a request asks for, as the pod's gRPC conversion reads the core's request for it.
async fn admit(
    state: &ApiState,
    id: &str,
    body: Body,
) -> Result<(GenerationRequest, Delivery), RequestError> {
    let bytes = daemon_runtime::request_body::read_body(body, MAX_REQUEST_BYTES, BODY_DEADLINE).await?;
    let request = parse_chat_request(&bytes, MAX_REQUEST_BYTES)?;
    let models = state.models.as_ref().ok_or_else(|| RequestError::model_not_found(&request.model))?;
    let normalized = normalize(&request, models, &Limits::default())?;
    refuse_unserved(&normalized.sampling)?;
    let wire = pb::GenerateRequest::for_request(id.to_owned(), HTTP_TENANT, &normalized);
    let generation = GenerationRequest::try_from(wire)?;
    Ok((generation, normalized.delivery))
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
