//! OpenTelemetry trace export (`--otlp-endpoint`): the spans of every request a daemon serves, sent to
//! an OTLP/HTTP collector as JSON (`POST {endpoint}/v1/traces`, the protocol's JSON encoding).
//!
//! A span belongs to a trace when it, or a span it runs in, carries a `trace_id` field (each tier's
//! request span does: the W3C trace context of [`crate::trace_context`]). A request span may also carry
//! `span_id` (the id this tier passes on as the parent) and `parent_span_id` (the caller's), so the
//! tiers' spans link up into one tree at the collector; spans inside it get ids of their own. Spans of
//! no trace (background work) are not exported.
//!
//! Export never blocks a request: closed spans go through a bounded queue to one exporter thread that
//! posts a batch every second (or at [`BATCH_SPANS`]); when the queue is full, or the collector does
//! not answer, spans are dropped and counted in the log.

use std::collections::BTreeMap;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Most spans waiting for the exporter; past it, spans are dropped.
const QUEUE_SPANS: usize = 8_192;
/// Most spans in one request to the collector.
pub const BATCH_SPANS: usize = 512;
/// How long spans wait before they are sent.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How long one request to the collector may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The fields that place a span in a trace rather than describe it.
const TRACE_ID: &str = "trace_id";
const SPAN_ID: &str = "span_id";
const PARENT_SPAN_ID: &str = "parent_span_id";

/// What the layer keeps of an open span.
#[derive(Clone, Debug, Default)]
struct OpenSpan {
    trace_id: Option<String>,
    span_id: String,
    parent_span_id: Option<String>,
    /// Whether the span continues a caller's trace (an OTLP server span) rather than a step inside one.
    remote_parent: bool,
    start_unix_nanos: u64,
    attributes: BTreeMap<String, String>,
}

/// A finished span, as the exporter sends it.
#[derive(Debug)]
struct ClosedSpan {
    name: &'static str,
    target: &'static str,
    open: OpenSpan,
    end_unix_nanos: u64,
}

/// The layer that collects spans for export; see [`layer`].
pub struct OtlpLayer {
    queue: SyncSender<ClosedSpan>,
}

/// A layer exporting to `endpoint` (for example `http://127.0.0.1:4318`) as `service` (the
/// `service.name` resource attribute), with its exporter thread started.
pub fn layer(endpoint: &str, service: &str) -> std::io::Result<OtlpLayer> {
    let (queue, spans) = sync_channel(QUEUE_SPANS);
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let service = service.to_owned();
    std::thread::Builder::new().name("otlp-export".into()).spawn(move || export(&url, &service, &spans))?;
    Ok(OtlpLayer { queue })
}

fn unix_nanos() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

fn new_span_id() -> String {
    shared::hex::encode(&crate::trace_context::random_bytes::<8>())
}

/// Sets a span's placement or one of its attributes from each field it is given.
struct FieldVisitor<'a>(&'a mut OpenSpan);

impl FieldVisitor<'_> {
    fn set(&mut self, field: &Field, value: String) {
        match field.name() {
            TRACE_ID => self.0.trace_id = Some(value),
            SPAN_ID => self.0.span_id = value,
            PARENT_SPAN_ID => {
                self.0.parent_span_id = Some(value);
                self.0.remote_parent = true;
            }
            name => {
                self.0.attributes.insert(name.to_owned(), value);
            }
        }
    }
}

impl Visit for FieldVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field, format!("{value:?}"));
    }
}

impl<S> Layer<S> for OtlpLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut open =
            OpenSpan { span_id: new_span_id(), start_unix_nanos: unix_nanos(), ..OpenSpan::default() };
        // Inside a span of a trace: the same trace, with that span as the parent.
        if let Some(parent) = span.parent() {
            if let Some(outer) = parent.extensions().get::<OpenSpan>() {
                open.trace_id.clone_from(&outer.trace_id);
                open.parent_span_id = Some(outer.span_id.clone());
            }
        }
        attrs.record(&mut FieldVisitor(&mut open));
        span.extensions_mut().insert(open);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(open) = extensions.get_mut::<OpenSpan>() {
            values.record(&mut FieldVisitor(open));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(open) = span.extensions_mut().remove::<OpenSpan>() else { return };
        if open.trace_id.is_none() {
            return;
        }
        let closed = ClosedSpan {
            name: span.name(),
            target: span.metadata().target(),
            open,
            end_unix_nanos: unix_nanos(),
        };
        match self.queue.try_send(closed) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => dropped_spans(1),
        }
    }
}

/// Counts spans that were not exported, logging at most one line a minute.
fn dropped_spans(count: u64) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static DROPPED: AtomicU64 = AtomicU64::new(0);
    static LAST_LOGGED_SECS: AtomicU64 = AtomicU64::new(0);
    let total = DROPPED.fetch_add(count, Ordering::Relaxed) + count;
    let now_secs = unix_nanos() / 1_000_000_000;
    let last = LAST_LOGGED_SECS.load(Ordering::Relaxed);
    if now_secs >= last + 60
        && LAST_LOGGED_SECS.compare_exchange(last, now_secs, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    {
        // Outside any request span, so this line is not itself exported.
        tracing::warn!(dropped_total = total, "OTLP export is behind or failing; spans dropped");
    }
}

/// The exporter thread: batches spans and posts them until every sender is gone.
fn export(url: &str, service: &str, spans: &Receiver<ClosedSpan>) {
    let config = ureq::Agent::config_builder().timeout_global(Some(EXPORT_TIMEOUT)).build();
    let agent = ureq::Agent::new_with_config(config);
    let mut batch = Vec::with_capacity(BATCH_SPANS);
    loop {
        let received = spans.recv_timeout(FLUSH_EVERY);
        let closed = matches!(received, Err(RecvTimeoutError::Disconnected));
        let timed_out = matches!(received, Err(RecvTimeoutError::Timeout));
        if let Ok(span) = received {
            batch.push(span);
            while batch.len() < BATCH_SPANS {
                match spans.try_recv() {
                    Ok(span) => batch.push(span),
                    Err(_) => break,
                }
            }
        }
        let due = batch.len() >= BATCH_SPANS || timed_out || closed;
        if due && !batch.is_empty() {
            let body = request_body(service, &batch);
            let count = batch.len() as u64;
            batch.clear();
            let sent = agent.post(url).header("content-type", "application/json").send(body.to_string());
            if sent.is_err() {
                dropped_spans(count);
            }
        }
        if closed {
            return;
        }
    }
}

/// An `ExportTraceServiceRequest` in OTLP's JSON encoding: ids in hex, times as decimal strings.
fn request_body(service: &str, spans: &[ClosedSpan]) -> Value {
    let spans: Vec<Value> = spans.iter().map(span_json).collect();
    json!({
        "resourceSpans": [{
            "resource": { "attributes": [string_attribute("service.name", service)] },
            "scopeSpans": [{ "scope": { "name": "llm-cache-mesh" }, "spans": spans }],
        }]
    })
}

fn string_attribute(key: &str, value: &str) -> Value {
    json!({ "key": key, "value": { "stringValue": value } })
}

/// OTLP span kinds: a span that continues a caller's trace serves it; the rest are internal.
const KIND_INTERNAL: u8 = 1;
const KIND_SERVER: u8 = 2;

fn span_json(span: &ClosedSpan) -> Value {
    let open = &span.open;
    let mut attributes = vec![string_attribute("code.namespace", span.target)];
    attributes.extend(open.attributes.iter().map(|(key, value)| string_attribute(key, value)));
    let mut out = json!({
        "traceId": open.trace_id,
        "spanId": open.span_id,
        "name": span.name,
        "kind": if open.remote_parent { KIND_SERVER } else { KIND_INTERNAL },
        "startTimeUnixNano": open.start_unix_nanos.to_string(),
        "endTimeUnixNano": span.end_unix_nanos.to_string(),
        "attributes": attributes,
    });
    if let Some(parent) = &open.parent_span_id {
        out["parentSpanId"] = Value::String(parent.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt as _;

    fn collecting_layer() -> (OtlpLayer, Receiver<ClosedSpan>) {
        let (queue, spans) = sync_channel(64);
        (OtlpLayer { queue }, spans)
    }

    #[test]
    fn spans_of_a_trace_link_up_and_spans_of_none_are_left_out() {
        let (layer, spans) = collecting_layer();
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let request = tracing::info_span!(
                "request",
                trace_id = "ab",
                span_id = "0102",
                parent_span_id = "0a0b",
                tenant = "dev"
            );
            let _entered = request.enter();
            tracing::info_span!("step", backend = 3).in_scope(|| {});
            drop(_entered);
            drop(request);
            tracing::info_span!("background").in_scope(|| {});
            // Recorded after the span opened, as the core and the pod record theirs.
            let late = tracing::info_span!("late", trace_id = tracing::field::Empty);
            late.record("trace_id", "cd");
        });
        let closed: Vec<ClosedSpan> = spans.try_iter().collect();
        let names: Vec<&str> = closed.iter().map(|s| s.name).collect();
        assert_eq!(names, ["step", "request", "late"]);
        let (step, request, late) = (&closed[0].open, &closed[1].open, &closed[2].open);
        assert_eq!(request.span_id, "0102");
        assert_eq!(request.parent_span_id.as_deref(), Some("0a0b"));
        assert!(request.remote_parent);
        assert_eq!(request.attributes.get("tenant").map(String::as_str), Some("dev"));
        assert_eq!(step.trace_id.as_deref(), Some("ab"));
        assert_eq!(step.parent_span_id.as_deref(), Some("0102"));
        assert!(!step.remote_parent);
        assert_eq!(step.attributes.get("backend").map(String::as_str), Some("3"));
        assert_eq!(step.span_id.len(), 16);
        assert_eq!(late.trace_id.as_deref(), Some("cd"));
        assert!(closed.iter().all(|s| s.end_unix_nanos >= s.open.start_unix_nanos));

        let body = request_body("mesh-test", &closed);
        let resource = &body["resourceSpans"][0];
        assert_eq!(resource["resource"]["attributes"][0]["value"]["stringValue"], "mesh-test");
        let sent = &resource["scopeSpans"][0]["spans"];
        assert_eq!(sent[1]["kind"], KIND_SERVER);
        assert_eq!(sent[1]["parentSpanId"], "0a0b");
        assert_eq!(sent[0]["kind"], KIND_INTERNAL);
        assert!(sent[2].get("parentSpanId").is_none());
        assert!(sent[0]["startTimeUnixNano"].as_str().is_some_and(|t| t.parse::<u64>().is_ok()));
    }
}
