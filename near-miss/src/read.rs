//! One question read once, before any rule looks at it: its numbers, negators, relation markers,
//! content words, speech act and unit conversion. Nothing here depends on the other question, and
//! nothing changes a reading once it is made ([`crate::optional`] reads it, with the other one, to say
//! which words may go unsaid).

use crate::conversion::{self, Conversion};
use crate::lexicon::Lexicon;
use crate::speech_act::{self, Act};
use crate::vocabulary::{self, Tag};
use crate::words::{words, WordKind};

/// A content word (or a number) and the dictionary forms it may have.
pub(crate) struct Content {
    /// The word as written, lowercased (`long` for the `many` of `how many days`).
    pub text: String,
    /// Its dictionary forms ([`Lexicon::lemmas`]); a number's only form is itself.
    pub forms: Vec<String>,
    /// The words between the previous content word and this one.
    pub before: Vec<String>,
    /// Whether it is a number. Numbers take part in the order and role checks (`generation 1 to
    /// generation 2` / `generation 2 to generation 1`); they align only with equals.
    pub number: bool,
    /// A unit of time counted by `how many` (`how many days does a cold last` asks what `how long
    /// does a cold last` asks: the unit only says how to count the answer).
    pub counted_time: bool,
}

impl Content {
    /// Whether it is a superlative (`largest`, `best`: an `-est` form of a shorter lemma).
    pub fn is_superlative(&self) -> bool {
        self.text.ends_with("est") && self.forms.iter().any(|f| *f != self.text)
    }
}

/// What the verifier keeps of one question.
pub(crate) struct Reading {
    /// Normalized numbers, sorted.
    pub numbers: Vec<String>,
    /// How many negators.
    pub negators: usize,
    /// The content words and numbers, in order.
    pub content: Vec<Content>,
    /// Each marker occurrence with the number of content words before it (so the index of the
    /// content word after it).
    pub objects: Vec<(String, usize)>,
    /// Whether the question compares things ([`Tag::ComparisonCue`]).
    pub compares: bool,
    /// What it asks the assistant to do.
    pub act: Act,
    /// Whether it asks how.
    pub asks_how: bool,
    /// Whether it asks for a superlative (`most`, `least`, or a word such as `largest`).
    pub superlative: bool,
    /// The unit conversion it asks for, if it asks for one.
    pub conversion: Option<Conversion>,
}

impl Reading {
    /// Reads `text`. `one quart` asks what `a quart` asks, so the number `1` is not kept (`1 + 1` and
    /// `1 + 2` still differ by the 2), and `is 91 prime or not` asks whether 91 is prime, so a `not`
    /// after `or` does not negate.
    pub fn new(text: &str, lexicon: &Lexicon) -> Self {
        let words = words(text);
        let mut reading = Reading {
            numbers: Vec::new(),
            negators: 0,
            content: Vec::new(),
            objects: Vec::new(),
            compares: words.iter().any(|w| vocabulary::is(&w.text, Tag::ComparisonCue)),
            act: speech_act::act(&words),
            asks_how: words.iter().any(|w| w.text == "how"),
            superlative: false,
            conversion: conversion::conversion(&words, lexicon),
        };
        let mut between: Vec<String> = Vec::new();
        for word in &words {
            match &word.kind {
                WordKind::Number(n) if n == "1" => {}
                WordKind::Negator if word.text == "not" && between.last().is_some_and(|w| w == "or") => {}
                WordKind::Number(n) => {
                    reading.numbers.push(n.clone());
                    let before = std::mem::take(&mut between);
                    reading.content.push(Content {
                        text: n.clone(),
                        forms: vec![n.clone()],
                        before,
                        number: true,
                        counted_time: false,
                    });
                    continue;
                }
                WordKind::Negator => reading.negators += 1,
                WordKind::Marker => reading.objects.push((word.text.clone(), reading.content.len())),
                WordKind::Function => {}
                WordKind::Content => {
                    let before = std::mem::take(&mut between);
                    let counted_time = before.is_empty()
                        && reading
                            .content
                            .last()
                            .is_some_and(|c| c.text == "many" && c.before.last().is_some_and(|w| w == "how"))
                        && lexicon.unit(&word.text).is_some_and(|unit| vocabulary::is(unit, Tag::Duration));
                    if counted_time {
                        if let Some(many) = reading.content.last_mut() {
                            many.text = "long".into();
                            many.forms = vec!["long".into()];
                        }
                    }
                    reading.content.push(Content {
                        text: word.text.clone(),
                        forms: lexicon.lemmas(&word.text),
                        before,
                        number: false,
                        counted_time,
                    });
                    continue;
                }
            }
            between.push(word.text.clone());
        }
        reading.numbers.sort();
        reading.superlative = words.iter().any(|w| matches!(w.text.as_str(), "most" | "least"))
            || reading.content.iter().any(Content::is_superlative);
        reading
    }
}
