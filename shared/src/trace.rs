//! W3C trace context (`traceparent: 00-<trace id>-<parent id>-<flags>`): one trace id follows a request
//! from the edge to the pod, each tier logging it and passing its own span id on as the parent.
//! Parsing and formatting only; the caller supplies the random bytes (no I/O here).

use crate::hex;

/// The HTTP header and gRPC metadata key.
pub const TRACEPARENT: &str = "traceparent";

/// The header every answer carries: the caller's request id, or one the tier gave the request.
pub const REQUEST_ID: &str = "x-request-id";

/// The caller's `x-request-id` when it is one a log can hold (1 to 128 visible ASCII characters).
pub fn valid_request_id(given: Option<&str>) -> Option<&str> {
    given.filter(|id| (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic()))
}

/// A parsed `traceparent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    trace_id: [u8; 16],
    parent_id: [u8; 8],
    flags: u8,
}

impl TraceParent {
    /// Parses a version-00 header; `None` for anything malformed, an all-zero id, or version `ff`
    /// (the receiver then starts a trace of its own, as the spec says).
    pub fn parse(header: &str) -> Option<Self> {
        let mut parts = header.trim().split('-');
        let (version, trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex_of = |s: &str, len: usize| {
            (s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
                .then(|| hex::decode(s))
                .flatten()
        };
        let version = hex_of(version, 2)?;
        // Version 00 has exactly four fields; a later version may add more after them.
        if version[0] == 0xff || (version[0] == 0 && parts.next().is_some()) {
            return None;
        }
        let trace_id: [u8; 16] = hex_of(trace, 32)?.try_into().ok()?;
        let parent_id: [u8; 8] = hex_of(parent, 16)?.try_into().ok()?;
        let flags = hex_of(flags, 2)?[0];
        (trace_id != [0; 16] && parent_id != [0; 8]).then_some(Self { trace_id, parent_id, flags })
    }

    /// A new trace from 24 random bytes (16 for the trace id, 8 for this span), sampled.
    pub fn start(random: [u8; 24]) -> Self {
        let mut trace_id = [0u8; 16];
        let mut parent_id = [0u8; 8];
        trace_id.copy_from_slice(&random[..16]);
        parent_id.copy_from_slice(&random[16..]);
        trace_id[0] |= 1; // never all zeroes
        parent_id[0] |= 1;
        Self { trace_id, parent_id, flags: 1 }
    }

    /// The context this tier passes on: the same trace, with `span` (8 random bytes) as the parent.
    pub fn child(&self, mut span: [u8; 8]) -> Self {
        span[0] |= 1;
        Self { parent_id: span, ..*self }
    }

    /// The trace id as 32 hex digits, as every tier logs it.
    pub fn trace_id(&self) -> String {
        hex::encode(&self.trace_id)
    }

    /// The header's parent id as 16 hex digits: in a context a tier made ([`Self::child`]), that tier's own
    /// span; in a header as received, the caller's.
    pub fn span_id(&self) -> String {
        hex::encode(&self.parent_id)
    }

    /// The header value.
    pub fn header(&self) -> String {
        format!("00-{}-{}-{:02x}", hex::encode(&self.trace_id), hex::encode(&self.parent_id), self.flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn parses_formats_and_continues_a_trace() {
        let parsed = TraceParent::parse(EXAMPLE).expect("the spec's example");
        assert_eq!(parsed.header(), EXAMPLE);
        assert_eq!(parsed.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let child = parsed.child([7; 8]);
        assert_eq!(child.trace_id(), parsed.trace_id());
        assert_ne!(child.header(), parsed.header());
        assert_eq!(TraceParent::parse(&child.header()), Some(child));
        let started = TraceParent::start([0; 24]);
        assert_eq!(TraceParent::parse(&started.header()), Some(started), "never an invalid all-zero id");
    }

    #[test]
    fn refuses_what_the_spec_says_to_ignore() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
        assert!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future").is_some()
        );
    }

    #[test]
    fn a_request_id_is_kept_only_when_a_log_can_hold_it() {
        assert_eq!(valid_request_id(Some("req-42")), Some("req-42"));
        assert_eq!(valid_request_id(Some("")), None);
        assert_eq!(valid_request_id(Some("two words")), None);
        assert_eq!(valid_request_id(Some(&"x".repeat(129))), None);
        assert_eq!(valid_request_id(None), None);
    }
}
