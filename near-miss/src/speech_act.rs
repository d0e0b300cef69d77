//! What a question asks the assistant to do, read from its grammar words. The alignment ignores those
//! words (`how`, `let`, auxiliaries), so without this `let's play chess` (play a game with me) hits
//! `how to play chess` (explain the rules).

use crate::vocabulary::{self, Tag};
use crate::words::Word;

/// The kind of answer a question asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// A method: `how to X`, `how do I X`, `explain how to X`.
    Method,
    /// Doing something together, now: `let's X`, `let us X`.
    Proposal,
    /// Anything else: a request (`write a joke`, `can you write a joke`), a question.
    Other,
}

/// The act `words` (of one question, in order) ask for.
pub fn act(words: &[Word]) -> Act {
    let texts: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
    let asks_method = texts.windows(2).any(|w| w == ["how", "to"])
        || texts.windows(3).any(|w| {
            w[0] == "how" && vocabulary::is(w[1], Tag::Auxiliary) && vocabulary::is(w[2], Tag::Person)
        });
    if asks_method {
        return Act::Method;
    }
    let start = texts.iter().position(|t| !vocabulary::is(t, Tag::Opener)).unwrap_or(texts.len());
    match &texts[start..] {
        // `let's` is `let` before its verb; `let me` and `let them` ask for something else.
        ["let", next, ..] if !matches!(*next, "me" | "him" | "her" | "them" | "it" | "my") => Act::Proposal,
        _ => Act::Other,
    }
}

/// Whether a cached answer for the act `cached` can answer the act `asked`: anything but a method for
/// a proposal or a proposal for a method. A request answers as a method or a proposal does
/// (`how do I reverse a list` / `reverse a list`, `let's write a poem` / `write a poem`).
pub fn compatible(cached: Act, asked: Act) -> bool {
    !matches!((cached, asked), (Act::Method, Act::Proposal) | (Act::Proposal, Act::Method))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::words;

    fn of(text: &str) -> Act {
        act(&words(text))
    }

    #[test]
    fn acts_are_read_from_the_grammar_words() {
        assert_eq!(of("How to play chess"), Act::Method);
        assert_eq!(of("how do I reverse a list in Python?"), Act::Method);
        assert_eq!(of("In Python, how can we reverse a list?"), Act::Method);
        assert_eq!(of("Explain how to deploy this"), Act::Method);
        assert_eq!(of("How are you?"), Act::Other);
        assert_eq!(of("How fast is Python?"), Act::Other);
        assert_eq!(of("Let's play chess"), Act::Proposal);
        assert_eq!(of("ok, let us write a poem"), Act::Proposal);
        assert_eq!(of("Let me know the capital of France"), Act::Other);
        assert_eq!(of("Can you play tic-tac-toe?"), Act::Other);
        assert_eq!(of("play chess"), Act::Other);
    }

    #[test]
    fn a_method_never_answers_a_proposal() {
        assert!(!compatible(Act::Method, Act::Proposal));
        assert!(!compatible(Act::Proposal, Act::Method));
        assert!(compatible(Act::Method, Act::Other));
        assert!(compatible(Act::Other, Act::Proposal));
        assert!(compatible(Act::Method, Act::Method));
    }
}
