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

use crate::normalize::{ChatRole, NormalizedRequest};

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

/// How long answers of each class live, in seconds.
///
/// [`ContentClass::Realtime`] has no TTL to set: it is never cached ([`TtlPolicy::cacheable`]) and its
/// TTL is always [`REALTIME_TTL_S`]. For the other classes 0 means "no TTL of this tier's own": an entry
/// stored with TTL 0 takes the tenant's default TTL at the core, and never expires if that is 0 too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TtlPolicy {
    /// TTL of [`ContentClass::Volatile`] answers.
    pub volatile_s: u64,
    /// TTL of [`ContentClass::Default`] answers.
    pub default_s: u64,
    /// TTL of [`ContentClass::Stable`] answers.
    pub stable_s: u64,
}

/// TTL of [`ContentClass::Realtime`] answers: 0, they are not cached.
pub const REALTIME_TTL_S: u64 = 0;
/// Default TTL of [`ContentClass::Volatile`] answers: five minutes.
pub const DEFAULT_VOLATILE_TTL_S: u64 = 300;
/// Default TTL of [`ContentClass::Default`] answers: an hour.
pub const DEFAULT_DEFAULT_TTL_S: u64 = 3_600;
/// Default TTL of [`ContentClass::Stable`] answers: a day.
pub const DEFAULT_STABLE_TTL_S: u64 = 86_400;

impl Default for TtlPolicy {
    fn default() -> Self {
        Self {
            volatile_s: DEFAULT_VOLATILE_TTL_S,
            default_s: DEFAULT_DEFAULT_TTL_S,
            stable_s: DEFAULT_STABLE_TTL_S,
        }
    }
}

impl TtlPolicy {
    /// The TTL, in seconds, of answers of `class`.
    pub fn ttl_s(&self, class: ContentClass) -> u64 {
        match class {
            ContentClass::Realtime => REALTIME_TTL_S,
            ContentClass::Volatile => self.volatile_s,
            ContentClass::Default => self.default_s,
            ContentClass::Stable => self.stable_s,
        }
    }

    /// Whether answers of `class` may be cached at all (every class but [`ContentClass::Realtime`]).
    pub fn cacheable(class: ContentClass) -> bool {
        class != ContentClass::Realtime
    }
}

/// Similarity a cached question needs, per content class, before the near-miss verifier is asked (the
/// regional tier's defaults; the edge's opt-in matching uses its own). The similarity only narrows the
/// candidates: the verifier decides. On the development sets, lowering the stable threshold from 0.92
/// to 0.80 raised recall (0.391 -> 0.433 and 0.125 -> 0.188) at the same precision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SemanticThresholds {
    /// Prices, schedules, "this week".
    pub volatile: f32,
    /// Nothing says how fast it changes.
    pub default: f32,
    /// Definitions, math, code, history.
    pub stable: f32,
}

impl SemanticThresholds {
    /// The thresholds of the small (distilled) embedding, which scores paraphrases lower than MiniLM:
    /// on the 596 labelled pairs, small embedding + verifier gave precision 0.992 / recall 0.433 at
    /// 0.85, 0.991 / 0.388 at 0.90 (`distill-edge-table --evaluate`).
    pub const SMALL_EMBEDDING: SemanticThresholds =
        SemanticThresholds { volatile: 0.90, default: 0.88, stable: 0.85 };

    /// The thresholds of the small embedding when it is the only one searched (a regional node with
    /// the table and without `--semantic-minilm-lookups`). The verifier decides; the similarity only
    /// picks the candidates, so these sit low. `semantic-eval` measures both sides of the choice:
    /// - on the development sets, the verifier's precision is the same from a gate of 0.40 to 0.80,
    ///   and recall rises as the gate falls (written-b: 0.190 at 0.75, 0.207 at 0.70, 0.227 at 0.60);
    /// - on real traffic (`--neighbours`: each ShareGPT first turn looked up among 6,525 others), the
    ///   verifier accepted none of the 338 lookups whose best candidate scored 0.70 to 0.75, and one
    ///   of the 162 from 0.65 to 0.70 (a one-word prompt), so the stable class stops at 0.70.
    pub const SMALL_ONLY: SemanticThresholds =
        SemanticThresholds { volatile: 0.75, default: 0.72, stable: 0.70 };
}

impl Default for SemanticThresholds {
    fn default() -> Self {
        Self { volatile: 0.88, default: 0.84, stable: 0.80 }
    }
}

impl SemanticThresholds {
    /// The threshold of `class`; `None` for realtime, which never hits.
    pub fn of(&self, class: ContentClass) -> Option<f32> {
        match class {
            ContentClass::Realtime => None,
            ContentClass::Volatile => Some(self.volatile),
            ContentClass::Default => Some(self.default),
            ContentClass::Stable => Some(self.stable),
        }
    }

    /// The small embedding's gate for a question of `class`: [`Self::of`], lowered to
    /// [`Self::CONVERSION`] when the question asks a unit conversion (`near_miss::asks_conversion`).
    pub fn gate(&self, class: ContentClass, asks_conversion: bool) -> Option<f32> {
        let gate = self.of(class)?;
        Some(if asks_conversion { gate.min(Self::CONVERSION) } else { gate })
    }

    /// The small embedding's gate for a unit conversion. The verifier reads a conversion whole (the
    /// amount, both units, the direction and every other word), and the small embedding scores one
    /// conversion in two frames low (`10 mi in km` / `how many kilometers is 10 miles`: 0.69; `what is
    /// half an hour in seconds` / `how many seconds are in 30 minutes`: 0.59), so the gate stops only
    /// unrelated questions.
    pub const CONVERSION: f32 = 0.50;

    /// Reads `volatile,default,stable` (three similarities in 0..=1).
    pub fn parse(text: &str) -> Result<Self, String> {
        let values: Vec<f32> = text
            .split(',')
            .map(|v| v.trim().parse::<f32>().map_err(|_| format!("{v:?} is not a number")))
            .collect::<Result<_, _>>()?;
        match values[..] {
            [volatile, default, stable] if values.iter().all(|v| (0.0..=1.0).contains(v)) => {
                Ok(Self { volatile, default, stable })
            }
            _ => Err(format!("want three similarities in 0..=1 (volatile,default,stable), not {text:?}")),
        }
    }
}

/// Time cues that ask about this very moment: realtime on their own.
pub const IMMEDIATE_CUES: &[&str] = &[
    "right now",
    "currently",
    "at the moment",
    "as of now",
    "as we speak",
    "today",
    "tonight",
    "this morning",
    "this afternoon",
    "this evening",
];

/// Weaker cues of the present: realtime only together with a live-data or changing topic.
pub const WEAK_NOW_CUES: &[&str] = &["now", "current"];

/// Topics whose value is live data: realtime on their own, unless asked about definitionally.
pub const LIVE_TOPIC_CUES: &[&str] = &[
    "weather",
    "forecast",
    "temperature outside",
    "is it raining",
    "stocks",
    "stock price",
    "share price",
    "stock market",
    "score",
    "scores",
    "news",
    "headlines",
    "traffic",
    "who is winning",
];

/// Cues of the recent past or near future: volatile.
pub const RECENT_CUES: &[&str] = &[
    "this week",
    "this weekend",
    "this month",
    "this year",
    "last week",
    "last night",
    "next week",
    "recent",
    "recently",
    "latest",
    "newest",
    "yesterday",
    "tomorrow",
    "upcoming",
    "these days",
    "so far",
];

/// Topics whose value changes within hours or days: volatile, unless asked about definitionally.
pub const CHANGING_TOPIC_CUES: &[&str] = &[
    "price",
    "prices",
    "cost",
    "costs",
    "how much is",
    "exchange rate",
    "exchange rates",
    "interest rate",
    "interest rates",
    "schedule",
    "schedules",
    "timetable",
    "opening hours",
    "version",
    "release date",
    "released",
    "election",
    "polls",
    "ranking",
    "rankings",
];

/// Phrasings that ask about a concept rather than its current value (see "False friends" above).
pub const DEFINITIONAL_CUES: &[&str] = &[
    "what is a",
    "what is an",
    "what s a",
    "what s an",
    "what does",
    "define",
    "definition",
    "meaning of",
    "explain",
    "how do i",
    "how to",
    "how does",
    "concept of",
];

/// Questions whose answer does not change: definitions, math, code, history, translations.
pub const STABLE_CUES: &[&str] = &[
    "what is",
    "what are",
    "what s",
    "what does",
    "who was",
    "who were",
    "define",
    "definition",
    "meaning of",
    "explain",
    "how do i",
    "how to",
    "how does",
    "why does",
    "why do",
    "why is",
    "difference between",
    "history",
    "history of",
    "translate",
    "translation",
    "prove",
    "proof",
    "derivative",
    "integral",
    "equation",
    "theorem",
    "calculate",
    "solve",
    "code",
    "function",
    "algorithm",
    "regex",
    "python",
    "rust",
    "javascript",
    "sql",
];

/// The content class of a normalized request (see the rules at the top of this file).
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

    #[test]
    fn semantic_thresholds_parse_three_similarities() {
        let t = SemanticThresholds::parse(" 0.97, 0.95,0.9 ").expect("valid");
        assert_eq!((t.of(ContentClass::Volatile), t.of(ContentClass::Stable)), (Some(0.97), Some(0.9)));
        assert_eq!(t.of(ContentClass::Realtime), None);
        for bad in ["", "0.9,0.9", "0.9,0.9,1.5", "a,b,c", "0.9,0.9,0.9,0.9"] {
            assert!(SemanticThresholds::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(SemanticThresholds::default().of(ContentClass::Default), Some(0.84));
    }

    #[test]
    fn a_unit_conversion_is_gated_lower() {
        let small = SemanticThresholds::SMALL_ONLY;
        assert_eq!(small.gate(ContentClass::Stable, true), Some(SemanticThresholds::CONVERSION));
        assert_eq!(small.gate(ContentClass::Stable, false), Some(small.stable));
        assert_eq!(small.gate(ContentClass::Realtime, true), None);
    }
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

    #[test]
    fn ttl_policy_defaults_and_cacheability() {
        let policy = TtlPolicy::default();
        assert_eq!(policy.ttl_s(ContentClass::Realtime), 0);
        assert_eq!(policy.ttl_s(ContentClass::Volatile), 300);
        assert_eq!(policy.ttl_s(ContentClass::Default), 3_600);
        assert_eq!(policy.ttl_s(ContentClass::Stable), 86_400);
        assert!(!TtlPolicy::cacheable(ContentClass::Realtime));
        for class in [ContentClass::Volatile, ContentClass::Default, ContentClass::Stable] {
            assert!(TtlPolicy::cacheable(class));
        }
        let custom = TtlPolicy { volatile_s: 60, default_s: 0, stable_s: 7 * 86_400 };
        assert_eq!(custom.ttl_s(ContentClass::Volatile), 60);
        assert_eq!(custom.ttl_s(ContentClass::Default), 0);
        assert_eq!(custom.ttl_s(ContentClass::Stable), 604_800);
        assert_eq!(custom.ttl_s(ContentClass::Realtime), 0);
    }

    #[test]
    fn ttls_shrink_as_classes_get_more_time_sensitive() {
        let policy = TtlPolicy::default();
        let ttls: Vec<u64> = ContentClass::ALL.into_iter().map(|c| policy.ttl_s(c)).collect();
        assert!(ttls.windows(2).all(|w| w[0] < w[1]), "{ttls:?}");
    }
}
