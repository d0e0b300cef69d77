//! Semantic hits checked against fresh answers, online: how often does the answer served for a
//! paraphrase agree with the answer the model gives the question as asked?
//!
//! A configurable share of semantic hits ([`AuditSettings::fraction`], counted out evenly, not drawn
//! at random) is audited off the request path: the asked question is generated again at the core,
//! fresh and stored nowhere (`CompleteRequest{fresh, no_store}`), and the two answers are compared
//! ([`answers_agree`]). Only deterministic requests are audited (greedy, or sampled with a seed): a
//! sampled answer without a seed differs from itself.
//!
//! Each tenant and content class keeps a tally, exported with its 95% Wilson interval. When the
//! interval's upper end falls below `1 - budget` (the tenant's error budget) after at least
//! [`MIN_AUDITS`] audits, the tier is confidently less accurate than promised there: the class's
//! similarity threshold for that tenant rises by [`TIGHTEN_STEP`] (a warning is logged and counted),
//! and the evidence starts again at the new threshold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use near_miss::words::{words, WordKind};
use shared::content_class::ContentClass;
use shared::metrics::{Counter, MetricsText};

/// Audits a (tenant, class) needs before its threshold may be raised on their evidence.
pub const MIN_AUDITS: u64 = 20;
/// How much one tightening raises a similarity threshold.
pub const TIGHTEN_STEP: f32 = 0.01;
/// Audits generating at once; a hit sampled while they are busy is skipped (and counted).
pub const AUDITS_IN_FLIGHT: usize = 2;
/// Answers whose MiniLM embeddings are at least this similar, and that state the same numbers,
/// agree even when worded differently.
pub const AGREEMENT_SIMILARITY: f32 = 0.90;
/// z of a two-sided 95% interval.
const Z95: f64 = 1.96;

/// What the audit samples and what it promises.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditSettings {
    /// Share of semantic hits audited, in 0..=1 (0: none).
    pub fraction: f64,
    /// Largest share of wrong semantic hits a tenant accepts when it has no budget of its own.
    pub error_budget: f64,
    /// Budgets of particular tenants.
    pub tenant_budgets: HashMap<String, f64>,
}

impl Default for AuditSettings {
    fn default() -> Self {
        Self { fraction: 0.0, error_budget: 0.01, tenant_budgets: HashMap::new() }
    }
}

impl AuditSettings {
    /// The error budget of `tenant`.
    pub fn budget(&self, tenant: &str) -> f64 {
        self.tenant_budgets.get(tenant).copied().unwrap_or(self.error_budget)
    }

    /// Parses `tenant=budget` pairs (the `--semantic-tenant-budget` flag).
    pub fn parse_tenant_budgets(pairs: &[String]) -> Result<HashMap<String, f64>, String> {
        pairs
            .iter()
            .map(|pair| {
                let (tenant, budget) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("a tenant budget is tenant=fraction, not {pair:?}"))?;
                let budget: f64 = budget.trim().parse().map_err(|_| format!("not a fraction: {pair:?}"))?;
                if !(0.0..1.0).contains(&budget) {
                    return Err(format!("an error budget is in 0..1, not {budget}"));
                }
                Ok((tenant.trim().to_string(), budget))
            })
            .collect()
    }
}

/// Audited hits and how many of them agreed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Hits audited.
    pub audited: u64,
    /// Hits whose served answer agreed with the fresh one.
    pub agreed: u64,
}

impl Tally {
    fn add(&mut self, agreed: bool) {
        self.audited += 1;
        self.agreed += u64::from(agreed);
    }

    /// The agreement rate's 95% Wilson interval, `(low, high)`; `(0, 1)` before any audit.
    pub fn interval(&self) -> (f64, f64) {
        wilson(self.agreed, self.audited)
    }
}

/// The Wilson score interval (95%) of `successes` in `trials`.
pub fn wilson(successes: u64, trials: u64) -> (f64, f64) {
    if trials == 0 {
        return (0.0, 1.0);
    }
    let n = trials as f64;
    let p = successes as f64 / n;
    let z2 = Z95 * Z95;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / (1.0 + z2 / n);
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// One (tenant, class)'s audits: since the node started, and since its threshold last moved.
#[derive(Debug, Default)]
struct Ledger {
    total: Tally,
    current: Tally,
    /// How far this tenant's threshold of the class was raised.
    raised: f32,
}

/// A threshold raised because the audits said the tier was wrong too often.
#[derive(Debug, Clone, PartialEq)]
pub struct Tightened {
    /// The tenant.
    pub tenant: String,
    /// The class.
    pub class: ContentClass,
    /// The audits that showed it.
    pub evidence: Tally,
    /// How far the threshold is now raised in all.
    pub raised: f32,
}

/// The audit's sampling, tallies and raised thresholds.
#[derive(Debug)]
pub struct SemanticAudit {
    settings: AuditSettings,
    /// Fractions of a sample owed (sampling counts hits out evenly).
    owed: Mutex<f64>,
    ledgers: Mutex<HashMap<(String, ContentClass), Ledger>>,
    /// Sampled hits not audited (busy, not deterministic, or the generation failed).
    pub skipped: Counter,
    /// Thresholds raised.
    pub tightenings: Counter,
    /// Bounds the audits generating at once.
    pub in_flight: Arc<tokio::sync::Semaphore>,
}

impl SemanticAudit {
    /// An audit with no evidence yet.
    pub fn new(settings: AuditSettings) -> Self {
        Self {
            settings,
            owed: Mutex::new(0.0),
            ledgers: Mutex::new(HashMap::new()),
            skipped: Counter::default(),
            tightenings: Counter::default(),
            in_flight: Arc::new(tokio::sync::Semaphore::new(AUDITS_IN_FLIGHT)),
        }
    }

    /// Whether this hit is one to audit: every `1 / fraction`-th, evenly.
    pub fn sample(&self) -> bool {
        if self.settings.fraction <= 0.0 {
            return false;
        }
        let mut owed = self.owed.lock().unwrap_or_else(PoisonError::into_inner);
        *owed += self.settings.fraction.min(1.0);
        if *owed >= 1.0 - 1e-9 {
            *owed -= 1.0;
            true
        } else {
            false
        }
    }

    /// How far `tenant`'s threshold of `class` has been raised.
    pub fn raised(&self, tenant: &str, class: ContentClass) -> f32 {
        let ledgers = self.ledgers.lock().unwrap_or_else(PoisonError::into_inner);
        ledgers.get(&(tenant.to_string(), class)).map_or(0.0, |l| l.raised)
    }

    /// Records one audit; raises the threshold when the evidence says the tier broke its budget.
    pub fn record(&self, tenant: &str, class: ContentClass, agreed: bool) -> Option<Tightened> {
        let budget = self.settings.budget(tenant);
        let mut ledgers = self.ledgers.lock().unwrap_or_else(PoisonError::into_inner);
        let ledger = ledgers.entry((tenant.to_string(), class)).or_default();
        ledger.total.add(agreed);
        ledger.current.add(agreed);
        let (_, high) = ledger.current.interval();
        if ledger.current.audited < MIN_AUDITS || high >= 1.0 - budget {
            return None;
        }
        let evidence = std::mem::take(&mut ledger.current);
        ledger.raised += TIGHTEN_STEP;
        self.tightenings.inc();
        Some(Tightened { tenant: tenant.to_string(), class, evidence, raised: ledger.raised })
    }

    /// Every (tenant, class)'s audits since the start.
    pub fn tallies(&self) -> Vec<(String, ContentClass, Tally)> {
        let ledgers = self.ledgers.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<_> = ledgers.iter().map(|((t, c), l)| (t.clone(), *c, l.total)).collect();
        out.sort_by(|a, b| (&a.0, a.1.as_str()).cmp(&(&b.0, b.1.as_str())));
        out
    }

    /// The audit's metrics.
    pub fn render(&self, mut text: MetricsText, region: &str) -> MetricsText {
        let ledgers: Vec<_> = {
            let ledgers = self.ledgers.lock().unwrap_or_else(PoisonError::into_inner);
            ledgers.iter().map(|((t, c), l)| (t.clone(), *c, l.total, l.raised)).collect()
        };
        let tier = ("tier", "regional");
        type Count = fn(&Tally) -> u64;
        let counts: [(&str, &str, Count); 2] = [
            ("mesh_semantic_audits_total", "Semantic hits audited against a fresh answer", |t| t.audited),
            (
                "mesh_semantic_audits_agreed_total",
                "Audited semantic hits whose served answer agreed with the fresh one",
                |t| t.agreed,
            ),
        ];
        for (name, help, value) in counts {
            for (tenant, class, tally, _) in &ledgers {
                let base = [("region", region), tier, ("tenant", tenant.as_str()), ("class", class.as_str())];
                text = text.count(name, help, &base, value(tally));
            }
        }
        for (tenant, class, _, raised) in &ledgers {
            let base = [("region", region), tier, ("tenant", tenant.as_str()), ("class", class.as_str())];
            text = text.gauge(
                "mesh_semantic_threshold_raised",
                "How far the audits raised this tenant's similarity threshold of the class",
                &base,
                (f64::from(*raised) * 1000.0).round() / 1000.0,
            );
        }
        for (tenant, class, tally, _) in &ledgers {
            let (low, high) = tally.interval();
            let rate = if tally.audited == 0 { 0.0 } else { tally.agreed as f64 / tally.audited as f64 };
            for (bound, value) in [("rate", rate), ("low", low), ("high", high)] {
                let labels = [
                    ("region", region),
                    tier,
                    ("tenant", tenant.as_str()),
                    ("class", class.as_str()),
                    ("bound", bound),
                ];
                text = text.gauge(
                    "mesh_semantic_agreement",
                    "Agreement of audited semantic hits with fresh answers (rate and 95% Wilson interval)",
                    &labels,
                    value,
                );
            }
        }
        text.counter(
            "mesh_semantic_audits_skipped_total",
            "Sampled semantic hits not audited (busy, sampled without a seed, or the generation failed)",
            &[("region", region)],
            &self.skipped,
        )
        .counter(
            "mesh_semantic_tightenings_total",
            "Thresholds raised because audits showed more wrong hits than the budget",
            &[("region", region)],
            &self.tightenings,
        )
    }
}

/// Whether a served answer agrees with the fresh one: equal once case, punctuation and spacing are
/// ignored; or, given the answers' embedding similarity, at least [`AGREEMENT_SIMILARITY`] with the
/// same numbers stated.
pub fn answers_agree(served: &str, fresh: &str, similarity: Option<f32>) -> bool {
    if normalized(served) == normalized(fresh) {
        return true;
    }
    similarity.is_some_and(|s| s >= AGREEMENT_SIMILARITY) && numbers(served) == numbers(fresh)
}

fn normalized(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

fn numbers(text: &str) -> Vec<String> {
    let mut numbers: Vec<String> = words(text)
        .into_iter()
        .filter_map(|w| match w.kind {
            WordKind::Number(n) => Some(n),
            _ => None,
        })
        .collect();
    numbers.sort();
    numbers.dedup();
    numbers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wilson_interval_brackets_the_rate_and_narrows_with_evidence() {
        let (low, high) = wilson(19, 20);
        assert!(low < 0.95 && high > 0.95 && low > 0.7, "{low} {high}");
        let (low_more, high_more) = wilson(950, 1000);
        assert!(low_more > low && high_more < high);
        assert_eq!(wilson(0, 0), (0.0, 1.0));
        let (low, high) = wilson(20, 20);
        assert!(high == 1.0 && low > 0.8 && low < 0.9, "{low}");
    }

    #[test]
    fn sampling_counts_hits_out_evenly() {
        let audit = SemanticAudit::new(AuditSettings { fraction: 0.25, ..AuditSettings::default() });
        let sampled: Vec<bool> = (0..8).map(|_| audit.sample()).collect();
        assert_eq!(sampled, [false, false, false, true, false, false, false, true]);
        let none = SemanticAudit::new(AuditSettings::default());
        assert!(!(0..100).any(|_| none.sample()));
        let all = SemanticAudit::new(AuditSettings { fraction: 1.0, ..AuditSettings::default() });
        assert!((0..10).all(|_| all.sample()));
    }

    #[test]
    fn a_tenant_over_its_budget_gets_a_higher_threshold_and_others_do_not() {
        let settings = AuditSettings {
            fraction: 1.0,
            error_budget: 0.01,
            tenant_budgets: AuditSettings::parse_tenant_budgets(&["lenient=0.5".into()]).expect("budgets"),
        };
        let audit = SemanticAudit::new(settings);
        let class = ContentClass::Stable;
        // 1 wrong in 10 for 19 audits: not yet enough evidence.
        for i in 0..(MIN_AUDITS - 1) {
            assert_eq!(audit.record("strict", class, i % 10 != 0), None);
            assert_eq!(audit.record("lenient", class, i % 10 != 0), None);
        }
        let tightened = audit.record("strict", class, true).expect("over budget: tightened");
        assert_eq!(tightened.evidence.audited, MIN_AUDITS);
        assert_eq!(audit.raised("strict", class), TIGHTEN_STEP);
        assert_eq!(audit.record("lenient", class, true), None, "a 0.5 budget holds 1 wrong in 10");
        assert_eq!(audit.raised("lenient", class), 0.0);
        assert_eq!(audit.raised("strict", ContentClass::Default), 0.0);
        // The evidence starts again; the totals keep everything.
        let tallies = audit.tallies();
        assert_eq!(tallies[1].2.audited, MIN_AUDITS);
        // A tier that agrees every time stays where it is.
        for _ in 0..100 {
            assert_eq!(audit.record("good", class, true), None);
        }
        let text = audit.render(MetricsText::default(), "r").finish();
        assert!(text.contains("mesh_semantic_threshold_raised{region=\"r\",tier=\"regional\",tenant=\"strict\",class=\"stable\"} 0.01"), "{text}");
        assert!(AuditSettings::parse_tenant_budgets(&["x=1.5".into()]).is_err());
        assert!(AuditSettings::parse_tenant_budgets(&["x".into()]).is_err());
    }

    #[test]
    fn answers_agree_when_equal_or_close_with_the_same_numbers() {
        assert!(answers_agree("Paris is the capital.", "paris is the capital", None));
        assert!(!answers_agree("Paris.", "Lyon.", Some(0.5)));
        assert!(answers_agree("It is Paris, France's capital.", "The capital is Paris.", Some(0.93)));
        assert!(!answers_agree("5 miles is 8.05 km", "5 km is 3.11 miles", Some(0.95)));
        assert!(!answers_agree("It is Paris, France's capital.", "The capital is Paris.", None));
    }
}
