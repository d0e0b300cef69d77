//! The second check of a semantic cache hit: does a cached question ask exactly what the new one
//! asks, or is it a near miss that merely embeds close to it?
//!
//! An embedding similarity alone cannot tell "copy a file from my laptop to the server" from
//! "... from the server to my laptop" (cosine 0.999 with all-MiniLM-L6-v2). This check aligns the
//! two questions word by word and refuses the hit when anything that changes the answer differs:
//! - a number, date or quantity (the multisets of normalized numbers differ);
//! - a negation in one and not the other (the parity of negators differs);
//! - a relation marker (`from`, `before`, `over`, `than`, ...) in one and not the other, or the
//!   same marker with the roles of two words swapped (`from A to B` vs `from B to A`);
//! - a content word that the other side lacks: swapped for its opposite (WordNet antonyms,
//!   negative prefixes), for a different word (`python` / `java`, `child` / `expert`), or added.
//!
//! Words align when their lemmas are equal or WordNet puts them in one synset. Function words
//! (articles, pronouns, auxiliaries, question words, politeness) are ignored, so rewording a
//! question, dropping "please" or turning it into an imperative still hits.
//!
//! Architecture invariant: the edge worker and the regional nodes call this same function, so a
//! pair hits or misses the same way in every tier.

pub mod lexicon;
pub mod words;

use std::fmt;

use lexicon::Lexicon;
use words::{words, WordKind, OPPOSITE_MARKERS};

/// Why a candidate hit was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NearMiss {
    /// The numbers differ (each side's normalized numbers, sorted).
    Numbers(Vec<String>, Vec<String>),
    /// One side is negated and the other is not.
    Negation,
    /// The relation markers differ, or the same marker relates different words.
    Relation(String),
    /// A content word was swapped for its opposite.
    Antonym(String, String),
    /// A content word was swapped for a different one.
    Substitution(String, String),
    /// One side has a content word the other lacks.
    Addition(String),
}

impl fmt::Display for NearMiss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Numbers(a, b) => write!(f, "numbers differ: {a:?} vs {b:?}"),
            Self::Negation => write!(f, "one side is negated"),
            Self::Relation(what) => write!(f, "relation differs: {what}"),
            Self::Antonym(a, b) => write!(f, "antonyms: {a} vs {b}"),
            Self::Substitution(a, b) => write!(f, "different words: {a} vs {b}"),
            Self::Addition(word) => write!(f, "only one side has: {word}"),
        }
    }
}

/// `Ok` when a cached answer to `cached` answers `asked` too, as far as the words show; the
/// reason otherwise. Symmetric.
pub fn verify(cached: &str, asked: &str) -> Result<(), NearMiss> {
    let lexicon = Lexicon::get();
    let (a, b) = (Side::new(cached, lexicon), Side::new(asked, lexicon));
    if a.numbers != b.numbers {
        return Err(NearMiss::Numbers(a.numbers, b.numbers));
    }
    if a.negators % 2 != b.negators % 2 {
        return Err(NearMiss::Negation);
    }
    for (x, y) in OPPOSITE_MARKERS {
        let has = |side: &Side, m: &str| side.objects.iter().any(|(marker, _)| marker == m);
        if (has(&a, x) && has(&b, y) && !has(&a, y) && !has(&b, x))
            || (has(&a, y) && has(&b, x) && !has(&a, x) && !has(&b, y))
        {
            return Err(NearMiss::Relation(format!("{x} vs {y}")));
        }
    }
    let alignment = align_content(&a.content, &b.content, lexicon)?;
    check_order(&alignment)?;
    check_roles(&a, &b, &alignment)
}

/// A content word and the dictionary forms it may have.
struct Content {
    text: String,
    forms: Vec<String>,
}

/// What the verifier keeps of one question.
struct Side {
    /// Normalized numbers, sorted.
    numbers: Vec<String>,
    /// How many negators.
    negators: usize,
    /// The content words, in order.
    content: Vec<Content>,
    /// Each marker occurrence with the number of content words before it (so the index of the
    /// content word after it).
    objects: Vec<(String, usize)>,
}

impl Side {
    fn new(text: &str, lexicon: &Lexicon) -> Self {
        let words = words(text);
        let mut side = Side { numbers: Vec::new(), negators: 0, content: Vec::new(), objects: Vec::new() };
        for word in &words {
            match &word.kind {
                WordKind::Number(n) => {
                    // Numbers also take part in the order and role checks (`generation 1 to
                    // generation 2` / `generation 2 to generation 1`); they align only with equals.
                    side.numbers.push(n.clone());
                    side.content.push(Content { text: n.clone(), forms: vec![n.clone()] });
                }
                WordKind::Negator => side.negators += 1,
                WordKind::Marker => side.objects.push((word.text.clone(), side.content.len())),
                WordKind::Function => {}
                WordKind::Content => {
                    side.content.push(Content { text: word.text.clone(), forms: lexicon.lemmas(&word.text) })
                }
            }
        }
        side.numbers.sort();
        side
    }
}

/// Pairs every content word of one side with one of the other: equal forms first, then (after
/// refusing antonyms) synonyms, derivations and misspellings. Returns `(a index, b index)` pairs.
fn align_content(a: &[Content], b: &[Content], lexicon: &Lexicon) -> Result<Vec<(usize, usize)>, NearMiss> {
    let mut pairs = Vec::new();
    let mut left: Vec<usize> = (0..a.len()).collect();
    let mut right: Vec<usize> = (0..b.len()).collect();
    let mut pass =
        |left: &mut Vec<usize>, right: &mut Vec<usize>, same: &dyn Fn(&Content, &Content) -> bool| {
            left.retain(|&i| match right.iter().position(|&j| same(&a[i], &b[j])) {
                Some(at) => {
                    pairs.push((i, right.remove(at)));
                    false
                }
                None => true,
            });
        };
    let any = |x: &Content, y: &Content, relation: &dyn Fn(&str, &str) -> bool| {
        x.forms.iter().any(|f| y.forms.iter().any(|g| relation(f, g)))
    };
    pass(&mut left, &mut right, &|x, y| any(x, y, &|f, g| f == g));
    for &i in &left {
        if let Some(&j) = right.iter().find(|&&j| any(&a[i], &b[j], &|f, g| lexicon.antonyms(f, g))) {
            return Err(NearMiss::Antonym(a[i].text.clone(), b[j].text.clone()));
        }
    }
    pass(&mut left, &mut right, &|x, y| {
        any(x, y, &|f, g| lexicon.synonyms(f, g) || lexicon.derived(f, g)) || misspelled(x, y, lexicon)
    });
    for (i, j) in join_compounds(&mut left, &mut right, a, b) {
        pairs.push((i, j));
    }
    for (j, i) in join_compounds(&mut right, &mut left, b, a) {
        pairs.push((i, j));
    }
    match (left.first(), right.first()) {
        (None, None) => Ok(pairs),
        (Some(&i), Some(&j)) => Err(NearMiss::Substitution(a[i].text.clone(), b[j].text.clone())),
        (Some(&i), None) => Err(NearMiss::Addition(a[i].text.clone())),
        (None, Some(&j)) => Err(NearMiss::Addition(b[j].text.clone())),
    }
}

/// Aligns a word of one side with two adjacent words of the other written apart (`vscode` /
/// `vs code`, `freshwater` / `fresh water`). Returns `(one index, other index of the first part)`.
fn join_compounds(
    one_left: &mut Vec<usize>,
    other_left: &mut Vec<usize>,
    one: &[Content],
    other: &[Content],
) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    one_left.retain(|&i| {
        let joined = (0..other.len().saturating_sub(1)).find(|&j| {
            if !(other_left.contains(&j) && other_left.contains(&(j + 1))) {
                return false;
            }
            let word = &one[i].text;
            let (first, second) = (&other[j].text, &other[j + 1].text);
            word.len() == first.len() + second.len()
                && word.starts_with(first.as_str())
                && word.ends_with(second.as_str())
        });
        match joined {
            Some(j) => {
                other_left.retain(|&k| k != j && k != j + 1);
                pairs.push((i, j));
                false
            }
            None => true,
        }
    });
    pairs
}

/// Whether two words are one word misspelled: close in edit distance (1 for five letters or
/// more, 2 for eight or more), not both words the lexicon knows (`ernest` / `earnest`, not
/// `lower` / `power`), and not numbers.
fn misspelled(x: &Content, y: &Content, lexicon: &Lexicon) -> bool {
    if x.text.chars().chain(y.text.chars()).any(|c| c.is_ascii_digit()) {
        return false;
    }
    let shorter = x.text.len().min(y.text.len());
    let allowed = match shorter {
        0..5 => return false,
        5..8 => 1,
        _ => 2,
    };
    !(lexicon.knows(&x.text) && lexicon.knows(&y.text)) && edit_distance(&x.text, &y.text, allowed) <= allowed
}

/// Levenshtein distance, or `limit + 1` once it is certainly above `limit`.
fn edit_distance(a: &str, b: &str, limit: usize) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len().abs_diff(b.len()) > limit {
        return limit + 1;
    }
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, y) in b.iter().enumerate() {
            current[j + 1] = (previous[j] + usize::from(x != y)).min(previous[j + 1] + 1).min(current[j] + 1);
        }
        if current.iter().min().is_some_and(|&m| m > limit) {
            return limit + 1;
        }
        previous = current;
    }
    previous[b.len()]
}

/// Longest question, in content words, whose word order is compared; a longer one never passes
/// (the order check is cubic, and such long questions are poor semantic-cache keys anyway).
const MAX_ORDERED_WORDS: usize = 128;

/// Aligned words may move as whole clauses ("in Python, how do I sort a list" / "how do I sort a
/// list in Python"), but two words must not trade places across a third that stays between them:
/// "can saltwater fish live in freshwater" / "can freshwater fish live in saltwater", "Germany
/// attacked the Soviet Union" / "the Soviet Union attacked Germany". Moving clauses never puts
/// a word between two others on one side and outside them on the other.
fn check_order(alignment: &[(usize, usize)]) -> Result<(), NearMiss> {
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

/// The same marker must relate the same words on both sides: `convert string to gzip` and
/// `convert gzip to string` align every word but swap the two sides of `to`. A swap is when the
/// word after the marker on one side stands before it on the other, both ways round.
fn check_roles(a: &Side, b: &Side, alignment: &[(usize, usize)]) -> Result<(), NearMiss> {
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

#[cfg(test)]
mod tests;
