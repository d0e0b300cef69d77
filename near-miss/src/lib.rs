//! The second check of a semantic cache hit: does a cached question ask exactly what the new one
//! asks, or is it a near miss that merely embeds close to it?
//!
//! An embedding similarity alone cannot tell "copy a file from my laptop to the server" from
//! "... from the server to my laptop" (cosine 0.999 with all-MiniLM-L6-v2). [`verify`] reads the two
//! questions word by word, aligns their content words, and refuses the hit when anything that
//! changes the answer differs. A refusal ([`NearMiss`]) names the [`Rule`] that made it.
//!
//! # Rules
//!
//! Asked in this order (the one list in `rules/mod.rs`); the first that refuses decides, and a pair none refuses
//! is a hit:
//! 1. [`Rule::SpeechAct`]: a method asked for on one side and a proposal to do it on the other (`how
//!    to play chess` / `let's play chess`).
//! 2. [`Rule::Numbers`]: a number, date or quantity (`3 times 7` / `3 times 8`, `20%` / `20`).
//! 3. [`Rule::Negation`]: a negation on one side only (`can I` / `can't I`).
//! 4. [`Rule::Markers`]: opposite relation markers (`before the war` / `after the war`).
//! 5. [`Rule::Conversion`]: two unit conversions that differ (`km in a mile` / `miles in a km`); two
//!    that are the same are a hit in any frame (`how many km are in a mile` / `1 mile equals how many
//!    km`), and no later rule is asked.
//! 6. [`Rule::Antonym`]: a content word swapped for its opposite (`legal` / `illegal`).
//! 7. [`Rule::Substitution`]: a content word swapped for another (`python` / `java`).
//! 8. [`Rule::Addition`]: a content word on one side only (`explain recursion to a child`), unless
//!    naming it or not asks the same (`optional.rs`: `which city is the capital` / `what is the
//!    capital`).
//! 9. [`Rule::Order`]: two words that trade places across a third (`saltwater fish in freshwater` /
//!    `freshwater fish in saltwater`).
//! 10. [`Rule::Swaps`]: two adjacent runs that trade places (`is every square a rectangle` / `is every
//!     rectangle a square`), with five exceptions (coordinated, nominalized, moved with a preposition,
//!     passive, superlative).
//! 11. [`Rule::Roles`]: the same marker with its sides swapped (`compare flights from Paris to London`
//!     / `compare flights from London to Paris`).
//! 12. [`Rule::Agent`]: `by` on one side only, the words in the same order (`banks bought by other
//!     banks` / `banks that bought other banks`).
//!
//! Words align when their lemmas are equal, WordNet puts them in one synset or derives one from the
//! other, they are names of one thing (`js` / `javascript`, `half an hour` / `30 minutes`), or one is
//! the other misspelled. Function words (articles, pronouns, auxiliaries, question words, politeness)
//! are ignored, so rewording a question, dropping "please" or turning it into an imperative still
//! hits. Symbols count as words: `17 + 28` is `17 plus 28`, `20%` is a quantity other than `20`, a
//! capital `A` inside a sentence is a letter, `US` in capitals is the country, and a grammar word in
//! quotes (`a comma before "which"`) is what the question is about. Two different units of measure
//! never align, though WordNet puts some in one sense (`minute` / `second`).
//!
//! # Layout
//!
//! - [`words`]: splits a question into numbers, negators, markers, function and content words.
//! - `numbers`: numbers in digits or words, normalized.
//! - [`vocabulary`]: the one table of the words the rules read, with their parts.
//! - [`lexicon`]: WordNet lemmas, synonyms, antonyms and derivations (generated `data/lexicon.tsv`).
//! - [`equivalents`]: names of one thing, frame phrases and quantity phrases.
//! - [`speech_act`]: what a question asks the assistant to do.
//! - [`conversion`]: the unit conversion a question asks, whatever its frame.
//! - `read`: one question read once (a `Reading`).
//! - `optional`: the words that may go unsaid, computed once per pair, in a stated order.
//! - `align`: the word alignment of two readings.
//! - `rules/`: one file per rule, and the list that orders them.
//! - `tests`, `properties`: the case table (`data/cases.tsv`), the labelled-set gate, and property
//!   tests (symmetry, reflexivity, stability under spacing, case and punctuation).
//!
//! Architecture invariant: the edge worker and the regional nodes call this same function, so a
//! pair hits or misses the same way in every tier.

mod align;
pub mod conversion;
pub mod equivalents;
pub mod lexicon;
mod numbers;
mod optional;
mod read;
mod rules;
pub mod speech_act;
pub mod vocabulary;
pub mod words;

use std::fmt;

pub use rules::Rule;
use rules::{Pair, Verdict, RULES};

/// Why a candidate hit was refused: the rule that refused it, and what differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NearMiss {
    /// The rule that refused the hit.
    pub rule: Rule,
    /// What differs, in words (`python vs java`, `one side is negated`).
    pub detail: String,
}

impl NearMiss {
    /// A refusal by `rule`, for what `detail` says.
    pub fn new(rule: Rule, detail: impl Into<String>) -> Self {
        NearMiss { rule, detail: detail.into() }
    }
}

impl fmt::Display for NearMiss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.rule, self.detail)
    }
}

/// `Ok` when a cached answer to `cached` answers `asked` too, as far as the words show; the
/// refusal otherwise. The rules are asked in the order listed above (`# Rules`).
pub fn verify(cached: &str, asked: &str) -> Result<(), NearMiss> {
    let pair = Pair::new(cached, asked);
    for (rule, check) in RULES {
        match check(&pair) {
            Verdict::Next => {}
            Verdict::Same => return Ok(()),
            Verdict::Differs(detail) => return Err(NearMiss::new(rule, detail)),
        }
    }
    Ok(())
}

/// Whether `question` asks for a unit conversion ([`conversion`]).
pub fn asks_conversion(question: &str) -> bool {
    conversion::conversion(&words::words(question), lexicon::Lexicon::get()).is_some()
}

#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
