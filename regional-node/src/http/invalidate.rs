//! `POST /v1/cache/invalidate`: a tenant drops one of its cached answers everywhere.
//!
//! The body is `{"key": "<x-cache-key of the answer>"}`. The core removes the entry from the
//! authoritative state first; then this node forgets it and, when it
//! replicates, writes a tombstone that every peer merges, so no region serves the answer again and no
//! stale copy brings it back. Another tenant's key is answered exactly as a key nobody holds
//! (`removed_at_core: 0`), and nothing of that tenant's is touched: the reply reveals nothing.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use shared::RequestError;

use crate::caller::resolve_tenant;
use crate::server::AppState;

/// Largest invalidation body.
const MAX_BODY_BYTES: usize = 4096;

/// The handler.
pub async fn invalidate(
    State(state): State<Arc<AppState>>,
    peer: Option<axum::Extension<daemon_runtime::PeerRole>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match run(&state, peer.as_ref().map(|axum::Extension(p)| p), &headers, body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn run(
    state: &AppState,
    peer: Option<&daemon_runtime::PeerRole>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, crate::RegionalError> {
    let settings = state.settings();
    let tenant = resolve_tenant(headers, peer, &settings.tenants, &settings.identity)?;
    state.invalidations().take(&tenant, std::time::Instant::now()).map_err(|retry_after_s| {
        RequestError::overloaded("too many invalidations from this tenant", retry_after_s)
    })?;
    let bytes =
        daemon_runtime::request_body::read_body(body, MAX_BODY_BYTES, settings.config.http_body_timeout())
            .await?;
    let key = parse_key(&bytes)?;
    let done = state.path().invalidate(&tenant, &key).await?;
    tracing::info!(%tenant, %key, removed_at_core = done.removed, at_ms = done.at_ms, "invalidated");
    Ok(Json(serde_json::json!({
        "object": "cache.invalidation",
        "key": key,
        "removed_at_core": done.removed,
        // The core's log time of the invalidation: no tier serves this key's answers created at or
        // before it, each within its documented bound.
        "invalidated_at_ms": done.at_ms,
        "replicated": !state.path().replication().settings().peers.is_empty(),
    }))
    .into_response())
}

/// The `key` field of the body.
fn parse_key(bytes: &[u8]) -> Result<String, RequestError> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| RequestError::invalid(format!("the body is not JSON: {e}")))?;
    let key = value
        .get("key")
        .ok_or_else(|| RequestError::invalid_param("key", "`key` is required"))?
        .as_str()
        .ok_or_else(|| RequestError::invalid_param("key", "`key` must be a string"))?;
    // Only the shape every tier derives (`v1:` and 64 lowercase hex digits): any other string would become a
    // key cutoff at every tier without ever naming an answer.
    shared::cache_key::CacheKey::parse(key).map(|key| key.as_str().to_owned()).ok_or_else(|| {
        RequestError::invalid_param(
            "key",
            "`key` must be a cache key as `X-Cache-Key` gives it (`v1:` and 64 hex digits)",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_must_be_a_cache_key() {
        let key = format!("v1:{}", "ab".repeat(32));
        let body = format!(r#"{{"key":"{key}"}}"#);
        assert_eq!(parse_key(body.as_bytes()).ok(), Some(key));
        for bad in [
            &br#"{"key":1}"#[..],
            b"{}",
            b"not json",
            br#"{"key":""}"#,
            br#"{"key":"a b"}"#,
            br#"{"key":"v1:abc"}"#,
        ] {
            let error = parse_key(bad).expect_err("refused");
            assert_eq!(error.status, 400, "{}", String::from_utf8_lossy(bad));
        }
    }
}
