//! `GET /v1/changes?since=<revision>`: the core's decisions for the edge ([`shared::changes`]), as this
//! node received them from the core's feed: the changes after `since`, or (for `since=0`, a revision
//! older than the changes this node keeps, or one it has not reached) a resync from this node's view.
//!
//! Only a tier may read it: the request must carry the tier secret (`x-mesh-secret`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use shared::{RequestError, TIER_SECRET_HEADER};

use crate::server::AppState;

/// The handler.
pub async fn changes(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let secret = headers.get(TIER_SECRET_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
    if !state.settings().tier_secret.matches(secret) {
        let error = RequestError::unauthorized("the change feed is for tiers: send the tier secret");
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
