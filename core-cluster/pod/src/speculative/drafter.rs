//! Prompt-lookup drafting: guess the next tokens by finding the sequence's last n-gram earlier in it.
//!
//! The index is incremental: each appended token registers the n-grams that now have a follower, so a
//! draft costs one hash lookup per n-gram size, whatever the length of the sequence.

use std::collections::HashMap;

/// Proposes draft tokens from earlier occurrences of the sequence's last n-gram.
#[derive(Debug, Clone)]
pub struct NgramDrafter {
    /// The sequence so far: prompt, then the generated tokens.
    tokens: Vec<u32>,
    /// Shortest n-gram matched (at least 1).
    min_ngram: usize,
    /// Longest n-gram matched, tried first.
    max_ngram: usize,
    /// Per n-gram size (index `n - min_ngram`): n-gram hash -> position of the token that followed its
    /// most recent occurrence.
    index: Vec<HashMap<u64, usize>>,
}

impl NgramDrafter {
    /// An empty drafter matching n-grams of `min_ngram..=max_ngram` tokens (`min_ngram` at least 1,
    /// `max_ngram` at least `min_ngram`).
    pub fn new(min_ngram: usize, max_ngram: usize) -> Self {
        let min_ngram = min_ngram.max(1);
        let max_ngram = max_ngram.max(min_ngram);
        let index = vec![HashMap::new(); max_ngram - min_ngram + 1];
        Self { tokens: Vec::new(), min_ngram, max_ngram, index }
    }

    /// The sequence so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Appends one token (prompt or generated).
    pub fn push(&mut self, token: u32) {
        self.tokens.push(token);
        let follower = self.tokens.len() - 1;
        for (i, map) in self.index.iter_mut().enumerate() {
            let n = self.min_ngram + i;
            if let Some(start) = follower.checked_sub(n) {
                // Overwrites an older occurrence: the most recent one wins.
                map.insert(ngram_hash(&self.tokens[start..follower]), follower);
            }
        }
    }

    /// Appends several tokens.
    pub fn extend(&mut self, tokens: &[u32]) {
        self.tokens.reserve(tokens.len());
        for &token in tokens {
            self.push(token);
        }
    }

    /// Up to `k` tokens that followed the most recent earlier occurrence of the sequence's last n-gram,
    /// trying the longest n-gram first; empty if none occurred before.
    ///
    /// When the match is so recent that its continuation runs into the end of the sequence, the
    /// continuation repeats with the same period (`a b a b` drafts `a b a ...`).
    pub fn draft(&self, k: usize) -> Vec<u32> {
        if k == 0 {
            return Vec::new();
        }
        let len = self.tokens.len();
        for n in (self.min_ngram..=self.max_ngram).rev() {
            let Some(suffix_start) = len.checked_sub(n) else { continue };
            let suffix = &self.tokens[suffix_start..];
            let Some(&follower) = self.index[n - self.min_ngram].get(&ngram_hash(suffix)) else { continue };
            // A hash collision would point at another n-gram: check, and treat a mismatch as a miss.
            if self.tokens.get(follower - n..follower) != Some(suffix) {
                continue;
            }
            let mut draft = Vec::with_capacity(k);
            for i in 0..k {
                let at = follower + i;
                // Past the end, read the draft itself: the sequence as it would be if the draft were right.
                let token = self.tokens.get(at).copied().or_else(|| draft.get(at - len).copied());
                match token {
                    Some(token) => draft.push(token),
                    None => break,
                }
            }
            return draft;
        }
        Vec::new()
    }
}

/// A 64-bit hash of an n-gram (mixes each token in; collisions are checked by the caller).
fn ngram_hash(ngram: &[u32]) -> u64 {
    let mut h = ngram.len() as u64;
    for &token in ngram {
        h = (h ^ u64::from(token)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 29;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn drafter(min: usize, max: usize, tokens: &[u32]) -> NgramDrafter {
        let mut d = NgramDrafter::new(min, max);
        d.extend(tokens);
        d
    }

    /// The definition, by a backwards scan: the latest earlier occurrence of the longest suffix n-gram.
    fn naive_draft(tokens: &[u32], min: usize, max: usize, k: usize) -> Vec<u32> {
        let len = tokens.len();
        for n in (min..=max).rev() {
            if len < n {
                continue;
            }
            let suffix = &tokens[len - n..];
            if let Some(follower) = (n..len).rev().find(|&f| &tokens[f - n..f] == suffix) {
                let mut extended = tokens.to_vec();
                for i in 0..k {
                    extended.push(extended[follower + i]);
                }
                return extended[len..].to_vec();
            }
        }
        Vec::new()
    }

    #[test]
    fn drafts_what_followed_the_most_recent_occurrence() {
        // "1 2" occurs twice before the end; the later one was followed by 7 8.
        let d = drafter(1, 3, &[1, 2, 3, 4, 1, 2, 7, 8, 9, 1, 2]);
        assert_eq!(d.draft(2), [7, 8]);
        assert_eq!(d.draft(5), [7, 8, 9, 1, 2]);
        assert_eq!(d.draft(0), Vec::<u32>::new());
    }

    #[test]
    fn prefers_the_longest_ngram() {
        // The last token 5 last occurred before 6, but the bigram "4 5" before 9.
        let d = drafter(1, 3, &[4, 5, 9, 5, 6, 4, 5]);
        assert_eq!(d.draft(1), [9]);
        let d = drafter(1, 1, &[4, 5, 9, 5, 6, 4, 5]);
        assert_eq!(d.draft(1), [6]);
    }

    #[test]
    fn no_match_or_too_short_drafts_nothing() {
        assert!(drafter(1, 3, &[1, 2, 3]).draft(4).is_empty());
        assert!(drafter(2, 3, &[1, 2, 3, 1]).draft(4).is_empty());
        assert!(drafter(1, 3, &[]).draft(4).is_empty());
        assert!(drafter(1, 3, &[7]).draft(4).is_empty());
    }

    #[test]
    fn a_repeating_tail_continues_periodically() {
        assert_eq!(drafter(1, 3, &[5, 5, 5]).draft(4), [5, 5, 5, 5]);
        assert_eq!(drafter(1, 3, &[1, 2, 1, 2]).draft(5), [1, 2, 1, 2, 1]);
    }

    #[test]
    fn matches_a_naive_scan_on_random_sequences() {
        let mut rng = Rng::seed_from_u64(9);
        for (min, max, alphabet) in [(1, 3, 3), (2, 4, 4), (1, 1, 5), (3, 3, 2)] {
            let mut d = NgramDrafter::new(min, max);
            for _ in 0..400 {
                d.push((rng.next_u64() % alphabet) as u32);
                for k in [1, 4] {
                    assert_eq!(d.draft(k), naive_draft(d.tokens(), min, max, k), "{:?}", d.tokens());
                }
            }
        }
    }

    #[test]
    fn odd_sizes_are_clamped() {
        let d = drafter(0, 0, &[3, 4, 3]);
        assert_eq!(d.draft(2), [4, 3]);
    }
}
