//! Distilling the edge's small embedding ([`shared::small_embedding`]) from all-MiniLM-L6-v2.
//!
//! Every vocabulary token alone (`[CLS] token [SEP]`) goes through the full model; its mean-pooled
//! output is the token's vector. The vectors are centred and reduced to their top principal components
//! ([`principal_components`], [`project`]), and each row is weighted by [`zipf_weight`] before the
//! table quantizes it to int8. [`evaluate`] compares the small embedding's hit decisions with the full
//! model's on the labelled pairs.

use regional_node::semantic::embedding::{EmbeddingError, SentenceEmbedder, EMBEDDING_DIM};

/// Token rows per forward pass.
const BATCH: usize = 512;

/// The full model's vector of every token id below `vocab`, row after row ([`EMBEDDING_DIM`] each).
pub fn token_vectors(
    embedder: &SentenceEmbedder,
    vocab: usize,
    cls: u32,
    sep: u32,
) -> Result<Vec<f32>, EmbeddingError> {
    let mut out = Vec::with_capacity(vocab * EMBEDDING_DIM);
    let ids: Vec<u32> = (0..vocab as u32).collect();
    for chunk in ids.chunks(BATCH) {
        let rows: Vec<Vec<u32>> = chunk.iter().map(|&t| vec![cls, t, sep]).collect();
        for v in embedder.embed_ids(&rows)? {
            out.extend(v);
        }
    }
    Ok(out)
}

/// The mean and the top `k` principal directions (unit rows of `dim`) of `n` rows of `dim`.
pub fn principal_components(data: &[f32], dim: usize, k: usize) -> (Vec<f32>, Vec<f32>) {
    let n = data.len() / dim;
    let mut mean = vec![0f64; dim];
    for row in data.chunks(dim) {
        for (m, x) in mean.iter_mut().zip(row) {
            *m += f64::from(*x);
        }
    }
    mean.iter_mut().for_each(|m| *m /= n as f64);
    let mut cov = vec![0f64; dim * dim];
    let mut centered = vec![0f64; dim];
    for row in data.chunks(dim) {
        for (c, (x, m)) in centered.iter_mut().zip(row.iter().zip(&mean)) {
            *c = f64::from(*x) - m;
        }
        for i in 0..dim {
            let ci = centered[i];
            let line = &mut cov[i * dim..(i + 1) * dim];
            for (cell, cj) in line.iter_mut().zip(&centered) {
                *cell += ci * cj;
            }
        }
    }
    // Subspace iteration: Q <- orth(C Q).
    let mut q: Vec<f64> =
        (0..k * dim).map(|i| (((i * 2_654_435_761) % 1000) as f64 / 1000.0) - 0.5).collect();
    for _ in 0..60 {
        let mut next = vec![0f64; k * dim];
        for c in 0..k {
            let col = &q[c * dim..(c + 1) * dim];
            for i in 0..dim {
                next[c * dim + i] = cov[i * dim..(i + 1) * dim].iter().zip(col).map(|(a, b)| a * b).sum();
            }
        }
        orthonormalize(&mut next, dim, k);
        q = next;
    }
    (mean.iter().map(|&m| m as f32).collect(), q.iter().map(|&x| x as f32).collect())
}

fn orthonormalize(rows: &mut [f64], dim: usize, k: usize) {
    for c in 0..k {
        for p in 0..c {
            let dot: f64 = (0..dim).map(|i| rows[c * dim + i] * rows[p * dim + i]).sum();
            for i in 0..dim {
                rows[c * dim + i] -= dot * rows[p * dim + i];
            }
        }
        let norm = (0..dim).map(|i| rows[c * dim + i].powi(2)).sum::<f64>().sqrt().max(1e-12);
        for i in 0..dim {
            rows[c * dim + i] /= norm;
        }
    }
}

/// Each row of `data` centred and projected on `components` (`k` rows of `dim`).
pub fn project(data: &[f32], mean: &[f32], components: &[f32], dim: usize) -> Vec<f32> {
    let k = components.len() / dim;
    let mut out = Vec::with_capacity(data.len() / dim * k);
    for row in data.chunks(dim) {
        for c in components.chunks(dim) {
            out.push(row.iter().zip(mean).zip(c).map(|((x, m), w)| (x - m) * w).sum());
        }
    }
    out
}

/// A token's weight in the pooled sum: the log of its rank in `vocab.txt`, which lists BERT's tokens
/// roughly by decreasing frequency, so frequent function words weigh little and rare content words
/// much (model2vec's Zipf weighting; on the labelled pairs it agrees with the full model more often
/// than equal weights).
pub fn zipf_weight(id: usize) -> f32 {
    ((1 + id) as f32).ln()
}

/// How the small embedding's decisions compare with the full model's at one threshold.
#[derive(Clone, Copy, Debug, Default)]
pub struct Agreement {
    /// The threshold both decide at.
    pub threshold: f32,
    /// Pairs where both decide the same.
    pub agree: usize,
    /// Pairs.
    pub pairs: usize,
    /// Precision of the small embedding's hits against the labels.
    pub precision: f64,
    /// Recall of the small embedding's hits against the labels.
    pub recall: f64,
}

/// Agreement of decisions on `pairs` (full cosine, small cosine, labelled a hit) at each threshold.
pub fn evaluate(pairs: &[(f32, f32, bool)], thresholds: &[f32]) -> Vec<Agreement> {
    thresholds
        .iter()
        .map(|&t| {
            let agree = pairs.iter().filter(|(full, small, _)| (*full >= t) == (*small >= t)).count();
            let tp = pairs.iter().filter(|(_, s, hit)| *s >= t && *hit).count() as f64;
            let fp = pairs.iter().filter(|(_, s, hit)| *s >= t && !*hit).count() as f64;
            let positives = pairs.iter().filter(|(_, _, hit)| *hit).count() as f64;
            Agreement {
                threshold: t,
                agree,
                pairs: pairs.len(),
                precision: if tp + fp > 0.0 { tp / (tp + fp) } else { 0.0 },
                recall: if positives > 0.0 { tp / positives } else { 0.0 },
            }
        })
        .collect()
}
