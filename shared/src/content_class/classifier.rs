//! The classifier: the rules of [`super`] applied to a message's words.

use super::cues::{
    CHANGING_TOPIC_CUES, DEFINITIONAL_CUES, IMMEDIATE_CUES, LIVE_TOPIC_CUES, RECENT_CUES, STABLE_CUES,
    WEAK_NOW_CUES,
};
use super::ContentClass;
use crate::normalize::{ChatRole, NormalizedRequest};

/// The content class of a normalized request (see the rules in [`crate::content_class`]).
pub fn classify(request: &NormalizedRequest) -> ContentClass {
    request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == ChatRole::User)
        .map_or(ContentClass::Default, |m| classify_text(&m.content))
}

/// The content class of one user message.
pub fn classify_text(text: &str) -> ContentClass {
    let words = Words::of(text);
    let immediate = words.any(IMMEDIATE_CUES);
    let weak_now = words.any(WEAK_NOW_CUES);
    let recent = words.any(RECENT_CUES) || words.has_recent_year();
    let timed = immediate || weak_now || recent;
    // A topic in a definitional question without any time cue asks about the concept.
    let conceptual = !timed && words.any(DEFINITIONAL_CUES);
    let live = words.any(LIVE_TOPIC_CUES) && !conceptual;
    let changing = words.any(CHANGING_TOPIC_CUES) && !conceptual;
    if immediate || live || (weak_now && changing) {
        ContentClass::Realtime
    } else if recent || changing {
        ContentClass::Volatile
    } else if words.any(STABLE_CUES) {
        ContentClass::Stable
    } else {
        ContentClass::Default
    }
}

/// First year that counts as recent: answers about it may still change.
const FIRST_RECENT_YEAR: u32 = 2020;

/// A message as lowercase words, each surrounded by one space, so that cues match whole words.
struct Words(String);

impl Words {
    fn of(text: &str) -> Self {
        let mut padded = String::with_capacity(text.len() + 2);
        padded.push(' ');
        for c in text.chars().flat_map(char::to_lowercase) {
            if c.is_alphanumeric() {
                padded.push(c);
            } else if !padded.ends_with(' ') {
                padded.push(' ');
            }
        }
        if !padded.ends_with(' ') {
            padded.push(' ');
        }
        Self(padded)
    }

    /// Whether one of `cues` occurs as whole words.
    fn any(&self, cues: &[&str]) -> bool {
        cues.iter().any(|cue| self.contains(cue))
    }

    fn contains(&self, cue: &str) -> bool {
        let bytes = self.0.as_bytes();
        self.0.match_indices(cue).any(|(at, _)| {
            // The text starts and ends with a space, so a match never touches either end.
            bytes.get(at.wrapping_sub(1)) == Some(&b' ') && bytes.get(at + cue.len()) == Some(&b' ')
        })
    }

    /// Whether a four-digit year of [`FIRST_RECENT_YEAR`] or later occurs (`2024`, or a decade: `2020s`).
    fn has_recent_year(&self) -> bool {
        self.0.split(' ').any(|word| {
            let digits = word.strip_suffix('s').unwrap_or(word);
            digits.len() == 4
                && digits.bytes().all(|b| b.is_ascii_digit())
                && digits.parse::<u32>().is_ok_and(|year| year >= FIRST_RECENT_YEAR)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::ModelRef;
    use crate::normalize::{Message, Sampling};

    fn request(messages: &[(ChatRole, &str)], temperature: f32) -> NormalizedRequest {
        NormalizedRequest {
            model: ModelRef { name: "m".into(), version: 1 },
            messages: messages
                .iter()
                .map(|(role, text)| Message { role: *role, content: (*text).into() })
                .collect(),
            sampling: Sampling { temperature, ..Sampling::greedy(16) },
            delivery: crate::openai::Delivery::Whole,
            api: crate::model_spec::ModelApi::Chat,
            echo: false,
            tags: Vec::new(),
        }
    }

    fn check(cases: &[&str], expected: ContentClass) {
        for text in cases {
            assert_eq!(classify_text(text), expected, "{text:?}");
        }
    }

    #[test]
    fn live_data_is_realtime() {
        check(
            &[
                "What's the weather in Paris?",
                "what is the weather like right now",
                "Current price of bitcoin",
                "AAPL stock price",
                "latest news about the election",
                "What was the score of the game?",
                "Today's top headlines",
                "Is it raining in London",
                "what time is it currently in Tokyo",
                "anything fun to do tonight?",
                "Bitcoin price now",
            ],
            ContentClass::Realtime,
        );
    }

    #[test]
    fn recent_and_changing_things_are_volatile() {
        check(
            &[
                "What happened this week in tech?",
                "Any recent papers on RLHF?",
                "What is the latest version of Rust?",
                "How much does a Tesla Model 3 cost?",
                "EUR to USD exchange rate",
                "train schedule from Boston to New York",
                "Who won the 2024 election?",
                "best phones of the 2020s",
                "what did the Fed decide yesterday",
                "Will it be sunny tomorrow? I mean the mood",
            ],
            ContentClass::Volatile,
        );
    }

    #[test]
    fn facts_definitions_math_and_code_are_stable() {
        check(
            &[
                "What is a monad?",
                "Explain how TCP congestion control works",
                "how do I reverse a linked list in Rust",
                "Translate 'good morning' into French",
                "Prove that the square root of 2 is irrational",
                "history of the Roman empire",
                "What is the capital of France?",
                "Who was Ada Lovelace?",
                "Why is the sky blue?",
                "What is 17 * 23?",
            ],
            ContentClass::Stable,
        );
    }

    #[test]
    fn other_requests_are_default() {
        check(
            &[
                "Write a haiku about autumn leaves",
                "hello",
                "",
                "Summarize this: the cat sat.",
                "Where do penguins live?",
            ],
            ContentClass::Default,
        );
    }

    #[test]
    fn definitional_questions_about_changing_topics_are_stable() {
        check(
            &[
                "What is a price elasticity?",
                "Explain how a weather front forms",
                "how do I parse a stock price feed in Python",
                "define opportunity cost",
                "What does version control mean?",
            ],
            ContentClass::Stable,
        );
    }

    #[test]
    fn a_time_cue_keeps_a_definitional_question_time_sensitive() {
        assert_eq!(classify_text("explain the latest price changes"), ContentClass::Volatile);
        assert_eq!(classify_text("explain today's market moves"), ContentClass::Realtime);
    }

    #[test]
    fn cues_match_whole_words_only() {
        // "now" in "snowfall" / "known", "cost" in "costume", "news" in "newsletter", "score" in "scoreboard".
        check(
            &[
                "What is snowfall?",
                "what is a known costume trope",
                "how do I write a newsletter",
                "What is a scoreboard made of?",
            ],
            ContentClass::Stable,
        );
        // The year cue needs exactly four digits.
        assert_eq!(classify_text("what is 20245 divided by 5"), ContentClass::Stable);
    }

    #[test]
    fn a_bare_now_or_current_is_not_realtime() {
        assert_eq!(classify_text("Now explain recursion"), ContentClass::Stable);
        assert_eq!(classify_text("print the current element of the list in python"), ContentClass::Stable);
    }

    #[test]
    fn old_years_are_not_recent() {
        assert_eq!(
            classify_text("Who won the 2008 election?"),
            ContentClass::Volatile,
            "election is changing"
        );
        assert_eq!(classify_text("What happened in 2019 to the dollar"), ContentClass::Default);
        assert_eq!(classify_text("the year 2031 in science fiction"), ContentClass::Volatile);
    }

    #[test]
    fn only_the_last_user_message_counts() {
        let r = request(
            &[
                (ChatRole::System, "You report live news and weather."),
                (ChatRole::User, "What is the weather today?"),
                (ChatRole::Assistant, "Sunny."),
                (ChatRole::User, "What is a cumulus cloud?"),
            ],
            0.0,
        );
        assert_eq!(classify(&r), ContentClass::Stable);
        let r = request(
            &[(ChatRole::User, "What is a monad?"), (ChatRole::Assistant, "Right now, a burrito.")],
            0.0,
        );
        assert_eq!(classify(&r), ContentClass::Stable);
        assert_eq!(classify(&request(&[(ChatRole::System, "today")], 0.0)), ContentClass::Default);
    }

    #[test]
    fn sampling_does_not_change_the_class() {
        let question = [(ChatRole::User, "weather in Oslo")];
        assert_eq!(classify(&request(&question, 0.0)), ContentClass::Realtime);
        assert_eq!(classify(&request(&question, 1.3)), ContentClass::Realtime);
    }

    #[test]
    fn case_and_punctuation_do_not_matter() {
        check(
            &["WEATHER?!", "weather—paris", "«Weather» in Oslo", "RIGHT-NOW please"],
            ContentClass::Realtime,
        );
    }
}
