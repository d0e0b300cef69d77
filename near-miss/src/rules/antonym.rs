//! A content word swapped for its opposite: a WordNet antonym, a negative prefix (`legal` /
//! `illegal`), or opposite prefixes of one stem (`import` / `export`, `hyperglycemia` /
//! `hypoglycemia`). Looked for among the words that have no equal on the other side, before
//! synonyms and misspellings could pair them ([`crate::align`]).
//!
//! - refused: `is it legal to drive at 16 in Texas` / `is it illegal ...`; `import data in Excel` /
//!   `export data in Excel`; `which is heavier` / `which is lighter`.
//! - hit: `how can I purchase a car` / `how can I buy a car` (synonyms, not opposites).

use super::{Pair, Verdict};

/// Refuses a word whose opposite the other side has.
pub(super) fn check(pair: &Pair) -> Verdict {
    match pair.alignment().antonym {
        Some((i, j)) => Verdict::Differs(format!("{} vs {}", pair.a.content[i].text, pair.b.content[j].text)),
        None => Verdict::Next,
    }
}
