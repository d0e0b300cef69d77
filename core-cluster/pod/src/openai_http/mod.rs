//! The OpenAI-compatible HTTP API, as vLLM serves it, on the pod's one port: `POST /v1/chat/completions`
//! (whole or streamed), `GET /v1/models` and `GET /v1/models/{id}`. With it the pod can serve on its
//! own, and the core's OpenAI-compatible backend can be tested against a real server.
//!
//! A request takes the core's way in: its body is parsed and normalized by `shared`, as the edge and
//! the regional tier do it, turned into the `GenerateRequest` the core would send
//! ([`proto::inference::GenerateRequest::for_request`]), and submitted through the same conversion and
//! [`InferenceService::submit`] as a gRPC `Generate`. So a request answers the same text whichever way
//! it came. What this API cannot honour is refused with a 400 naming the parameter, never dropped.
//!
//! # Layout
//! - [`api_key`]: the optional key (`--openai-api-key-file`), held as a digest.
//! - [`chat`]: `POST /v1/chat/completions`, from the body to a queued generation.
//! - [`respond`]: a generation's events as one `chat.completion` or as server-sent chunks.
//! - [`models`]: `GET /v1/models` and `GET /v1/models/{id}`.
//! - [`errors`]: engine errors as OpenAI-shaped responses.
//!
//! Architecture Invariant: when a key is configured, no `/v1/*` route does anything for a request
//! before its `Authorization: Bearer` key is checked (in constant time); the key is never logged.

pub mod api_key;
pub mod chat;
pub mod errors;
pub mod models;
pub mod respond;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use shared::models::{ModelRef, ModelTable};

pub use api_key::{ApiKey, ApiKeyError};

use crate::service::InferenceService;
use errors::{error_response, method_not_allowed};

/// The tenant every caller of this API is: it salts the prefix cache, and callers that share the key
/// share the cache.
pub const HTTP_TENANT: &str = "openai-api";

/// What the handlers share.
pub struct ApiState {
    /// The pod's request handling, shared with gRPC.
    service: InferenceService,
    /// The key callers must present, when one is configured.
    api_key: Option<ApiKey>,
    /// The served model as the normalizer resolves it; `None` when the model name is empty. The pod
    /// knows no model versions: the version normalization needs never reaches the answer.
    models: Option<ModelTable>,
    /// When the pod started (Unix seconds), the `created` of its model.
    created: i64,
}

impl ApiState {
    /// The name requests must use and answers carry.
    fn model_name(&self) -> &str {
        self.service.model_name()
    }
}

/// The `/v1/*` routes over `service`, behind `api_key` when there is one.
pub fn router(service: InferenceService, api_key: Option<ApiKey>) -> Router {
    let served = ModelRef { name: service.model_name().to_owned(), version: 1 };
    let state = Arc::new(ApiState {
        models: ModelTable::from_models([served]),
        service,
        api_key,
        created: unix_seconds(),
    });
    Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions).fallback(method_not_allowed))
        .route("/v1/models", get(models::list).fallback(method_not_allowed))
        .route("/v1/models/{*id}", get(models::retrieve).fallback(method_not_allowed))
        .route_layer(middleware::from_fn_with_state(Arc::clone(&state), require_key))
        .with_state(state)
}

/// Refuses a request without the configured key (401); lets every request through when none is.
async fn require_key(State(state): State<Arc<ApiState>>, request: Request, next: Next) -> Response {
    if let Some(key) = &state.api_key {
        let presented = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if let Err(refused) = key.authorize(presented) {
            tracing::debug!(path = request.uri().path(), "OpenAI API key refused");
            return error_response(&refused);
        }
    }
    next.run(request).await
}

/// Now, in Unix seconds.
fn unix_seconds() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(now.as_secs()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
