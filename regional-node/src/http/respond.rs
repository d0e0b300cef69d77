//! Building responses: cached entries as JSON or SSE, with the cache headers every answer carries.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use shared::completion::CachedCompletion;
use shared::server_timing::ServerTiming;

/// `Content-Type` of server-sent events.
pub const EVENT_STREAM: &str = "text/event-stream";

/// Headers every chat answer carries: which tier answered, the key, timing, and (when known) validators.
pub fn cache_headers(
    x_cache: &'static str,
    key: &str,
    timing: &ServerTiming,
    entry: Option<&CachedCompletion>,
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(HeaderName::from_static(shared::X_CACHE), HeaderValue::from_static(x_cache));
    insert(&mut headers, HeaderName::from_static(shared::CACHE_KEY_HEADER), key);
    insert(&mut headers, HeaderName::from_static("server-timing"), timing.as_str());
    if let Some(entry) = entry {
        insert(&mut headers, header::ETAG, &entry.etag);
        let max_age = entry.remaining_ttl_s(crate::server::now_ms()).unwrap_or(365 * 86_400);
        insert(&mut headers, header::CACHE_CONTROL, &format!("private, max-age={max_age}"));
    }
    headers
}

fn insert(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}

/// A whole answer from an entry: a JSON completion, or the complete SSE stream when `stream` is set.
pub fn entry_response(entry: &CachedCompletion, stream: bool, headers: HeaderMap) -> Response {
    let (content_type, body) = if stream {
        (EVENT_STREAM, entry.to_sse())
    } else {
        ("application/json", serde_json::to_string(&entry.to_response()).unwrap_or_default())
    };
    with_headers(StatusCode::OK, content_type, Body::from(body), headers)
}

/// A response with a status, content type, body and extra headers.
pub fn with_headers(
    status: StatusCode,
    content_type: &'static str,
    body: Body,
    headers: HeaderMap,
) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().extend(headers);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
