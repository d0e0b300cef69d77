//! The OpenAI API's errors: the pod's [`InferenceError`] as a client-facing [`RequestError`], and that
//! as a response with OpenAI's body (`{"error": {"message", "type", "param", "code"}}`). This is the one
//! place the HTTP side turns errors into statuses, as `error.rs` is for gRPC.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use shared::model_spec::ModelApi;
use shared::RequestError;

use crate::InferenceError;

/// Seconds a client is told to wait before retrying a pod that is loading or full.
const RETRY_AFTER_S: u64 = 1;

/// The response for `error`: its status, its OpenAI body, and `Retry-After` when a retry may succeed.
pub fn error_response(error: &RequestError) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, error.to_json()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(seconds) = error.retry_after_s {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// Why the pod refused to queue a generation that came through `api`: as [`From<InferenceError>`], with
/// a prompt too long for the context named as the API names it (`messages`, or a text completion's
/// `prompt`).
pub fn generation_refused(e: InferenceError, api: ModelApi) -> RequestError {
    let too_long = matches!(e, InferenceError::PromptTooLong { .. });
    let refused = RequestError::from(e);
    match api {
        ModelApi::Completions if too_long => RequestError { param: Some("prompt".to_owned()), ..refused },
        _ => refused,
    }
}

/// 405 on a known path, as OpenAI's body.
pub async fn method_not_allowed() -> Response {
    error_response(&RequestError::method_not_allowed())
}

impl From<InferenceError> for RequestError {
    fn from(e: InferenceError) -> Self {
        use InferenceError as E;
        match &e {
            E::InvalidRequest(_) => RequestError::invalid(e.to_string()),
            E::UnknownModel { requested, .. } => RequestError::model_not_found(requested),
            E::PromptTooLong { .. } => RequestError {
                code: Some("context_length_exceeded"),
                ..RequestError::invalid_param("messages", e.to_string())
            },
            E::QueueFull(_) | E::KvCacheFull { .. } => RequestError::overloaded(e.to_string(), RETRY_AFTER_S),
            E::NotReady => RequestError {
                status: 503,
                code: Some("model_not_ready"),
                ..RequestError::internal("the model is loading or its step loop has stopped")
            }
            .with_retry_after(RETRY_AFTER_S),
            E::Cancelled => RequestError::internal(e.to_string()),
            // Internal details stay in the pod's log, not in the client's error.
            E::ModelFile { .. } | E::Metadata(_) | E::Candle(_) | E::Tokenizer(_) | E::Internal(_) => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "generation failed");
                RequestError::internal("inference failed")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_get_openai_statuses() {
        let status = |e: InferenceError| RequestError::from(e).status;
        assert_eq!(status(InferenceError::InvalidRequest("max_tokens".into())), 400);
        assert_eq!(status(InferenceError::PromptTooLong { prompt_tokens: 9, context: 8 }), 400);
        assert_eq!(status(InferenceError::UnknownModel { requested: "x".into(), served: "m".into() }), 404);
        assert_eq!(status(InferenceError::QueueFull(3)), 429);
        assert_eq!(status(InferenceError::KvCacheFull { needed: 9, available: 8 }), 429);
        assert_eq!(status(InferenceError::Internal("kernel".into())), 500);
        let loading = RequestError::from(InferenceError::NotReady);
        assert_eq!((loading.status, loading.retry_after_s), (503, Some(RETRY_AFTER_S)));
        let response = error_response(&loading);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers().get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()), Some("1"));
    }

    #[test]
    fn a_text_completions_prompt_too_long_names_the_prompt() {
        let too_long = || InferenceError::PromptTooLong { prompt_tokens: 9, context: 8 };
        let param = |api| generation_refused(too_long(), api).param;
        assert_eq!(param(ModelApi::Chat).as_deref(), Some("messages"));
        assert_eq!(param(ModelApi::Completions).as_deref(), Some("prompt"));
        let full = generation_refused(InferenceError::QueueFull(3), ModelApi::Completions);
        assert_eq!((full.status, full.param), (429, None));
    }
}
