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
//! - two words or phrases that trade places with nothing symmetric between them (`is every square
//!   a rectangle` / `is every rectangle a square`, `20 celsius in fahrenheit` / `20 fahrenheit in
//!   celsius`), unless a phrase moved with its preposition (`in Python, how do I ...` / `how do I
//!   ... in Python`) or the two are coordinated (`A and B` / `B and A`).
//!
//! - `by` on one side only with the words still in order (`banks bought by other banks` / `banks that
//!   bought other banks`).
//!
//! - a method asked for on one side and a proposal to do it on the other (`how to play chess` / `let's
//!   play chess`, [`speech_act`]).
//!
//! A unit conversion asks the same in any frame (`how many km are in a mile` / `1 mile equals how many
//! km` / `convert a mile to km`, [`conversion`]), and a noun that names a method may go unsaid when
//! the other side asks for the method (`steps to reset a router` / `how do I reset my router`).
//!
//! A question put in the passive (`who painted the Mona Lisa` / `the Mona Lisa was painted by whom`),
//! a superlative said of a noun or put before it (`which ocean is the largest` / `the largest ocean`)
//! and a superlative's whole-world scope (`on Earth`, `in the world`) ask the same.
//!
//! Symbols count as words: `17 + 28` is `17 plus 28`, `20%` is a quantity other than `20`, a capital
//! `A` inside a sentence is a letter, `US` in capitals is the country, and a grammar word in quotes
//! (`a comma before "which"`) is what the question is about. Two different units of measure never
//! align, though WordNet puts some in one sense (`minute` / `second`).
//!
//! Words align when their lemmas are equal, WordNet puts them in one synset, or they are names of one
//! thing ([`equivalents`]: `js` / `javascript`, `half an hour` / `30 minutes`). Function words
//! (articles, pronouns, auxiliaries, question words, politeness) are ignored, so rewording a
//! question, dropping "please" or turning it into an imperative still hits.
//!
//! Architecture invariant: the edge worker and the regional nodes call this same function, so a
//! pair hits or misses the same way in every tier.

pub mod conversion;
pub mod equivalents;
pub mod lexicon;
mod order;
pub mod speech_act;
pub mod words;

use std::fmt;

use lexicon::Lexicon;
use order::{check_agent, check_order, check_roles, check_swaps, flipped};
use speech_act::Act;
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
    /// The questions ask for different kinds of answer (a method, a proposal, yes or no).
    Act(speech_act::Act, speech_act::Act),
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
            Self::Act(a, b) => write!(f, "asks for another kind of answer: {a:?} vs {b:?}"),
        }
    }
}

/// `Ok` when a cached answer to `cached` answers `asked` too, as far as the words show; the
/// reason otherwise. Symmetric.
pub fn verify(cached: &str, asked: &str) -> Result<(), NearMiss> {
    let lexicon = Lexicon::get();
    let (mut a, mut b) = (Side::new(cached, lexicon), Side::new(asked, lexicon));
    if a.compares && b.compares {
        // `the difference between A and B` asks what `A vs B` asks.
        for side in [&mut a, &mut b] {
            for word in &mut side.content {
                word.optional |= COMPARISON_CUES.contains(&word.text.as_str());
            }
        }
    }
    // A category named after `which` or `what` may go unnamed on the other side (`which city is the
    // capital` / `what is the capital`, `what caused the war` / `why did the war start`), but not when
    // that side asks how, which asks for a manner or a state, not a thing (`what day is today` / `how
    // are you today`).
    let (a_asks_how, b_asks_how) = (a.asks_how, b.asks_how);
    for (side, other_asks_how) in [(&mut a, b_asks_how), (&mut b, a_asks_how)] {
        for word in side.content.iter_mut().filter(|w| w.category) {
            word.optional &= !other_asks_how;
        }
    }
    // `steps for making a roux` asks what `how do I make a roux` asks: a noun that names a method may
    // go unsaid when the other side asks for the method itself.
    let (a_asks_method, b_asks_method) = (a.act == Act::Method, b.act == Act::Method);
    for (side, other_asks_method) in [(&mut a, b_asks_method), (&mut b, a_asks_method)] {
        for word in side.content.iter_mut() {
            word.optional |=
                other_asks_method && word.forms.iter().any(|f| METHOD_NOUNS.contains(&f.as_str()));
        }
    }
    if !speech_act::compatible(a.act, b.act) {
        return Err(NearMiss::Act(a.act, b.act));
    }
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
    // Two conversions ask the same when they convert the same quantity between the same units, in
    // any frame (`how many km are in a mile` / `1 mile equals how many km`).
    match (&a.conversion, &b.conversion) {
        (Some(x), Some(y)) if x == y => return Ok(()),
        (Some(x), Some(y)) => {
            return Err(NearMiss::Relation(format!(
                "another conversion: {} {} to {} {:?} vs {} {} to {} {:?}",
                x.amount, x.from, x.to, x.rest, y.amount, y.from, y.to, y.rest
            )))
        }
        _ => {}
    }
    let alignment = align_content(&a.content, &b.content, lexicon)?;
    // A comparison on both sides is symmetric: `A vs B` asks what `how do B and A differ` asks.
    if !(a.compares && b.compares) {
        check_order(&alignment)?;
        check_swaps(&a, &b, &alignment)?;
    }
    check_roles(&a, &b, &alignment)?;
    check_agent(&a, &b, &alignment)?;
    check_agent(&b, &a, &flipped(&alignment))
}

/// Whether `question` asks for a unit conversion ([`conversion`]).
pub fn asks_conversion(question: &str) -> bool {
    conversion::conversion(&words(question), Lexicon::get()).is_some()
}

/// Units of time, which `how many` counts where `how long` measures.
const DURATIONS: [&str; 9] =
    ["second", "minute", "hour", "day", "week", "month", "year", "decade", "century"];

/// Nouns that name the way to do something (`steps to reset a router`, `bash for loop syntax`, `formula
/// for compound interest`).
const METHOD_NOUNS: [&str; 9] =
    ["step", "syntax", "formula", "procedure", "instruction", "process", "method", "recipe", "guide"];

/// Words that make a question a comparison of two things.
const COMPARISON_CUES: [&str; 7] =
    ["difference", "differences", "differ", "differs", "vs", "versus", "compare"];

/// A content word and the dictionary forms it may have.
struct Content {
    text: String,
    forms: Vec<String>,
    /// The words between the previous content word and this one.
    before: Vec<String>,
    /// Whether naming it or not asks the same: a category right after `which` or `what` (`which city
    /// is ...`), a comparison's cue, a superlative's whole-world scope.
    optional: bool,
    /// A category right after `which` or `what`.
    category: bool,
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
    /// Whether the question compares things ([`COMPARISON_CUES`]).
    compares: bool,
    /// What it asks the assistant to do.
    act: speech_act::Act,
    /// Whether it asks how.
    asks_how: bool,
    /// The unit conversion it asks for, if it asks for one.
    conversion: Option<conversion::Conversion>,
}

impl Side {
    fn new(text: &str, lexicon: &Lexicon) -> Self {
        let words = words(text);
        let compares = words.iter().any(|w| COMPARISON_CUES.contains(&w.text.as_str()));
        let act = speech_act::act(&words);
        let mut side = Side {
            numbers: Vec::new(),
            negators: 0,
            content: Vec::new(),
            objects: Vec::new(),
            compares,
            act,
            asks_how: words.iter().any(|w| w.text == "how"),
            conversion: conversion::conversion(&words, lexicon),
        };
        let mut between: Vec<String> = Vec::new();
        for word in &words {
            let optional = matches!(between.last().map(String::as_str), Some("which" | "what"));
            match &word.kind {
                // `one quart` asks what `a quart` asks; `1 + 1` and `1 + 2` still differ by the 2.
                WordKind::Number(n) if n == "1" => {}
                // `is 91 prime or not` asks whether 91 is prime.
                WordKind::Negator if word.text == "not" && between.last().is_some_and(|w| w == "or") => {}
                WordKind::Number(n) => {
                    // Numbers also take part in the order and role checks (`generation 1 to
                    // generation 2` / `generation 2 to generation 1`); they align only with equals.
                    side.numbers.push(n.clone());
                    let before = std::mem::take(&mut between);
                    side.content.push(Content {
                        text: n.clone(),
                        forms: vec![n.clone()],
                        before,
                        optional: false,
                        category: false,
                    });
                    continue;
                }
                WordKind::Negator => side.negators += 1,
                WordKind::Marker => side.objects.push((word.text.clone(), side.content.len())),
                WordKind::Function => {}
                WordKind::Content => {
                    let before = std::mem::take(&mut between);
                    let forms = lexicon.lemmas(&word.text);
                    // In `which Asian country`, the category is the last word; the words before it
                    // narrow it and must match (`which Asian country` / `which country`).
                    let head_of_category =
                        before.is_empty() && side.content.last().is_some_and(|c| c.optional);
                    if head_of_category {
                        if let Some(modifier) = side.content.last_mut() {
                            modifier.optional = false;
                            modifier.category = false;
                        }
                    }
                    let category = optional || head_of_category;
                    // `how many days does a cold last` asks what `how long does a cold last` asks: the
                    // unit of time only says how to count the answer.
                    let counted_time = before.is_empty()
                        && side
                            .content
                            .last()
                            .is_some_and(|c| c.text == "many" && c.before.last().is_some_and(|w| w == "how"))
                        && lexicon.unit(&word.text).is_some_and(|unit| DURATIONS.contains(&unit));
                    if counted_time {
                        if let Some(many) = side.content.last_mut() {
                            many.text = "long".into();
                            many.forms = vec!["long".into()];
                        }
                    }
                    side.content.push(Content {
                        text: word.text.clone(),
                        forms,
                        before,
                        optional: category || counted_time,
                        category,
                    });
                    continue;
                }
            }
            between.push(word.text.clone());
        }
        side.numbers.sort();
        // `the largest ocean on Earth` asks what `the largest ocean` asks: a superlative's scope that
        // names the whole world adds nothing (another scope, `on Mars`, still differs).
        let superlative = words.iter().any(|w| matches!(w.text.as_str(), "most" | "least"))
            || side.content.iter().any(is_superlative);
        if superlative {
            for content in &mut side.content {
                let placed = content.before.iter().any(|w| w == "in" || w == "on");
                content.optional |= placed && WHOLE_WORLD.contains(&content.text.as_str());
            }
        }
        side
    }
}

/// Whether a content word is a superlative (`largest`, `best`: an `-est` form of a shorter lemma).
fn is_superlative(word: &Content) -> bool {
    word.text.ends_with("est") && word.forms.iter().any(|f| *f != word.text)
}

/// Names of the whole world, the widest scope a superlative can have.
const WHOLE_WORLD: [&str; 4] = ["world", "earth", "planet", "globe"];

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
        left.retain(|&i| !a[i].optional);
        right.retain(|&j| !b[j].optional);
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

#[cfg(test)]
mod tests;
