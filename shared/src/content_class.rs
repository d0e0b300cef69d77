//! Content classes and adaptive TTL: how long an answer may be served from a cache depends on how fast the
//! truth behind the question changes. "What is the weather right now" must be generated every time; "what
//! is a monad" can be kept for a day.
//!
//! # Rules
//! [`classify`] reads the last user message only (the system prompt and earlier turns are context, not the
//! question). The text is lowercased and cut into words at every character that is not alphanumeric
//! (`today's` reads as `today s`), and cues match whole words or whole runs of words, never parts of
//! words (`snowfall` does not contain `now`). The class depends on the text alone: sampling parameters
//! do not change how fast an answer goes stale. The first rule that matches wins, so the order of
//! precedence is realtime > volatile > stable > default:
//!
//! 1. [`ContentClass::Realtime`] (never cached) when the message has
//!    - an immediate time cue ([`IMMEDIATE_CUES`]: "right now", "today", "tonight", "currently", ...), or
//!    - a live-data topic ([`LIVE_TOPIC_CUES`]: "weather", "forecast", "stock price", "news", "score",
//!      ...), or
//!    - a weak "now" cue ([`WEAK_NOW_CUES`]: "now", "current") together with a live-data or changing topic
//!      ("the current price", "bitcoin price now").
//! 2. [`ContentClass::Volatile`] (minutes) when the message has a recent time cue ([`RECENT_CUES`]:
//!    "this week", "latest", "recent", "yesterday", "tomorrow", ...), a year of 2020 or later (`2024`,
//!    `2020s`), or a changing topic ([`CHANGING_TOPIC_CUES`]: "price", "cost", "exchange rate",
//!    "schedule", "version", ...).
//! 3. [`ContentClass::Stable`] (a day or more) when the message has a stable cue ([`STABLE_CUES`]: "what
//!    is", "how do i", "explain", "define", "translate", "history of", "prove", code words, ...).
//! 4. [`ContentClass::Default`] otherwise.
//!
//! A bare "now" or "current" alone does not make a message realtime: "now explain recursion" and "the
//! current element of the list" are everyday phrasing, not requests for live data.
//!
//! # False friends
//! A topic cue in a definitional question ([`DEFINITIONAL_CUES`]: "what is a", "define", "meaning of",
//! "explain", "how do i", ...) that has no time cue at all asks about the concept, not its current value:
//! "what is a price elasticity?", "explain how a weather front forms" and "how do I parse a stock
//! price feed in Python" are [`ContentClass::Stable`]. "What is the weather in Paris" is not
//! definitional ("what is the" is not "what is a") and stays realtime; any time cue ("define the
//! latest iPhone price") keeps the topic's class.
//!
//! Misclassification is asymmetric: calling a stable question realtime costs one generation, calling a
//! realtime question stable serves a stale answer for a day. The cue lists lean towards the former.

mod classifier;
mod cues;
mod thresholds;
mod ttl;

pub use classifier::{classify, classify_text};
pub use cues::{
    CHANGING_TOPIC_CUES, DEFINITIONAL_CUES, IMMEDIATE_CUES, LIVE_TOPIC_CUES, RECENT_CUES, STABLE_CUES,
    WEAK_NOW_CUES,
};
pub use thresholds::SemanticThresholds;
pub use ttl::{
    TtlPolicy, DEFAULT_DEFAULT_TTL_S, DEFAULT_STABLE_TTL_S, DEFAULT_VOLATILE_TTL_S, REALTIME_TTL_S,
};

/// How fast the answer to a request goes stale, which decides how long caches keep it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ContentClass {
    /// Live data (weather, scores, "right now"): generated every time, never cached.
    Realtime,
    /// Changes within hours or days (prices, schedules, "this week"): cached for minutes.
    Volatile,
    /// Nothing says how fast it changes: cached for about an hour.
    Default,
    /// Facts that do not change (definitions, math, code, history): cached for a day or more.
    Stable,
}

impl ContentClass {
    /// Every class, from the most to the least time-sensitive.
    pub const ALL: [ContentClass; 4] =
        [ContentClass::Realtime, ContentClass::Volatile, ContentClass::Default, ContentClass::Stable];

    /// The class's name as headers, the core's records and configuration write it.
    pub fn as_str(self) -> &'static str {
        match self {
            ContentClass::Realtime => "realtime",
            ContentClass::Volatile => "volatile",
            ContentClass::Default => "default",
            ContentClass::Stable => "stable",
        }
    }

    /// The class a name stands for (case and surrounding blanks ignored), if any.
    pub fn parse(name: &str) -> Option<Self> {
        let name = name.trim();
        Self::ALL.into_iter().find(|class| class.as_str().eq_ignore_ascii_case(name))
    }
}

impl std::fmt::Display for ContentClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for class in ContentClass::ALL {
            assert_eq!(ContentClass::parse(class.as_str()), Some(class));
            assert_eq!(class.to_string(), class.as_str());
        }
        assert_eq!(ContentClass::parse(" Stable "), Some(ContentClass::Stable));
        assert_eq!(ContentClass::parse("REALTIME"), Some(ContentClass::Realtime));
        assert_eq!(ContentClass::parse("forever"), None);
        assert_eq!(ContentClass::parse(""), None);
    }
}
