//! Canary model versions: while a model's next version is on trial, a stated share of the requests that
//! reach the cache are answered by it, and the rest by the current version.
//!
//! The share is taken by request, not at random: a request is in the canary's share when its cache key
//! at the current version falls in the first `percent` of a hundred buckets ([`in_share`]). The edge and
//! the regional nodes route alike ([`route`]), so every tier derives the same key for a request, the
//! same question always goes to the same arm (each arm's answers stay apart, keyed by their version, and
//! are hits within their arm), and a rollback or a promotion is one change in the feed.

use serde::{Deserialize, Serialize};

use crate::cache_key::CacheKey;
use crate::normalize::NormalizedRequest;

/// A model's version on trial and the share of requests it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Canary {
    /// The version on trial (above the current one).
    pub version: u64,
    /// Percent of requests it answers, 1 to 99.
    pub percent: u8,
}

/// Whether the request whose key at the current version is `key` is in a share of `percent` of requests.
pub fn in_share(key: &CacheKey, percent: u8) -> bool {
    let digest = key.as_str().rsplit(':').next().unwrap_or_default();
    let bucket = digest.get(..8).and_then(|hex| u32::from_str_radix(hex, 16).ok()).unwrap_or(0) % 100;
    bucket < u32::from(percent.min(100))
}

/// Moves `request` of `tenant` to `canary`'s version when it is in the canary's share; returns whether
/// it did. Called after normalization (tags included), before the key is derived.
pub fn route(tenant: &str, request: &mut NormalizedRequest, canary: Option<Canary>) -> bool {
    let Some(canary) = canary.filter(|c| c.version > request.model.version) else { return false };
    if !in_share(&CacheKey::derive(tenant, request), canary.percent) {
        return false;
    }
    request.model.version = canary.version;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::ModelTable;
    use crate::normalize::{normalize, Limits};
    use crate::openai::parse_chat_request;

    fn request(question: &str) -> NormalizedRequest {
        let body = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{question}"}}]}}"#);
        let parsed = parse_chat_request(body.as_bytes(), 1 << 20).expect("json");
        normalize(&parsed, &ModelTable::parse("m@1").expect("models"), &Limits::default()).expect("valid")
    }

    #[test]
    fn a_canary_takes_about_its_share_and_each_request_always_goes_to_the_same_arm() {
        let canary = Canary { version: 2, percent: 30 };
        let mut routed = 0;
        for i in 0..2_000 {
            let mut first = request(&format!("question {i}"));
            let mut again = request(&format!("question {i}"));
            let taken = route("t", &mut first, Some(canary));
            assert_eq!(taken, route("t", &mut again, Some(canary)), "the same arm every time");
            assert_eq!(first.model.version, if taken { 2 } else { 1 });
            routed += usize::from(taken);
        }
        assert!((500..700).contains(&routed), "{routed} of 2000 in a 30% share");
        let mut untouched = request("question 1");
        assert!(!route("t", &mut untouched, None));
        assert!(!route("t", &mut untouched, Some(Canary { version: 1, percent: 99 })), "not above current");
        assert!(!route("t", &mut untouched, Some(Canary { version: 2, percent: 0 })));
    }
}
