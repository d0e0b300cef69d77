//! The worker's configuration: wrangler `[vars]` and secrets, read and checked on every request.
//!
//! | Name            | Kind   | Meaning                                                                 |
//! |-----------------|--------|-------------------------------------------------------------------------|
//! | `API_KEYS`      | secret | Tenant key table, `tenant:sha256hex,...` ([`shared::auth::TenantKeys`]). |
//! | `TIER_SECRET`   | secret | Insecure development secret (at least 32 bytes), sent in `x-mesh-secret` when there is no `REGIONAL_MTLS` binding. |
//! | `REGIONAL_URLS` | var    | Comma-separated regional base URLs, tried in order: `https://`, or `http://` to a loopback host (development). |
//! | `MODELS`        | var    | Served models, `name@version,...`, until the core's feed names newer versions. |
//! | `CACHE_TTL_S`   | var    | Edge TTL when the regional answer has no `max-age`; 0 turns L1 off.     |
//! | `SEMANTIC_THRESHOLDS` | var | The edge's own small-embedding paraphrase matching: `volatile,default,stable` similarities (e.g. `0.90,0.88,0.85`), or `off` (the default: the edge serves only paraphrases the regional tier matched). |
//! | `HOTSET_REFRESH_S` | var | Seconds between hot-set pulls per isolate (default 10); 0 turns the hot set off. |
//! | `HOTSET_MAX_ENTRIES` | var | Hot entries one isolate holds (default 20000).                     |
//! | `HOTSET_PER_TENANT` | var | Hot entries of one tenant (default 1000).                           |
//! | `REGIONAL_TIMEOUT_MS` | var | How long a regional node may take to answer (headers) before the next is tried (default 30000). |
//! | `CHANGES_REFRESH_MS` | var | Milliseconds between pulls of the core's changes per isolate, after a response (default 100). |
//! | `CHANGES_BOUND_MS` | var | Staleness bound: no cached answer is served unless the isolate's view of the core's changes was confirmed this recently; an older view is pulled first (default 1000). |
//! | `ANSWER_PUBLIC_KEY` | var | The core's answer-signing public key (64 hex digits, `answer-signing.pub` of `mesh certs`): when set, the edge keeps only answers the core signed, from the hot set and from fills. |
//! | `HOTSET` | KV binding | Optional: the last hot set, so a cold isolate starts warm.          |
//!
//! Parsing is pure (a lookup function in, a [`Config`] out) so it is tested natively; `lib.rs` feeds it
//! from the worker's `Env`.

use shared::answer_signature::AnswerVerifier;
use shared::auth::TenantKeys;
use shared::content_class::SemanticThresholds;
use shared::models::{ModelTable, DEFAULT_MODELS};

use crate::hot_set::HotSetLimits;

/// `CACHE_TTL_S` when the variable is not set: one day.
pub const DEFAULT_CACHE_TTL_S: u64 = 86_400;
/// `HOTSET_REFRESH_S` when the variable is not set.
pub const DEFAULT_HOTSET_REFRESH_S: u64 = 10;
/// `HOTSET_MAX_ENTRIES` when the variable is not set.
pub const DEFAULT_HOTSET_MAX_ENTRIES: usize = 20_000;
/// `HOTSET_PER_TENANT` when the variable is not set.
pub const DEFAULT_HOTSET_PER_TENANT: usize = 1_000;
/// `SEMANTIC_THRESHOLDS` suggested when the edge's own matching is turned on: lower than the regional
/// tier's (0.96, 0.94, 0.92), because the small embedding scores paraphrases lower while the verifier
/// does the refusing. On the 596 labelled pairs, small embedding + verifier: precision 0.992 / recall
/// 0.433 at 0.85, 0.991 / 0.388 at 0.90, 0.990 / 0.349 at 0.92 (`distill-edge-table --evaluate`).
///
/// Off by default: the edge must never be less precise than the regional tier, and its small
/// embedding has not been shown to hold the regional tier's bound on questions nobody tuned for. By
/// default the edge serves a paraphrase only when the regional tier matched it (its answer is kept
/// under the paraphrase's key, bound to the matched entry's invalidations).
pub const DEFAULT_SEMANTIC_THRESHOLDS: SemanticThresholds = SemanticThresholds::SMALL_EMBEDDING;
/// `REGIONAL_TIMEOUT_MS` when the variable is not set.
pub const DEFAULT_REGIONAL_TIMEOUT_MS: u64 = 30_000;
/// `CHANGES_REFRESH_MS` when the variable is not set.
pub const DEFAULT_CHANGES_REFRESH_MS: u64 = 100;
/// `CHANGES_BOUND_MS` when the variable is not set.
pub const DEFAULT_CHANGES_BOUND_MS: u64 = 1_000;

/// The checked configuration of one worker invocation.
#[derive(Clone)]
pub struct Config {
    /// Tenants and the digests of their API keys.
    pub keys: TenantKeys,
    /// The secret that proves to a regional node that a request comes from this tier.
    pub tier_secret: String,
    /// Regional base URLs without a trailing slash, in the order they are tried.
    pub regional_urls: Vec<String>,
    /// Served models and their current versions (part of every cache key).
    pub models: ModelTable,
    /// TTL for entries whose regional answer carries no `max-age`; 0 disables the edge cache.
    pub cache_ttl_s: u64,
    /// Similarity thresholds of the small-embedding semantic tier; `None` turns it off.
    pub semantic: Option<SemanticThresholds>,
    /// Seconds between hot-set pulls; 0 turns the hot set off.
    pub hotset_refresh_s: u64,
    /// Bounds of the isolate's hot set.
    pub hotset_limits: HotSetLimits,
    /// Milliseconds a regional node may take to start answering before the next one is tried.
    pub regional_timeout_ms: u64,
    /// Milliseconds between background pulls of the core's changes.
    pub changes_refresh_ms: u64,
    /// Oldest view of the core's changes that cached answers are served under, in milliseconds.
    pub changes_bound_ms: u64,
    /// Checks the core's signature on answers kept here; `None` keeps unsigned answers too.
    pub answer_verifier: Option<AnswerVerifier>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("keys", &self.keys.len())
            .field("tier_secret", &"<redacted>")
            .field("regional_urls", &self.regional_urls)
            .field("models", &self.models)
            .field("cache_ttl_s", &self.cache_ttl_s)
            .field("semantic", &self.semantic)
            .field("hotset_refresh_s", &self.hotset_refresh_s)
            .field("hotset_limits", &self.hotset_limits)
            .field("regional_timeout_ms", &self.regional_timeout_ms)
            .field("changes_refresh_ms", &self.changes_refresh_ms)
            .field("changes_bound_ms", &self.changes_bound_ms)
            .field("answer_verifier", &self.answer_verifier.is_some())
            .finish()
    }
}

impl Config {
    /// Reads the configuration through `lookup` (variable name to value). Errors name the variable but
    /// never echo a secret's value.
    pub fn parse(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let required = |name: &str| {
            lookup(name).filter(|v| !v.trim().is_empty()).ok_or_else(|| format!("{name} is not set"))
        };
        let keys = TenantKeys::parse(&required("API_KEYS")?).map_err(|e| format!("API_KEYS: {e}"))?;
        if keys.is_empty() {
            return Err("API_KEYS has no keys".into());
        }
        let tier_secret = required("TIER_SECRET")?.trim().to_owned();
        if tier_secret.len() < MIN_TIER_SECRET_BYTES {
            return Err(format!("TIER_SECRET must be at least {MIN_TIER_SECRET_BYTES} bytes"));
        }
        let regional_urls = parse_urls(&required("REGIONAL_URLS")?)?;
        let models_table =
            lookup("MODELS").filter(|v| !v.trim().is_empty()).unwrap_or_else(|| DEFAULT_MODELS.to_owned());
        let models = ModelTable::parse(&models_table).map_err(|e| format!("MODELS: {e}"))?;
        let number = |name: &str, default: u64| match lookup(name).filter(|v| !v.trim().is_empty()) {
            None => Ok(default),
            Some(v) => v.trim().parse::<u64>().map_err(|_| format!("{name}: {v:?} is not a whole number")),
        };
        let cache_ttl_s = number("CACHE_TTL_S", DEFAULT_CACHE_TTL_S)?;
        let semantic = match lookup("SEMANTIC_THRESHOLDS").filter(|v| !v.trim().is_empty()) {
            None => None,
            Some(v) if v.trim().eq_ignore_ascii_case("off") => None,
            Some(v) => Some(SemanticThresholds::parse(&v).map_err(|e| format!("SEMANTIC_THRESHOLDS: {e}"))?),
        };
        let hotset_limits = HotSetLimits {
            total: number("HOTSET_MAX_ENTRIES", DEFAULT_HOTSET_MAX_ENTRIES as u64)? as usize,
            per_tenant: number("HOTSET_PER_TENANT", DEFAULT_HOTSET_PER_TENANT as u64)? as usize,
        };
        let answer_verifier = lookup("ANSWER_PUBLIC_KEY")
            .filter(|v| !v.trim().is_empty())
            .map(|v| AnswerVerifier::from_hex(&v).map_err(|e| format!("ANSWER_PUBLIC_KEY: {e}")))
            .transpose()?;
        Ok(Self {
            keys,
            tier_secret,
            regional_urls,
            models,
            cache_ttl_s,
            semantic,
            hotset_refresh_s: number("HOTSET_REFRESH_S", DEFAULT_HOTSET_REFRESH_S)?,
            hotset_limits,
            regional_timeout_ms: number("REGIONAL_TIMEOUT_MS", DEFAULT_REGIONAL_TIMEOUT_MS)?,
            changes_refresh_ms: number("CHANGES_REFRESH_MS", DEFAULT_CHANGES_REFRESH_MS)?,
            changes_bound_ms: number("CHANGES_BOUND_MS", DEFAULT_CHANGES_BOUND_MS)?,
            answer_verifier,
        })
    }
}

fn parse_urls(list: &str) -> Result<Vec<String>, String> {
    let urls: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| u.trim_end_matches('/').to_owned())
        .collect();
    if let Some(bad) = urls.iter().find(|u| !(u.starts_with("https://") || is_loopback_http(u))) {
        return Err(format!(
            "REGIONAL_URLS: {bad:?} is not an https:// URL (plain http:// is for loopback hosts only)"
        ));
    }
    if urls.is_empty() {
        return Err("REGIONAL_URLS has no URL".into());
    }
    Ok(urls)
}

/// The shortest `TIER_SECRET` accepted, as the daemons require of theirs.
const MIN_TIER_SECRET_BYTES: usize = 32;

/// Whether `url` is plain `http://` to this machine (`127.0.0.0/8`, `localhost`, `[::1]`): the only place
/// an unencrypted hop is allowed, for `wrangler dev` next to a local mesh.
fn is_loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else { return false };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(host, _)| host),
    };
    host == "localhost"
        || host == "::1"
        || host.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "a-development-secret-of-32-bytes!";
    const DIGEST: &str = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8";

    fn parse(vars: &[(&str, &str)]) -> Result<Config, String> {
        Config::parse(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned()))
    }

    #[test]
    fn reads_vars_and_fills_defaults() {
        let keys = format!("dev:{DIGEST}");
        let config = parse(&[
            ("API_KEYS", &keys),
            ("TIER_SECRET", SECRET),
            ("REGIONAL_URLS", " http://127.0.0.1:1/ , https://b "),
        ])
        .expect("valid");
        assert_eq!(config.regional_urls, vec!["http://127.0.0.1:1".to_owned(), "https://b".to_owned()]);
        for local in ["http://localhost:8081", "http://[::1]:1/", "http://127.0.0.2"] {
            assert!(is_loopback_http(local), "{local}");
        }
        assert_eq!(config.cache_ttl_s, DEFAULT_CACHE_TTL_S);
        assert_eq!(config.models, ModelTable::parse(DEFAULT_MODELS).expect("default table"));
        assert_eq!(config.keys.tenant_for_key("password"), Some("dev"));
        let with_ttl = parse(&[
            ("API_KEYS", &keys),
            ("TIER_SECRET", SECRET),
            ("REGIONAL_URLS", "https://a"),
            ("CACHE_TTL_S", "0"),
        ]);
        assert_eq!(with_ttl.map(|c| c.cache_ttl_s), Ok(0));
        assert_eq!(config.semantic, None, "the edge's own paraphrase matching is opt-in");
        assert_eq!(config.hotset_refresh_s, DEFAULT_HOTSET_REFRESH_S);
        let tuned = parse(&[
            ("API_KEYS", &keys),
            ("TIER_SECRET", SECRET),
            ("REGIONAL_URLS", "https://a"),
            ("SEMANTIC_THRESHOLDS", "0.90,0.88,0.85"),
            ("HOTSET_PER_TENANT", "5"),
        ])
        .expect("valid");
        assert_eq!((tuned.semantic, tuned.hotset_limits.per_tenant), (Some(DEFAULT_SEMANTIC_THRESHOLDS), 5));
        assert!(config.answer_verifier.is_none(), "unsigned answers are kept unless a key is named");
        let public = shared::answer_signature::AnswerSigner::from_seed([3; 32]).public_hex();
        let verifying = parse(&[
            ("API_KEYS", &keys),
            ("TIER_SECRET", SECRET),
            ("REGIONAL_URLS", "https://a"),
            ("ANSWER_PUBLIC_KEY", &public),
        ])
        .expect("valid");
        assert!(verifying.answer_verifier.is_some());
    }

    #[test]
    fn rejects_missing_or_malformed_vars_without_echoing_secrets() {
        let keys = format!("dev:{DIGEST}");
        let base = [("API_KEYS", keys.as_str()), ("TIER_SECRET", SECRET), ("REGIONAL_URLS", "https://a")];
        for missing in ["API_KEYS", "TIER_SECRET", "REGIONAL_URLS"] {
            let vars: Vec<_> = base.iter().copied().filter(|(n, _)| *n != missing).collect();
            assert!(parse(&vars).is_err_and(|e| e.contains(missing)), "{missing}");
        }
        let bad = [
            ("REGIONAL_URLS", "ftp://x"),
            ("REGIONAL_URLS", "http://regional.example.com"),
            ("REGIONAL_URLS", "http://127.0.0.1.example.com:80"),
            ("TIER_SECRET", "hunter2"),
            ("MODELS", "nover"),
            ("CACHE_TTL_S", "day"),
            ("SEMANTIC_THRESHOLDS", "0.9"),
            ("HOTSET_REFRESH_S", "-1"),
            ("REGIONAL_TIMEOUT_MS", "soon"),
            ("ANSWER_PUBLIC_KEY", "not-a-key"),
            ("API_KEYS", "dev:abc"),
            ("API_KEYS", " "),
        ];
        for (name, value) in bad {
            let mut vars: Vec<_> = base.iter().copied().filter(|(n, _)| *n != name).collect();
            vars.push((name, value));
            let err = parse(&vars).expect_err(name);
            assert!(err.contains(name) && !err.contains("hunter2") && !err.contains(SECRET), "{err}");
        }
    }
}
