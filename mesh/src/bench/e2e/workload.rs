//! The end-to-end suite's traffic, from ShareGPT: the *natural* mix replays conversations in the
//! dataset's own order (its repeats included, and a second user turn where the conversation has one),
//! with labelled pairs woven in: a ShareGPT question, then some conversations later a rewrite of it,
//! either a paraphrase or a near miss (`near-miss/data/semantic_pairs.jsonl`), so that semantic hits, right
//! and wrong, happen at a known rate;
//! the *popular* mix draws distinct first turns with a Zipf distribution (exponent 1.0), the popularity
//! skew of production assistant traffic. Both are a fixed sequence every system replays from the same
//! offsets.

use std::collections::HashSet;
use std::path::Path;

use crate::bench::common::sharegpt;

/// Which traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// The dataset's conversations in its own order.
    Natural,
    /// Distinct first turns drawn with Zipf (exponent 1.0).
    Popular,
}

impl Mix {
    /// How the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Mix::Natural => "natural",
            Mix::Popular => "popular",
        }
    }

    /// The mix `--mixes` names `name`.
    pub fn parse(name: &str) -> anyhow::Result<Self> {
        match name {
            "natural" => Ok(Mix::Natural),
            "popular" => Ok(Mix::Popular),
            other => anyhow::bail!("unknown mix {other:?} (natural, popular)"),
        }
    }
}

/// A conversation a client replays turn by turn: the user's turns, the assistant's being whatever the
/// system under test answered.
pub type Conversation = Vec<String>;

/// One mix's conversation sequence.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Which mix.
    pub mix: Mix,
    /// The sequence every system replays.
    pub conversations: Vec<Conversation>,
}

/// How the mixes are drawn.
#[derive(Clone, Debug)]
pub struct WorkloadSpec {
    /// Conversations of each mix's sequence.
    pub length: usize,
    /// Distinct first turns the popular mix draws from.
    pub popular_pool: usize,
    /// Longest user turn, in characters (bounds prefill work).
    pub max_chars: usize,
    /// Seed of the Zipf draws.
    pub seed: u64,
    /// Labelled pairs woven into the natural mix.
    pub pairs: Vec<LabelledRewrite>,
    /// One pair starts every this many natural conversations (0: none).
    pub pair_every: usize,
}

/// Conversations between a pair's question and its rewrite.
const PAIR_GAP: usize = 24;

/// Shortest user turn kept, in characters.
const MIN_CHARS: usize = 4;

impl WorkloadSpec {
    /// Both mixes. They use disjoint parts of the dataset (the natural mix its first conversations, the
    /// popular mix first turns after those), so that one mix's answers never serve the other's.
    pub fn build(&self, sharegpt: &Path) -> anyhow::Result<[Workload; 2]> {
        let all = sharegpt::conversations(
            sharegpt,
            self.length * 4 + self.popular_pool * 2,
            2,
            MIN_CHARS..=self.max_chars,
        )?;
        let (natural, rest) = all.split_at(self.length.min(all.len()));
        let natural = Workload { mix: Mix::Natural, conversations: self.weave_pairs(natural) };
        let mut seen: HashSet<String> = natural.conversations.iter().map(|c| normalize(&c[0])).collect();
        let pool: Vec<String> = rest
            .iter()
            .map(|c| c[0].clone())
            .filter(|t| seen.insert(normalize(t)))
            .take(self.popular_pool)
            .collect();
        anyhow::ensure!(!pool.is_empty(), "no first turns left for the popular mix");
        let zipf = Zipf::new(pool.len(), 1.0);
        let mut rng = SplitMix(self.seed);
        let popular = (0..self.length).map(|_| vec![pool[zipf.sample(rng.unit())].clone()]).collect();
        Ok([natural, Workload { mix: Mix::Popular, conversations: popular }])
    }
}

impl WorkloadSpec {
    /// `conversations` with a pair's question before every [`Self::pair_every`]th one and its rewrite
    /// [`PAIR_GAP`] conversations later.
    fn weave_pairs(&self, conversations: &[Conversation]) -> Vec<Conversation> {
        if self.pair_every == 0 {
            return conversations.to_vec();
        }
        let mut pairs = self.pairs.iter();
        let mut rewrites: std::collections::BTreeMap<usize, Vec<String>> = Default::default();
        let mut out = Vec::with_capacity(conversations.len() * 5 / 4);
        for (i, conversation) in conversations.iter().enumerate() {
            if i % self.pair_every == 0 {
                if let Some(pair) = pairs.next() {
                    out.push(vec![pair.question.clone()]);
                    rewrites.entry(i + PAIR_GAP).or_default().push(pair.rewrite.clone());
                }
            }
            for rewrite in rewrites.remove(&i).unwrap_or_default() {
                out.push(vec![rewrite]);
            }
            out.push(conversation.clone());
        }
        out
    }
}

/// A labelled pair: a question and its rewrite, a paraphrase or a near miss.
#[derive(Clone, Debug)]
pub struct LabelledRewrite {
    /// The question (a ShareGPT first turn).
    pub question: String,
    /// Its rewrite.
    pub rewrite: String,
    /// Whether the rewrite asks what the question asks (labelled `hit`).
    pub paraphrase: bool,
}

/// The labelled pairs of `path` (JSON lines with `a`, `b`, `label` and `source`) whose question is a
/// ShareGPT first turn, paraphrases and near misses alike, in file order.
pub fn sharegpt_pairs(path: &Path) -> anyhow::Result<Vec<LabelledRewrite>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    let mut pairs = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let pair: serde_json::Value = serde_json::from_str(line)?;
        let field = |name: &str| pair.get(name).and_then(|v| v.as_str()).map(str::to_owned);
        if field("source").as_deref() == Some("sharegpt") {
            if let (Some(question), Some(rewrite)) = (field("a"), field("b")) {
                let paraphrase = field("label").as_deref() == Some("hit");
                pairs.push(LabelledRewrite { question, rewrite, paraphrase });
            }
        }
    }
    Ok(pairs)
}

impl Workload {
    /// Share of first turns that repeat an earlier one after case and whitespace normalisation.
    pub fn repeat_share(&self) -> f64 {
        let mut seen = HashSet::new();
        let repeats = self.conversations.iter().filter(|c| !seen.insert(normalize(&c[0]))).count();
        repeats as f64 / self.conversations.len().max(1) as f64
    }
}

/// Lowercase, whitespace runs collapsed to one space, trimmed.
pub fn normalize(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

/// A Zipf distribution over ranks `0..n` (rank k drawn with probability proportional to 1/(k+1)^s).
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut total = 0.0;
        let mut cumulative: Vec<f64> = (1..=n)
            .map(|k| {
                total += 1.0 / (k as f64).powf(s);
                total
            })
            .collect();
        cumulative.iter_mut().for_each(|c| *c /= total);
        Self { cumulative }
    }

    /// The rank for a uniform draw `u` in [0, 1).
    fn sample(&self, u: f64) -> usize {
        self.cumulative.partition_point(|c| *c <= u).min(self.cumulative.len() - 1)
    }
}

/// SplitMix64: a small seeded generator (the draws only need to be reproducible, not secure).
pub(super) struct SplitMix(pub(super) u64);

impl SplitMix {
    /// A uniform draw in [0, 1).
    pub(super) fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_one_favours_the_head_as_the_harmonic_series_says() {
        let zipf = Zipf::new(100, 1.0);
        let mut rng = SplitMix(7);
        let draws = 20_000;
        let head = (0..draws).filter(|_| zipf.sample(rng.unit()) == 0).count() as f64 / draws as f64;
        // 1 / H(100) = 0.193.
        assert!((head - 0.193).abs() < 0.02, "{head}");
        assert_eq!(zipf.sample(0.999_999_9), 99);
    }

    #[test]
    fn normalisation_ignores_case_and_whitespace() {
        assert_eq!(normalize("  Hello\n  World "), "hello world");
        let workload = Workload {
            mix: Mix::Natural,
            conversations: vec![vec!["Hi there".into()], vec!["hi  THERE".into()]],
        };
        assert_eq!(workload.repeat_share(), 0.5);
    }

    #[test]
    fn a_pairs_rewrite_follows_its_question_after_the_gap() {
        let spec = WorkloadSpec {
            length: 0,
            popular_pool: 0,
            max_chars: 100,
            seed: 1,
            pairs: ["1", "2"]
                .map(|n| LabelledRewrite {
                    question: format!("q{n}"),
                    rewrite: format!("r{n}"),
                    paraphrase: true,
                })
                .to_vec(),
            pair_every: 10,
        };
        let conversations: Vec<Conversation> = (0..40).map(|i| vec![format!("c{i}")]).collect();
        let woven: Vec<String> = spec.weave_pairs(&conversations).into_iter().map(|c| c[0].clone()).collect();
        let at = |t: &str| woven.iter().position(|w| w == t).expect(t);
        assert_eq!(woven.len(), 44);
        assert!(at("q1") < at("c0") && at("q2") < at("c10") && at("c9") < at("q2"));
        assert!(at("c23") < at("r1") && at("r1") < at("c24"), "{woven:?}");
        assert!(at("c33") < at("r2") && at("r2") < at("c34"));
    }
}
