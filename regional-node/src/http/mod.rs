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
        .with_state(state)
}
