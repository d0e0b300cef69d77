//! Whether a cache hit served the right answer: for a sample of semantic hits (hits on a conversation
//! never sent before), the fresh greedy answer to the same messages is generated with the cache
//! bypassed, and the two are compared two ways: equal after case and whitespace normalisation, and
//! similar (ROUGE-L F1 over lowercase words of at least [`SIMILAR`]: two short answers that differ only in
//! the entity they name, "Paris is the capital of France." against "Berlin is the capital of Germany.",
//! score 0.67 and do not count).

use serde_json::json;

use crate::bench::e2e::driver::{Endpoint, Turn, MODEL};
use crate::bench::e2e::workload::{normalize, LabelledRewrite};
use mesh_harness::client::ChatClient;

/// The ROUGE-L F1 at or above which two answers count as the same answer.
pub const SIMILAR: f64 = 0.7;

/// How the sampled hits compared with fresh answers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Agreement {
    /// Hits compared.
    pub sampled: usize,
    /// Hits equal to the fresh answer after normalisation.
    pub exact: usize,
    /// Hits similar to the fresh answer.
    pub similar: usize,
}

impl Agreement {
    /// Share of sampled hits similar to the fresh answer (0 without samples).
    pub fn similar_rate(&self) -> f64 {
        self.similar as f64 / self.sampled.max(1) as f64
    }

    /// Share of sampled hits equal to the fresh answer after normalisation.
    pub fn exact_rate(&self) -> f64 {
        self.exact as f64 / self.sampled.max(1) as f64
    }
}

/// Compares up to `sample` semantic hits among `turns` (evenly spread) with fresh answers from `fresh`.
pub fn audit(fresh: &Endpoint, turns: &[&Turn], sample: usize, max_tokens: u32) -> anyhow::Result<Agreement> {
    let semantic: Vec<&&Turn> =
        turns.iter().filter(|t| t.status == 200 && t.hit.is_some() && t.first_ask).collect();
    let step = (semantic.len() as f64 / sample.max(1) as f64).max(1.0);
    let answer = FreshAnswers::new(fresh, max_tokens);
    let mut agreement = Agreement::default();
    for i in 0..semantic.len().min(sample) {
        let turn = semantic[(i as f64 * step) as usize];
        agreement.add(&answer.to(&turn.messages)?, &turn.answer);
    }
    Ok(agreement)
}

/// The most a semantic hit can agree under [`audit`]'s rules with this model: fresh greedy answers to
/// both wordings of up to `sample` of the labelled paraphrases among `pairs`, compared the same way.
/// A small model words its answers to two wordings differently even when both are right, so a cache
/// serving only true paraphrases scores this, not 1.
pub fn paraphrase_ceiling(
    fresh: &Endpoint,
    pairs: &[LabelledRewrite],
    sample: usize,
    max_tokens: u32,
) -> anyhow::Result<Agreement> {
    let answer = FreshAnswers::new(fresh, max_tokens);
    let mut agreement = Agreement::default();
    for pair in pairs.iter().filter(|p| p.paraphrase).take(sample) {
        let ask = |text: &str| answer.to(&[json!({"role": "user", "content": text})]);
        agreement.add(&ask(&pair.rewrite)?, &ask(&pair.question)?);
    }
    Ok(agreement)
}

impl Agreement {
    /// Counts one served answer against the fresh one.
    fn add(&mut self, fresh: &str, served: &str) {
        self.sampled += 1;
        self.exact += usize::from(normalize(fresh) == normalize(served));
        self.similar += usize::from(rouge_l_f1(fresh, served) >= SIMILAR);
    }
}

/// Greedy answers generated with the cache bypassed.
struct FreshAnswers<'a> {
    client: ChatClient,
    headers: Vec<(&'a str, &'a str)>,
    max_tokens: u32,
}

impl<'a> FreshAnswers<'a> {
    fn new(fresh: &'a Endpoint, max_tokens: u32) -> Self {
        let headers = fresh.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Self { client: ChatClient::new(&fresh.base_url, fresh.api_key.as_deref()), headers, max_tokens }
    }

    fn to(&self, messages: &[serde_json::Value]) -> anyhow::Result<String> {
        let body =
            json!({"model": MODEL, "temperature": 0, "max_tokens": self.max_tokens, "messages": messages});
        let reply = self.client.chat_with_headers(&body, &self.headers)?;
        anyhow::ensure!(reply.status == 200, "a fresh answer: {} {}", reply.status, reply.body);
        Ok(reply.content().unwrap_or_default())
    }
}

/// ROUGE-L F1: the longest common subsequence of lowercase words against both lengths.
pub fn rouge_l_f1(a: &str, b: &str) -> f64 {
    let words = |s: &str| s.split_whitespace().map(str::to_lowercase).collect::<Vec<_>>();
    let (a, b) = (words(a), words(b));
    if a.is_empty() || b.is_empty() {
        return if a.is_empty() && b.is_empty() { 1.0 } else { 0.0 };
    }
    let mut row = vec![0usize; b.len() + 1];
    for x in &a {
        let mut diagonal = 0;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if x == y { diagonal + 1 } else { above.max(row[j]) };
            diagonal = above;
        }
    }
    let lcs = row[b.len()] as f64;
    let (precision, recall) = (lcs / b.len() as f64, lcs / a.len() as f64);
    if lcs == 0.0 {
        0.0
    } else {
        2.0 * precision * recall / (precision + recall)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rouge_l_counts_the_longest_common_subsequence() {
        assert_eq!(rouge_l_f1("The cat sat", "the cat sat"), 1.0);
        assert_eq!(rouge_l_f1("a b c d", "a x c y"), 0.5);
        assert_eq!(rouge_l_f1("", "x"), 0.0);
        assert!(rouge_l_f1("Paris is the capital of France.", "Berlin is the capital of Germany.") < 0.7);
    }
}
