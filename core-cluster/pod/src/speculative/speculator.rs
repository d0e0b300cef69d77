//! One sequence's speculation: the n-gram drafter, the adaptive draft length and the counters together.

use super::adaptive::{AdaptiveConfig, DraftLength};
use super::drafter::NgramDrafter;
use super::stats::SpeculationStats;
use super::verify::{verify, Verdict};
use crate::sampler::Sampler;

/// How to speculate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpeculativeConfig {
    /// Shortest n-gram the drafter matches (at least 1).
    pub min_ngram: usize,
    /// Longest n-gram the drafter matches, tried first.
    pub max_ngram: usize,
    /// How the draft length adapts.
    pub adaptive: AdaptiveConfig,
}

impl Default for SpeculativeConfig {
    fn default() -> Self {
        Self { min_ngram: 2, max_ngram: 3, adaptive: AdaptiveConfig::default() }
    }
}

/// Drafts, verifies and learns for one sequence.
#[derive(Debug, Clone)]
pub struct Speculator {
    /// The sequence so far and its n-gram index.
    drafter: NgramDrafter,
    /// How many tokens to draft next.
    length: DraftLength,
    /// What happened so far.
    stats: SpeculationStats,
}

impl Speculator {
    /// A speculator for a sequence that starts with `prompt`.
    pub fn new(config: &SpeculativeConfig, prompt: &[u32]) -> Self {
        let mut drafter = NgramDrafter::new(config.min_ngram, config.max_ngram);
        drafter.extend(prompt);
        Self { drafter, length: DraftLength::new(config.adaptive), stats: SpeculationStats::default() }
    }

    /// Appends a token chosen outside [`Speculator::verify`] (e.g. the first one, sampled after prefill).
    pub fn push(&mut self, token: u32) {
        self.drafter.push(token);
    }

    /// The draft for the next step: at most `limit` tokens (e.g. the tokens still allowed, minus the one
    /// verification always adds), possibly none. Each call is one step for the adaptive length.
    pub fn propose(&mut self, limit: usize) -> Vec<u32> {
        let k = self.length.next_step().min(limit);
        self.drafter.draft(k)
    }

    /// Verifies `draft` (from [`Speculator::propose`]) against `rows` (see [`verify`]), then learns from
    /// the verdict and appends its tokens to the sequence.
    pub fn verify<R: AsRef<[f32]>>(&mut self, sampler: &mut Sampler, draft: &[u32], rows: &[R]) -> Verdict {
        let verdict = verify(sampler, draft, rows);
        self.length.record(verdict.drafted, verdict.accepted);
        self.stats.record(&verdict);
        self.drafter.extend(&verdict.tokens);
        verdict
    }

    /// The sequence so far: the prompt, then every token pushed or verified.
    pub fn tokens(&self) -> &[u32] {
        self.drafter.tokens()
    }

    /// The counters so far.
    pub fn stats(&self) -> SpeculationStats {
        self.stats
    }
}
