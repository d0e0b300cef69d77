//! Counters, histograms and a Prometheus text-format encoder, shared by every daemon's `metrics.rs`.
//!
//! Each daemon declares its metrics as plain struct fields and renders them with [`MetricsText`]; there is
//! no global registry, so tests can create as many independent sets as they like.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// One count per bound plus one for `+Inf` (not cumulative; summed on render).
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
}

/// Builds a Prometheus text exposition. Emit every label set of one metric name together.
#[derive(Debug, Default)]
pub struct MetricsText {
    out: String,
    last_name: String,
}

impl MetricsText {
    fn header(&mut self, name: &str, help: &str, kind: &str) {
        if self.last_name != name {
            let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            self.last_name = name.to_owned();
        }
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], extra: Option<(&str, &str)>, value: f64) {
        self.out.push_str(name);
        let mut all = labels.iter().copied().chain(extra).peekable();
        if all.peek().is_some() {
            self.out.push('{');
            for (i, (k, v)) in all.enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let escaped = v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
                let _ = write!(self.out, "{k}=\"{escaped}\"");
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// Adds a counter sample.
    pub fn counter(mut self, name: &str, help: &str, labels: &[(&str, &str)], counter: &Counter) -> Self {
        self.header(name, help, "counter");
        self.sample(name, labels, None, counter.get() as f64);
        self
    }

    /// Adds a gauge sample.
    pub fn gauge(mut self, name: &str, help: &str, labels: &[(&str, &str)], value: f64) -> Self {
        self.header(name, help, "gauge");
        self.sample(name, labels, None, value);
        self
    }

    /// Adds a histogram's buckets, sum and count.
    pub fn histogram(
        mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        histogram: &Histogram,
    ) -> Self {
        self.header(name, help, "histogram");
        let bucket_name = format!("{name}_bucket");
        let mut cumulative = 0;
        for (i, bucket) in histogram.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = histogram.bounds.get(i).map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
            self.sample(&bucket_name, labels, Some(("le", &le)), cumulative as f64);
        }
        let sum = histogram.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        self.sample(&format!("{name}_sum"), labels, None, sum);
        self.sample(&format!("{name}_count"), labels, None, histogram.count() as f64);
        self
    }

    /// The finished exposition text.
    pub fn finish(self) -> String {
        self.out
    }
}

/// The `Content-Type` of the Prometheus text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

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
            .histogram("latency_seconds", "Latency.", &[], &latency)
            .finish();
        assert_eq!(text.matches("# TYPE hits_total counter").count(), 1);
        assert!(text.contains("hits_total{tier=\"edge\"} 3\n"));
        assert!(text.contains("hits_total{tier=\"core\"} 0\n"));
        assert!(text.contains("queue 2\n"));
        assert!(text.contains("latency_seconds_bucket{le=\"0.1\"} 1\n"));
        assert!(text.contains("latency_seconds_bucket{le=\"1\"} 2\n"));
        assert!(text.contains("latency_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("latency_seconds_count 3\n"));
        assert!(text.contains("latency_seconds_sum 5.55\n"));
    }
}
