//! Properties of [`verify`] over questions built from the labelled sets and the case table: it is
//! reflexive, symmetric in its verdict, and stable under changes of spacing, letter case and
//! trailing punctuation.
//!
//! One asymmetry is known and left as it is (a structural change does not tune verdicts): the
//! [`Rule::Swaps`] exception for a superlative reads the runs of the cached side only, so `What is the
//! longest river in Africa?` / `Which river is Africa's longest?` hits one way round and not the other
//! ([`the_swaps_superlative_exception_reads_one_side`] pins it). The symmetry property leaves out a
//! pair that Swaps refuses one way round and accepts the other.

use std::sync::OnceLock;

use proptest::prelude::*;

use super::*;
use crate::tests::cases;

/// The labelled development sets (not the frozen test set).
const LABELLED: [&str; 5] = [
    include_str!("../data/semantic_pairs.jsonl"),
    include_str!("../data/pairs_written_a.jsonl"),
    include_str!("../data/pairs_written_b.jsonl"),
    include_str!("../data/pairs_written_c.jsonl"),
    include_str!("../data/pairs_written_d.jsonl"),
];

/// Every pair of the labelled sets and the case table.
fn pairs() -> &'static [(String, String)] {
    static PAIRS: OnceLock<Vec<(String, String)>> = OnceLock::new();
    PAIRS.get_or_init(|| {
        let labelled =
            LABELLED.iter().flat_map(|set| set.lines()).filter(|l| !l.trim().is_empty()).map(|line| {
                let pair: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
                let text = |key: &str| pair[key].as_str().expect("a string field").to_string();
                (text("a"), text("b"))
            });
        labelled.chain(cases().into_iter().map(|case| (case.a, case.b))).collect()
    })
}

/// Every word of those questions, as written, once.
fn vocabulary() -> &'static [String] {
    static WORDS: OnceLock<Vec<String>> = OnceLock::new();
    WORDS.get_or_init(|| {
        let mut words: Vec<String> = pairs()
            .iter()
            .flat_map(|(a, b)| a.split_whitespace().chain(b.split_whitespace()))
            .map(str::to_string)
            .collect();
        words.sort();
        words.dedup();
        words
    })
}

/// A question of the sets, or one made of 1 to 12 of their words.
fn question() -> impl Strategy<Value = String> {
    let known = (0..pairs().len() * 2).prop_map(|k| {
        let (a, b) = &pairs()[k / 2];
        if k % 2 == 0 {
            a.clone()
        } else {
            b.clone()
        }
    });
    let made = proptest::collection::vec(0..vocabulary().len(), 1..12)
        .prop_map(|words| words.iter().map(|&w| vocabulary()[w].as_str()).collect::<Vec<_>>().join(" "));
    prop_oneof![known, made]
}

/// A change of one word of a question: dropped, swapped with the next, replaced or preceded by a word
/// of the sets.
fn near(question: &str, at: usize, change: u8, word: usize) -> String {
    let mut words: Vec<&str> = question.split_whitespace().collect();
    if words.is_empty() {
        return question.to_string();
    }
    let at = at % words.len();
    let other = vocabulary()[word % vocabulary().len()].as_str();
    match change % 4 {
        0 => drop(words.remove(at)),
        1 if at + 1 < words.len() => words.swap(at, at + 1),
        2 => words[at] = other,
        _ => words.insert(at, other),
    }
    words.join(" ")
}

/// `question` respaced, with some words' case changed and its trailing punctuation replaced. Only
/// words that read the same in either case change (`US` is the country and a capital `A` inside a
/// sentence is a letter, whatever else they are in lowercase).
fn restyled(question: &str, spaces: &[usize], cases: &[bool], ending: usize) -> String {
    const SPACES: [&str; 5] = [" ", "  ", "\t", " \n ", "   "];
    const ENDINGS: [&str; 6] = ["", "?", "!", ".", "??", " ?"];
    let body = question.trim_end_matches(['?', '!', '.']);
    let mut out = String::from(SPACES[spaces[0] % SPACES.len()].trim_start_matches(' '));
    for (k, word) in body.split_whitespace().enumerate() {
        if k > 0 {
            out.push_str(SPACES[spaces[k % spaces.len()] % SPACES.len()]);
        }
        let mut chars = word.chars();
        let first = chars.next().unwrap_or(' ');
        let rest: String = chars.collect();
        let either_case = word.chars().count() >= 2 && rest.chars().all(|c| !c.is_uppercase());
        match (either_case, cases[k % cases.len()]) {
            (true, true) => out.extend(first.to_uppercase().chain(rest.chars())),
            (true, false) => out.extend(first.to_lowercase().chain(rest.chars())),
            (false, _) => out.push_str(word),
        }
    }
    out.push_str(ENDINGS[ending % ENDINGS.len()]);
    out
}

#[test]
fn the_swaps_superlative_exception_reads_one_side() {
    let (a, b) = ("What is the longest river in Africa?", "Which river is Africa's longest?");
    assert_eq!(verify(a, b), Ok(()));
    assert_eq!(verify(b, a).map_err(|why| why.rule), Err(Rule::Swaps));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_question_answers_itself(question in question()) {
        prop_assert_eq!(verify(&question, &question), Ok(()), "{:?}", question);
    }

    #[test]
    fn the_verdict_is_the_same_both_ways_round(
        (a, b) in (0..pairs().len()).prop_map(|k| pairs()[k].clone()),
        made in question(),
        (at, change, word) in (0..64usize, 0..4u8, 0..100_000usize),
    ) {
        for (x, y) in [(a.clone(), b.clone()), (made.clone(), near(&made, at, change, word))] {
            let (forward, backward) = (verify(&x, &y), verify(&y, &x));
            let by_swaps = |v: &Result<(), NearMiss>| v.as_ref().is_err_and(|why| why.rule == Rule::Swaps);
            if (by_swaps(&forward) && backward.is_ok()) || (by_swaps(&backward) && forward.is_ok()) {
                continue;
            }
            prop_assert_eq!(forward.is_ok(), backward.is_ok(), "{:?} / {:?}: {:?} vs {:?}", x, y, forward, backward);
        }
    }

    #[test]
    fn spacing_case_and_trailing_punctuation_change_nothing(
        (a, b) in (0..pairs().len()).prop_map(|k| pairs()[k].clone()),
        spaces in proptest::collection::vec(0..5usize, 1..8),
        cases in proptest::collection::vec(any::<bool>(), 1..8),
        ending in 0..6usize,
    ) {
        let styled = restyled(&a, &spaces, &cases, ending);
        prop_assert_eq!(verify(&a, &styled), Ok(()), "{:?} / {:?}", a, styled);
        let (before, after) = (verify(&a, &b), verify(&styled, &b));
        prop_assert_eq!(before.is_ok(), after.is_ok(), "{:?} / {:?}: {:?}, restyled {:?}: {:?}", a, b, before, styled, after);
    }
}
