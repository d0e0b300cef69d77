//! Building responses: cached entries as JSON or SSE, with the cache headers every answer carries.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use shared::completion::{CachedCompletion, Rendering};
use shared::server_timing::ServerTiming;

use crate::request_path::ClassTtl;
use crate::semantic::cache::SemanticHit;

/// `Content-Type` of server-sent events.
pub const EVENT_STREAM: &str = "text/event-stream";

/// Headers every chat answer carries: which tier answered, the key, timing, the content class and its TTL,
/// and (when known) validators.
///
/// `X-Cache-TTL` is the TTL the class gets under this node's policy; `Cache-Control: max-age` is what is
/// left of the entry's own life (it may have been stored under another policy, or capped by the tenant's).
/// An answer that must not be stored (realtime, sampled, or asked `no-store`) says `no-store`, so that
/// neither the edge nor the client keeps it. `X-Cache-Created-Ms` is the entry's creation time at the
/// core, which the edge compares with the core's invalidations; with `X-Cache-Entry-Ttl-S` and
/// `X-Cache-Signature` the edge can check the core's signature over the answer.
pub fn cache_headers(
    x_cache: &'static str,
    key: &str,
    timing: &ServerTiming,
    labels: Labels,
    entry: Option<&CachedCompletion>,
) -> HeaderMap {
    let Labels { class, store } = labels;
    let mut headers = HeaderMap::new();
    headers.insert(HeaderName::from_static(shared::X_CACHE), HeaderValue::from_static(x_cache));
    insert(&mut headers, HeaderName::from_static(shared::CACHE_KEY_HEADER), key);
    insert(&mut headers, HeaderName::from_static("server-timing"), timing.as_str());
    headers.insert(
        HeaderName::from_static(shared::CACHE_CLASS_HEADER),
        HeaderValue::from_static(class.class.as_str()),
    );
    headers.insert(HeaderName::from_static(shared::CACHE_TTL_HEADER), HeaderValue::from(class.ttl_s));
    if let Some(entry) = entry {
        insert(&mut headers, header::ETAG, &entry.etag);
        headers.insert(
            HeaderName::from_static(shared::MODEL_VERSION_HEADER),
            HeaderValue::from(entry.model_version),
        );
        headers.insert(
            HeaderName::from_static(shared::CACHE_CREATED_HEADER),
            HeaderValue::from(entry.created_ms),
        );
        headers
            .insert(HeaderName::from_static(shared::CACHE_ENTRY_TTL_HEADER), HeaderValue::from(entry.ttl_s));
        if !entry.signature.is_empty() {
            insert(&mut headers, HeaderName::from_static(shared::CACHE_SIGNATURE_HEADER), &entry.signature);
            if let Some(question) = &entry.question {
                let partition = HeaderName::from_static(shared::CACHE_QUESTION_PARTITION_HEADER);
                insert(&mut headers, partition, &question.partition);
                let text = shared::hex::encode(question.text.as_bytes());
                insert(&mut headers, HeaderName::from_static(shared::CACHE_QUESTION_TEXT_HEADER), &text);
            }
        }
    }
    if !store {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    } else if let Some(entry) = entry {
        let max_age = entry.remaining_ttl_s(crate::clock::now_ms()).unwrap_or(365 * 86_400);
        insert(&mut headers, header::CACHE_CONTROL, &format!("private, max-age={max_age}"));
    }
    headers
}

/// How an answer is labelled: its content class and TTL, and whether it may be stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Labels {
    /// The request's class and the TTL it gets.
    pub class: ClassTtl,
    /// Whether the answer may be kept by the edge and the client.
    pub store: bool,
}

/// Adds what a semantic hit matched: the similarity and the key of the cached entry served.
pub fn semantic_headers(headers: &mut HeaderMap, hit: &SemanticHit) {
    insert(
        headers,
        HeaderName::from_static(shared::CACHE_SIMILARITY_HEADER),
        &format!("{:.4}", hit.similarity),
    );
    insert(headers, HeaderName::from_static(shared::CACHE_MATCHED_KEY_HEADER), &hit.key);
}

/// Marks an answer that came from another identical request's flight to the core.
pub fn mark_coalesced(headers: &mut HeaderMap) {
    headers.insert(HeaderName::from_static(shared::CACHE_COALESCED_HEADER), HeaderValue::from_static("true"));
}

/// Marks an answer the asked model's fallback gave: names the model, and keeps the edge from storing it
/// under the asked model's key (`no-store`; it is cached here and at the core under the fallback's).
pub fn mark_fallback(headers: &mut HeaderMap, model: &str) {
    insert(headers, HeaderName::from_static(shared::MODEL_FALLBACK_HEADER), model);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

fn insert(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}

/// A whole answer from an entry, as the request asked for it: a JSON completion, or the complete SSE
/// stream, of a chat or a text completion.
pub fn entry_response(entry: &CachedCompletion, rendering: Rendering<'_>, headers: HeaderMap) -> Response {
    with_headers(StatusCode::OK, rendering.content_type(), Body::from(entry.render(rendering)), headers)
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

#[cfg(test)]
mod tests {
    use shared::content_class::{ContentClass, TtlPolicy};

    use super::*;

    fn entry(ttl_s: u64) -> CachedCompletion {
        CachedCompletion {
            tenant: "t".into(),
            created_ms: crate::clock::now_ms(),
            ttl_s,
            ..CachedCompletion::example("k", "hi")
        }
    }

    fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
        headers.get(name).and_then(|v| v.to_str().ok())
    }

    #[test]
    fn every_answer_names_its_class_and_ttl() {
        let stable = ClassTtl::new(ContentClass::Stable, &TtlPolicy::default());
        let timing = ServerTiming::default();
        for entry in [None, Some(entry(86_400))] {
            let labels = Labels { class: stable, store: true };
            let headers = cache_headers("MISS", "k", &timing, labels, entry.as_ref());
            assert_eq!(header(&headers, "x-cache-class"), Some("stable"));
            assert_eq!(header(&headers, "x-cache-ttl"), Some("86400"));
        }
        let volatile = ClassTtl::new(ContentClass::Volatile, &TtlPolicy::default());
        let labels = Labels { class: volatile, store: true };
        let headers = cache_headers("HIT-REGIONAL", "k", &timing, labels, Some(&entry(300)));
        assert!(header(&headers, "x-cache-created-ms").is_some_and(|v| v.parse::<i64>().is_ok()));
        assert_eq!(header(&headers, "x-cache-class"), Some("volatile"));
        assert_eq!(header(&headers, "x-cache-ttl"), Some("300"));
        let max_age = header(&headers, "cache-control").and_then(|v| v.strip_prefix("private, max-age="));
        assert!(max_age.and_then(|v| v.parse::<u64>().ok()).is_some_and(|s| s <= 300), "{max_age:?}");
    }

    #[test]
    fn realtime_answers_are_not_to_be_stored() {
        let realtime = ClassTtl::new(ContentClass::Realtime, &TtlPolicy::default());
        assert!(!realtime.cacheable());
        let labels = Labels { class: realtime, store: false };
        let headers = cache_headers("MISS", "k", &ServerTiming::default(), labels, Some(&entry(1)));
        assert_eq!(header(&headers, "x-cache-class"), Some("realtime"));
        assert_eq!(header(&headers, "x-cache-ttl"), Some("0"));
        assert_eq!(header(&headers, "cache-control"), Some("no-store"));
        assert!(headers.contains_key(header::ETAG));
    }
}
