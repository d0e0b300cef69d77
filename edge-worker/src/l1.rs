//! L1: the exact-match cache at the edge, in the Workers Cache API (`caches.default`).
//!
//! Each entry is a [`CachedCompletion`] stored as JSON under a synthetic URL made from its key
//! (`https://edge-cache.invalid/v1:<hex>`), with `Cache-Control: max-age=<remaining ttl>` so the runtime
//! evicts it when it expires. The cache lives in one data center; the regional tier is what spans them.
//! Errors here never fail a request: a broken lookup is a miss and a failed store is logged.

use shared::cache_key::CacheKey;
use shared::completion::CachedCompletion;
use worker::{Cache, Headers, ResponseBuilder};

/// Host of the synthetic cache URLs; `.invalid` can never be a real origin.
const CACHE_URL_PREFIX: &str = "https://edge-cache.invalid/";

/// The edge cache.
pub struct L1 {
    /// `caches.default`.
    cache: Cache,
}

impl L1 {
    /// Opens the data center's default cache.
    pub fn open() -> Self {
        Self { cache: Cache::default() }
    }

    fn url(key: &str) -> String {
        format!("{CACHE_URL_PREFIX}{key}")
    }

    /// The live entry for `key` owned by `tenant`, if there is one.
    pub async fn get(&self, key: &CacheKey, tenant: &str, now_ms: i64) -> Option<CachedCompletion> {
        let mut response = match self.cache.get(Self::url(key.as_str()), false).await {
            Ok(Some(response)) => response,
            Ok(None) => return None,
            Err(e) => {
                worker::console_warn!("edge cache lookup failed, treating as a miss: {e}");
                return None;
            }
        };
        let entry: CachedCompletion = match response.json().await {
            Ok(entry) => entry,
            Err(e) => {
                worker::console_warn!("unreadable edge cache entry {key}, treating as a miss: {e}");
                return None;
            }
        };
        // The key already covers the tenant; checking both guards against a corrupted or foreign entry.
        // A paraphrase's answer is the matched entry, under the paraphrase's key.
        (entry.tenant == tenant && !entry.is_expired(now_ms)).then_some(entry)
    }

    /// Stores `entry` under `under` (its own key, or a paraphrase's the regional tier matched to it) for
    /// the rest of its lifetime. An entry without one left is not stored.
    pub async fn put(&self, under: &str, entry: &CachedCompletion, now_ms: i64) -> worker::Result<()> {
        let max_age = match entry.remaining_ttl_s(now_ms) {
            Some(0) => return Ok(()),
            Some(s) => s,
            // Entries the edge builds always have a TTL; keep a never-expiring one for a year at most.
            None => 365 * 86_400,
        };
        let json = serde_json::to_vec(entry).map_err(|e| worker::Error::RustError(e.to_string()))?;
        let headers = Headers::new();
        headers.set("content-type", "application/json")?;
        headers.set("cache-control", &format!("max-age={max_age}"))?;
        let response = ResponseBuilder::new().with_status(200).with_headers(headers).fixed(json);
        self.cache.put(Self::url(under), response).await
    }
}
