//! A content word that aligns with nothing on the other side, which has a word of its own left over:
//! another entity, language, audience or unit.
//!
//! - refused: `write a sorting function in Python` / `... in Java`; `sort an array in descending
//!   order` / `... ascending order` (a changed first letter is a prefix, not a typo); `how many days
//!   does a cold last` / `how many weeks ...` (two units never align).
//! - hit: `what is the best progam for editing photos` / `... program ...` (a misspelling); `how do I
//!   deploy to k8s` / `... Kubernetes` (names of one thing).

use super::{Pair, Verdict};

/// Refuses two questions that each keep a word the other lacks.
pub(super) fn check(pair: &Pair) -> Verdict {
    let alignment = pair.alignment();
    match (alignment.left.first(), alignment.right.first()) {
        (Some(&i), Some(&j)) => {
            Verdict::Differs(format!("{} vs {}", pair.a.content[i].text, pair.b.content[j].text))
        }
        _ => Verdict::Next,
    }
}
