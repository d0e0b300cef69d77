//! What a question asks the assistant to do, read from its grammar words. The alignment ignores those
//! words (`how`, `let`, auxiliaries), so without this `let's play chess` (play a game with me) hits
//! `how to play chess` (explain the rules).

use super::words::Word;

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

/// Auxiliaries that may follow `how` in a question about a method (`how do I`, `how can we`).
const AUXILIARIES: &[&str] = &["can", "could", "do", "does", "should", "would", "might", "may", "must"];

/// Who a method is for, after `how` and an auxiliary (`how does one`).
const PEOPLE: &[&str] = &["i", "we", "you", "one", "u"];

/// Openings that carry nothing about the act (`hi, let's ...`, `ok so let's ...`).
const OPENERS: &[&str] =
    &["hi", "hello", "hey", "ok", "okay", "so", "please", "now", "well", "chatgpt", "gpt"];

/// The act `words` (of one question, in order) ask for.
pub fn act(words: &[Word]) -> Act {
    let texts: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
    let asks_method = texts.windows(2).any(|w| w == ["how", "to"])
        || texts.windows(3).any(|w| w[0] == "how" && AUXILIARIES.contains(&w[1]) && PEOPLE.contains(&w[2]));
    if asks_method {
        return Act::Method;
    }
    let start = texts.iter().position(|t| !OPENERS.contains(t)).unwrap_or(texts.len());
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
    use super::super::words::words;
    use super::*;

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
