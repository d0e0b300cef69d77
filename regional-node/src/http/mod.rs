//! HTTP routes of the regional daemon.

mod changes;
mod chat;
mod choices;
mod hot_set;
mod invalidate;
mod ops;
mod respond;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use crate::server::AppState;

pub use ops::readiness;

/// The router with every route, sharing `state`.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions).fallback(ops::method_not_allowed))
        .route("/v1/completions", post(chat::text_completions).fallback(ops::method_not_allowed))
        .route("/v1/cache/invalidate", post(invalidate::invalidate).fallback(ops::method_not_allowed))
        .route("/v1/hotset", get(hot_set::hot_set).fallback(ops::method_not_allowed))
        .route("/v1/hotset/hits", post(hot_set::edge_hits).fallback(ops::method_not_allowed))
        .route("/v1/changes", get(changes::changes).fallback(ops::method_not_allowed))
        .route("/v1/replication", get(ops::replication).fallback(ops::method_not_allowed))
        .route("/v1/models", get(ops::models).fallback(ops::method_not_allowed))
        .route("/v1/models/{id}", get(ops::model).fallback(ops::method_not_allowed))
        .route("/healthz", get(ops::healthz))
        .route("/metrics", get(ops::metrics))
        .fallback(ops::not_found)
        .with_state(Arc::clone(&state))
        .merge(daemon_runtime::probes::router(ops::readiness(&state)))
        .layer(axum::middleware::from_fn(request_id))
}

/// `x-request-id` on every answer: the caller's when a log can hold it, else the request's trace id
/// (its `traceparent`'s, or a new one); the handlers see the same id in the request.
async fn request_id(
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::HeaderValue;
    let name = shared::trace::REQUEST_ID;
    let given = request.headers().get(name).and_then(|v| v.to_str().ok());
    let id = match shared::trace::valid_request_id(given) {
        Some(id) => id.to_owned(),
        None => {
            let parent = request.headers().get(shared::trace::TRACEPARENT).and_then(|v| v.to_str().ok());
            daemon_runtime::trace_context::continue_or_start(parent).trace_id()
        }
    };
    let value = HeaderValue::from_str(&id).ok();
    if let Some(value) = &value {
        request.headers_mut().insert(name, value.clone());
    }
    let mut response = next.run(request).await;
    if let Some(value) = value {
        response.headers_mut().insert(name, value);
    }
    response
}
