//! Cache tags: labels a client puts on a request (`X-Cache-Tags: stock:AAPL, region:eu`) naming the data
//! its answer depends on, so that one invalidation of a tag refuses every answer that carries it at every
//! tier (as a CDN purges by surrogate key), and `--refresh` regenerates the hottest of them.
//!
//! Tags are scoped to the tenant: one tenant's `stock:AAPL` is not another's. A request's tags are part of
//! its cache key's meaning ([`crate::cache_key`]), so an answer carries exactly the tags of the requests
//! it answers, and a request without tags keeps the key it always had.
//!
//! A tag is 1 to [`MAX_TAG_BYTES`] bytes of ASCII letters, digits and `:._-/=@+`; a request carries at most
//! [`MAX_TAGS`]. The list is kept sorted and without duplicates, so the same set in any order is one key.

use crate::error::RequestError;

/// The request header that carries a request's tags, comma-separated.
pub const CACHE_TAGS_HEADER: &str = "x-cache-tags";
/// Most tags one request may carry.
pub const MAX_TAGS: usize = 8;
/// Longest tag, in bytes.
pub const MAX_TAG_BYTES: usize = 64;

/// Whether `byte` may appear in a tag.
fn tag_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b":._-/=@+".contains(&byte)
}

/// Checks one tag's shape.
pub fn check_tag(tag: &str) -> Result<(), RequestError> {
    if tag.is_empty() || tag.len() > MAX_TAG_BYTES || !tag.bytes().all(tag_byte) {
        return Err(RequestError::invalid_param(
            "tag",
            format!(
                "a cache tag is 1 to {MAX_TAG_BYTES} ASCII letters, digits or `:._-/=@+` (got {:?})",
                tag.chars().take(MAX_TAG_BYTES + 8).collect::<String>()
            ),
        ));
    }
    Ok(())
}

/// The tags of an `X-Cache-Tags` header value (absent: none), sorted and without duplicates. Empty items
/// (`a,,b`, a trailing comma) are skipped; a malformed tag or more than [`MAX_TAGS`] is a 400.
pub fn parse(header: Option<&str>) -> Result<Vec<String>, RequestError> {
    let Some(header) = header else { return Ok(Vec::new()) };
    let mut tags = Vec::new();
    for item in header.split(',').map(str::trim).filter(|item| !item.is_empty()) {
        check_tag(item).map_err(|e| RequestError { param: Some("X-Cache-Tags".to_owned()), ..e })?;
        tags.push(item.to_owned());
    }
    tags.sort_unstable();
    tags.dedup();
    if tags.len() > MAX_TAGS {
        return Err(RequestError::invalid_param(
            "X-Cache-Tags",
            format!("a request carries at most {MAX_TAGS} cache tags (got {})", tags.len()),
        ));
    }
    Ok(tags)
}

/// Whether `tags` is a list [`parse`] could have produced: each well-formed, sorted, no duplicates, at
/// most [`MAX_TAGS`]. Tiers check what other tiers send them with it.
pub fn is_canonical(tags: &[String]) -> bool {
    tags.len() <= MAX_TAGS
        && tags.iter().all(|tag| check_tag(tag).is_ok())
        && tags.windows(2).all(|pair| pair[0] < pair[1])
}

/// The header value that carries `tags` (comma-separated).
pub fn header_value(tags: &[String]) -> String {
    tags.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_becomes_a_sorted_set() {
        assert_eq!(parse(None).expect("none"), Vec::<String>::new());
        assert_eq!(parse(Some(" , ")).expect("blank"), Vec::<String>::new());
        let tags = parse(Some("stock:AAPL, region:eu,stock:AAPL,")).expect("tags");
        assert_eq!(tags, ["region:eu", "stock:AAPL"]);
        assert!(is_canonical(&tags));
        assert_eq!(parse(Some(&header_value(&tags))).expect("again"), tags);
    }

    #[test]
    fn malformed_or_too_many_tags_are_a_400() {
        let long = "x".repeat(MAX_TAG_BYTES + 1);
        let many = (0..=MAX_TAGS).map(|i| format!("t{i}")).collect::<Vec<_>>().join(",");
        for bad in ["a b", "é", "a;b", long.as_str(), many.as_str(), "tag\"quote"] {
            let error = parse(Some(bad)).expect_err(bad);
            assert_eq!(error.status, 400, "{bad}");
        }
        assert!(!is_canonical(&["b".into(), "a".into()]), "unsorted");
        assert!(!is_canonical(&["a".into(), "a".into()]), "duplicated");
        assert!(!is_canonical(&[String::new()]), "empty");
    }
}
