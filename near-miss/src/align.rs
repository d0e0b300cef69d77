//! Pairs every content word of one question with one of the other: equal forms first, then (after
//! looking for antonyms among the rest) WordNet synonyms, derivations, names of one thing
//! ([`crate::equivalents`]: `js` / `javascript`, `half an hour` / `30 minutes`), misspellings, and a
//! word written as two (`vscode` / `vs code`). What is left unaligned, less the words that may go
//! unsaid ([`crate::optional`]), is a substitution or an addition.

use crate::equivalents;
use crate::lexicon::Lexicon;
use crate::read::Content;

/// How the content words of two questions pair up.
pub(crate) struct Alignment {
    /// `(a index, b index)` of each aligned pair.
    pub pairs: Vec<(usize, usize)>,
    /// The first word of `a` whose opposite `b` has, among the words not equal to any, if any.
    pub antonym: Option<(usize, usize)>,
    /// The words of `a` left unaligned, in order; optional words are dropped when either side has
    /// none left.
    pub left: Vec<usize>,
    /// The words of `b` left unaligned, likewise.
    pub right: Vec<usize>,
}

impl Alignment {
    /// The alignment seen from the other side.
    pub fn flipped(&self) -> Vec<(usize, usize)> {
        self.pairs.iter().map(|&(i, j)| (j, i)).collect()
    }
}

/// Aligns `a` with `b`, where `optional_a` and `optional_b` say which words may go unsaid.
pub(crate) fn align(
    a: &[Content],
    b: &[Content],
    (optional_a, optional_b): (&[bool], &[bool]),
    lexicon: &Lexicon,
) -> Alignment {
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
    let antonym = left.iter().find_map(|&i| {
        let j = right.iter().find(|&&j| any(&a[i], &b[j], &|f, g| lexicon.antonyms(f, g)))?;
        Some((i, *j))
    });
    pass(&mut left, &mut right, &|x, y| {
        any(x, y, &|f, g| lexicon.synonyms(f, g) || lexicon.derived(f, g) || equivalents::equivalent(f, g))
            || misspelled(x, y, lexicon)
    });
    for (i, j) in join_compounds(&mut left, &mut right, a, b) {
        pairs.push((i, j));
    }
    for (j, i) in join_compounds(&mut right, &mut left, b, a) {
        pairs.push((i, j));
    }
    if left.is_empty() || right.is_empty() {
        // A category named on one side only (`which city is the capital` / `what is the capital`).
        left.retain(|&i| !optional_a[i]);
        right.retain(|&j| !optional_b[j]);
    }
    Alignment { pairs, antonym, left, right }
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
/// more, 2 for eight or more), with the same first letter (a changed start is a prefix:
/// `ascending` / `descending`, `encrypt` / `decrypt`), not both words the lexicon knows (`ernest` /
/// `earnest`, not `lower` / `power`), and not numbers.
fn misspelled(x: &Content, y: &Content, lexicon: &Lexicon) -> bool {
    if x.text.chars().chain(y.text.chars()).any(|c| c.is_ascii_digit()) {
        return false;
    }
    if x.text.chars().next() != y.text.chars().next() {
        return false;
    }
    let known = |c: &Content| c.forms.iter().any(|f| lexicon.knows(f));
    if known(x) && known(y) {
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
