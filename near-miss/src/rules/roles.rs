//! The same marker must relate the same words on both sides: a swap is when the word after the marker
//! on one side stands before it on the other, both ways round. Asked even when both questions
//! compare, where the order rules are not.
//!
//! - refused: `compare flights from Paris to London` / `compare flights from London to Paris`.
//! - hit: `compare flights from Paris to London` / `compare flights to London from Paris` (each
//!   marker keeps its word).

use super::{Pair, Verdict};

/// Refuses a marker whose two sides are swapped.
pub(super) fn check(pair: &Pair) -> Verdict {
    let (a, b, alignment) = (&pair.a, &pair.b, &pair.alignment().pairs);
    let in_b = |i: usize| alignment.iter().find(|&&(x, _)| x == i).map(|&(_, y)| y);
    let in_a = |j: usize| alignment.iter().find(|&&(_, y)| y == j).map(|&(x, _)| x);
    for (marker, at_a) in &a.objects {
        for (_, at_b) in b.objects.iter().filter(|(m, _)| m == marker) {
            let after_a_stands_before_in_b = in_b(*at_a).is_some_and(|j| j < *at_b);
            let after_b_stands_before_in_a = in_a(*at_b).is_some_and(|i| i < *at_a);
            if after_a_stands_before_in_b && after_b_stands_before_in_a {
                return Verdict::Differs(format!("the sides of {marker:?} are swapped"));
            }
        }
    }
    Verdict::Next
}
