//! Two adjacent runs of aligned words that trade places (`X Y` on one side, `Y X` on the other, all
//! else in order) change who does what. Not asked when both questions compare.
//!
//! - refused: `is every square a rectangle` / `is every rectangle a square`; `copy a file from my
//!   laptop to the server` / `... from the server to my laptop`; `who succeeded Victoria` / `who did
//!   Victoria succeed`.
//!
//! The swap asks the same, in this order, when:
//! 1. the two are coordinated on either side (`between TCP and UDP` / `between UDP and TCP`);
//! 2. one of them is a verb on one side and a noun made of it on the other, which puts its object
//!    before it (`who invented the telephone` / `the telephone's inventor`, `how do I iron a shirt` /
//!    `shirt ironing instructions`); a reversed relation moves words that keep their form;
//! 3. a preposition between them on one side is not between them on the other: the phrase moved with
//!    its preposition (`how do I sort a list in Python` / `in Python, how do I sort a list`, `capital
//!    of France` / `France's capital`). A preposition that stays between them is a relation reversed
//!    (`celsius in fahrenheit` / `fahrenheit in celsius`);
//! 4. the verb and its object trade places and `by` follows the verb on the passive side only (`who
//!    painted the Mona Lisa` / `the Mona Lisa was painted by whom`);
//! 5. a superlative is said of a noun on one side and put before it on the other (`which ocean is the
//!    largest` / `the largest ocean`).

use super::{Pair, Verdict};
use crate::read::Reading;
use crate::vocabulary::{self, Tag};

/// Endings that make a noun of a verb (`ironing`, `inventor`, `declaration`, `payment`).
const NOMINAL_SUFFIXES: [&str; 5] = ["ing", "er", "or", "ion", "ment"];

/// Refuses two adjacent runs that trade places, unless one of the exceptions above holds.
pub(super) fn check(pair: &Pair) -> Verdict {
    if pair.both_compare() {
        return Verdict::Next;
    }
    let (a, b) = (&pair.a, &pair.b);
    let mut by_a = pair.alignment().pairs.clone();
    by_a.sort_unstable();
    let mut in_b: Vec<usize> = by_a.iter().map(|&(_, j)| j).collect();
    let mut ranks = in_b.clone();
    ranks.sort_unstable();
    for j in &mut in_b {
        *j = ranks.binary_search(j).unwrap_or(0);
    }
    let Some((start, middle)) = two_runs_swapped(&in_b) else { return Verdict::Next };
    // In a: X = by_a[start..middle], Y = by_a[middle..end]; in b, Y comes first and X follows it.
    let end = middle + (in_b[start] - start);
    let between_in_a = &a.content[by_a[middle].0].before;
    let between_in_b = &b.content[by_a[start].1].before;
    let has = |words: &[String], tag: Tag| words.iter().any(|w| vocabulary::is(w, tag));
    let coordinated = has(between_in_a, Tag::Coordinator) || has(between_in_b, Tag::Coordinator);
    let nominalized =
        (start..end).any(|k| is_nominalized(&a.content[by_a[k].0].text, &b.content[by_a[k].1].text));
    let moved = |here: &[String], there: &[String]| {
        here.iter().any(|w| vocabulary::is(w, Tag::Preposition) && !there.contains(w))
    };
    let moved_with_preposition = moved(between_in_a, between_in_b) || moved(between_in_b, between_in_a);
    let by_right_after =
        |side: &Reading, word: usize| side.objects.iter().any(|(m, at)| m == "by" && *at == word + 1);
    let has_by = |side: &Reading| side.objects.iter().any(|(m, _)| m == "by");
    let passive = (by_right_after(a, by_a[end - 1].0) && !has_by(b))
        || (by_right_after(b, by_a[middle - 1].1) && !has_by(a));
    let (x, y) = (&a.content[by_a[start].0], &a.content[by_a[middle].0]);
    let copula = |words: &[String]| words.iter().all(|w| vocabulary::is(w, Tag::Copula));
    let superlative = middle - start == 1
        && (x.is_superlative() || y.is_superlative())
        && (copula(between_in_a) || copula(between_in_b));
    if coordinated || nominalized || moved_with_preposition || passive || superlative {
        Verdict::Next
    } else {
        Verdict::Differs(format!("{:?} and {:?} trade places", x.text, y.text))
    }
}

/// Whether two aligned words are one verb and a noun made of it: `ironing` / `iron`, `inventor` /
/// `invented`, `declaration` / `declare`, `author` / `wrote` ([`vocabulary::MAKERS`]).
pub(crate) fn is_nominalized(x: &str, y: &str) -> bool {
    let nominal_of = |noun: &str, verb: &str| {
        if vocabulary::is_agent_noun(noun) {
            return !vocabulary::is_agent_noun(verb);
        }
        let stem = verb.trim_end_matches("ed").trim_end_matches('e');
        stem.len() >= 3
            && noun.len() > stem.len()
            && noun.starts_with(stem)
            && NOMINAL_SUFFIXES.iter().any(|suffix| noun.ends_with(suffix))
            && !NOMINAL_SUFFIXES.iter().any(|suffix| verb.ends_with(suffix))
    };
    x != y && (nominal_of(x, y) || nominal_of(y, x))
}

/// `order[p]` is the rank on the other side of the word at position `p` on this side. When the other
/// side is this one with two adjacent runs swapped (`X Y` here, `Y X` there, all else in place):
/// `(start, middle)`, where `X` is `start..middle` and `Y` starts at `middle`.
fn two_runs_swapped(order: &[usize]) -> Option<(usize, usize)> {
    let start = order.iter().enumerate().position(|(i, &v)| i != v)?;
    let first_of_x = order[start];
    let len_y = first_of_x.checked_sub(start)?;
    let len_x = order[start..].iter().enumerate().take_while(|&(k, &v)| v == first_of_x + k).count();
    let middle = start + len_x;
    let end = middle + len_y;
    if end > order.len() {
        return None;
    }
    let y_in_place = order[middle..end].iter().enumerate().all(|(k, &v)| v == start + k);
    let rest_in_place = order[end..].iter().enumerate().all(|(k, &v)| v == end + k);
    (y_in_place && rest_in_place).then_some((start, middle))
}
