//! Whether a cache hit served the right answer: for a sample of semantic hits (hits on a conversation
//! never sent before), the fresh greedy answer to the same messages is generated with the cache
//! bypassed, and the two are compared two ways: equal after case and whitespace normalisation, and
//! similar (ROUGE-L F1 over lowercase words of at least [`SIMILAR`]: two short answers that differ only in
//! the entity they name, "Paris is the capital of France." against "Berlin is the capital of Germany.",
//! score 0.67 and do not count).

use serde_json::json;

use super::e2e_driver::{Endpoint, Turn, MODEL};
use super::e2e_workload::normalize;
use crate::client::ChatClient;

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
    let client = ChatClient::new(&fresh.base_url, fresh.api_key.as_deref());
    let headers: Vec<(&str, &str)> = fresh.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut agreement = Agreement::default();
    for i in 0..semantic.len().min(sample) {
        let turn = semantic[(i as f64 * step) as usize];
        let body =
            json!({"model": MODEL, "temperature": 0, "max_tokens": max_tokens, "messages": turn.messages});
        let reply = client.chat_with_headers(&body, &headers)?;
        anyhow::ensure!(reply.status == 200, "a fresh answer: {} {}", reply.status, reply.body);
        let fresh_answer = reply.content().unwrap_or_default();
        agreement.sampled += 1;
        agreement.exact += usize::from(normalize(&fresh_answer) == normalize(&turn.answer));
        agreement.similar += usize::from(rouge_l_f1(&fresh_answer, &turn.answer) >= SIMILAR);
    }
    Ok(agreement)
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
