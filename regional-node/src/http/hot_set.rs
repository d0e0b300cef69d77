//! `GET /v1/hotset?since=<version>`: the hot set for the edge ([`shared::hot_set`]).
//!
//! The hot set is the node's replicated live answers: the keys its frequency sketch found hot, and
//! what the peers replicated. Each entry comes with the small embedding of the question it answers
//! (when the node has the edge table), so the edge's semantic tier scans without embedding anything
//! but the request. Without `since`, or with a version from another start of the node or older than
//! the removals it remembers, the answer is a snapshot (at most `--hotset-per-tenant` entries of each
//! tenant); otherwise it is the delta since that version.
//!
//! Only the edge may read it (its certificate, or the insecure secret in development). The edge reports
//! the hits it served itself to `POST /v1/hotset/hits`, which count toward hotness here.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use daemon_runtime::PeerRole;
use shared::hot_set::{encode_embedding, HotEntry, HotSet, HotSetVersion};
use shared::RequestError;

use crate::caller::require_edge;
use crate::clock::now_ms;
use crate::server::AppState;

/// The handler.
pub async fn hot_set(
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
    match read(&state, &params).await {
        Ok(set) => ([(header::CACHE_CONTROL, "no-store")], Json(set)).into_response(),
        Err(error) => crate::error::error_response(&error),
    }
}

async fn read(state: &Arc<AppState>, params: &HashMap<String, String>) -> Result<HotSet, RequestError> {
    let since = match params.get("since").map(String::as_str) {
        None | Some("") => None,
        Some(text) => Some(HotSetVersion::parse(text).ok_or_else(|| {
            RequestError::invalid(format!(
                "since must be a version from an earlier answer (<epoch>.<sequence>), not {text:?}"
            ))
        })?),
    };
    let state = Arc::clone(state);
    // Embedding a snapshot's questions takes a while: off the async workers.
    tokio::task::spawn_blocking(move || build(&state, since))
        .await
        .map_err(|e| RequestError::internal(format!("hot set task: {e}")))
}

fn build(state: &AppState, since: Option<HotSetVersion>) -> HotSet {
    let changes = state.path().replication().store().hot_changes(
        since,
        state.settings().config.hotset_per_tenant,
        now_ms(),
    );
    let table = state.edge_table();
    let view = state.path().view();
    let entries = changes
        .live
        .into_iter()
        // What the core invalidated and this node has not dropped yet stays out of the edge's set.
        .filter(|entry| view.admits(entry))
        .map(|entry| {
            let embedding = table
                .zip(entry.question.as_ref())
                .and_then(|(table, question)| table.embed_i8(&question.text))
                .map(|values| encode_embedding(&values));
            HotEntry { entry, embedding }
        })
        .collect();
    state.path().metrics().hotset_reads.inc();
    HotSet {
        version: changes.version.to_string(),
        snapshot: changes.snapshot,
        table: table.map(|t| t.id().to_owned()),
        entries,
        removed: changes.removed,
    }
}

/// Largest hit report read.
const MAX_HITS_BYTES: usize = 1024 * 1024;

/// `POST /v1/hotset/hits` (the edge only): hits the edge served from its own caches
/// ([`shared::hot_set::EdgeHits`]), counted toward each key's hotness as if this node had served them.
pub async fn edge_hits(
    State(state): State<Arc<AppState>>,
    peer: Option<Extension<PeerRole>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    if let Err(error) =
        require_edge(&headers, peer.as_ref().map(|Extension(p)| p), &state.settings().identity)
    {
        return crate::error::error_response(&error);
    }
    let deadline = state.settings().config.http_body_timeout();
    let bytes = match daemon_runtime::request_body::read_body(body, MAX_HITS_BYTES, deadline).await {
        Ok(bytes) => bytes,
        Err(error) => return crate::error::error_response(&error),
    };
    let report: shared::hot_set::EdgeHits = match serde_json::from_slice(&bytes) {
        Ok(report) => report,
        Err(e) => {
            return crate::error::error_response(&RequestError::invalid(format!("not a hit report: {e}")))
        }
    };
    // Only keys of the shape every tier derives count: anything else names no answer.
    let valid: Vec<_> =
        report.hits.iter().filter(|hit| shared::cache_key::CacheKey::parse(&hit.key).is_some()).collect();
    for hit in &valid {
        state.path().count_edge_hits(&hit.key, &hit.tenant, hit.hits);
    }
    Json(serde_json::json!({ "counted": valid.len() })).into_response()
}
