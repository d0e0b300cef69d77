//! A negation on one side and not the other: the parity of the negators (`not`, `no`, `never`,
//! `without`, `n't`) must be the same.
//!
//! - refused: `can I use Python on Windows` / `can't I use Python on Windows`.
//! - hit: `how do I install it without admin rights` / `how do I install it if I don't have admin
//!   rights`; `is 91 prime or not` / `is 91 prime` (a `not` after `or` does not negate).

use super::{Pair, Verdict};

/// Refuses a question negated on one side only.
pub(super) fn check(pair: &Pair) -> Verdict {
    if pair.a.negators % 2 == pair.b.negators % 2 {
        Verdict::Next
    } else {
        Verdict::Differs("one side is negated".into())
    }
}
