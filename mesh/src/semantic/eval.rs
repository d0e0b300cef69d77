//! `semantic-eval`: precision and recall of semantic-hit decisions on the labelled pair set
//! (`near-miss/data/semantic_pairs.jsonl`), for a plain all-MiniLM-L6-v2 similarity threshold and for
//! the threshold plus the near-miss verifier ([`near_miss`]).
//!
//! A decision is a "hit" when the cached answer to `a` would be served for `b`. Precision is the
//! share of hits that are labelled hits (a wrong answer served from cache is the costly error);
//! recall is the share of labelled hits that hit.

use std::collections::BTreeMap;
use std::path::Path;

use near_miss::{verify, NearMiss};
use serde::Deserialize;
use shared::content_class::{classify_text, SemanticThresholds};

use shared::small_embedding::SmallEmbedder;

use regional_node::semantic::embedding::{cosine, SentenceEmbedder};

/// One labelled pair, as in the file.
#[derive(Debug, Clone, Deserialize)]
pub struct LabelledPair {
    /// 1..N in file order.
    pub id: u32,
    /// The cached question.
    pub a: String,
    /// The new question.
    pub b: String,
    /// `hit` or `miss`.
    pub label: String,
    /// `paraphrase`, or the kind of near miss.
    pub kind: String,
}

impl LabelledPair {
    fn should_hit(&self) -> bool {
        self.label == "hit"
    }
}

/// Which pairs to score: the whole set, or one half by id parity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Split {
    /// Every pair.
    All,
    /// Odd ids: the half to look at while developing the verifier.
    Dev,
    /// Even ids: the half left unseen, the figure to report.
    Test,
}

impl Split {
    /// Whether the split takes `pair`.
    pub fn keeps(self, pair: &LabelledPair) -> bool {
        match self {
            Self::All => true,
            Self::Dev => !pair.id.is_multiple_of(2),
            Self::Test => pair.id.is_multiple_of(2),
        }
    }
}

/// A pair with what the tiers compute for it.
#[derive(Debug, Clone)]
pub struct ScoredPair {
    /// The pair.
    pub pair: LabelledPair,
    /// Cosine similarity of the two embeddings.
    pub similarity: f32,
    /// Cosine similarity of the two small embeddings, when a table was given.
    pub small_similarity: Option<f32>,
    /// The verifier's verdict.
    pub verdict: Result<(), NearMiss>,
}

/// Hit decisions against the labels.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    /// Decided hit, labelled hit.
    pub true_hits: usize,
    /// Decided hit, labelled miss: a wrong answer served.
    pub false_hits: usize,
    /// Labelled hits.
    pub labelled_hits: usize,
}

impl Counts {
    /// Hits that were right; 1 when nothing hit.
    pub fn precision(&self) -> f64 {
        let decided = self.true_hits + self.false_hits;
        if decided == 0 {
            1.0
        } else {
            self.true_hits as f64 / decided as f64
        }
    }

    /// Labelled hits that hit.
    pub fn recall(&self) -> f64 {
        if self.labelled_hits == 0 {
            0.0
        } else {
            self.true_hits as f64 / self.labelled_hits as f64
        }
    }
}

/// Counts the decisions of `hits` over `pairs`.
pub fn count(pairs: &[ScoredPair], hits: impl Fn(&ScoredPair) -> bool) -> Counts {
    let mut counts = Counts::default();
    for scored in pairs {
        let should = scored.pair.should_hit();
        counts.labelled_hits += usize::from(should);
        if hits(scored) {
            if should {
                counts.true_hits += 1;
            } else {
                counts.false_hits += 1;
            }
        }
    }
    counts
}

/// Reads the pair file; a line that does not parse is an error naming it.
pub fn read_pairs(path: &Path) -> anyhow::Result<Vec<LabelledPair>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect()
}

/// Embeds both sides of every pair (with the small table too, when given) and runs the verifier.
pub fn score(
    embedder: &SentenceEmbedder,
    small: Option<&SmallEmbedder>,
    pairs: Vec<LabelledPair>,
) -> anyhow::Result<Vec<ScoredPair>> {
    let mut scored = Vec::with_capacity(pairs.len());
    for chunk in pairs.chunks(32) {
        let texts: Vec<&str> = chunk.iter().flat_map(|p| [p.a.as_str(), p.b.as_str()]).collect();
        let embeddings = embedder.embed(&texts)?;
        for (pair, sides) in chunk.iter().zip(embeddings.chunks_exact(2)) {
            scored.push(ScoredPair {
                similarity: cosine(&sides[0], &sides[1]),
                small_similarity: small.and_then(|s| Some(cosine(&s.embed(&pair.a)?, &s.embed(&pair.b)?))),
                verdict: verify(&pair.a, &pair.b),
                pair: pair.clone(),
            });
        }
    }
    Ok(scored)
}

/// The decision a regional node makes with its default settings: with the small table (pairs scored
/// with it), the small embedding's similarity at [`SemanticThresholds::SMALL_ONLY`]'s gate for the
/// asked question (lower for a unit conversion), then the verifier; without it, MiniLM's at
/// `thresholds` (`None` for a class that never hits), then the verifier.
pub fn deployed(pairs: &[ScoredPair], thresholds: &SemanticThresholds) -> Counts {
    count(pairs, |p| deployed_hits(p, thresholds))
}

/// Whether the deployed decision serves `p`'s cached answer (see [`deployed`]).
fn deployed_hits(p: &ScoredPair, thresholds: &SemanticThresholds) -> bool {
    let class = classify_text(&p.pair.b);
    let similar = match p.small_similarity {
        Some(small) => SemanticThresholds::SMALL_ONLY
            .gate(class, near_miss::asks_conversion(&p.pair.b))
            .is_some_and(|t| small >= t),
        None => thresholds.of(class).is_some_and(|t| p.similarity >= t),
    };
    similar && p.verdict.is_ok()
}

/// The decision of a node with `--semantic-minilm-lookups`: the small embedding at
/// [`SemanticThresholds::SMALL_EMBEDDING`] first, else MiniLM at `thresholds`; then the verifier.
pub fn with_minilm_lookups(pairs: &[ScoredPair], thresholds: &SemanticThresholds) -> Counts {
    count(pairs, |p| {
        let class = classify_text(&p.pair.b);
        let full = thresholds.of(class).is_some_and(|t| p.similarity >= t);
        let small = SemanticThresholds::SMALL_EMBEDDING
            .gate(class, near_miss::asks_conversion(&p.pair.b))
            .is_some_and(|t| p.small_similarity.is_some_and(|s| s >= t));
        (full || small) && p.verdict.is_ok()
    })
}

/// How much of a set the report shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// Totals only, no pair (the frozen set: nothing is written against its errors).
    Totals,
    /// The totals, the near misses served by kind, and every wrong hit.
    WrongHits,
    /// As [`Listing::WrongHits`], and every labelled hit the verifier refused, with the reason.
    Refusals,
}

/// The small-embedding gates the report scores with the verifier (the gate only narrows the candidates
/// the verifier sees).
const SMALL_GATES: [f32; 8] = [0.40, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75, 0.80];

/// The printed report: the deployed decision, precision and recall by threshold, then (unless
/// `listing` is [`Listing::Totals`]) what still hits wrongly and why labelled hits were refused, at
/// `threshold`.
pub fn report(
    pairs: &[ScoredPair],
    thresholds: &[f32],
    threshold: f32,
    listing: Listing,
    classes: &SemanticThresholds,
) -> String {
    let mut out = String::new();
    write_decisions(&mut out, pairs, listing, classes);
    write_threshold_tables(&mut out, pairs, thresholds);
    if listing != Listing::Totals {
        write_listings(&mut out, pairs, threshold, listing);
    }
    out
}

/// The deployed decision (and, unless `listing` is [`Listing::Totals`], its wrong hits), the decision
/// with `--semantic-minilm-lookups`, and the set's size.
fn write_decisions(out: &mut String, pairs: &[ScoredPair], listing: Listing, classes: &SemanticThresholds) {
    use std::fmt::Write as _;
    let decided = deployed(pairs, classes);
    let small = SemanticThresholds::SMALL_ONLY;
    let how = if pairs.iter().any(|p| p.small_similarity.is_some()) {
        format!(
            "small embedding alone, class thresholds {:.2}/{:.2}/{:.2}",
            small.volatile, small.default, small.stable
        )
    } else {
        format!(
            "MiniLM, class thresholds {:.2}/{:.2}/{:.2}",
            classes.volatile, classes.default, classes.stable
        )
    };
    let _ = writeln!(
        out,
        "deployed decision ({how}; + verifier): precision {:.3} ({} wrong of {} hits), recall {:.3}",
        decided.precision(),
        decided.false_hits,
        decided.true_hits + decided.false_hits,
        decided.recall()
    );
    let wrong = pairs.iter().filter(|p| !p.pair.should_hit() && deployed_hits(p, classes));
    for p in wrong.filter(|_| listing != Listing::Totals) {
        let _ = writeln!(out, "  wrong: #{} {}: {:?} / {:?}", p.pair.id, p.pair.kind, p.pair.a, p.pair.b);
    }
    let both = with_minilm_lookups(pairs, classes);
    let _ = writeln!(
        out,
        "with --semantic-minilm-lookups (small embedding first, then MiniLM at {:.2}/{:.2}/{:.2}; + verifier): precision {:.3} ({} wrong of {} hits), recall {:.3}",
        classes.volatile,
        classes.default,
        classes.stable,
        both.precision(),
        both.false_hits,
        both.true_hits + both.false_hits,
        both.recall()
    );
    let misses = pairs.iter().filter(|p| !p.pair.should_hit()).count();
    let _ =
        writeln!(out, "{} pairs: {} labelled hits, {misses} near misses", pairs.len(), pairs.len() - misses);
}

/// Precision and recall by MiniLM threshold, plain and with the verifier; by small-embedding gate with
/// the verifier (when the pairs were scored with the small table); and of the verifier alone.
fn write_threshold_tables(out: &mut String, pairs: &[ScoredPair], thresholds: &[f32]) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "| threshold | plain precision | plain recall | +verifier precision | +verifier recall |"
    );
    let _ = writeln!(
        out,
        "|-----------|-----------------|--------------|---------------------|------------------|"
    );
    for &t in thresholds {
        let plain = count(pairs, |p| p.similarity >= t);
        let verified = count(pairs, |p| p.similarity >= t && p.verdict.is_ok());
        let _ = writeln!(
            out,
            "| {t:.2}      | {:.3} ({:>3} wrong)  | {:.3}        | {:.3} ({:>3} wrong)      | {:.3}            |",
            plain.precision(),
            plain.false_hits,
            plain.recall(),
            verified.precision(),
            verified.false_hits,
            verified.recall(),
        );
    }
    if pairs.iter().any(|p| p.small_similarity.is_some()) {
        let _ = writeln!(out, "| small-embedding gate | +verifier precision | +verifier recall |");
        let _ = writeln!(out, "|----------------------|---------------------|------------------|");
        for t in SMALL_GATES {
            let verified = count(pairs, |p| p.small_similarity.is_some_and(|s| s >= t) && p.verdict.is_ok());
            let _ = writeln!(
                out,
                "| {t:.2}                 | {:.3} ({:>3} wrong)      | {:.3}            |",
                verified.precision(),
                verified.false_hits,
                verified.recall(),
            );
        }
    }
    let alone = count(pairs, |p| p.verdict.is_ok());
    let _ = writeln!(
        out,
        "verifier alone (no threshold): precision {:.3} ({} wrong), recall {:.3}",
        alone.precision(),
        alone.false_hits,
        alone.recall()
    );
}

/// At `threshold`: the near misses served by kind, every wrong hit with the verifier, and the labelled
/// hits the verifier refused by reason (each one too, with [`Listing::Refusals`]).
fn write_listings(out: &mut String, pairs: &[ScoredPair], threshold: f32, listing: Listing) {
    use std::fmt::Write as _;
    let mut by_kind: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
    for p in pairs.iter().filter(|p| !p.pair.should_hit()) {
        let entry = by_kind.entry(p.pair.kind.as_str()).or_default();
        entry.0 += 1;
        entry.1 += usize::from(p.similarity >= threshold);
        entry.2 += usize::from(p.similarity >= threshold && p.verdict.is_ok());
    }
    let _ = writeln!(out, "near misses served at {threshold:.2}, by kind (plain -> +verifier):");
    for (kind, (total, plain, verified)) in by_kind {
        let _ = writeln!(out, "  {kind:<10} {total:>4} pairs: {plain:>4} -> {verified}");
    }
    let _ = writeln!(out, "wrong hits at {threshold:.2} with the verifier:");
    for p in pairs.iter().filter(|p| !p.pair.should_hit() && p.similarity >= threshold && p.verdict.is_ok()) {
        let _ = writeln!(
            out,
            "  #{} {} {:.3}: {:?} / {:?}",
            p.pair.id, p.pair.kind, p.similarity, p.pair.a, p.pair.b
        );
    }
    let mut refused: BTreeMap<String, usize> = BTreeMap::new();
    for p in pairs.iter().filter(|p| p.pair.should_hit() && p.similarity >= threshold) {
        if let Err(why) = &p.verdict {
            let reason = format!("{why}");
            if listing == Listing::Refusals {
                let _ = writeln!(
                    out,
                    "  refused #{} {:.3} ({reason}): {:?} / {:?}",
                    p.pair.id, p.similarity, p.pair.a, p.pair.b
                );
            }
            let class = reason.split(':').next().unwrap_or_default().to_string();
            *refused.entry(class).or_default() += 1;
        }
    }
    let _ =
        writeln!(out, "labelled hits above {threshold:.2} that the verifier refused, by reason: {refused:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scored(id: u32, label: &str, similarity: f32, ok: bool) -> ScoredPair {
        ScoredPair {
            pair: LabelledPair {
                id,
                a: String::new(),
                b: String::new(),
                label: label.into(),
                kind: if label == "hit" { "paraphrase".into() } else { "number".into() },
            },
            similarity,
            small_similarity: None,
            verdict: if ok {
                Ok(())
            } else {
                Err(NearMiss::new(near_miss::Rule::Negation, "one side is negated"))
            },
        }
    }

    #[test]
    fn precision_and_recall_count_decisions_against_labels() {
        let pairs = [
            scored(1, "hit", 0.99, true),
            scored(2, "hit", 0.90, true),
            scored(3, "miss", 0.99, false),
            scored(4, "miss", 0.98, true),
        ];
        let plain = count(&pairs, |p| p.similarity >= 0.95);
        assert_eq!(plain, Counts { true_hits: 1, false_hits: 2, labelled_hits: 2 });
        assert!((plain.precision() - 1.0 / 3.0).abs() < 1e-9);
        assert!((plain.recall() - 0.5).abs() < 1e-9);
        let verified = count(&pairs, |p| p.similarity >= 0.95 && p.verdict.is_ok());
        assert_eq!(verified.false_hits, 1);
        assert_eq!(count(&pairs, |_| false).precision(), 1.0);
        assert!(Split::Test.keeps(&pairs[1].pair) && !Split::Test.keeps(&pairs[0].pair));
    }
}
