//! Aligned words may move as whole clauses, but two words must not trade places across a third that
//! stays between them: moving clauses never puts a word between two others on one side and outside
//! them on the other. Not asked when both questions compare (`A vs B` / `how do B and A differ`).
//!
//! - refused: `can saltwater fish live in freshwater` / `can freshwater fish live in saltwater`;
//!   `did Germany invade Poland` / `did Poland invade Germany`; `100 Canadian dollars in US dollars`
//!   / `100 US dollars in Canadian dollars`.
//! - hit: `in Python, how do I sort a list` / `how do I sort a list in Python`.

use super::{Pair, Verdict};

/// Longest question, in content words, whose word order is compared; a longer one never passes
/// (the order check is cubic, and such long questions are poor semantic-cache keys anyway).
const MAX_ORDERED_WORDS: usize = 128;

/// Refuses two words that trade places across a third.
pub(super) fn check(pair: &Pair) -> Verdict {
    if pair.both_compare() {
        return Verdict::Next;
    }
    let alignment = &pair.alignment().pairs;
    if alignment.len() > MAX_ORDERED_WORDS {
        return Verdict::Differs(format!("more than {MAX_ORDERED_WORDS} words to compare"));
    }
    let mut by_a = alignment.to_vec();
    by_a.sort_unstable();
    let b: Vec<usize> = by_a.iter().map(|&(_, j)| j).collect();
    for x in 0..b.len() {
        for y in x + 2..b.len() {
            if b[y] < b[x] && (x + 1..y).any(|v| b[y] < b[v] && b[v] < b[x]) {
                return Verdict::Differs("words trade places".into());
            }
        }
    }
    Verdict::Next
}
