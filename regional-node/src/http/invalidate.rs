//! `POST /v1/cache/invalidate`: a tenant drops one of its cached answers, or every answer carrying one of
//! its cache tags, everywhere.
//!
//! The body is `{"key": "<x-cache-key of the answer>"}` or `{"tag": "<tag>", "refresh": true}`. The core
//! invalidates in the authoritative state first; then this node forgets what it covers and, when it
//! replicates, writes tombstones that every peer merges, so no region serves the answers again and no
//! stale copy brings them back. Another tenant's key is answered exactly as a key nobody holds
//! (`removed_at_core: 0`), and nothing of that tenant's is touched: the reply reveals nothing. A tag is
//! always the caller's own (tags are scoped to the tenant). With `refresh`, the core regenerates the
//! hottest answers the tag covered in the background (`refreshing` says how many), so the next caller
//! gets a fresh hit rather than a miss.

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
    let replicated = !state.path().replication().settings().peers.is_empty();
    let reply = match parse_target(&bytes)? {
        Target::Key(key) => {
            let done = state.path().invalidate(&tenant, &key).await?;
            tracing::info!(%tenant, %key, removed_at_core = done.removed, at_ms = done.at_ms, "invalidated");
            serde_json::json!({
                "object": "cache.invalidation",
                "key": key,
                "removed_at_core": done.removed,
                // The core's log time of the invalidation: no tier serves this key's answers created at
                // or before it, each within its documented bound.
                "invalidated_at_ms": done.at_ms,
                "replicated": replicated,
            })
        }
        Target::Tag { tag, refresh } => {
            let done = state.path().invalidate_tag(&tenant, &tag, refresh).await?;
            tracing::info!(%tenant, %tag, refreshing = done.refreshing, at_ms = done.at_ms, "tag invalidated");
            serde_json::json!({
                "object": "cache.invalidation",
                "tag": tag,
                "invalidated_at_ms": done.at_ms,
                "refreshing": done.refreshing,
                "replicated": replicated,
            })
        }
    };
    Ok(Json(reply).into_response())
}

/// What a body asks to invalidate.
#[derive(Debug, PartialEq)]
enum Target {
    /// One answer, by its cache key.
    Key(String),
    /// Every answer carrying a tag of the caller's.
    Tag { tag: String, refresh: bool },
}

/// The body: `key`, or `tag` with an optional `refresh`.
fn parse_target(bytes: &[u8]) -> Result<Target, RequestError> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| RequestError::invalid(format!("the body is not JSON: {e}")))?;
    if value.get("key").is_some() && value.get("tag").is_some() {
        return Err(RequestError::invalid("give `key` or `tag`, not both"));
    }
    if let Some(tag) = value.get("tag") {
        let tag = tag.as_str().ok_or_else(|| RequestError::invalid_param("tag", "`tag` must be a string"))?;
        shared::cache_tags::check_tag(tag)?;
        let refresh = match value.get("refresh") {
            None | Some(serde_json::Value::Null) => false,
            Some(refresh) => refresh
                .as_bool()
                .ok_or_else(|| RequestError::invalid_param("refresh", "`refresh` must be true or false"))?,
        };
        return Ok(Target::Tag { tag: tag.to_owned(), refresh });
    }
    let key = value
        .get("key")
        .ok_or_else(|| RequestError::invalid_param("key", "`key` or `tag` is required"))?
        .as_str()
        .ok_or_else(|| RequestError::invalid_param("key", "`key` must be a string"))?;
    // Only the shape every tier derives (`v1:` and 64 lowercase hex digits): any other string would become a
    // key cutoff at every tier without ever naming an answer.
    shared::cache_key::CacheKey::parse(key).map(|key| Target::Key(key.as_str().to_owned())).ok_or_else(|| {
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
        assert_eq!(parse_target(body.as_bytes()).ok(), Some(Target::Key(key)));
        let tag = |body: &str| parse_target(body.as_bytes());
        assert_eq!(
            tag(r#"{"tag":"stock:AAPL"}"#).ok(),
            Some(Target::Tag { tag: "stock:AAPL".into(), refresh: false })
        );
        assert_eq!(
            tag(r#"{"tag":"stock:AAPL","refresh":true}"#).ok(),
            Some(Target::Tag { tag: "stock:AAPL".into(), refresh: true })
        );
        for bad in [
            &br#"{"key":1}"#[..],
            b"{}",
            b"not json",
            br#"{"key":""}"#,
            br#"{"key":"a b"}"#,
            br#"{"key":"v1:abc"}"#,
            br#"{"tag":""}"#,
            br#"{"tag":"a b"}"#,
            br#"{"tag":7}"#,
            br#"{"tag":"t","refresh":"yes"}"#,
            br#"{"tag":"t","key":"v1:abc"}"#,
        ] {
            let error = parse_target(bad).expect_err("refused");
            assert_eq!(error.status, 400, "{}", String::from_utf8_lossy(bad));
        }
    }
}
