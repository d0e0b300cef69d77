//! The canary's judge: while a model's next version is on trial, each core node compares the two arms'
//! generations it ran itself (errors and end-to-end p99 of misses, over a window of the latest ones) and
//! rolls the trial back through Raft once the trial arm is worse than the rule allows
//! (`--canary-max-error-rate-increase`, `--canary-max-p99-ratio`, judged once each arm has
//! `--canary-min-samples`). Any node may trip it; the rollback's request id names the model and the
//! version, so nodes that trip together roll back once.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use shared::metrics::{Counter, Histogram, MetricsText};

use crate::node::state_machine::StateMachineStore;
use crate::node::types::{Command, Outcome, Request};
use crate::node::writes::writer::Writer;

/// Generations kept per arm for the judgement.
const WINDOW: usize = 256;
/// How often the judge looks.
const EVERY: Duration = Duration::from_secs(1);

/// When a trial is rolled back by itself.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CanaryRule {
    /// The trial's error rate may exceed the current version's by at most this (0.05: 5 points).
    pub max_error_rate_increase: f64,
    /// The trial's end-to-end p99 may be at most this multiple of the current version's.
    pub max_p99_ratio: f64,
    /// Generations each arm needs on this node before it is judged (and audits the trial needs before its
    /// agreement is).
    pub min_samples: usize,
    /// Percent of the trial's greedy generations generated again by the current version to compare.
    pub audit_percent: u8,
    /// The least share of audited trial answers that must agree with the current version's (0: not
    /// judged).
    pub min_agreement: f64,
}

/// A model's current version and its version on trial, if any: what labels each version's arm.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelArms {
    /// The model.
    pub model: String,
    /// Its current version.
    pub current: u64,
    /// Its version on trial.
    pub trial: Option<u64>,
}

/// One successful generation, as an arm counts it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Generated {
    /// From the call to the committed answer, in seconds.
    pub seconds: f64,
    /// From the call to the first generated text, in seconds (`None` for an answer with none).
    pub ttft_seconds: Option<f64>,
    /// Tokens generated.
    pub output_tokens: u64,
}

/// One version's generations on this node: the latest, for the judgement, and counts since the start,
/// for `/metrics`.
#[derive(Debug)]
struct Arm {
    /// End-to-end seconds of the latest successful ones.
    seconds: VecDeque<f64>,
    /// Outcomes of the latest ones, true for an error.
    errors: VecDeque<bool>,
    /// End-to-end seconds of every successful one.
    histogram: Histogram,
    /// Time to first token of every successful one.
    ttft: Histogram,
    /// Tokens every successful one generated.
    output_tokens: Counter,
    /// Generations that failed.
    failed: Counter,
    /// Whether the latest audited answers agreed with the current version's.
    audits: VecDeque<bool>,
    /// Answers audited, and those that agreed.
    audited: Counter,
    agreed: Counter,
}

impl Default for Arm {
    fn default() -> Self {
        let (seconds, errors) = (VecDeque::new(), VecDeque::new());
        Self {
            seconds,
            errors,
            histogram: Histogram::latency(),
            ttft: Histogram::latency(),
            output_tokens: Counter::default(),
            failed: Counter::default(),
            audits: VecDeque::new(),
            audited: Counter::default(),
            agreed: Counter::default(),
        }
    }
}

impl Arm {
    fn record(&mut self, generated: Option<Generated>) {
        match generated {
            Some(generated) => {
                self.histogram.observe(generated.seconds);
                if let Some(ttft) = generated.ttft_seconds {
                    self.ttft.observe(ttft);
                }
                self.output_tokens.add(generated.output_tokens);
            }
            None => self.failed.inc(),
        }
        let seconds = generated.map(|g| g.seconds);
        if let Some(seconds) = seconds {
            self.seconds.push_back(seconds);
            if self.seconds.len() > WINDOW {
                self.seconds.pop_front();
            }
        }
        self.errors.push_back(seconds.is_none());
        if self.errors.len() > WINDOW {
            self.errors.pop_front();
        }
    }

    fn record_audit(&mut self, agreed: bool) {
        self.audited.inc();
        if agreed {
            self.agreed.inc();
        }
        self.audits.push_back(agreed);
        if self.audits.len() > WINDOW {
            self.audits.pop_front();
        }
    }

    fn agreement(&self) -> f64 {
        self.audits.iter().filter(|a| **a).count() as f64 / self.audits.len().max(1) as f64
    }

    fn error_rate(&self) -> f64 {
        self.errors.iter().filter(|e| **e).count() as f64 / self.errors.len().max(1) as f64
    }

    fn p99(&self) -> f64 {
        let mut sorted: Vec<f64> = self.seconds.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        sorted.get(((sorted.len() as f64 - 1.0) * 0.99).round() as usize).copied().unwrap_or(0.0)
    }
}

/// Each (model, version)'s latest generations on this node.
#[derive(Debug, Default)]
pub struct ArmStats {
    arms: Mutex<HashMap<(String, u64), Arm>>,
    /// Trials this node rolled back by the rule.
    pub rollbacks: Counter,
}

impl ArmStats {
    /// Records one generation of `model` at `version`: what it took, or `None` for an error.
    pub fn record(&self, model: &str, version: u64, generated: Option<Generated>) {
        let mut arms = self.arms.lock().unwrap_or_else(PoisonError::into_inner);
        arms.entry((model.to_owned(), version)).or_default().record(generated);
    }

    /// Records one audit of `model`'s `version` (a trial): whether its answer agreed with the current
    /// version's.
    pub fn record_audit(&self, model: &str, version: u64, agreed: bool) {
        let mut arms = self.arms.lock().unwrap_or_else(PoisonError::into_inner);
        arms.entry((model.to_owned(), version)).or_default().record_audit(agreed);
    }

    /// Why `rule` rolls back `model`'s trial of `trial` against `current`, if it does.
    pub fn verdict(&self, rule: &CanaryRule, model: &str, current: u64, trial: u64) -> Option<String> {
        let arms = self.arms.lock().unwrap_or_else(PoisonError::into_inner);
        let trial_arm = arms.get(&(model.to_owned(), trial))?;
        if rule.min_agreement > 0.0 && trial_arm.audits.len() >= rule.min_samples {
            let agreement = trial_arm.agreement();
            if agreement < rule.min_agreement {
                return Some(format!(
                    "{:.0}% of {} audited answers agree with the current version's",
                    agreement * 100.0,
                    trial_arm.audits.len()
                ));
            }
        }
        let (current, trial) = (arms.get(&(model.to_owned(), current))?, trial_arm);
        if current.errors.len() < rule.min_samples || trial.errors.len() < rule.min_samples {
            return None;
        }
        let (before, after) = (current.error_rate(), trial.error_rate());
        if after - before > rule.max_error_rate_increase {
            return Some(format!("error rate {after:.3} against {before:.3}"));
        }
        let (before, after) = (current.p99(), trial.p99());
        if before > 0.0 && after > rule.max_p99_ratio * before {
            return Some(format!("end-to-end p99 {:.0} ms against {:.0} ms", after * 1e3, before * 1e3));
        }
        None
    }

    /// Forgets a version's latest generations (its trial ended; its counts stay).
    fn forget(&self, model: &str, version: u64) {
        if let Some(arm) =
            self.arms.lock().unwrap_or_else(PoisonError::into_inner).get_mut(&(model.to_owned(), version))
        {
            arm.seconds.clear();
            arm.errors.clear();
            arm.audits.clear();
        }
    }

    /// Each version's generations on this node, labelled with its model, version and arm (`current`,
    /// `trial`, or `retired` for a version neither current nor on trial), given every model's current
    /// version and trial (`models`): the two arms of a canary side by side.
    pub fn exposition(&self, text: MetricsText, models: &[ModelArms]) -> MetricsText {
        let arms = self.arms.lock().unwrap_or_else(PoisonError::into_inner);
        let mut sorted: Vec<_> = arms.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        sorted
            .into_iter()
            .fold(text, |text, ((model, version), arm)| {
                let state = models.iter().find(|arms| &arms.model == model);
                let role = match state {
                    Some(arms) if arms.current == *version => "current",
                    Some(arms) if arms.trial == Some(*version) => "trial",
                    _ => "retired",
                };
                let version = version.to_string();
                let labels = [("model", model.as_str()), ("version", version.as_str()), ("arm", role)];
                text.histogram(
                    "mesh_core_generation_seconds",
                    "End-to-end time of the generations this node ran, by model, version and canary arm.",
                    &labels,
                    &arm.histogram,
                )
                .histogram(
                    "mesh_core_generation_ttft_seconds",
                    "Time to the first generated text of the generations this node ran, by model, version and canary arm.",
                    &labels,
                    &arm.ttft,
                )
                .counter(
                    "mesh_core_generation_output_tokens_total",
                    "Tokens generated by the generations this node ran, by model, version and canary arm.",
                    &labels,
                    &arm.output_tokens,
                )
                .counter(
                    "mesh_core_canary_audits_total",
                    "Trial answers this node generated again on the current version to compare, by model, version and arm.",
                    &labels,
                    &arm.audited,
                )
                .counter(
                    "mesh_core_canary_audit_agreements_total",
                    "Audited trial answers that agreed with the current version's, by model, version and arm.",
                    &labels,
                    &arm.agreed,
                )
                .counter(
                    "mesh_core_generation_errors_total",
                    "Generations this node started that failed, by model, version and canary arm.",
                    &labels,
                    &arm.failed,
                )
            })
            .counter(
                "mesh_core_canary_rollbacks_total",
                "Trials of a model version this node rolled back because they broke the canary rule.",
                &[],
                &self.rollbacks,
            )
    }
}

/// Judges every trial once a second, rolling back those that break `rule`.
pub async fn run(rule: CanaryRule, stats: Arc<ArmStats>, state: StateMachineStore, writer: Writer) {
    let mut ticks = tokio::time::interval(EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        for (model, current, trial) in state.canaries() {
            let Some(reason) = stats.verdict(&rule, &model, current, trial) else { continue };
            tracing::warn!(%model, current, trial, %reason, "the canary broke its rule; rolling it back");
            let command = Command::EndCanary { model: model.clone(), promote: false };
            let id = format!("canary-rollback-{model}-{trial}");
            match writer.write(Request { id, command }).await {
                Ok(committed) if !matches!(committed.applied.outcome, Outcome::Rejected { .. }) => {
                    stats.forget(&model, trial);
                    // Another node that tripped first made the same write: counted there.
                    if !committed.applied.duplicate {
                        stats.rollbacks.inc();
                    }
                }
                Ok(committed) => tracing::debug!(outcome = ?committed.applied.outcome, "rollback refused"),
                Err(error) => tracing::warn!(%error, %model, "the canary's rollback was not committed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: CanaryRule = CanaryRule {
        max_error_rate_increase: 0.05,
        max_p99_ratio: 1.5,
        min_samples: 10,
        audit_percent: 10,
        min_agreement: 0.0,
    };

    /// A generation that took `seconds`, its first token at a tenth of that, and 8 tokens.
    fn took(seconds: f64) -> Option<Generated> {
        Some(Generated { seconds, ttft_seconds: Some(seconds / 10.0), output_tokens: 8 })
    }

    #[test]
    fn a_trial_is_judged_once_both_arms_have_enough_and_only_when_worse_than_the_rule() {
        let stats = ArmStats::default();
        for _ in 0..10 {
            stats.record("m", 1, took(0.100));
        }
        for _ in 0..9 {
            stats.record("m", 2, took(0.120));
        }
        assert_eq!(stats.verdict(&RULE, "m", 1, 2), None, "too few samples");
        stats.record("m", 2, took(0.140));
        assert_eq!(stats.verdict(&RULE, "m", 1, 2), None, "within 1.5x");
        stats.record("m", 2, took(0.400));
        assert!(stats.verdict(&RULE, "m", 1, 2).is_some_and(|why| why.contains("p99")));
        let errors = ArmStats::default();
        for i in 0..20 {
            errors.record("m", 1, took(0.1));
            errors.record("m", 2, if i % 5 != 0 { took(0.1) } else { None });
        }
        assert!(errors.verdict(&RULE, "m", 1, 2).is_some_and(|why| why.contains("error rate")), "20% errors");
        assert_eq!(errors.verdict(&RULE, "m", 1, 3), None, "no such arm");
    }

    #[test]
    fn a_trial_whose_answers_disagree_is_judged_once_it_has_enough_audits() {
        let rule = CanaryRule { min_agreement: 0.8, ..RULE };
        let stats = ArmStats::default();
        for _ in 0..10 {
            stats.record("m", 1, took(0.1));
            stats.record("m", 2, took(0.1));
        }
        for i in 0..9 {
            stats.record_audit("m", 2, i % 2 == 0);
        }
        assert_eq!(stats.verdict(&rule, "m", 1, 2), None, "9 audits are too few");
        stats.record_audit("m", 2, false);
        assert!(stats.verdict(&rule, "m", 1, 2).is_some_and(|why| why.contains("agree")), "4 of 10 agree");
        assert_eq!(stats.verdict(&RULE, "m", 1, 2), None, "agreement is not judged without a bar");
    }

    #[test]
    fn each_arm_shows_its_ttft_and_tokens() {
        let stats = ArmStats::default();
        stats.record("m", 1, took(0.5));
        stats.record("m", 2, took(0.5));
        stats.record("m", 2, took(1.0));
        let arms = [ModelArms { model: "m".into(), current: 1, trial: Some(2) }];
        let text = stats.exposition(MetricsText::default(), &arms).finish();
        let trial_tokens =
            r#"mesh_core_generation_output_tokens_total{model="m",version="2",arm="trial"} 16"#;
        assert!(text.contains(trial_tokens), "{text}");
        let current_ttft =
            r#"mesh_core_generation_ttft_seconds_count{model="m",version="1",arm="current"} 1"#;
        assert!(text.contains(current_ttft), "{text}");
    }
}
