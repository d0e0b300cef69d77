//! Which words of a question may go unsaid: naming them or not asks the same. Computed once per pair,
//! here and nowhere else, from the two readings ([`crate::read`]); the alignment drops these words
//! when one side has nothing else left to align ([`crate::align`]).
//!
//! # Order
//!
//! A content word is optional when, in this order:
//! 1. it names a category right after `which` or `what` (`which city is the capital` / `what is the
//!    capital`). In `which Asian country` the category is the last word: a word right after a
//!    category takes its place, and the words before it narrow it and must match (`which Asian
//!    country` / `which country`);
//! 2. or it is a unit of time counted by `how many` (`how many days does a cold last` / `how long
//!    does a cold last`), unless a word right after it takes its place as in 1;
//! 3. or it is a superlative's whole-world scope (`the largest ocean on Earth` / `the largest ocean`;
//!    another scope, `on Mars`, still differs);
//! 4. or both questions compare and it is a comparison's cue (`the difference between A and B` / `A
//!    vs B`);
//! 5. but not when it is a category (1) and the other question asks how, which asks for a manner or
//!    a state, not a thing (`what day is today` / `how are you today`);
//! 6. and always when it names a method and the other question asks for the method itself (`steps
//!    for making a roux` / `how do I make a roux`).

use crate::read::{Content, Reading};
use crate::speech_act::Act;
use crate::vocabulary::{self, Tag};

/// Whether each content word of `this` may go unsaid, given the `other` question.
pub(crate) fn optional(this: &Reading, other: &Reading) -> Vec<bool> {
    let content = &this.content;
    let after_which =
        |c: &Content| !c.number && matches!(c.before.last().map(String::as_str), Some("which" | "what"));
    // `head[i]`: word i comes right after a word that is optional so far, and takes its place.
    let mut head = vec![false; content.len()];
    let mut so_far = vec![false; content.len()];
    for (i, word) in content.iter().enumerate() {
        head[i] = !word.number && word.before.is_empty() && i > 0 && so_far[i - 1];
        so_far[i] = !word.number && (after_which(word) || head[i] || word.counted_time);
    }
    let replaced = |i: usize| head.get(i + 1).copied().unwrap_or(false);
    let both_compare = this.compares && other.compares;
    content
        .iter()
        .enumerate()
        .map(|(i, word)| {
            let category = (after_which(word) || head[i]) && !replaced(i);
            let counted = so_far[i] && !replaced(i);
            let scope = this.superlative
                && word.before.iter().any(|w| w == "in" || w == "on")
                && vocabulary::is(&word.text, Tag::WholeWorld);
            let cue = both_compare && vocabulary::is(&word.text, Tag::ComparisonCue);
            let method =
                other.act == Act::Method && word.forms.iter().any(|f| vocabulary::is(f, Tag::MethodNoun));
            ((counted || scope || cue) && !(category && other.asks_how)) || method
        })
        .collect()
}
