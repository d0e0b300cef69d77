//! Verification of a draft against the target model's logits, exact for greedy and sampled decoding.
//!
//! The drafter's proposal is deterministic, a point mass `q` on each draft token `x`, so speculative
//! rejection sampling reduces to: accept `x` with probability `min(1, p(x) / q(x)) = p(x)`, where `p` is
//! the sampler's (truncated, renormalised) distribution at that position; on rejection, draw from the
//! residual `max(0, p - q)` normalised, which is `p` without `x`. Every emitted token is then distributed
//! exactly as plain sampling would have it. Under greedy decoding `p` is a point mass on the argmax, so
//! this accepts the draft while it equals the argmax and then emits the argmax, drawing nothing.

use crate::sampler::{Distribution, Sampler};

/// The outcome of verifying one draft.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Draft tokens checked: the draft's length (cut to the rows given).
    pub drafted: usize,
    /// Draft tokens accepted: a prefix of the draft of this length.
    pub accepted: usize,
    /// The accepted draft tokens, then one more: the target's token where the draft was rejected, or a
    /// bonus token after a fully accepted draft. Always `accepted + 1` tokens (given at least one row).
    pub tokens: Vec<u32>,
}

/// Verifies `draft` against the target model's logits and picks the tokens to emit.
///
/// `rows[0]` holds the logits at the position of the last accepted token (predicting the first draft
/// token), `rows[i]` those at draft token `i - 1`; `draft.len() + 1` rows in all. A draft longer than
/// `rows.len() - 1` is cut to fit; with no rows at all the verdict is empty.
pub fn verify<R: AsRef<[f32]>>(sampler: &mut Sampler, draft: &[u32], rows: &[R]) -> Verdict {
    let Some(last_row) = rows.len().checked_sub(1) else {
        return Verdict { drafted: 0, accepted: 0, tokens: Vec::new() };
    };
    let draft = &draft[..draft.len().min(last_row)];
    let mut tokens = Vec::with_capacity(draft.len() + 1);
    for (&proposed, row) in draft.iter().zip(rows) {
        let target = sampler.distribution(row.as_ref());
        if accepts(sampler, &target, proposed) {
            tokens.push(proposed);
            continue;
        }
        let accepted = tokens.len();
        let residual = target.without(proposed);
        // Empty only if rounding gave `proposed` all the mass yet a probability below 1.
        let pick = if residual.is_empty() { &target } else { &residual };
        tokens.push(sampler.sample_from(pick));
        return Verdict { drafted: draft.len(), accepted, tokens };
    }
    let accepted = tokens.len();
    let bonus = sampler.distribution(rows[draft.len()].as_ref());
    tokens.push(sampler.sample_from(&bonus));
    Verdict { drafted: draft.len(), accepted, tokens }
}

/// Whether to keep `proposed`: always at probability 1, never at 0 (neither draws), else with
/// probability `p(proposed)`.
fn accepts(sampler: &mut Sampler, target: &Distribution, proposed: u32) -> bool {
    let p = target.prob(proposed);
    p >= 1.0 || (p > 0.0 && sampler.uniform_f64() < f64::from(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::SamplingParams;

    /// Logits whose argmax is `token` (vocabulary of 5).
    fn peak(token: usize) -> Vec<f32> {
        let mut row = vec![0.0; 5];
        row[token] = 3.0;
        row
    }

    fn greedy() -> Sampler {
        Sampler::new(&SamplingParams::greedy(1))
    }

    #[test]
    fn greedy_accepts_the_matching_prefix_then_corrects() {
        let rows = [peak(1), peak(2), peak(4), peak(0)];
        let v = verify(&mut greedy(), &[1, 2, 3], &rows);
        assert_eq!(v, Verdict { drafted: 3, accepted: 2, tokens: vec![1, 2, 4] });
        let v = verify(&mut greedy(), &[3, 2, 4], &rows);
        assert_eq!(v, Verdict { drafted: 3, accepted: 0, tokens: vec![1] });
    }

    #[test]
    fn greedy_adds_a_bonus_token_after_a_full_acceptance() {
        let rows = [peak(1), peak(2), peak(0)];
        let v = verify(&mut greedy(), &[1, 2], &rows);
        assert_eq!(v, Verdict { drafted: 2, accepted: 2, tokens: vec![1, 2, 0] });
        // No draft: just the next token.
        let v = verify(&mut greedy(), &[], &rows[..1]);
        assert_eq!(v, Verdict { drafted: 0, accepted: 0, tokens: vec![1] });
    }

    #[test]
    fn a_draft_longer_than_the_rows_is_cut() {
        let rows = [peak(1), peak(2)];
        let v = verify(&mut greedy(), &[1, 2, 3], &rows);
        assert_eq!(v, Verdict { drafted: 1, accepted: 1, tokens: vec![1, 2] });
        let none: [Vec<f32>; 0] = [];
        assert!(verify(&mut greedy(), &[1], &none).tokens.is_empty());
    }

    #[test]
    fn sampling_never_accepts_a_token_outside_the_support() {
        // top_k 1 leaves only the argmax: a wrong draft is always rejected and corrected to it.
        let params =
            SamplingParams { temperature: 1.0, top_k: 1, seed: Some(3), ..SamplingParams::greedy(1) };
        let mut sampler = Sampler::new(&params);
        for _ in 0..100 {
            let v = verify(&mut sampler, &[3, 2], &[peak(1), peak(2), peak(0)]);
            assert_eq!(v, Verdict { drafted: 2, accepted: 0, tokens: vec![1] });
        }
    }
}
