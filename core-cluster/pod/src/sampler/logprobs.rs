//! Log-probabilities of a row of logits: the chosen token's and the most likely tokens', as OpenAI's
//! `logprobs` and `top_logprobs` report them.

use super::{math, truncate};

/// How likely the model found one token, and the most likely tokens at its position.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// The token taken.
    pub token: u32,
    /// Its natural log-probability.
    pub logprob: f32,
    /// The `k` most likely tokens with their log-probabilities, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// Scores `token` and the `top` best tokens under the softmax of `logits` at temperature 1 (the model's
/// distribution, before the request's temperature and truncation, as vLLM reports by default). A token
/// whose logit is NaN or `-inf` gets `-inf`; when no logit is finite every log-probability is `-inf`.
pub fn score(logits: &[f32], token: u32, top: usize) -> Scored {
    let max = math::max(logits);
    // log Σ e^l = max + log Σ e^(l - max), summed in f64.
    let log_total = if max.is_finite() {
        max as f64 + math::sum(&math::weights(logits, max, 1.0)).ln()
    } else {
        f64::INFINITY
    };
    let logprob_of = |logit: f32| {
        if logit.is_nan() {
            f32::NEG_INFINITY
        } else {
            (f64::from(logit) - log_total) as f32
        }
    };
    let logit = logits.get(token as usize).copied().unwrap_or(f32::NEG_INFINITY);
    let top = if top == 0 {
        Vec::new()
    } else {
        truncate::top_k(logits, top.min(logits.len())).into_iter().map(|(t, l)| (t, logprob_of(l))).collect()
    };
    Scored { token, logprob: logprob_of(logit), top }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_probabilities_are_the_log_softmax() {
        let logits = [1.0f32, 3.0, 2.0, f32::NEG_INFINITY];
        let total: f64 = logits.iter().map(|&l| f64::from(l).exp()).sum();
        let scored = score(&logits, 2, 2);
        assert!((f64::from(scored.logprob) - (2.0 - total.ln())).abs() < 1e-5, "{scored:?}");
        assert_eq!(scored.top.iter().map(|&(t, _)| t).collect::<Vec<_>>(), [1, 2]);
        assert!((f64::from(scored.top[0].1) - (3.0 - total.ln())).abs() < 1e-5);
        let probabilities: f64 = (0..4).map(|t| f64::from(score(&logits, t, 0).logprob).exp()).sum();
        assert!((probabilities - 1.0).abs() < 1e-5, "{probabilities}");
        assert_eq!(score(&logits, 3, 0).logprob, f32::NEG_INFINITY);
        assert_eq!(score(&logits, 0, 10).top.len(), 4, "at most the vocabulary");
    }

    #[test]
    fn huge_logits_do_not_overflow() {
        let scored = score(&[1e30, 0.0], 0, 1);
        assert_eq!(scored.logprob, 0.0);
        assert!(score(&[1e30, 0.0], 1, 0).logprob < -1e29);
    }
}
