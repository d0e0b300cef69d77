//! Picks the next token from logits: argmax, or a seeded draw after temperature, top-k and top-p.
//!
//! The truncated, renormalised distribution is a value of its own ([`Distribution`]) so speculative
//! verification can read a draft token's probability and draw from what is left without it.
//!
//! NaN logits count as `-inf`. When no logit is finite (all `-inf`, or a `+inf`), the choice is the argmax
//! (the first `+inf`, or token 0), whatever the temperature. Weights below `e^-87` of the best token's
//! (after temperature) count as 0.
//!
//! # Layout
//! - [`distribution`]: [`Distribution`], probabilities by token, dense or truncated.
//! - `truncate`: top-k by a heap, top-p by a mass-guided selection; neither sorts the vocabulary.
//! - `math`: maximum, sum and `exp` over the vocabulary, in loops that vectorise.
//! - [`penalties`]: [`Penalizer`], frequency, presence and repetition penalties on tokens already seen.
//! - [`logprobs`]: the log-probabilities of a token and of the most likely tokens, for `logprobs`.

pub mod distribution;
pub mod logprobs;
pub(crate) mod math;
pub mod penalties;
mod truncate;

pub use distribution::Distribution;
pub use penalties::Penalizer;

use super::request::SamplingParams;
use super::rng::{random_seed, Rng};

/// The token picker of one generation.
#[derive(Debug, Clone)]
pub struct Sampler {
    /// Softmax temperature; 0 means greedy.
    temperature: f32,
    /// Tokens kept by top-k; 0 means all.
    top_k: usize,
    /// Nucleus mass; 0 or at least 1 means no truncation.
    top_p: f32,
    /// The draws, seeded from the request or at random.
    rng: Rng,
}

impl Sampler {
    /// The sampler the parameters ask for. Without a seed, a random one is drawn.
    pub fn new(params: &SamplingParams) -> Self {
        let t = params.temperature;
        // A temperature so small that 1/t overflows is greedy too.
        let greedy = t.is_nan() || t <= 0.0 || !(1.0 / t).is_finite();
        Self {
            temperature: if greedy { 0.0 } else { t },
            top_k: params.top_k as usize,
            top_p: params.top_p,
            rng: Rng::seed_from_u64(params.seed.unwrap_or_else(random_seed)),
        }
    }

    /// Whether this sampler always takes the argmax (temperature 0).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// The next token, from one row of logits (one per vocabulary entry); token 0 if `logits` is empty.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.is_greedy() {
            return math::argmax(logits).map_or(0, |(token, _)| token);
        }
        let dist = self.distribution(logits);
        self.sample_from(&dist)
    }

    /// The distribution [`Sampler::sample`] draws from for `logits`.
    pub fn distribution(&self, logits: &[f32]) -> Distribution {
        let Some((best, max)) = math::argmax(logits) else {
            return Distribution::from_sparse(Vec::new());
        };
        if self.is_greedy() || !max.is_finite() {
            return Distribution::point(best);
        }
        let inv_t = 1.0 / self.temperature;
        if self.top_k > 0 && self.top_k < logits.len() {
            let mut kept: Vec<(u32, f32)> = truncate::top_k(logits, self.top_k)
                .into_iter()
                .map(|(token, logit)| (token, math::exp_neg((logit - max) * inv_t)))
                .collect();
            if self.truncates_top_p() {
                kept.truncate(truncate::nucleus_of_sorted(&kept, self.top_p));
            }
            kept.sort_unstable_by_key(|&(token, _)| token);
            return Distribution::from_sparse(kept);
        }
        let weights = math::weights(logits, max, inv_t);
        if self.truncates_top_p() {
            Distribution::from_sparse(truncate::top_p(&weights, math::sum(&weights), self.top_p))
        } else {
            Distribution::from_dense(weights)
        }
    }

    /// A token drawn from `dist` (token 0 if it is empty). A single-token distribution costs no draw.
    pub fn sample_from(&mut self, dist: &Distribution) -> u32 {
        if let Some(token) = dist.single() {
            return token;
        }
        let u = self.rng.uniform_f64();
        dist.inverse_cdf(u)
    }

    /// A uniform `f32` in `[0, 1)` from this sampler's generator.
    pub fn uniform(&mut self) -> f32 {
        self.rng.uniform_f32()
    }

    /// A uniform `f64` in `[0, 1)` from this sampler's generator (finer grained, for acceptance tests).
    pub fn uniform_f64(&mut self) -> f64 {
        self.rng.uniform_f64()
    }

    /// Whether top-p truncates anything.
    fn truncates_top_p(&self) -> bool {
        self.top_p > 0.0 && self.top_p < 1.0
    }
}

#[cfg(test)]
pub(crate) mod tests;
