//! What a regional answer's `Cache-Control` header allows the edge to keep.

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

#[cfg(test)]
mod tests {
    use super::*;

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
