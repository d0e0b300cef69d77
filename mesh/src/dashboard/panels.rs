//! The dashboard's charts: what each plots, from which of the daemons' metric families. [`all`] lists
//! them in page order, one function per section of the page.

use std::collections::BTreeMap;

use super::query::{metric, Aggregate, Query, Scrape, TARGET_LABEL};

/// How a chart's values read.
#[derive(Clone, Copy, Debug, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Durations.
    Seconds,
    /// Shares from 0 to 1.
    Ratio,
    /// Rates.
    PerSecond,
    /// Plain numbers.
    Count,
}

/// One plotted line (or, with `by`, one line per value of that label).
#[derive(Clone, Debug)]
pub enum Line {
    /// A query's value, named `name` (with `by`: `name value`, or the value alone when `name` is empty).
    Of {
        /// The line's name (or prefix, with `by`).
        name: &'static str,
        /// What it plots.
        query: Query,
        /// The label whose values split it into lines.
        by: Option<&'static str>,
    },
    /// What `total` leaves after the chart's other lines (stacked charts of a latency's parts).
    Rest {
        /// The line's name.
        name: &'static str,
        /// The whole the other lines are parts of.
        total: Query,
    },
}

/// One chart.
#[derive(Clone, Debug)]
pub struct Panel {
    /// Stable identifier of the chart (the page keys its charts by it).
    pub id: &'static str,
    /// Section heading it appears under.
    pub group: &'static str,
    /// Its title.
    pub title: &'static str,
    /// How its values read.
    pub unit: Unit,
    /// Whether its lines stack.
    pub stacked: bool,
    /// What it plots.
    pub lines: Vec<Line>,
}

impl Panel {
    /// Each line's value over the interval from `before` to `now`.
    pub fn evaluate(&self, before: &Scrape, now: &Scrape) -> BTreeMap<String, Option<f64>> {
        let mut values = BTreeMap::new();
        for line in &self.lines {
            if let Line::Of { name, query, by } = line {
                for (group, value) in query.evaluate(before, now, *by) {
                    let label = match (name.is_empty(), by.is_some()) {
                        (_, false) => (*name).to_owned(),
                        (true, true) => group,
                        (false, true) => format!("{name} {group}"),
                    };
                    values.insert(label, value);
                }
            }
        }
        for line in &self.lines {
            if let Line::Rest { name, total } = line {
                let parts: f64 = values.values().flatten().sum();
                let total = total.evaluate(before, now, None).remove("").flatten();
                values.insert((*name).to_owned(), total.map(|t| (t - parts).max(0.0)));
            }
        }
        values
    }
}

const NO_LABELS: &[(&str, &str)] = &[];

fn of(name: &'static str, query: Query) -> Line {
    Line::Of { name, query, by: None }
}

fn by(name: &'static str, label: &'static str, query: Query) -> Line {
    Line::Of { name, query, by: Some(label) }
}

fn rate(family: &'static str) -> Query {
    Query::Rate(metric(family, NO_LABELS))
}

fn gauge(aggregate: Aggregate, family: &'static str) -> Query {
    Query::Gauge(aggregate, metric(family, NO_LABELS))
}

fn quantile(q: f64, family: &'static str) -> Query {
    Query::Quantile(q, metric(family, NO_LABELS))
}

/// A section's chart maker: charts under the heading `group`, their lines not stacked.
fn section(group: &'static str) -> impl Fn(&'static str, &'static str, Unit, Vec<Line>) -> Panel {
    move |id, title, unit, lines| Panel { id, group, title, unit, stacked: false, lines }
}

/// Every chart, in page order: one function per section.
pub fn all() -> Vec<Panel> {
    [where_the_time_goes(), cache_efficiency(), protection(), replication(), raft(), pods(), model_versions()]
        .concat()
}

/// "Where the time goes": a miss by part, and the answer latency by answering tier.
fn where_the_time_goes() -> Vec<Panel> {
    let panel = section(TIME_GROUP);
    vec![
        decomposition("miss_p50", "A miss, p50, by part (stacked)", 0.5),
        decomposition("miss_p99", "A miss, p99, by part (stacked)", 0.99),
        panel(
            "answer_latency",
            "Regional answer latency by answering tier, p50 and p99",
            Unit::Seconds,
            vec![
                by("p50", "tier", quantile(0.5, "mesh_regional_request_seconds")),
                by("p99", "tier", quantile(0.99, "mesh_regional_request_seconds")),
            ],
        ),
    ]
}

/// The heading of [`where_the_time_goes`] and of [`decomposition`]'s charts.
const TIME_GROUP: &str = "Where the time goes";

/// A miss's time split into the parts each tier measures; the rest (regional and core work, the
/// network between them) is what the regional node's miss latency leaves.
fn decomposition(id: &'static str, title: &'static str, q: f64) -> Panel {
    Panel {
        id,
        group: TIME_GROUP,
        title,
        unit: Unit::Seconds,
        stacked: true,
        lines: vec![
            of("pod queue", quantile(q, "mesh_pod_queue_seconds")),
            of("prefill", quantile(q, "mesh_pod_prefill_seconds")),
            of("decode", quantile(q, "mesh_pod_decode_seconds")),
            of("raft commit", quantile(q, "mesh_core_commit_seconds")),
            Line::Rest {
                name: "regional + core + network",
                total: Query::Quantile(q, metric("mesh_regional_request_seconds", &[("tier", "miss")])),
            },
        ],
    }
}

/// "Cache efficiency": hits by tier, tokens, semantic lookups, and the agreement of audited hits.
fn cache_efficiency() -> Vec<Panel> {
    let panel = section("Cache efficiency");
    vec![
        Panel {
            stacked: true,
            ..panel(
                "hit_ratio",
                "Answered from a cache, by tier (share of regional requests, stacked)",
                Unit::Ratio,
                vec![by(
                    "",
                    "tier",
                    Query::Ratio(
                        metric("mesh_regional_hits_total", NO_LABELS),
                        metric("mesh_regional_requests_total", NO_LABELS),
                    ),
                )],
            )
        },
        panel(
            "tokens",
            "Tokens per second: generated, and prompt tokens served by the prefix cache",
            Unit::PerSecond,
            vec![
                of("generated", rate("mesh_pod_generated_tokens_total")),
                of("prompt (all)", rate("mesh_pod_prompt_tokens_total")),
                of("prompt from prefix cache", rate("mesh_pod_cached_prompt_tokens_total")),
                of("answered by caches", rate("mesh_regional_tokens_avoided_total")),
            ],
        ),
        panel(
            "semantic",
            "Semantic hits and lookups that found no verified match",
            Unit::PerSecond,
            vec![
                of("semantic hits", Query::Rate(metric("mesh_regional_hits_total", &[("tier", "semantic")]))),
                of("semantic misses", rate("mesh_regional_semantic_misses_total")),
            ],
        ),
        panel(
            "agreement",
            "Audited semantic hits agreeing with a fresh answer, by tenant (lowest across regions)",
            Unit::Ratio,
            vec![
                by(
                    "",
                    "tenant",
                    Query::Gauge(Aggregate::Min, metric("mesh_semantic_agreement", &[("bound", "rate")])),
                ),
                by(
                    "95% low",
                    "tenant",
                    Query::Gauge(Aggregate::Min, metric("mesh_semantic_agreement", &[("bound", "low")])),
                ),
            ],
        ),
    ]
}

/// "Protection": admission refusals and sheds, stale answers, coalescing, and the core breaker.
fn protection() -> Vec<Panel> {
    let panel = section("Protection");
    vec![
        panel(
            "protection",
            "Refused (429), shed for a TTFT target, stale answers served, coalesced",
            Unit::PerSecond,
            vec![
                of("refused", rate("mesh_regional_admission_refused_total")),
                of("shed", rate("mesh_regional_admission_shed_total")),
                of("stale served", rate("mesh_regional_stale_served_total")),
                of("coalesced", rate("mesh_regional_coalesced_total")),
            ],
        ),
        panel(
            "breaker",
            "Core circuit breaker by region (0 closed, 1 half-open, 2 open) and requests waiting",
            Unit::Count,
            vec![
                by("breaker", "region", gauge(Aggregate::Max, "mesh_regional_core_breaker_state")),
                by("waiting", "region", gauge(Aggregate::Sum, "mesh_regional_admission_waiting")),
            ],
        ),
    ]
}

/// "Replication": records between regions, anti-entropy repairs, and each region's record count.
fn replication() -> Vec<Panel> {
    let panel = section("Replication");
    vec![
        panel(
            "replication",
            "Records sent, merged and refused over budget; anti-entropy ranges repaired",
            Unit::PerSecond,
            vec![
                of("sent", rate("mesh_regional_replication_records_sent_total")),
                of("merged", rate("mesh_regional_replication_records_merged_total")),
                of("over budget", rate("mesh_regional_replication_over_budget_total")),
                of("ranges repaired", rate("mesh_regional_anti_entropy_ranges_repaired_total")),
            ],
        ),
        panel(
            "replica_records",
            "Replicated records by region (regions apart = replication lag)",
            Unit::Count,
            vec![by("", "region", gauge(Aggregate::Max, "mesh_regional_replica_records"))],
        ),
    ]
}

/// "Raft": the core cluster's leader and term, commit latency, and each node's applied index.
fn raft() -> Vec<Panel> {
    let panel = section("Raft");
    vec![
        panel(
            "raft",
            "Leader id and term",
            Unit::Count,
            vec![
                of("leader", gauge(Aggregate::Max, "mesh_core_raft_leader")),
                of("term", gauge(Aggregate::Max, "mesh_core_raft_term")),
            ],
        ),
        panel(
            "commit",
            "Commit latency p50 and p99",
            Unit::Seconds,
            vec![
                of("p50", quantile(0.5, "mesh_core_commit_seconds")),
                of("p99", quantile(0.99, "mesh_core_commit_seconds")),
            ],
        ),
        panel(
            "applied",
            "Last applied index by core node",
            Unit::Count,
            vec![by("", TARGET_LABEL, gauge(Aggregate::Max, "mesh_core_raft_last_applied"))],
        ),
    ]
}

/// "Pods": queue, batch and KV blocks, and time to first token and per output token.
fn pods() -> Vec<Panel> {
    let panel = section("Pods");
    vec![
        panel(
            "pod_load",
            "Queue depth, batch size, KV blocks in use",
            Unit::Count,
            vec![
                of("queued", gauge(Aggregate::Sum, "mesh_pod_queue_depth")),
                of("batch", gauge(Aggregate::Sum, "mesh_pod_running")),
                of(
                    "KV blocks in use",
                    Query::GaugeDifference(
                        metric("mesh_pod_kv_total_blocks", NO_LABELS),
                        metric("mesh_pod_kv_free_blocks", NO_LABELS),
                    ),
                ),
            ],
        ),
        panel(
            "pod_latency",
            "Time to first token and time per output token, p50 and p99",
            Unit::Seconds,
            vec![
                of("TTFT p50", quantile(0.5, "mesh_pod_ttft_seconds")),
                of("TTFT p99", quantile(0.99, "mesh_pod_ttft_seconds")),
                of("TPOT p50", quantile(0.5, "mesh_pod_tpot_seconds")),
                of("TPOT p99", quantile(0.99, "mesh_pod_tpot_seconds")),
            ],
        ),
    ]
}

/// "Model versions": the current version and a version on trial (a canary) side by side, as the core
/// nodes ran their generations.
fn model_versions() -> Vec<Panel> {
    let panel = section("Model versions");
    vec![
        panel(
            "arm_latency",
            "Generation time by canary arm (current, trial), p50 and p99",
            Unit::Seconds,
            vec![
                by("p50", "arm", quantile(0.5, "mesh_core_generation_seconds")),
                by("p99", "arm", quantile(0.99, "mesh_core_generation_seconds")),
            ],
        ),
        panel(
            "arm_errors",
            "Generations and failed generations by canary arm, per second",
            Unit::PerSecond,
            vec![
                by("generated", "arm", rate("mesh_core_generation_seconds_count")),
                by("failed", "arm", rate("mesh_core_generation_errors_total")),
            ],
        ),
        panel(
            "arm_ttft",
            "Time to first token by canary arm, p50 and p99",
            Unit::Seconds,
            vec![
                by("p50", "arm", quantile(0.5, "mesh_core_generation_ttft_seconds")),
                by("p99", "arm", quantile(0.99, "mesh_core_generation_ttft_seconds")),
            ],
        ),
        panel(
            "arm_tokens",
            "Tokens generated by canary arm, per second",
            Unit::PerSecond,
            vec![by("tokens", "arm", rate("mesh_core_generation_output_tokens_total"))],
        ),
        panel(
            "arm_audits",
            "Trial answers audited against the current version, and those that agreed, per second",
            Unit::PerSecond,
            vec![
                by("audited", "arm", rate("mesh_core_canary_audits_total")),
                by("agreed", "arm", rate("mesh_core_canary_audit_agreements_total")),
            ],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::exposition::parse;

    #[test]
    fn the_rest_of_a_stacked_latency_is_what_its_parts_leave() {
        let bucket = |family: &str, n: u32| {
            format!("{family}_bucket{{le=\"1\"}} {n}\n{family}_bucket{{le=\"+Inf\"}} {n}\n")
        };
        let text = |n| {
            [
                bucket("mesh_pod_queue_seconds", n),
                format!("mesh_regional_request_seconds_bucket{{tier=\"miss\",le=\"10\"}} {n}\n"),
                format!("mesh_regional_request_seconds_bucket{{tier=\"miss\",le=\"+Inf\"}} {n}\n"),
            ]
            .concat()
        };
        let before = Scrape { at_ms: 0, samples: parse(&text(0)) };
        let now = Scrape { at_ms: 1000, samples: parse(&text(4)) };
        let values = decomposition("x", "x", 0.5).evaluate(&before, &now);
        assert_eq!(values["pod queue"], Some(0.5));
        assert_eq!(values["regional + core + network"], Some(4.5));
        assert!(!values.contains_key("prefill"), "a family nobody exports draws no line");
    }

    #[test]
    fn every_panel_has_a_unique_id_and_a_line() {
        let panels = all();
        let ids: std::collections::BTreeSet<_> = panels.iter().map(|p| p.id).collect();
        assert_eq!(ids.len(), panels.len());
        assert!(panels.iter().all(|p| !p.lines.is_empty()));
    }
}
