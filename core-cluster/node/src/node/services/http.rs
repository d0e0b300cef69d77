//! The node's plain-HTTP routes: `/healthz` and `/metrics` (the probes, `/livez` and `/readyz`, come
//! from [`daemon_runtime::probes`]). They need no secret and reveal no cache data.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};

use crate::node::context::NodeContext;

/// The HTTP routes, to be merged with the gRPC routes on the node's one listener.
pub fn router(node: Arc<NodeContext>) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/metrics", get(metrics)).with_state(node)
}

/// 200 once the node knows a leader, else 503; the body says which leader, term and last applied index.
async fn healthz(State(node): State<Arc<NodeContext>>) -> impl IntoResponse {
    let health = node.health();
    let status = if health.leader.is_some() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(health))
}

/// The metrics, in OpenMetrics text.
async fn metrics(State(node): State<Arc<NodeContext>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, shared::metrics::CONTENT_TYPE)], node.render_metrics())
}
