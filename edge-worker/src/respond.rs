//! Building responses: OpenAI-shaped errors, edge hits, and regional answers relayed to the client.

use shared::cache_key::CacheKey;
use shared::completion::{CachedCompletion, Rendering};
use shared::server_timing::ServerTiming;
use shared::{RequestError, CACHE_KEY_HEADER, CACHE_MATCHED_KEY_HEADER, CACHE_SIMILARITY_HEADER, X_CACHE};
use worker::{Headers, Response, ResponseBuilder, Result};

/// Upstream headers that are not relayed: hop-by-hop ones, ones the runtime sets for the new body, and
/// the mesh's internal ones.
const NOT_RELAYED: &[&str] = &[
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "content-encoding",
    "set-cookie",
    "server",
    "server-timing",
];

/// An OpenAI-shaped JSON error; `allow` lists the methods of a 405.
pub fn error(err: &RequestError, allow: Option<&str>) -> Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    if let Some(methods) = allow {
        headers.set("allow", methods)?;
    }
    Ok(ResponseBuilder::new().with_status(err.status).with_headers(headers).fixed(err.to_json().into_bytes()))
}

/// How an edge hit matched its entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EdgeMatch<'a> {
    /// By key (L1 or the hot set): `X-Cache: HIT-EDGE`.
    Exact,
    /// A verified paraphrase: `X-Cache: HIT-EDGE-SEMANTIC`, with the request's own key, the matched
    /// entry's key and, when the edge matched it itself, the similarity.
    Semantic {
        /// The request's key.
        request_key: &'a str,
        /// Cosine of the two questions' small embeddings; `None` when the regional tier matched them.
        similarity: Option<f32>,
    },
}

/// An answer from the edge, as JSON or as a complete event stream, as `rendering` asks (a chat or a
/// text completion; a greedy request's `n` as that many copies); or, when the client already holds it
/// (`not_modified`: its `If-None-Match` names the entry's ETag), a 304 without a body.
pub fn edge_hit(
    entry: &CachedCompletion,
    matched: EdgeMatch<'_>,
    rendering: Rendering<'_>,
    not_modified: bool,
    edge_ms: f64,
) -> Result<Response> {
    let headers = Headers::new();
    headers.set("etag", &entry.etag)?;
    headers.set(shared::MODEL_VERSION_HEADER, &entry.model_version.to_string())?;
    headers.set(shared::CACHE_CREATED_HEADER, &entry.created_ms.to_string())?;
    match matched {
        EdgeMatch::Exact => {
            headers.set(X_CACHE, "HIT-EDGE")?;
            headers.set(CACHE_KEY_HEADER, &entry.key)?;
        }
        EdgeMatch::Semantic { request_key, similarity } => {
            headers.set(X_CACHE, "HIT-EDGE-SEMANTIC")?;
            headers.set(CACHE_KEY_HEADER, request_key)?;
            headers.set(CACHE_MATCHED_KEY_HEADER, &entry.key)?;
            if let Some(similarity) = similarity {
                headers.set(CACHE_SIMILARITY_HEADER, &format!("{similarity:.4}"))?;
            }
        }
    }
    headers.set("server-timing", ServerTiming::from_header(None).push_ms("edge", edge_ms).as_str())?;
    if not_modified {
        return Ok(ResponseBuilder::new().with_status(304).with_headers(headers).empty());
    }
    headers.set("content-type", rendering.content_type())?;
    if rendering.delivery.is_stream() {
        headers.set("cache-control", "no-cache")?;
    }
    let body = entry.render(rendering).into_bytes();
    Ok(ResponseBuilder::new().with_status(200).with_headers(headers).fixed(body))
}

/// Whether an `If-None-Match` header value names `etag` (`*`, or one of a list; weak comparison, which
/// is what RFC 9110 prescribes for this header).
pub fn etag_matches(if_none_match: &str, etag: &str) -> bool {
    let opaque = |tag: &str| tag.trim().trim_start_matches("W/").to_owned();
    if_none_match.split(',').any(|tag| tag.trim() == "*" || opaque(tag) == opaque(etag))
}

/// The headers to send the client with a regional answer: the regional ones (minus [`NOT_RELAYED`] and
/// the mesh's `x-mesh-*`), with the edge's time put first in `Server-Timing` and the edge's key in
/// `X-Cache-Key` when the regional tier sent none.
pub fn relayed_headers(upstream: &Headers, key: &CacheKey, edge_ms: f64) -> Result<Headers> {
    let headers = Headers::new();
    for (name, value) in upstream.entries() {
        let name = name.to_ascii_lowercase();
        if !NOT_RELAYED.contains(&name.as_str()) && !name.starts_with("x-mesh-") {
            headers.append(&name, &value)?;
        }
    }
    if !headers.has(CACHE_KEY_HEADER)? {
        headers.set(CACHE_KEY_HEADER, key.as_str())?;
    }
    let mut timing = ServerTiming::from_header(upstream.get("server-timing")?.as_deref());
    headers.set("server-timing", timing.prepend_ms("edge", edge_ms).as_str())?;
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_lists_wildcards_and_weak_tags() {
        let etag = "\"abc\"";
        for value in ["\"abc\"", " \"x\", \"abc\" ", "W/\"abc\"", "*"] {
            assert!(etag_matches(value, etag), "{value}");
        }
        for value in ["\"abd\"", "abc", "", "\"x\", \"y\""] {
            assert!(!etag_matches(value, etag), "{value}");
        }
    }
}
