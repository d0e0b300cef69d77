//! The cue lists [`super::classify_text`] matches as whole words (see the rules in [`super`]).

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
