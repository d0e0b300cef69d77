//! Two unit conversions ask the same when they convert the same quantity between the same units, in
//! any frame ([`crate::conversion`]); that settles the pair as a hit, whatever the words. Two that
//! differ are a near miss.
//!
//! - hit: `how many kilometers are in a mile` / `1 mile equals how many km`; `how many liters are in a
//!   US gallon` / `convert 1 US gallon to litres`.
//! - refused: `how many kilometers are in a mile` / `1 km equals how many miles`; `20 degrees Celsius
//!   in Fahrenheit` / `20 degrees Fahrenheit in Celsius`.

use super::{Pair, Verdict};

/// Settles two equal conversions as a hit and refuses two different ones.
pub(super) fn check(pair: &Pair) -> Verdict {
    match (&pair.a.conversion, &pair.b.conversion) {
        (Some(x), Some(y)) if x == y => Verdict::Same,
        (Some(x), Some(y)) => Verdict::Differs(format!(
            "{} {} to {} {:?} vs {} {} to {} {:?}",
            x.amount, x.from, x.to, x.rest, y.amount, y.from, y.to, y.rest
        )),
        _ => Verdict::Next,
    }
}
