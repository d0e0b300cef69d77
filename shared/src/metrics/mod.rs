//! Counters, histograms and the `/metrics` exposition shared by every daemon's `metrics.rs` (the
//! `metrics` feature: the daemons enable it, the edge worker does not).
//!
//! Each daemon declares its metrics as plain struct fields (cheap atomics), a label with values known
//! in advance as a [`Family`] over a [`label_values!`](crate::label_values) enum, and, on each scrape, feeds
//! their values to a [`MetricsText`]. The builder groups the samples by family and hands them to
//! prometheus-client as a [`Collector`]; the exposition is prometheus-client's OpenMetrics text encoder
//! (`prometheus_client::encoding::text::encode`): one `HELP` and `TYPE` per family, whatever order the
//! samples were added in, escaped label values, `le="+Inf"`, counters' samples suffixed `_total`, and a
//! closing `# EOF`. There is no global registry, so tests can create as many independent sets as they
//! like.
//!
//! Names follow one scheme: a `mesh_` prefix and the tier (`mesh_regional_`, `mesh_semantic_`,
//! `mesh_core_`, `mesh_pod_`), the unit as a suffix (`_seconds`, `_bytes`), and `_total` on counters
//! (given to [`MetricsText::counter`] with it, as PromQL names the series). Labels: `tier` for the tier
//! of an answer, `tenant`, `model`.

mod family;

pub use family::{Family, FamilyMember, LabelValue};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The current count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A cumulative histogram with fixed upper bounds, in Prometheus' sense.
#[derive(Debug)]
pub struct Histogram {
    /// Upper bounds of the buckets, ascending; the implicit last bucket is `+Inf`.
    bounds: &'static [f64],
    /// One count per bound plus one for `+Inf` (not cumulative; the encoder sums them).
    buckets: Vec<AtomicU64>,
    /// Sum of observations in microunits, so it fits an atomic integer.
    sum_micros: AtomicU64,
    count: AtomicU64,
}

/// Bucket bounds in seconds for request latencies, from 100 µs to 60 s.
pub const LATENCY_BOUNDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0,
];

impl Histogram {
    /// A histogram with the given ascending bucket bounds.
    pub fn with_bounds(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// A histogram of latencies in seconds ([`LATENCY_BOUNDS`]).
    pub fn latency() -> Self {
        Self::with_bounds(LATENCY_BOUNDS)
    }

    /// Records one observation. NaN and negative values are ignored.
    pub fn observe(&self, value: f64) {
        if value.is_nan() || value < 0.0 {
            return;
        }
        let index = self.bounds.iter().position(|b| value <= *b).unwrap_or(self.bounds.len());
        self.buckets[index].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add((value * 1e6) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The sum of the observations and each bucket's own count (upper bound, not cumulative), the last
    /// bucket's bound being infinity.
    fn snapshot(&self) -> HistogramSample {
        let buckets = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| (self.bounds.get(i).copied().unwrap_or(f64::INFINITY), b.load(Ordering::Relaxed)))
            .collect();
        HistogramSample { sum: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6, buckets }
    }
}

/// Builds a `/metrics` exposition: add samples in any order, each family gets one `HELP` and `TYPE`.
///
/// A sample's family is identified by its name; the first sample of a family sets its help text and type
/// (a later sample of another type under the same name is a bug: it fails a debug assertion and is left
/// out of a release build's exposition).
#[derive(Debug, Default)]
pub struct MetricsText {
    /// Families in the order their first sample was added.
    families: Vec<SampleFamily>,
    /// Index of each family in `families`, by name.
    index: HashMap<String, usize>,
}

#[derive(Debug)]
struct SampleFamily {
    /// The family's name (for a counter, without `_total`: the encoder appends it to each sample).
    name: String,
    help: String,
    kind: Kind,
    samples: Vec<(Labels, Value)>,
}

type Labels = Vec<(String, String)>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

#[derive(Debug)]
enum Value {
    Counter(u64),
    /// A gauge holding a whole number (written without a fraction).
    GaugeInteger(i64),
    Gauge(f64),
    Histogram(HistogramSample),
}

#[derive(Debug)]
struct HistogramSample {
    sum: f64,
    /// (upper bound, count in that bucket alone); the last bound is infinity.
    buckets: Vec<(f64, u64)>,
}

impl MetricsText {
    /// Adds a sample of family `name` (declaring the family with its first sample); `None` declares it
    /// without a sample.
    fn add(
        mut self,
        name: &str,
        help: &str,
        kind: Kind,
        labels: &[(&str, &str)],
        value: Option<Value>,
    ) -> Self {
        let next = self.families.len();
        let index = *self.index.entry(name.to_owned()).or_insert(next);
        if index == next {
            self.families.push(SampleFamily {
                name: name.to_owned(),
                help: help.to_owned(),
                kind,
                samples: Vec::new(),
            });
        }
        let family = &mut self.families[index];
        debug_assert_eq!(family.kind, kind, "metric family {name} added with two types");
        if let Some(value) = value.filter(|_| family.kind == kind) {
            let labels = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            family.samples.push((labels, value));
        }
        self
    }

    /// Adds a counter sample. `name` is the sample's name, ending in `_total` (the family is named
    /// without it, as OpenMetrics wants).
    pub fn counter(self, name: &str, help: &str, labels: &[(&str, &str)], counter: &Counter) -> Self {
        self.count(name, help, labels, counter.get())
    }

    /// Adds a counter sample holding `value`: a count kept elsewhere (under another structure's lock, in
    /// another type of atomic). `name` ends in `_total`, as for [`MetricsText::counter`].
    pub fn count(self, name: &str, help: &str, labels: &[(&str, &str)], value: u64) -> Self {
        let family = name.strip_suffix("_total");
        debug_assert!(family.is_some(), "counter {name} does not end in _total");
        self.add(family.unwrap_or(name), help, Kind::Counter, labels, Some(Value::Counter(value)))
    }

    /// Adds a gauge sample. A value that is not finite is left out: prometheus-client's text encoder
    /// would write infinity as `inf`, which OpenMetrics does not allow, and an absent sample is how
    /// Prometheus shows "no value".
    pub fn gauge(self, name: &str, help: &str, labels: &[(&str, &str)], value: f64) -> Self {
        // Whole numbers (counts, ids, states) keep the integer form: `3`, not `3.0`.
        let value = match value {
            v if !v.is_finite() => None,
            v if v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 => Some(Value::GaugeInteger(v as i64)),
            v => Some(Value::Gauge(v)),
        };
        self.add(name, help, Kind::Gauge, labels, value)
    }

    /// Adds a histogram's buckets, sum and count.
    pub fn histogram(self, name: &str, help: &str, labels: &[(&str, &str)], histogram: &Histogram) -> Self {
        self.add(name, help, Kind::Histogram, labels, Some(Value::Histogram(histogram.snapshot())))
    }

    /// The finished exposition: prometheus-client's OpenMetrics text, `# EOF` last.
    pub fn finish(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        // Writing to a String does not fail, and every sample here is one the encoder accepts.
        let encoded = prometheus_client::encoding::text::encode(&mut out, &registry);
        debug_assert!(encoded.is_ok(), "encoding the metrics failed");
        out
    }
}

impl Collector for MetricsText {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in &self.families {
            let metric_type = match family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Histogram => MetricType::Histogram,
            };
            let mut metric = encoder.encode_descriptor(&family.name, &family.help, None, metric_type)?;
            for (labels, value) in &family.samples {
                if labels.is_empty() {
                    encode_value(&mut metric, value)?;
                } else {
                    encode_value(&mut metric.encode_family(labels)?, value)?;
                }
            }
        }
        Ok(())
    }
}

fn encode_value(encoder: &mut MetricEncoder, value: &Value) -> Result<(), std::fmt::Error> {
    match value {
        Value::Counter(v) => encoder.encode_counter::<NoLabelSet, u64, u64>(v, None),
        Value::GaugeInteger(v) => encoder.encode_gauge(v),
        Value::Gauge(v) => encoder.encode_gauge(v),
        Value::Histogram(h) => {
            let count = h.buckets.iter().map(|(_, n)| n).sum();
            encoder.encode_histogram::<NoLabelSet>(h.sum, count, &h.buckets, None)
        }
    }
}

/// The `Content-Type` of the exposition: OpenMetrics text, what prometheus-client's encoder writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    fn type_lines(text: &str) -> Vec<&str> {
        text.lines().filter(|l| l.starts_with("# TYPE ")).collect()
    }

    #[test]
    fn renders_counters_gauges_and_cumulative_buckets() {
        let hits = Counter::default();
        hits.add(3);
        let latency = Histogram::with_bounds(&[0.1, 1.0]);
        latency.observe(0.05);
        latency.observe(0.5);
        latency.observe(5.0);
        latency.observe(f64::NAN);
        let text = MetricsText::default()
            .counter("hits_total", "Hits.", &[("tier", "edge")], &hits)
            .counter("hits_total", "Hits.", &[("tier", "core")], &Counter::default())
            .gauge("queue", "Queue depth.", &[], 2.0)
            .gauge("ratio", "A share.", &[], 0.25)
            .histogram("latency_seconds", "Latency.", &[], &latency)
            .finish();
        assert_eq!(text.matches("# TYPE hits counter").count(), 1, "{text}");
        assert!(text.contains("hits_total{tier=\"edge\"} 3\n"), "{text}");
        assert!(text.contains("hits_total{tier=\"core\"} 0\n"), "{text}");
        assert!(text.contains("# TYPE queue gauge\n"), "{text}");
        assert!(text.contains("queue 2\n"), "{text}");
        assert!(text.contains("ratio 0.25\n"), "{text}");
        assert!(text.contains("# TYPE latency_seconds histogram\n"), "{text}");
        assert!(text.contains("latency_seconds_bucket{le=\"0.1\"} 1\n"), "{text}");
        assert!(text.contains("latency_seconds_bucket{le=\"1.0\"} 2\n"), "{text}");
        assert!(text.contains("latency_seconds_bucket{le=\"+Inf\"} 3\n"), "{text}");
        assert!(text.contains("latency_seconds_count 3\n"), "{text}");
        assert!(text.contains("latency_seconds_sum 5.55\n"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn a_family_added_twice_apart_gets_one_help_and_type() {
        let one = Counter::default();
        one.inc();
        let latency = Histogram::latency();
        latency.observe(0.002);
        let text = MetricsText::default()
            .counter("mesh_x_requests_total", "Requests.", &[("tier", "a")], &one)
            .gauge("mesh_x_entries", "Entries.", &[], 4.0)
            .histogram("mesh_x_request_seconds", "Latency.", &[("tier", "a")], &latency)
            .counter("mesh_x_requests_total", "Requests.", &[("tier", "b")], &one)
            .gauge("mesh_x_bytes", "Bytes.", &[], 10.0)
            .histogram("mesh_x_request_seconds", "Latency.", &[("tier", "b")], &latency)
            .finish();
        assert_eq!(
            type_lines(&text),
            [
                "# TYPE mesh_x_requests counter",
                "# TYPE mesh_x_entries gauge",
                "# TYPE mesh_x_request_seconds histogram",
                "# TYPE mesh_x_bytes gauge",
            ],
            "{text}"
        );
        assert_eq!(text.lines().filter(|l| l.starts_with("# HELP ")).count(), 4, "{text}");
        // A family's samples follow its TYPE line together.
        let lines: Vec<&str> = text.lines().collect();
        let at = |needle: &str| lines.iter().position(|l| l.starts_with(needle)).expect(needle);
        assert!(at("mesh_x_requests_total{tier=\"b\"}") < at("# TYPE mesh_x_entries"), "{text}");
        assert_eq!(text.matches("mesh_x_request_seconds_bucket{le=\"+Inf\",tier=\"b\"} 1\n").count(), 1);
        assert_eq!(text.matches("le=\"+Inf\"").count(), 2, "{text}");
        assert!(!text.contains("inf\""), "{text}");
    }

    #[test]
    fn counters_are_exported_with_total_once() {
        let text = MetricsText::default()
            .counter("mesh_x_hits_total", "Hits.", &[], &Counter::default())
            .count("mesh_x_sent_bytes_total", "Bytes sent.", &[("region", "eu")], 7)
            .finish();
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(samples, ["mesh_x_hits_total 0", "mesh_x_sent_bytes_total{region=\"eu\"} 7"], "{text}");
        assert!(samples.iter().all(|s| s.split([' ', '{']).next().is_some_and(|n| n.ends_with("_total"))));
        assert!(!text.contains("_total_total"), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        let text = MetricsText::default().gauge("g", "G.", &[("tenant", "a\"b\\c\nd")], 1.0).finish();
        assert!(text.contains("g{tenant=\"a\\\"b\\\\c\\nd\"} 1\n"), "{text}");
    }

    #[test]
    fn a_gauge_that_is_not_finite_is_left_out() {
        let text = MetricsText::default()
            .gauge("g", "G.", &[("a", "1")], f64::INFINITY)
            .gauge("g", "G.", &[("a", "2")], 1.5)
            .gauge("h", "H.", &[], f64::NAN)
            .finish();
        assert!(text.contains("g{a=\"2\"} 1.5\n"), "{text}");
        assert!(!text.contains("a=\"1\""), "{text}");
        assert!(!text.contains("inf") && !text.contains("NaN"), "{text}");
        assert_eq!(type_lines(&text), ["# TYPE g gauge", "# TYPE h gauge"], "{text}");
    }

    #[test]
    fn the_content_type_is_openmetrics_text() {
        assert!(CONTENT_TYPE.starts_with("application/openmetrics-text; version=1.0.0"));
    }
}
