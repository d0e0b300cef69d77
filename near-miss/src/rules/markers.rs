//! A relation marker on one side and its opposite on the other reverse the relation.
//!
//! - refused: `what happened before the war` / `what happened after the war`.
//! - hit: `how did people travel before trains` / `before trains, how did people travel`; `what
//!   changed before and after the war` / `... after and before the war` (a side with both markers
//!   reverses nothing).

use super::{Pair, Verdict};
use crate::read::Reading;

/// Markers that reverse each other's relation.
const OPPOSITE_MARKERS: [(&str, &str); 3] = [("before", "after"), ("above", "below"), ("over", "under")];

/// Refuses one marker of an opposite pair on one side and the other on the other side.
pub(super) fn check(pair: &Pair) -> Verdict {
    let (a, b) = (&pair.a, &pair.b);
    let has = |side: &Reading, m: &str| side.objects.iter().any(|(marker, _)| marker == m);
    for (x, y) in OPPOSITE_MARKERS {
        if (has(a, x) && has(b, y) && !has(a, y) && !has(b, x))
            || (has(a, y) && has(b, x) && !has(a, x) && !has(b, y))
        {
            return Verdict::Differs(format!("{x} vs {y}"));
        }
    }
    Verdict::Next
}
