//! Prometheus metrics of the regional daemon, rendered at `/metrics`.

use shared::metrics::{Counter, Histogram, MetricsText};

use crate::exact_cache::CacheStats;

/// Every metric the regional daemon exports.
#[derive(Debug)]
pub struct RegionalMetrics {
    /// Chat completion requests received.
    pub requests: Counter,
    /// Requests rejected before lookup (auth, bad body, unknown model).
    pub rejected: Counter,
    /// Answers from the regional exact cache.
    pub hits_regional: Counter,
    /// Answers from the core's state.
    pub hits_core: Counter,
    /// Answers generated for this request.
    pub misses: Counter,
    /// Requests that failed because the core could not answer.
    pub core_errors: Counter,
    /// Latency of regional hits.
    pub latency_hit_regional: Histogram,
    /// Latency of core hits.
    pub latency_hit_core: Histogram,
    /// Latency of misses (to the last byte).
    pub latency_miss: Histogram,
}

impl Default for RegionalMetrics {
    fn default() -> Self {
        Self {
            requests: Counter::default(),
            rejected: Counter::default(),
            hits_regional: Counter::default(),
            hits_core: Counter::default(),
            misses: Counter::default(),
            core_errors: Counter::default(),
            latency_hit_regional: Histogram::latency(),
            latency_hit_core: Histogram::latency(),
            latency_miss: Histogram::latency(),
        }
    }
}

impl RegionalMetrics {
    /// The Prometheus text exposition.
    pub fn render(&self, region: &str, cache: CacheStats) -> String {
        let r = [("region", region)];
        let tier = |t: &'static str| [("region", region), ("tier", t)];
        MetricsText::default()
            .counter("mesh_regional_requests_total", "Chat completion requests received.", &r, &self.requests)
            .counter(
                "mesh_regional_rejected_total",
                "Requests rejected before cache lookup.",
                &r,
                &self.rejected,
            )
            .counter(
                "mesh_regional_core_errors_total",
                "Requests failed because the core could not answer.",
                &r,
                &self.core_errors,
            )
            .counter(
                "mesh_regional_hits_total",
                "Requests answered from a cache, by tier.",
                &tier("regional"),
                &self.hits_regional,
            )
            .counter(
                "mesh_regional_hits_total",
                "Requests answered from a cache, by tier.",
                &tier("core"),
                &self.hits_core,
            )
            .counter("mesh_regional_misses_total", "Requests that needed generation.", &r, &self.misses)
            .histogram(
                "mesh_regional_request_seconds",
                "Request latency by the tier that answered.",
                &tier("regional"),
                &self.latency_hit_regional,
            )
            .histogram(
                "mesh_regional_request_seconds",
                "Request latency by the tier that answered.",
                &tier("core"),
                &self.latency_hit_core,
            )
            .histogram(
                "mesh_regional_request_seconds",
                "Request latency by the tier that answered.",
                &tier("miss"),
                &self.latency_miss,
            )
            .gauge("mesh_regional_cache_entries", "Entries in the exact cache.", &r, cache.entries as f64)
            .gauge("mesh_regional_cache_bytes", "Bytes in the exact cache.", &r, cache.bytes as f64)
            .finish()
    }
}
