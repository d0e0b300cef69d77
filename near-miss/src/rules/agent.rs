//! `by` on one side only with the words still in order reverses who acts; a passive turned active
//! moves the agent before its verb, which asks the same. Asked both ways round.
//!
//! - refused: `which banks were bought by other banks` / `which banks bought other banks`; `who
//!   conquered the Spanish` / `who was conquered by the Spanish`.
//! - hit: `which novels were published by Penguin` / `which novels did Penguin publish`.

use super::{Pair, Verdict};
use crate::read::Reading;

/// Refuses `by` on one side only with its verb and agent in the same order on the other.
pub(super) fn check(pair: &Pair) -> Verdict {
    let alignment = pair.alignment();
    if lost(&pair.a, &pair.b, &alignment.pairs) || lost(&pair.b, &pair.a, &alignment.flipped()) {
        Verdict::Differs("\"by\" on one side only, the words in the same order".into())
    } else {
        Verdict::Next
    }
}

/// Whether `a` has an agent after `by` that `b`, without `by`, keeps after its verb.
fn lost(a: &Reading, b: &Reading, alignment: &[(usize, usize)]) -> bool {
    if b.objects.iter().any(|(marker, _)| marker == "by") {
        return false;
    }
    let in_b = |i: usize| alignment.iter().find(|&&(x, _)| x == i).map(|&(_, y)| y);
    a.objects.iter().filter(|(marker, _)| marker == "by").any(|&(_, agent)| {
        let Some(verb) = agent.checked_sub(1) else { return false };
        matches!((in_b(verb), in_b(agent)), (Some(verb_in_b), Some(agent_in_b)) if verb_in_b < agent_in_b)
    })
}
