//! The OpenAI-compatible HTTP API, as vLLM serves it, on the pod's one port: `POST /v1/chat/completions`
//! and `POST /v1/completions` (each whole or streamed), `GET /v1/models` and `GET /v1/models/{id}`. With
//! it the pod can serve on its own, and the core's OpenAI-compatible backend can be tested against a real
//! server.
//!
//! A request takes the core's way in: its body is parsed and normalized by `shared`, as the edge and
//! the regional tier do it, turned into the `GenerateRequest` the core would send
//! ([`proto::inference::GenerateRequest::for_request`]), and submitted through the same conversion and
//! [`InferenceService::submit`] as a gRPC `Generate`. So a request answers the same text whichever way
//! it came. A text completion is a chat request of one user message whose prompt the pod continues
//! without the chat template (`raw_prompt`); both routes share one handler and differ only in how the
//! body is parsed and the answer rendered. What this API cannot honour is refused with a 400 naming the
//! parameter, never dropped.
//!
//! # Layout
//! - [`api_key`]: the optional key (`--openai-api-key-file`), held as a digest.
//! - [`completions`]: both `POST` routes, from the body to a queued generation.
//! - [`respond`]: a generation's events as one `chat.completion` or `text_completion`, or as server-sent
//!   chunks.
//! - [`models`]: `GET /v1/models` and `GET /v1/models/{id}`.
//! - [`errors`]: engine errors as OpenAI-shaped responses.
//!
//! Architecture Invariant: when a key is configured, no `/v1/*` route does anything for a request
//! before its `Authorization: Bearer` key is checked (in constant time); the key is never logged.

pub mod api_key;
pub mod completions;
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
use shared::model_spec::{ModelApi, ModelSpec};
use shared::models::{ModelRef, ModelTable};
use shared::RequestError;

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
    /// The served model as the normalizer resolves it, described as answering both APIs; `None` when
    /// the model name is empty. The pod knows no model versions: the version normalization needs never
    /// reaches the answer.
    models: Option<ModelTable>,
    /// When the pod started (Unix seconds), the `created` of its model.
    created: i64,
}

impl ApiState {
    /// The name requests must use and answers carry.
    fn model_name(&self) -> &str {
        self.service.model_name()
    }

    /// The table a request for `requested` is normalized against; a 404 when the pod has none.
    fn models_for(&self, requested: &str) -> Result<&ModelTable, RequestError> {
        self.models.as_ref().ok_or_else(|| RequestError::model_not_found(requested))
    }

    /// The APIs the served model answers.
    fn apis(&self) -> Vec<ModelApi> {
        let spec = self.models.as_ref().and_then(|table| {
            let served = table.resolve(self.model_name()).ok()?;
            table.spec(&served.name)
        });
        spec.map_or_else(|| SERVED_APIS.to_vec(), ModelSpec::served_apis)
    }
}

/// The APIs the pod answers for its model: chat, and text completions of a raw prompt.
const SERVED_APIS: [ModelApi; 2] = [ModelApi::Chat, ModelApi::Completions];

/// The `/v1/*` routes over `service`, behind `api_key` when there is one.
pub fn router(service: InferenceService, api_key: Option<ApiKey>) -> Router {
    let served = ModelRef { name: service.model_name().to_owned(), version: 1 };
    let spec = ModelSpec { apis: SERVED_APIS.to_vec(), ..ModelSpec::default() };
    let state = Arc::new(ApiState {
        models: ModelTable::from_models([served]).map(|table| table.with_spec(service.model_name(), spec)),
        service,
        api_key,
        created: unix_seconds(),
    });
    Router::new()
        .route("/v1/chat/completions", post(completions::chat_completions).fallback(method_not_allowed))
        .route("/v1/completions", post(completions::completions).fallback(method_not_allowed))
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
