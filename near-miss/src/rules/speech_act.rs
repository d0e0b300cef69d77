//! A method asked for on one side and a proposal to do it on the other ask for different answers
//! ([`crate::speech_act`]).
//!
//! - refused: `how to play chess` / `let's play chess`; `how do I write a haiku about autumn` / `let
//!   us write a haiku about autumn`.
//! - hit: `let's play chess` / `play chess`; `how do I reverse a list in Python` / `reverse a list in
//!   Python` (a request answers as a method or a proposal does).

use super::{Pair, Verdict};
use crate::speech_act::compatible;

/// Refuses a method for a proposal and a proposal for a method.
pub(super) fn check(pair: &Pair) -> Verdict {
    if compatible(pair.a.act, pair.b.act) {
        Verdict::Next
    } else {
        Verdict::Differs(format!("{:?} vs {:?}", pair.a.act, pair.b.act))
    }
}
