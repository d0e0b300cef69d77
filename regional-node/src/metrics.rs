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
    /// Answers from a paraphrase's cached entry (the semantic tier).
    pub hits_semantic: Counter,
    /// Semantic lookups that found a candidate the verifier or the threshold refused, or none.
    pub semantic_misses: Counter,
    /// Completion tokens of the answers served from a cache here (generation the pod did not do).
    pub tokens_avoided: Counter,
    /// Latency of semantic hits (embedding included).
    pub latency_hit_semantic: Histogram,
    /// Answers generated for this request.
    pub misses: Counter,
    /// Requests answered by an identical request's flight to the core.
    pub coalesced: Counter,
    /// Generations this node stopped waiting for because every client of the flight had left.
    pub flights_abandoned: Counter,
    /// Lookup calls to the core.
    pub core_lookups: Counter,
    /// Generation calls to the core.
    pub core_completions: Counter,
    /// Requests that failed because the core could not answer.
    pub core_errors: Counter,
    /// Answers past their TTL served while the core was out of reach.
    pub stale_served: Counter,
    /// Hot-set reads by the edge (`/v1/hotset`).
    pub hotset_reads: Counter,
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
            hits_semantic: Counter::default(),
            semantic_misses: Counter::default(),
            tokens_avoided: Counter::default(),
            latency_hit_semantic: Histogram::latency(),
            misses: Counter::default(),
            coalesced: Counter::default(),
            flights_abandoned: Counter::default(),
            core_lookups: Counter::default(),
            core_completions: Counter::default(),
            core_errors: Counter::default(),
            stale_served: Counter::default(),
            hotset_reads: Counter::default(),
            latency_hit_regional: Histogram::latency(),
            latency_hit_core: Histogram::latency(),
            latency_miss: Histogram::latency(),
        }
    }
}

impl RegionalMetrics {
    /// Appends the regional daemon's own metrics and the exact cache's to `text`.
    pub fn render(&self, text: MetricsText, region: &str, cache: CacheStats) -> MetricsText {
        let r = [("region", region)];
        let tier = |t: &'static str| [("region", region), ("tier", t)];
        let outcome = |o: &'static str| [("region", region), ("outcome", o)];
        let cause = |c: &'static str| [("region", region), ("cause", c)];
        text.counter("mesh_regional_requests_total", "Chat completion requests received.", &r, &self.requests)
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
                "mesh_regional_stale_served_total",
                "Answers past their TTL served while the core was out of reach.",
                &r,
                &self.stale_served,
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
            .counter(
                "mesh_regional_hits_total",
                "Requests answered from a cache, by tier.",
                &tier("semantic"),
                &self.hits_semantic,
            )
            .counter(
                "mesh_regional_semantic_misses_total",
                "Semantic lookups that found no verified match.",
                &r,
                &self.semantic_misses,
            )
            .counter("mesh_regional_misses_total", "Requests that needed generation.", &r, &self.misses)
            .counter(
                "mesh_regional_tokens_avoided_total",
                "Completion tokens of answers served from a cache here instead of generated.",
                &r,
                &self.tokens_avoided,
            )
            .counter(
                "mesh_regional_core_calls_total",
                "Calls to the core cluster, by kind.",
                &[("region", region), ("call", "lookup")],
                &self.core_lookups,
            )
            .counter(
                "mesh_regional_core_calls_total",
                "Calls to the core cluster, by kind.",
                &[("region", region), ("call", "complete")],
                &self.core_completions,
            )
            .counter("mesh_regional_hotset_reads_total", "Hot-set reads by the edge.", &r, &self.hotset_reads)
            .counter(
                "mesh_regional_coalesced_total",
                "Requests answered by an identical request already in flight to the core.",
                &r,
                &self.coalesced,
            )
            .counter(
                "mesh_regional_flights_abandoned_total",
                "Generations no longer followed here because every client of the flight had left.",
                &r,
                &self.flights_abandoned,
            )
            .histogram(
                "mesh_regional_request_seconds",
                "Request latency by the tier that answered.",
                &tier("semantic"),
                &self.latency_hit_semantic,
            )
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
            .count(
                "mesh_regional_cache_admissions_total",
                "Entries offered to the exact cache's main space, by outcome.",
                &outcome("admitted"),
                cache.admitted,
            )
            .count(
                "mesh_regional_cache_admissions_total",
                "Entries offered to the exact cache's main space, by outcome.",
                &outcome("rejected"),
                cache.rejected,
            )
            .count(
                "mesh_regional_cache_admissions_total",
                "Entries offered to the exact cache's main space, by outcome.",
                &outcome("oversized"),
                cache.oversized,
            )
            .count(
                "mesh_regional_cache_admissions_total",
                "Entries offered to the exact cache's main space, by outcome.",
                &outcome("over_quota"),
                cache.over_quota,
            )
            .count(
                "mesh_regional_cache_removals_total",
                "Entries removed from the exact cache, by cause.",
                &cause("evicted"),
                cache.evicted,
            )
            .count(
                "mesh_regional_cache_removals_total",
                "Entries removed from the exact cache, by cause.",
                &cause("expired"),
                cache.expired,
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_cache_counters_by_outcome_and_cause() {
        let cache = CacheStats {
            entries: 2,
            bytes: 300,
            admitted: 5,
            rejected: 4,
            evicted: 3,
            expired: 1,
            oversized: 6,
            over_quota: 7,
        };
        let text = RegionalMetrics::default().render(MetricsText::default(), "eu", cache).finish();
        for line in [
            "mesh_regional_cache_entries{region=\"eu\"} 2",
            "mesh_regional_cache_admissions_total{region=\"eu\",outcome=\"admitted\"} 5",
            "mesh_regional_cache_admissions_total{region=\"eu\",outcome=\"rejected\"} 4",
            "mesh_regional_cache_admissions_total{region=\"eu\",outcome=\"oversized\"} 6",
            "mesh_regional_cache_admissions_total{region=\"eu\",outcome=\"over_quota\"} 7",
            "mesh_regional_cache_removals_total{region=\"eu\",cause=\"evicted\"} 3",
            "mesh_regional_cache_removals_total{region=\"eu\",cause=\"expired\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
        assert_eq!(text.matches("# TYPE mesh_regional_cache_admissions counter").count(), 1);
    }
}
