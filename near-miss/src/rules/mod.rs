//! The rules, one per file, and the one list that orders them ([`RULES`]). [`crate::verify`] reads
//! both questions once ([`Pair::new`]) and asks each rule in turn: the first that refuses names the
//! near miss; a rule may also settle the pair as the same question ([`Verdict::Same`]); a pair no rule
//! refuses is a hit.
//!
//! A new rule is a file here with a doc comment that carries its examples, a [`Rule`] variant, a row
//! in [`RULES`] at the place where it should be asked, and rows in `data/cases.tsv`.

use std::cell::OnceCell;
use std::fmt;

use crate::align::{align, Alignment};
use crate::lexicon::Lexicon;
use crate::optional::optional;
use crate::read::Reading;

mod addition;
mod agent;
mod antonym;
mod conversion;
mod markers;
mod negation;
mod numbers;
mod order;
mod roles;
mod speech_act;
mod substitution;
mod swaps;

#[cfg(test)]
pub(crate) use swaps::is_nominalized;

/// A rule of the verifier: what a refusal names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// A method asked for on one side, a proposal to do it on the other ([`crate::speech_act`]).
    SpeechAct,
    /// The numbers, dates or quantities differ.
    Numbers,
    /// One side is negated and the other is not.
    Negation,
    /// Opposite relation markers (`before` / `after`).
    Markers,
    /// Two unit conversions that differ (settles two that are the same as a hit).
    Conversion,
    /// A content word swapped for its opposite.
    Antonym,
    /// A content word swapped for a different one.
    Substitution,
    /// A content word on one side only.
    Addition,
    /// Two words that trade places across a third.
    Order,
    /// Two adjacent runs of words that trade places.
    Swaps,
    /// The same marker with its sides swapped.
    Roles,
    /// `by` on one side only, the words in the same order.
    Agent,
}

/// What a rule says about a pair.
pub(crate) enum Verdict {
    /// Nothing: ask the next rule.
    Next,
    /// The two ask the same: a hit, whatever the later rules would say.
    Same,
    /// A near miss, and what differs.
    Differs(String),
}

/// How a rule checks a pair.
type Check = fn(&Pair) -> Verdict;

/// The rules in the order they are asked: first what each question is on its own (its speech act,
/// numbers, negation, relation markers, conversion), then what the word alignment shows (antonyms,
/// other words, words on one side only), then the word order over the aligned words.
pub(crate) const RULES: [(Rule, Check); 12] = [
    (Rule::SpeechAct, speech_act::check),
    (Rule::Numbers, numbers::check),
    (Rule::Negation, negation::check),
    (Rule::Markers, markers::check),
    (Rule::Conversion, conversion::check),
    (Rule::Antonym, antonym::check),
    (Rule::Substitution, substitution::check),
    (Rule::Addition, addition::check),
    (Rule::Order, order::check),
    (Rule::Swaps, swaps::check),
    (Rule::Roles, roles::check),
    (Rule::Agent, agent::check),
];

impl Rule {
    /// Every rule, in the order [`crate::verify`] asks them.
    pub fn all() -> impl Iterator<Item = Rule> {
        RULES.iter().map(|(rule, _)| *rule)
    }

    /// The rule's name, as `data/cases.tsv` and [`crate::NearMiss`]'s text write it.
    pub fn name(self) -> &'static str {
        match self {
            Rule::SpeechAct => "speech_act",
            Rule::Numbers => "numbers",
            Rule::Negation => "negation",
            Rule::Markers => "markers",
            Rule::Conversion => "conversion",
            Rule::Antonym => "antonym",
            Rule::Substitution => "substitution",
            Rule::Addition => "addition",
            Rule::Order => "order",
            Rule::Swaps => "swaps",
            Rule::Roles => "roles",
            Rule::Agent => "agent",
        }
    }

    /// The rule named `name` ([`Rule::name`]), if any.
    pub fn named(name: &str) -> Option<Rule> {
        Rule::all().find(|rule| rule.name() == name)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Two questions as the rules see them: each read once, the words that may go unsaid, and the word
/// alignment, made when a rule first asks for it.
pub(crate) struct Pair {
    /// The cached question.
    pub a: Reading,
    /// The question asked.
    pub b: Reading,
    /// Which content words of `a` and of `b` may go unsaid ([`crate::optional`]).
    optional: (Vec<bool>, Vec<bool>),
    /// The lexicon the words are compared with.
    lexicon: &'static Lexicon,
    /// The word alignment, once made.
    alignment: OnceCell<Alignment>,
}

impl Pair {
    /// Reads both questions.
    pub fn new(cached: &str, asked: &str) -> Self {
        let lexicon = Lexicon::get();
        let (a, b) = (Reading::new(cached, lexicon), Reading::new(asked, lexicon));
        let optional = (optional(&a, &b), optional(&b, &a));
        Pair { a, b, optional, lexicon, alignment: OnceCell::new() }
    }

    /// How the content words pair up ([`crate::align`]).
    pub fn alignment(&self) -> &Alignment {
        self.alignment.get_or_init(|| {
            align(&self.a.content, &self.b.content, (&self.optional.0, &self.optional.1), self.lexicon)
        })
    }

    /// Whether both questions compare things, which makes their word order free (`A vs B` asks what
    /// `how do B and A differ` asks).
    pub fn both_compare(&self) -> bool {
        self.a.compares && self.b.compares
    }
}
