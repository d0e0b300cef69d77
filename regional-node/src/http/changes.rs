//! `GET /v1/changes?since=<revision>`: the core's decisions for the edge ([`shared::changes`]), as this
//! node received them from the core's feed: the changes after `since`, or (for `since=0`, or a revision
//! older than the changes this node keeps) a resync from this node's view, with how long ago the core
//! confirmed the view. 503 with `Retry-After` while the view has not caught up, is not confirmed within
//! its bound, or is behind `since` (the edge asks another node rather than go back).
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
    match state.path().view().changes_since(since) {
        Ok(changes) => ([(header::CACHE_CONTROL, "no-store")], Json(changes)).into_response(),
        Err(refused) => {
            let error = RequestError::upstream(503, refused.reason()).with_retry_after(1);
            crate::error::error_response(&error)
        }
    }
}
