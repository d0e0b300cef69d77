//! The numbers, dates and quantities of the two questions, normalized ([`crate::numbers`]), must be
//! the same multiset.
//!
//! - refused: `what is 3 times 7` / `what is 3 times 8`; `what is 20% of 50` / `what percentage of
//!   50 is 20`; `the first Harry Potter book` / `the second Harry Potter book`.
//! - hit: `is 91 a prime number` / `is ninety-one a prime number`; `what is 20 percent of 50` /
//!   `what's 20% of 50`; `what is 1/3 as a decimal` / `one third as a decimal`.

use super::{Pair, Verdict};

/// Refuses two questions whose numbers differ.
pub(super) fn check(pair: &Pair) -> Verdict {
    if pair.a.numbers == pair.b.numbers {
        Verdict::Next
    } else {
        Verdict::Differs(format!("{:?} vs {:?}", pair.a.numbers, pair.b.numbers))
    }
}
