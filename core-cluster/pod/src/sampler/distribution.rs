//! The distribution one row of logits gives after temperature, top-k and top-p.

use super::math;

/// What a [`Sampler`](super::Sampler) draws from for one row of logits: the softmax at the temperature,
/// truncated by top-k and top-p, renormalised. Greedy decoding gives a point mass on the argmax.
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    /// The tokens and their unnormalised weights.
    support: Support,
    /// The sum of the weights; probabilities are weights divided by it.
    total: f64,
}

/// How a [`Distribution`] stores its weights.
#[derive(Debug, Clone, PartialEq)]
enum Support {
    /// One weight per token of the vocabulary, indexed by token id (no truncation).
    Dense(Vec<f32>),
    /// The kept tokens, all of positive weight, in token order.
    Sparse(Vec<(u32, f32)>),
}

impl Distribution {
    /// All the mass on `token`.
    pub fn point(token: u32) -> Self {
        Self { support: Support::Sparse(vec![(token, 1.0)]), total: 1.0 }
    }

    /// Non-negative weights indexed by token.
    pub(super) fn from_dense(weights: Vec<f32>) -> Self {
        let total = math::sum(&weights);
        Self { support: Support::Dense(weights), total }
    }

    /// `(token, weight)` pairs in token order; zero weights are dropped.
    pub(super) fn from_sparse(mut entries: Vec<(u32, f32)>) -> Self {
        entries.retain(|&(_, w)| w > 0.0);
        let total = entries.iter().map(|&(_, w)| f64::from(w)).sum();
        Self { support: Support::Sparse(entries), total }
    }

    /// The probability of `token` (0 outside the support).
    pub fn prob(&self, token: u32) -> f32 {
        let weight = match &self.support {
            Support::Dense(weights) => weights.get(token as usize).copied().unwrap_or(0.0),
            Support::Sparse(entries) => {
                entries.binary_search_by_key(&token, |&(t, _)| t).map_or(0.0, |i| entries[i].1)
            }
        };
        self.normalise(weight)
    }

    /// The tokens of positive probability with their probabilities, in token order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (u32, f32)> + '_> {
        let entries: Box<dyn Iterator<Item = (u32, f32)>> = match &self.support {
            Support::Dense(weights) => Box::new(dense_entries(weights).filter(|&(_, w)| w > 0.0)),
            Support::Sparse(entries) => Box::new(entries.iter().copied()),
        };
        Box::new(entries.map(|(token, w)| (token, self.normalise(w))))
    }

    /// How many tokens have positive probability.
    pub fn len(&self) -> usize {
        match &self.support {
            Support::Dense(weights) => weights.iter().filter(|&&w| w > 0.0).count(),
            Support::Sparse(entries) => entries.len(),
        }
    }

    /// Whether no token has positive probability.
    pub fn is_empty(&self) -> bool {
        self.total <= 0.0
    }

    /// The only token, if exactly one has positive probability and the support is truncated (so
    /// drawing from it needs no random number).
    pub(super) fn single(&self) -> Option<u32> {
        match &self.support {
            Support::Sparse(entries) if entries.len() == 1 => entries.first().map(|&(token, _)| token),
            _ => None,
        }
    }

    /// This distribution without `token`, renormalised: the residual `max(0, p - q)` of speculative
    /// sampling when the proposal `q` is a point mass on `token`. Empty if `token` held all the mass.
    pub fn without(&self, token: u32) -> Self {
        match &self.support {
            Support::Dense(weights) => {
                let mut weights = weights.clone();
                if let Some(w) = weights.get_mut(token as usize) {
                    *w = 0.0;
                }
                Self::from_dense(weights)
            }
            Support::Sparse(entries) => {
                Self::from_sparse(entries.iter().copied().filter(|&(t, _)| t != token).collect())
            }
        }
    }

    /// The token where the cumulative probability first exceeds `u` (in `[0, 1)`); token 0 if empty.
    pub(super) fn inverse_cdf(&self, u: f64) -> u32 {
        let target = u * self.total;
        match &self.support {
            Support::Dense(weights) => pick(dense_entries(weights), target),
            Support::Sparse(entries) => pick(entries.iter().copied(), target),
        }
    }

    /// A weight as a probability.
    fn normalise(&self, weight: f32) -> f32 {
        if self.total > 0.0 {
            (f64::from(weight) / self.total) as f32
        } else {
            0.0
        }
    }
}

/// Dense weights as `(token, weight)` pairs.
fn dense_entries(weights: &[f32]) -> impl Iterator<Item = (u32, f32)> + '_ {
    weights.iter().enumerate().map(|(token, &w)| (token as u32, w))
}

/// The first token whose cumulative weight exceeds `target`; the last of positive weight if rounding
/// leaves the sum just short of it; token 0 if there is none.
fn pick(entries: impl Iterator<Item = (u32, f32)>, target: f64) -> u32 {
    let mut cumulative = 0.0;
    let mut last = 0;
    for (token, w) in entries {
        if w > 0.0 {
            cumulative += f64::from(w);
            if cumulative > target {
                return token;
            }
            last = token;
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_and_sparse_agree() {
        let dense = Distribution::from_dense(vec![1.0, 0.0, 3.0, 4.0]);
        let sparse = Distribution::from_sparse(vec![(0, 1.0), (1, 0.0), (2, 3.0), (3, 4.0)]);
        for d in [&dense, &sparse] {
            assert_eq!(d.len(), 3);
            assert_eq!(d.prob(2), 0.375);
            assert_eq!(d.prob(1), 0.0);
            assert_eq!(d.prob(9), 0.0);
            assert_eq!(d.inverse_cdf(0.0), 0);
            assert_eq!(d.inverse_cdf(0.2), 2);
            assert_eq!(d.inverse_cdf(0.999_999), 3);
            assert_eq!(d.iter().collect::<Vec<_>>(), [(0, 0.125), (2, 0.375), (3, 0.5)]);
        }
    }

    #[test]
    fn without_removes_a_token_and_renormalises() {
        for d in [
            Distribution::from_dense(vec![1.0, 0.0, 3.0, 4.0]),
            Distribution::from_sparse(vec![(0, 1.0), (2, 3.0), (3, 4.0)]),
        ] {
            let rest = d.without(3);
            assert_eq!(rest.prob(3), 0.0);
            assert_eq!(rest.prob(0), 0.25);
            assert_eq!(rest.prob(2), 0.75);
            assert_eq!(rest.len(), 2);
        }
        assert!(Distribution::point(4).without(4).is_empty());
        assert_eq!(Distribution::point(4).without(5), Distribution::point(4));
    }

    #[test]
    fn empty_distributions_give_token_zero() {
        for d in [Distribution::from_sparse(Vec::new()), Distribution::from_dense(vec![0.0; 3])] {
            assert!(d.is_empty());
            assert_eq!(d.inverse_cdf(0.5), 0);
            assert_eq!(d.prob(0), 0.0);
        }
    }
}
