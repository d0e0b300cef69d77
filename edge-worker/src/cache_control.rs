//! `Cache-Control` both ways: what a regional answer allows the edge to keep ([`parse`]), and what a
//! client's request allows the edge to serve and store ([`RequestCaching::parse`]).

/// The edge's reading of a `Cache-Control` response header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// `no-store`, `no-cache` or `max-age=0`: do not keep it at the edge. (`private` is allowed: edge
    /// entries are keyed per tenant, so they are never shared between tenants.)
    DoNotStore,
    /// `max-age=N` with N > 0: keep it for N more seconds.
    MaxAge(u64),
    /// No directive about lifetime: the edge's own TTL applies.
    Unspecified,
}

/// Reads a `Cache-Control` header value (absent means [`Freshness::Unspecified`]).
pub fn parse(header: Option<&str>) -> Freshness {
    let mut max_age = None;
    for directive in header.unwrap_or_default().split(',').map(str::trim) {
        let (name, value) =
            directive.split_once('=').map_or((directive, None), |(n, v)| (n.trim(), Some(v.trim())));
        match name.to_ascii_lowercase().as_str() {
            "no-store" | "no-cache" => return Freshness::DoNotStore,
            // `s-maxage` is meant for shared caches like this one and wins over `max-age`.
            "s-maxage" => max_age = value.and_then(|v| v.trim_matches('"').parse::<u64>().ok()).or(max_age),
            "max-age" if max_age.is_none() => {
                max_age = value.and_then(|v| v.trim_matches('"').parse::<u64>().ok())
            }
            _ => {}
        }
    }
    match max_age {
        Some(0) => Freshness::DoNotStore,
        Some(n) => Freshness::MaxAge(n),
        None => Freshness::Unspecified,
    }
}

/// What a client's `Cache-Control` request header asks of the edge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestCaching {
    /// `no-store`: neither answer from the edge's caches nor keep the answer.
    pub no_store: bool,
    /// `no-cache`: do not answer from the edge's caches without the regional tier (the request goes on,
    /// and its answer refreshes the edge entry).
    pub no_cache: bool,
    /// `max-age=N`: an entry older than N seconds is not served from the edge.
    pub max_age_s: Option<u64>,
}

impl RequestCaching {
    /// Reads a request's `Cache-Control` value (absent: no constraints).
    pub fn parse(header: Option<&str>) -> Self {
        let mut out = Self::default();
        for directive in header.unwrap_or_default().split(',').map(str::trim) {
            let (name, value) =
                directive.split_once('=').map_or((directive, None), |(n, v)| (n.trim(), Some(v.trim())));
            match name.to_ascii_lowercase().as_str() {
                "no-store" => out.no_store = true,
                "no-cache" => out.no_cache = true,
                "max-age" => {
                    // An unreadable max-age is treated as 0 (RFC 9111: a cache must not serve stale).
                    let age = value.and_then(|v| v.trim_matches('"').parse::<u64>().ok()).unwrap_or(0);
                    out.max_age_s = Some(out.max_age_s.map_or(age, |held| held.min(age)));
                }
                _ => {}
            }
        }
        out
    }

    /// Whether the edge may answer from its caches at all.
    pub fn may_read(&self) -> bool {
        !self.no_store && !self.no_cache
    }

    /// Whether an entry created at `created_ms` is fresh enough to serve at `now_ms`.
    pub fn accepts_age(&self, created_ms: i64, now_ms: i64) -> bool {
        self.may_read()
            && self
                .max_age_s
                .is_none_or(|max| (now_ms - created_ms).max(0) as u64 <= max.saturating_mul(1000))
    }

    /// Whether the edge may keep the answer.
    pub fn may_store(&self) -> bool {
        !self.no_store
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_a_request_allows() {
        let none = RequestCaching::parse(None);
        assert!(none.may_read() && none.may_store() && none.accepts_age(0, i64::MAX / 2));
        let no_store = RequestCaching::parse(Some("No-Store"));
        assert!(!no_store.may_read() && !no_store.may_store());
        let no_cache = RequestCaching::parse(Some("no-cache"));
        assert!(!no_cache.may_read() && no_cache.may_store());
        let young = RequestCaching::parse(Some("max-age=60, max-age=\"30\""));
        assert_eq!(young.max_age_s, Some(30));
        assert!(young.accepts_age(1_000, 31_000) && !young.accepts_age(1_000, 31_001));
        assert_eq!(RequestCaching::parse(Some("max-age=soon")).max_age_s, Some(0));
        assert!(RequestCaching::parse(Some("only-if-cached")).may_read());
    }

    #[test]
    fn reads_lifetime_directives() {
        assert_eq!(parse(None), Freshness::Unspecified);
        assert_eq!(parse(Some("public")), Freshness::Unspecified);
        assert_eq!(parse(Some("public, max-age=600")), Freshness::MaxAge(600));
        assert_eq!(parse(Some("max-age=600, s-maxage=60")), Freshness::MaxAge(60));
        assert_eq!(parse(Some("s-maxage=60, max-age=600")), Freshness::MaxAge(60));
        assert_eq!(parse(Some("max-age=0")), Freshness::DoNotStore);
        assert_eq!(parse(Some("max-age=600, No-Store")), Freshness::DoNotStore);
        assert_eq!(parse(Some("private, max-age=600")), Freshness::MaxAge(600));
        assert_eq!(parse(Some("max-age=soon")), Freshness::Unspecified);
    }
}
