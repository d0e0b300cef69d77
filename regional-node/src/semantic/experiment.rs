//! Cache-policy arms: a tenant's semantic thresholds tried two ways side by side, the A/B loop of the
//! model canary applied to a cache setting (`--semantic-experiment TENANT=PERCENT:DELTA`).
//!
//! A share of the tenant's requests (PERCENT of 100 buckets of the request's key, the canary's
//! [`shared::canary::in_share`], so a question always lands in the same arm) is in the `trial` arm,
//! whose similarity thresholds are the tenant's moved by DELTA (a negative one hits more paraphrases);
//! the rest is the `control` arm. Both look in the same index. Each arm's semantic lookups, hits, audits
//! and audited agreements are counted (`mesh_regional_semantic_arm_*`), so hit ratio and precision
//! compare side by side; the online audit that raises a tenant's threshold counts both arms' evidence.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use shared::cache_key::CacheKey;
use shared::metrics::MetricsText;

/// One tenant's experiment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Experiment {
    /// Percent of the tenant's requests in the trial arm, 1 to 99.
    pub percent: u8,
    /// What the trial arm adds to each similarity threshold.
    pub delta: f32,
}

/// Which arm a request is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Arm {
    /// The tenant's thresholds as they are.
    Control,
    /// The thresholds moved by the experiment's delta.
    Trial,
}

impl Arm {
    /// The arm's label in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Control => "control",
            Self::Trial => "trial",
        }
    }
}

/// Counts of one tenant's arm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    lookups: u64,
    hits: u64,
    audits: u64,
    agreements: u64,
}

/// Every tenant's experiment and its arms' counts.
#[derive(Debug, Default)]
pub struct Experiments {
    by_tenant: HashMap<String, Experiment>,
    counts: Mutex<BTreeMap<(String, Arm), Counts>>,
}

impl Experiments {
    /// Parses `--semantic-experiment` items, `TENANT=PERCENT:DELTA` (`dev=50:-0.05`).
    pub fn parse(items: &[String]) -> Result<Self, String> {
        let mut by_tenant = HashMap::new();
        for item in items.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
            let bad = || format!("semantic experiment {item:?} is not TENANT=PERCENT:DELTA");
            let (tenant, arms) = item.split_once('=').ok_or_else(bad)?;
            let (percent, delta) = arms.split_once(':').ok_or_else(bad)?;
            let percent: u8 = percent.trim().parse().map_err(|_| bad())?;
            let delta: f32 = delta.trim().parse().map_err(|_| bad())?;
            if !(1..=99).contains(&percent) || !delta.is_finite() || delta.abs() > 1.0 {
                return Err(format!("{item:?}: PERCENT is 1 to 99 and DELTA -1 to 1"));
            }
            by_tenant.insert(tenant.trim().to_owned(), Experiment { percent, delta });
        }
        Ok(Self { by_tenant, counts: Mutex::default() })
    }

    /// The arm of `tenant`'s request under `key` and what it adds to a threshold; `None` when the
    /// tenant runs no experiment.
    pub fn arm(&self, tenant: &str, key: &CacheKey) -> Option<(Arm, f32)> {
        let experiment = self.by_tenant.get(tenant)?;
        Some(match shared::canary::in_share(key, experiment.percent) {
            true => (Arm::Trial, experiment.delta),
            false => (Arm::Control, 0.0),
        })
    }

    /// Counts one semantic lookup of `arm`, a hit or not.
    pub fn record_lookup(&self, tenant: &str, arm: Arm, hit: bool) {
        self.update(tenant, arm, |c| {
            c.lookups += 1;
            c.hits += u64::from(hit);
        });
    }

    /// Counts one audit of a hit served in `arm`.
    pub fn record_audit(&self, tenant: &str, arm: Arm, agreed: bool) {
        self.update(tenant, arm, |c| {
            c.audits += 1;
            c.agreements += u64::from(agreed);
        });
    }

    fn update(&self, tenant: &str, arm: Arm, change: impl FnOnce(&mut Counts)) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        change(counts.entry((tenant.to_owned(), arm)).or_default());
    }

    /// Each arm's counts, labelled `tenant` and `arm`.
    pub fn exposition(&self, mut text: MetricsText) -> MetricsText {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for ((tenant, arm), c) in counts {
            let labels = [("tenant", tenant.as_str()), ("arm", arm.as_str())];
            text = text
                .count(
                    "mesh_regional_semantic_arm_lookups_total",
                    "Semantic lookups of a tenant's --semantic-experiment arm.",
                    &labels,
                    c.lookups,
                )
                .count(
                    "mesh_regional_semantic_arm_hits_total",
                    "Semantic hits served in a tenant's --semantic-experiment arm.",
                    &labels,
                    c.hits,
                )
                .count(
                    "mesh_regional_semantic_arm_audits_total",
                    "Audited semantic hits of a tenant's --semantic-experiment arm.",
                    &labels,
                    c.audits,
                )
                .count(
                    "mesh_regional_semantic_arm_audit_agreements_total",
                    "Audited semantic hits of a tenant's --semantic-experiment arm that agreed with a fresh answer.",
                    &labels,
                    c.agreements,
                );
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::models::ModelTable;
    use shared::normalize::{normalize, Limits};

    fn key(question: &str) -> CacheKey {
        let body = serde_json::json!({"model": "m", "temperature": 0,
                                      "messages": [{"role": "user", "content": question}]});
        let request = serde_json::from_value(body).expect("request");
        let models = ModelTable::parse("m@1").expect("models");
        CacheKey::derive("dev", &normalize(&request, &models, &Limits::default()).expect("valid"))
    }

    #[test]
    fn experiments_parse_and_bad_ones_are_refused() {
        let parsed = Experiments::parse(&["dev=50:-0.05".into()]).expect("valid");
        assert_eq!(parsed.by_tenant.get("dev"), Some(&Experiment { percent: 50, delta: -0.05 }));
        for bad in ["dev", "dev=50", "dev=0:-0.1", "dev=100:0.1", "dev=50:x", "dev=50:2"] {
            assert!(Experiments::parse(&[bad.into()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_question_stays_in_its_arm_and_only_the_trial_moves_its_threshold() {
        let experiments = Experiments::parse(&["dev=50:-0.05".into()]).expect("valid");
        assert_eq!(experiments.arm("other", &key("hi")), None, "no experiment");
        let arms: Vec<(Arm, f32)> =
            (0..200).filter_map(|i| experiments.arm("dev", &key(&format!("question {i}")))).collect();
        let trial = arms.iter().filter(|(arm, _)| *arm == Arm::Trial).count();
        assert!((70..=130).contains(&trial), "{trial} of 200 in the trial arm");
        assert!(arms.iter().all(|(arm, delta)| (*arm == Arm::Trial) == (*delta == -0.05)));
        let once = experiments.arm("dev", &key("question 7"));
        assert_eq!(experiments.arm("dev", &key("question 7")), once, "the same arm every time");
    }

    #[test]
    fn each_arm_is_counted_apart() {
        let experiments = Experiments::parse(&["dev=50:-0.05".into()]).expect("valid");
        experiments.record_lookup("dev", Arm::Trial, true);
        experiments.record_lookup("dev", Arm::Trial, false);
        experiments.record_audit("dev", Arm::Trial, false);
        experiments.record_lookup("dev", Arm::Control, false);
        let text = experiments.exposition(MetricsText::default()).finish();
        for line in [
            r#"mesh_regional_semantic_arm_lookups_total{tenant="dev",arm="trial"} 2"#,
            r#"mesh_regional_semantic_arm_hits_total{tenant="dev",arm="trial"} 1"#,
            r#"mesh_regional_semantic_arm_hits_total{tenant="dev",arm="control"} 0"#,
            r#"mesh_regional_semantic_arm_audits_total{tenant="dev",arm="trial"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
