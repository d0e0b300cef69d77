//! A content word on one side only, which the other side does not replace: it narrows or changes
//! what is asked. Words that may go unsaid ([`crate::optional`]) are not counted.
//!
//! - refused: `explain recursion` / `explain recursion to a child`; `which country has won the most
//!   gold medals` / `which Asian country ...`; `what are the steps of mitosis` / `what is mitosis`.
//! - hit: `which city is the capital of Peru` / `what is the capital of Peru`; `how do I reset my
//!   router` / `steps to reset a router`; `which ocean is the largest` / `largest ocean on Earth`.

use super::{Pair, Verdict};

/// Refuses a word that one side has and the other lacks.
pub(super) fn check(pair: &Pair) -> Verdict {
    let alignment = pair.alignment();
    match (alignment.left.first(), alignment.right.first()) {
        (Some(&i), None) => Verdict::Differs(pair.a.content[i].text.clone()),
        (None, Some(&j)) => Verdict::Differs(pair.b.content[j].text.clone()),
        _ => Verdict::Next,
    }
}
