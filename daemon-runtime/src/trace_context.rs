//! The W3C trace context between the tiers ([`shared::trace`]): each tier continues the trace it was
//! given (or starts one), logs its id, and passes its own span on as the parent, as `traceparent`
//! gRPC metadata or HTTP header.

use std::hash::{BuildHasher as _, Hasher as _};
use std::sync::atomic::{AtomicU64, Ordering};

use shared::trace::{TraceParent, TRACEPARENT};
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::Request;

/// `N` unpredictable-enough bytes for trace and span ids (not for secrets): the process's random
/// hasher keys, a counter and the clock.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut out = [0u8; N];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        hasher.write_usize(i);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        hasher.write_u128(nanos.as_nanos());
        chunk.copy_from_slice(&hasher.finish().to_le_bytes()[..chunk.len()]);
    }
    out
}

/// This tier's context: a child of `incoming` when that is a valid `traceparent`, else a new trace.
pub fn continue_or_start(incoming: Option<&str>) -> TraceParent {
    match incoming.and_then(TraceParent::parse) {
        Some(parent) => parent.child(random_bytes()),
        None => TraceParent::start(random_bytes()),
    }
}

/// This tier's context for a gRPC call carrying `metadata`.
pub fn from_metadata(metadata: &MetadataMap) -> TraceParent {
    continue_or_start(metadata.get(TRACEPARENT).and_then(|v| v.to_str().ok()))
}

/// The caller's context as received with a gRPC call, when it sent a valid one.
pub fn caller_of(metadata: &MetadataMap) -> Option<TraceParent> {
    metadata.get(TRACEPARENT).and_then(|v| v.to_str().ok()).and_then(TraceParent::parse)
}

/// Records this tier's place in the trace on its request span, which declares the fields `trace_id`,
/// `span_id` and `parent_span_id` (empty until recorded): what the log shows and [`crate::otlp`] exports.
pub fn record_span(span: &tracing::Span, context: &TraceParent, caller: Option<&TraceParent>) {
    span.record("trace_id", context.trace_id());
    span.record("span_id", context.span_id());
    if let Some(caller) = caller {
        span.record("parent_span_id", caller.span_id());
    }
}

/// Passes `context` on with an outgoing call.
pub fn attach<T>(request: &mut Request<T>, context: &TraceParent) {
    if let Ok(value) = AsciiMetadataValue::try_from(context.header()) {
        request.metadata_mut().insert(TRACEPARENT, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_continues_the_callers_trace_with_a_span_of_its_own() {
        let caller = continue_or_start(None);
        let mut request = Request::new(());
        attach(&mut request, &caller);
        let callee = from_metadata(request.metadata());
        assert_eq!(callee.trace_id(), caller.trace_id());
        assert_ne!(callee.header(), caller.header());
        assert_ne!(continue_or_start(Some("garbage")).trace_id(), caller.trace_id());
        assert_ne!(random_bytes::<16>(), random_bytes::<16>());
    }
}
