//! `GET /v1/changes?since=<revision>`: the core's decisions for the edge ([`shared::changes`]), as this
//! node received them from the core's feed: the changes after `since`, or (for `since=0`, a revision
//! older than the changes this node keeps, or one it has not reached) a resync from this node's view.
//!
//! Only the edge may read it (its certificate, or the insecure secret in development).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use daemon_runtime::PeerRole;
use shared::RequestError;

use crate::caller::require_edge;
use crate::server::AppState;

/// The handler.
pub async fn changes(
    State(state): State<Arc<AppState>>,
    peer: Option<Extension<PeerRole>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    if let Err(error) =
        require_edge(&headers, peer.as_ref().map(|Extension(p)| p), &state.settings().identity)
    {
        return crate::error::error_response(&error);
    }
    let since = match params.get("since").map(String::as_str) {
        None | Some("") => 0,
        Some(text) => match text.parse::<u64>() {
            Ok(since) => since,
            Err(_) => {
                let error =
                    RequestError::invalid_param("since", format!("since must be a revision, not {text:?}"));
                return crate::error::error_response(&error);
            }
        },
    };
    let view = state.path().view();
    if !view.caught_up() {
        let error = RequestError::upstream(503, "this node has not caught up with the core's feed yet")
            .with_retry_after(1);
        return crate::error::error_response(&error);
    }
    ([(header::CACHE_CONTROL, "no-store")], Json(view.changes_since(since))).into_response()
}
