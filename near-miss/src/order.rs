//! Word order: the aligned words of two questions may move as whole clauses and phrases, but a swap
//! that changes who does what to whom is a near miss ([`super::verify`] calls these after aligning).

use super::{is_superlative, NearMiss, Side};

/// Words that link a subject to what is said of it.
const COPULA: [&str; 5] = ["is", "are", "was", "were", "the"];

/// The alignment seen from the other side.
pub(super) fn flipped(alignment: &[(usize, usize)]) -> Vec<(usize, usize)> {
    alignment.iter().map(|&(i, j)| (j, i)).collect()
}

/// `by` on one side only: `banks bought by other banks` / `banks that bought other banks` keep the
/// words in order and reverse who acts. A passive turned active moves the agent before its verb
/// (`plays written by Shakespeare` / `plays Shakespeare wrote`), which is the same question.
pub(super) fn check_agent(a: &Side, b: &Side, alignment: &[(usize, usize)]) -> Result<(), NearMiss> {
    if b.objects.iter().any(|(marker, _)| marker == "by") {
        return Ok(());
    }
    let in_b = |i: usize| alignment.iter().find(|&&(x, _)| x == i).map(|&(_, y)| y);
    for &(_, agent) in a.objects.iter().filter(|(marker, _)| marker == "by") {
        let Some(verb) = agent.checked_sub(1) else { continue };
        if let (Some(verb_in_b), Some(agent_in_b)) = (in_b(verb), in_b(agent)) {
            if verb_in_b < agent_in_b {
                return Err(NearMiss::Relation(
                    "\"by\" on one side only, the words in the same order".into(),
                ));
            }
        }
    }
    Ok(())
}

/// Longest question, in content words, whose word order is compared; a longer one never passes
/// (the order check is cubic, and such long questions are poor semantic-cache keys anyway).
const MAX_ORDERED_WORDS: usize = 128;

/// Aligned words may move as whole clauses ("in Python, how do I sort a list" / "how do I sort a
/// list in Python"), but two words must not trade places across a third that stays between them:
/// "can saltwater fish live in freshwater" / "can freshwater fish live in saltwater", "Germany
/// attacked the Soviet Union" / "the Soviet Union attacked Germany". Moving clauses never puts
/// a word between two others on one side and outside them on the other.
pub(super) fn check_order(alignment: &[(usize, usize)]) -> Result<(), NearMiss> {
    if alignment.len() > MAX_ORDERED_WORDS {
        return Err(NearMiss::Relation(format!("more than {MAX_ORDERED_WORDS} words to compare")));
    }
    let mut by_a = alignment.to_vec();
    by_a.sort_unstable();
    let b: Vec<usize> = by_a.iter().map(|&(_, j)| j).collect();
    for x in 0..b.len() {
        for y in x + 2..b.len() {
            if b[y] < b[x] && (x + 1..y).any(|v| b[y] < b[v] && b[v] < b[x]) {
                return Err(NearMiss::Relation("words trade places".into()));
            }
        }
    }
    Ok(())
}

/// Words that join two things symmetrically (`A and B` asks what `B and A` asks).
const COORDINATORS: [&str; 5] = ["and", "or", "vs", "versus", "&"];

/// Words that introduce a phrase which may move as a whole (`in Python`, `for beginners`).
const PREPOSITIONS: [&str; 23] = [
    "in", "on", "at", "of", "for", "with", "from", "to", "by", "using", "via", "about", "without", "within",
    "through", "during", "before", "after", "over", "under", "above", "below", "as",
];

/// Two adjacent runs of aligned words that trade places (`X Y` on one side, `Y X` on the other, all
/// else in order) change who does what (`is every square a rectangle` / `is every rectangle a
/// square`, `how many km in a mile` / `how many miles in a km`, `who succeeded Victoria` / `who did
/// Victoria succeed`), except when:
/// - the two are coordinated on either side (`between TCP and UDP` / `between UDP and TCP`);
/// - a preposition between them on one side is not between them on the other: the phrase moved with
///   its preposition (`how do I sort a list in Python` / `in Python, how do I sort a list`,
///   `capital of France` / `France's capital`). A preposition that stays between them is a relation
///   reversed (`celsius in fahrenheit` / `fahrenheit in celsius`).
pub(super) fn check_swaps(a: &Side, b: &Side, alignment: &[(usize, usize)]) -> Result<(), NearMiss> {
    let mut by_a = alignment.to_vec();
    by_a.sort_unstable();
    let mut in_b: Vec<usize> = by_a.iter().map(|&(_, j)| j).collect();
    let mut ranks = in_b.clone();
    ranks.sort_unstable();
    for j in &mut in_b {
        *j = ranks.binary_search(j).unwrap_or(0);
    }
    let Some((start, middle)) = two_runs_swapped(&in_b) else { return Ok(()) };
    // In a: X = by_a[start..middle], Y = by_a[middle..end]; in b, Y comes first and X follows it.
    let between_in_a = &a.content[by_a[middle].0].before;
    let first_of_x_in_b = by_a[start].1;
    let between_in_b = &b.content[first_of_x_in_b].before;
    let has = |words: &[String], set: &[&str]| words.iter().any(|w| set.contains(&w.as_str()));
    if has(between_in_a, &COORDINATORS) || has(between_in_b, &COORDINATORS) {
        return Ok(());
    }
    // `who invented the telephone` / `the telephone's inventor`, `how do I iron a shirt` / `shirt
    // ironing`: a verb turned into a noun puts its object before it, so one word of the swap changes
    // form as well as place. A reversed relation moves words that keep their form.
    let end = middle + (in_b[start] - start);
    let nominalized =
        (start..end).any(|k| is_nominalized(&a.content[by_a[k].0].text, &b.content[by_a[k].1].text));
    if nominalized {
        return Ok(());
    }
    let moved = |here: &[String], there: &[String]| {
        here.iter().any(|w| PREPOSITIONS.contains(&w.as_str()) && !there.contains(w))
    };
    if moved(between_in_a, between_in_b) || moved(between_in_b, between_in_a) {
        return Ok(());
    }
    // `who painted the Mona Lisa` / `the Mona Lisa was painted by whom`: the verb and its object trade
    // places, and `by` follows the verb on the passive side only.
    let by_right_after =
        |side: &Side, word: usize| side.objects.iter().any(|(m, at)| m == "by" && *at == word + 1);
    let has_by = |side: &Side| side.objects.iter().any(|(m, _)| m == "by");
    let passive_in_a = by_right_after(a, by_a[end - 1].0) && !has_by(b);
    let passive_in_b = by_right_after(b, by_a[middle - 1].1) && !has_by(a);
    if passive_in_a || passive_in_b {
        return Ok(());
    }
    // `which ocean is the largest` / `the largest ocean`: a superlative said of a noun or put before it.
    let (x, y) = (&a.content[by_a[start].0], &a.content[by_a[middle].0]);
    let copula = |words: &[String]| words.iter().all(|w| COPULA.contains(&w.as_str()));
    if middle - start == 1
        && (is_superlative(x) || is_superlative(y))
        && (copula(between_in_a) || copula(between_in_b))
    {
        return Ok(());
    }
    Err(NearMiss::Relation(format!(
        "{:?} and {:?} trade places",
        a.content[by_a[start].0].text, a.content[by_a[middle].0].text
    )))
}

/// Nouns that name who did what a verb says (`author` of `wrote`), which no suffix shows.
const AGENT_NOUNS: [&str; 8] =
    ["author", "writer", "inventor", "founder", "painter", "composer", "director", "discoverer"];

/// Endings that make a noun of a verb (`ironing`, `inventor`, `declaration`, `payment`).
const NOMINAL_SUFFIXES: [&str; 5] = ["ing", "er", "or", "ion", "ment"];

/// Whether two aligned words are one verb and a noun made of it: `ironing` / `iron`, `inventor` /
/// `invented`, `declaration` / `declare`, `author` / `wrote`.
pub(super) fn is_nominalized(x: &str, y: &str) -> bool {
    let nominal_of = |noun: &str, verb: &str| {
        if AGENT_NOUNS.contains(&noun) {
            return !AGENT_NOUNS.contains(&verb);
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

/// The same marker must relate the same words on both sides: `convert string to gzip` and
/// `convert gzip to string` align every word but swap the two sides of `to`. A swap is when the
/// word after the marker on one side stands before it on the other, both ways round.
pub(super) fn check_roles(a: &Side, b: &Side, alignment: &[(usize, usize)]) -> Result<(), NearMiss> {
    let in_b = |i: usize| alignment.iter().find(|&&(x, _)| x == i).map(|&(_, y)| y);
    let in_a = |j: usize| alignment.iter().find(|&&(_, y)| y == j).map(|&(x, _)| x);
    for (marker, at_a) in &a.objects {
        for (_, at_b) in b.objects.iter().filter(|(m, _)| m == marker) {
            let after_a_stands_before_in_b = in_b(*at_a).is_some_and(|j| j < *at_b);
            let after_b_stands_before_in_a = in_a(*at_b).is_some_and(|i| i < *at_a);
            if after_a_stands_before_in_b && after_b_stands_before_in_a {
                return Err(NearMiss::Relation(format!("the sides of {marker:?} are swapped")));
            }
        }
    }
    Ok(())
}
