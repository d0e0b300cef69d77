//! Penalties on tokens a sequence has already seen, applied to a row of logits before the sampler
//! picks: OpenAI's frequency and presence penalties over the tokens generated so far, and vLLM's
//! repetition penalty over the prompt and the answer so far.

use std::collections::{HashMap, HashSet};

use shared::normalize::Penalties;

/// What one sequence has seen, and the penalties it asked for.
#[derive(Debug, Clone)]
pub struct Penalizer {
    penalties: Penalties,
    /// How often each token was generated.
    generated: HashMap<u32, u32>,
    /// Every token of the prompt and of the answer so far.
    seen: HashSet<u32>,
}

impl Penalizer {
    /// A penalizer for a sequence with `prompt`; `None` when no penalty is set (nothing to do).
    pub fn new(penalties: Penalties, prompt: &[u32]) -> Option<Self> {
        if penalties.is_none() {
            return None;
        }
        let seen =
            if penalties.repetition == 1.0 { HashSet::new() } else { prompt.iter().copied().collect() };
        Some(Self { penalties, generated: HashMap::new(), seen })
    }

    /// Counts a generated token.
    pub fn record(&mut self, token: u32) {
        *self.generated.entry(token).or_insert(0) += 1;
        if self.penalties.repetition != 1.0 {
            self.seen.insert(token);
        }
    }

    /// Applies the penalties to `logits` (one per vocabulary entry).
    pub fn apply(&self, logits: &mut [f32]) {
        let Penalties { frequency, presence, repetition } = self.penalties;
        if repetition != 1.0 {
            for &token in &self.seen {
                if let Some(logit) = logits.get_mut(token as usize) {
                    *logit = if *logit > 0.0 { *logit / repetition } else { *logit * repetition };
                }
            }
        }
        if frequency != 0.0 || presence != 0.0 {
            for (&token, &count) in &self.generated {
                if let Some(logit) = logits.get_mut(token as usize) {
                    *logit -= frequency * count as f32 + presence;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn penalties(frequency: f32, presence: f32, repetition: f32) -> Penalties {
        Penalties { frequency, presence, repetition }
    }

    #[test]
    fn no_penalty_means_no_penalizer() {
        assert!(Penalizer::new(Penalties::default(), &[1, 2]).is_none());
    }

    #[test]
    fn frequency_and_presence_count_generated_tokens_only() {
        let mut p = Penalizer::new(penalties(0.5, 0.25, 1.0), &[0]).expect("penalties set");
        p.record(1);
        p.record(1);
        p.record(2);
        let mut logits = vec![1.0, 1.0, 1.0, 1.0];
        p.apply(&mut logits);
        // Token 0 is only in the prompt; 1 was generated twice, 2 once, 3 never.
        assert_eq!(logits, vec![1.0, 1.0 - 2.0 * 0.5 - 0.25, 1.0 - 0.5 - 0.25, 1.0]);
    }

    #[test]
    fn repetition_pushes_every_seen_token_towards_unlikely() {
        let mut p = Penalizer::new(penalties(0.0, 0.0, 2.0), &[0]).expect("penalties set");
        p.record(1);
        let mut logits = vec![4.0, -4.0, 4.0, 9.0];
        p.apply(&mut logits);
        assert_eq!(logits, vec![2.0, -8.0, 4.0, 9.0]);
        // Out-of-vocabulary ids are ignored rather than panicking.
        p.record(100);
        p.apply(&mut logits);
    }

    #[test]
    fn a_greedy_loop_is_broken_by_a_frequency_penalty() {
        // Token 1 is always a little ahead of token 2: greedy repeats it forever, unless penalized.
        let mut p = Penalizer::new(penalties(0.3, 0.0, 1.0), &[]).expect("penalties set");
        let mut picked = Vec::new();
        for _ in 0..6 {
            let mut logits = vec![0.0, 1.0, 0.9];
            p.apply(&mut logits);
            let best = (0..logits.len()).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).expect("a token");
            p.record(best as u32);
            picked.push(best);
        }
        assert!(picked.contains(&2), "{picked:?}");
    }
}
