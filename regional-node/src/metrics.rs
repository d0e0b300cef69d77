//! Prometheus metrics of the regional daemon, rendered at `/metrics`.

use shared::label_values;
use shared::metrics::{Counter, Family, Histogram, MetricsText};

use crate::exact_cache::CacheStats;

label_values! {
    /// The cache tier that answered a request.
    pub enum HitTier("tier") {
        /// This node's exact cache.
        Regional = "regional",
        /// The core's state.
        Core = "core",
        /// A paraphrase's cached entry (the semantic tier).
        Semantic = "semantic",
    }
}

label_values! {
    /// What answered a request, for its latency: a cache tier or a generation.
    pub enum AnsweredBy("tier") {
        /// A paraphrase's cached entry (embedding included).
        Semantic = "semantic",
        /// This node's exact cache.
        Regional = "regional",
        /// The core's state.
        Core = "core",
        /// A generation (to the last byte).
        Miss = "miss",
    }
}

label_values! {
    /// A call to the core cluster.
    pub enum CoreCall("call") {
        /// A lookup of the core's state.
        Lookup = "lookup",
        /// A generation.
        Complete = "complete",
    }
}

/// Every metric the regional daemon exports.
#[derive(Debug)]
pub struct RegionalMetrics {
    /// Chat completion requests received.
    pub requests: Counter,
    /// Requests rejected before lookup (auth, bad body, unknown model).
    pub rejected: Counter,
    /// Answers from a cache, by tier.
    pub hits: Family<HitTier, Counter>,
    /// Semantic lookups that found a candidate the verifier or the threshold refused, or none.
    pub semantic_misses: Counter,
    /// Completion tokens of the answers served from a cache here (generation the pod did not do).
    pub tokens_avoided: Counter,
    /// Answers generated for this request.
    pub misses: Counter,
    /// Requests answered by an identical request's flight to the core.
    pub coalesced: Counter,
    /// Generations this node stopped waiting for because every client of the flight had left.
    pub flights_abandoned: Counter,
    /// Answers the core gave with the asked model's fallback model.
    pub fallbacks: Counter,
    /// Calls to the core, by kind.
    pub core_calls: Family<CoreCall, Counter>,
    /// Requests that failed because the core could not answer.
    pub core_errors: Counter,
    /// Answers past their TTL served while the core was out of reach.
    pub stale_served: Counter,
    /// Hot-set reads by the edge (`/v1/hotset`).
    pub hotset_reads: Counter,
    /// Requests refused (429) because their tenant was past its rate of core lookups.
    pub lookups_refused: Counter,
    /// Request latency, by what answered.
    pub latency: Family<AnsweredBy, Histogram>,
}

impl Default for RegionalMetrics {
    fn default() -> Self {
        Self {
            requests: Counter::default(),
            rejected: Counter::default(),
            hits: Family::default(),
            semantic_misses: Counter::default(),
            tokens_avoided: Counter::default(),
            misses: Counter::default(),
            coalesced: Counter::default(),
            flights_abandoned: Counter::default(),
            fallbacks: Counter::default(),
            core_calls: Family::default(),
            core_errors: Counter::default(),
            stale_served: Counter::default(),
            hotset_reads: Counter::default(),
            lookups_refused: Counter::default(),
            latency: Family::new(Histogram::latency),
        }
    }
}

impl RegionalMetrics {
    /// Appends the regional daemon's own metrics and the exact cache's to `text`.
    pub fn render(&self, text: MetricsText, region: &str, cache: CacheStats) -> MetricsText {
        let text = self.requests(text, region);
        exact_cache(text, region, cache)
    }

    /// Requests, their answers by tier, calls to the core and latency.
    fn requests(&self, text: MetricsText, region: &str) -> MetricsText {
        let r = [("region", region)];
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
            .family("mesh_regional_hits_total", "Requests answered from a cache, by tier.", &r, &self.hits)
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
            .family(
                "mesh_regional_core_calls_total",
                "Calls to the core cluster, by kind.",
                &r,
                &self.core_calls,
            )
            .counter("mesh_regional_hotset_reads_total", "Hot-set reads by the edge.", &r, &self.hotset_reads)
            .counter(
                "mesh_regional_lookups_refused_total",
                "Requests refused because their tenant was past its rate of core lookups.",
                &r,
                &self.lookups_refused,
            )
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
            .counter(
                "mesh_regional_fallbacks_total",
                "Answers the core gave with the asked model's fallback model.",
                &r,
                &self.fallbacks,
            )
            .family(
                "mesh_regional_request_seconds",
                "Request latency by the tier that answered.",
                &r,
                &self.latency,
            )
    }
}

/// The exact cache's size, admissions by outcome and removals by cause.
fn exact_cache(text: MetricsText, region: &str, cache: CacheStats) -> MetricsText {
    const ADMISSIONS: &str = "mesh_regional_cache_admissions_total";
    const ADMISSIONS_HELP: &str = "Entries offered to the exact cache's main space, by outcome.";
    const REMOVALS: &str = "mesh_regional_cache_removals_total";
    const REMOVALS_HELP: &str = "Entries removed from the exact cache, by cause.";
    let r = [("region", region)];
    let admissions = [
        ("admitted", cache.admitted),
        ("rejected", cache.rejected),
        ("oversized", cache.oversized),
        ("over_quota", cache.over_quota),
    ];
    let removals = [("evicted", cache.evicted), ("expired", cache.expired)];
    let text = text
        .gauge("mesh_regional_cache_entries", "Entries in the exact cache.", &r, cache.entries as f64)
        .gauge("mesh_regional_cache_bytes", "Bytes in the exact cache.", &r, cache.bytes as f64);
    let text = admissions.into_iter().fold(text, |text, (outcome, n)| {
        text.count(ADMISSIONS, ADMISSIONS_HELP, &[("region", region), ("outcome", outcome)], n)
    });
    removals.into_iter().fold(text, |text, (cause, n)| {
        text.count(REMOVALS, REMOVALS_HELP, &[("region", region), ("cause", cause)], n)
    })
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
