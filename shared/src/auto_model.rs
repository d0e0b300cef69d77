//! `model: "auto"`: the mesh picks the model per request.
//!
//! Every tier resolves `auto` to one [`ModelRef`] whose version is the sum of the served models'
//! current versions ([`auto_version`]): it moves forward whenever any model is bumped or added, so an
//! auto answer's key changes with the models that could have produced it, and a tier that is behind
//! learns it as it learns any model's new version. The choice itself is the core's, which drives
//! inference; it stores the answer under the auto key with the producing model and version in the
//! entry (its `model` field, which every tier's model cutoffs check).
//!
//! The rule ([`plan`]) is pure and the same wherever it runs:
//! - the candidates are a ladder, cheapest first (the registry's prices, or the operator's order);
//! - a request's estimated complexity ([`complexity`], from 0 to 1) picks the rung it starts on: an
//!   easy request starts on the cheapest model, a hard one higher up;
//! - a time-sensitive request (the content class `realtime`) is answered by the cheapest model alone;
//! - a request whose estimated price ([`estimated_cost`]) on a model is over its budget never goes to
//!   that model;
//! - the cascade: each rung but the last answers first, and the request climbs one rung when that
//!   answer's confidence ([`confidence`], the geometric mean of its tokens' probabilities) is below the
//!   threshold.

use crate::model_spec::ModelSpec;
use crate::models::ModelRef;
use crate::normalize::{ChatRole, Message};

/// The model name that asks the mesh to choose.
pub const AUTO_MODEL: &str = "auto";

/// The most rungs a cascade climbs (each rung but the last is a whole generation before the answer).
pub const MAX_RUNGS: usize = 3;

/// The version `auto` resolves to at a tier serving `models`: the sum of their current versions.
///
/// Versions only move forward and models are only added, so the sum grows with every change of the
/// table and two tables a tier holds at different times never share it.
pub fn auto_version(models: &[ModelRef]) -> u64 {
    models.iter().fold(0u64, |sum, m| sum.saturating_add(m.version))
}

/// One model the rule may choose.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The model at its current version.
    pub model: ModelRef,
    /// Its prices, when the registry gives them.
    pub spec: Option<ModelSpec>,
}

impl Candidate {
    fn output_price(&self) -> u64 {
        self.spec.as_ref().map_or(0, |s| s.output_micro_usd_per_mtok)
    }

    fn input_price(&self) -> u64 {
        self.spec.as_ref().map_or(0, |s| s.input_micro_usd_per_mtok)
    }
}

/// Orders `candidates` cheapest first: by output price, then input price; models the registry gives no
/// price keep their given order among themselves (a stable sort).
pub fn ladder(mut candidates: Vec<Candidate>) -> Vec<Candidate> {
    candidates.sort_by_key(|c| (c.output_price(), c.input_price()));
    candidates
}

/// What the rule is asked about one request.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    /// The conversation.
    pub messages: &'a [Message],
    /// The request's `max_tokens`.
    pub max_tokens: u32,
    /// Whether the answer is time-sensitive (content class `realtime`).
    pub time_sensitive: bool,
    /// The most the request may cost, in micro-dollars; `None` for no limit.
    pub budget_micro_usd: Option<u64>,
}

/// The models one request tries, in order, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Each rung: the first answers, each later one only when the one before was not confident.
    pub rungs: Vec<ModelRef>,
    /// The estimated complexity, 0 to 1.
    pub complexity: f32,
    /// Why the plan starts where it does (for logs and headers).
    pub reason: &'static str,
}

/// The rule: the rungs `ask` climbs on `ladder` (cheapest first, as [`ladder`] orders it). Empty when
/// no candidate is within the budget.
pub fn plan(ladder: &[Candidate], ask: &Ask<'_>) -> Plan {
    let complexity = complexity(ask.messages, ask.max_tokens);
    let affordable: Vec<&Candidate> = ladder
        .iter()
        .filter(|c| ask.budget_micro_usd.is_none_or(|budget| estimated_cost(c, ask) <= budget))
        .collect();
    if affordable.is_empty() {
        return Plan { rungs: Vec::new(), complexity, reason: "over budget" };
    }
    let (start, reason) = if ask.time_sensitive {
        (0, "time-sensitive")
    } else {
        // Rung k of n covers complexities [k/n, (k+1)/n).
        let n = affordable.len();
        let start = ((complexity * n as f32) as usize).min(n - 1);
        (start, if start == 0 { "simple" } else { "complex" })
    };
    let end = match ask.time_sensitive {
        true => start + 1,
        false => (start + MAX_RUNGS).min(affordable.len()),
    };
    let rungs = affordable[start..end].iter().map(|c| c.model.clone()).collect();
    Plan { rungs, complexity, reason }
}

/// A request's price on `candidate` at most: its prompt (about 4 bytes a token) and `max_tokens`
/// generated tokens, in micro-dollars.
pub fn estimated_cost(candidate: &Candidate, ask: &Ask<'_>) -> u64 {
    let prompt_bytes: usize = ask.messages.iter().map(|m| m.content.len()).sum();
    let prompt_tokens = (prompt_bytes as u64).div_ceil(4);
    let cost = u128::from(prompt_tokens) * u128::from(candidate.input_price())
        + u128::from(ask.max_tokens) * u128::from(candidate.output_price());
    u64::try_from(cost.div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// Words that ask for reasoning, explanation or construction rather than a fact.
const REASONING_CUES: &[&str] = &[
    "explain",
    "why",
    "how",
    "compare",
    "contrast",
    "prove",
    "derive",
    "analyze",
    "analyse",
    "evaluate",
    "design",
    "implement",
    "write",
    "step",
    "steps",
    "reason",
    "justify",
    "summarize",
    "summarise",
    "translate",
    "debug",
    "optimize",
    "optimise",
    "refactor",
    "plan",
    "argue",
    "discuss",
    "describe",
];

/// How hard `messages` look to answer, from 0 (a short factual question) to 1, from what any tier can
/// see without a model: the length of the last user turn, cues that ask for reasoning, code, several
/// numbers and operators, the turns before it, and a long answer asked for.
pub fn complexity(messages: &[Message], max_tokens: u32) -> f32 {
    let last = messages.iter().rev().find(|m| m.role == ChatRole::User).map_or("", |m| m.content.as_str());
    let words: Vec<String> =
        last.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect();
    // Length: nothing up to 12 words, all of it from about 200.
    let length =
        (((words.len() as f32 + 1.0).ln() - 13f32.ln()) / (201f32.ln() - 13f32.ln())).clamp(0.0, 1.0);
    let cues = words.iter().filter(|w| REASONING_CUES.contains(&w.as_str())).count();
    let reasoning = (cues as f32 / 2.0).min(1.0);
    let code =
        ["```", "fn ", "def ", "class ", "#include", "=>", "();", "{\n"].iter().any(|m| last.contains(m));
    let numbers = words.iter().filter(|w| w.chars().all(|c| c.is_ascii_digit())).count();
    let operators = last.chars().filter(|c| matches!(c, '+' | '*' | '/' | '^' | '=' | '%')).count();
    let arithmetic = ((numbers.saturating_sub(2) + operators.saturating_sub(1)) as f32 / 4.0).min(1.0);
    let earlier_turns = messages.iter().filter(|m| m.role != ChatRole::System).count().saturating_sub(1);
    let context = (earlier_turns as f32 / 6.0).min(1.0);
    let long_answer = ((max_tokens as f32 - 256.0) / 768.0).clamp(0.0, 1.0);
    let score = 0.35 * length
        + 0.3 * reasoning
        + if code { 0.3 } else { 0.0 }
        + 0.2 * arithmetic
        + 0.1 * context
        + 0.15 * long_answer;
    score.clamp(0.0, 1.0)
}

/// An answer's confidence from its tokens' log-probabilities: the geometric mean of their
/// probabilities, from 0 to 1. `None` for an answer of no tokens (nothing to judge) or a log-probability
/// that is not a number.
pub fn confidence(logprobs: &[f32]) -> Option<f32> {
    if logprobs.is_empty() || logprobs.iter().any(|l| !l.is_finite() && *l != f32::NEG_INFINITY) {
        return None;
    }
    let mean = logprobs.iter().map(|&l| f64::from(l)).sum::<f64>() / logprobs.len() as f64;
    Some(mean.exp().clamp(0.0, 1.0) as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Vec<Message> {
        vec![Message { role: ChatRole::User, content: text.to_owned() }]
    }

    fn candidate(name: &str, output_price: u64) -> Candidate {
        let spec = ModelSpec {
            input_micro_usd_per_mtok: output_price / 4,
            output_micro_usd_per_mtok: output_price,
            ..ModelSpec::default()
        };
        Candidate { model: ModelRef { name: name.into(), version: 1 }, spec: Some(spec) }
    }

    fn ask(messages: &[Message]) -> Ask<'_> {
        Ask { messages, max_tokens: 64, time_sensitive: false, budget_micro_usd: None }
    }

    fn names(plan: &Plan) -> Vec<&str> {
        plan.rungs.iter().map(|m| m.name.as_str()).collect()
    }

    #[test]
    fn the_version_grows_with_every_bump_and_new_model() {
        let table = |versions: &[u64]| -> Vec<ModelRef> {
            versions
                .iter()
                .enumerate()
                .map(|(i, &v)| ModelRef { name: format!("m{i}"), version: v })
                .collect()
        };
        assert_eq!(auto_version(&table(&[1, 1])), 2);
        assert!(auto_version(&table(&[2, 1])) > auto_version(&table(&[1, 1])), "a bump");
        assert!(auto_version(&table(&[1, 1, 1])) > auto_version(&table(&[1, 1])), "a new model");
    }

    #[test]
    fn the_ladder_is_cheapest_first_and_keeps_the_order_of_unpriced_models() {
        let unpriced =
            |name: &str| Candidate { model: ModelRef { name: name.into(), version: 1 }, spec: None };
        let ordered =
            ladder(vec![candidate("big", 900), candidate("small", 100), unpriced("b"), unpriced("a")]);
        let names: Vec<&str> = ordered.iter().map(|c| c.model.name.as_str()).collect();
        assert_eq!(names, ["b", "a", "small", "big"]);
    }

    #[test]
    fn a_short_fact_starts_small_and_a_hard_task_starts_large() {
        let ladder = [candidate("small", 100), candidate("large", 1000)];
        let simple = user("What is the capital of France?");
        let simple_plan = plan(&ladder, &ask(&simple));
        assert_eq!(names(&simple_plan), ["small", "large"], "cascade from the small model");
        assert_eq!(simple_plan.reason, "simple");

        let hard = user(
            "Explain step by step why the following Rust function deadlocks when two threads call it, \
             compare it with a version that takes the locks in a fixed order, and write the fixed code:\n\
             ```\nfn transfer(a: &Mutex<u64>, b: &Mutex<u64>) { let x = a.lock(); let y = b.lock(); }\n```",
        );
        let hard_plan = plan(&ladder, &ask(&hard));
        assert!(hard_plan.complexity >= 0.5, "{}", hard_plan.complexity);
        assert_eq!(names(&hard_plan), ["large"]);
    }

    #[test]
    fn time_sensitive_requests_take_the_cheapest_model_alone() {
        let ladder = [candidate("small", 100), candidate("large", 1000)];
        let messages = user("What is the price of gold right now?");
        let plan = plan(&ladder, &Ask { time_sensitive: true, ..ask(&messages) });
        assert_eq!((names(&plan), plan.reason), (vec!["small"], "time-sensitive"));
    }

    #[test]
    fn a_budget_leaves_out_the_models_it_cannot_pay_for() {
        let ladder = [candidate("small", 1_000_000), candidate("large", 100_000_000)];
        let messages = user("What is 2 plus 2?");
        // 64 tokens: 64 micro-dollars on the small model, 6,400 on the large one.
        let capped = plan(&ladder, &Ask { budget_micro_usd: Some(1_000), ..ask(&messages) });
        assert_eq!(names(&capped), ["small"]);
        let broke = plan(&ladder, &Ask { budget_micro_usd: Some(1), ..ask(&messages) });
        assert!(broke.rungs.is_empty());
        assert_eq!(broke.reason, "over budget");
    }

    #[test]
    fn complexity_grows_with_what_a_request_asks_for() {
        let fact = complexity(&user("What is the capital of Peru?"), 32);
        let why = complexity(&user("Why is the sky blue? Explain how scattering works."), 32);
        let sum = complexity(&user("What is 17 * 23 + 4 * 9 - 12 / 3?"), 32);
        assert!(fact < 0.2, "{fact}");
        assert!(why > fact && sum > fact, "{fact} {why} {sum}");
        assert!(complexity(&user("What is the capital of Peru?"), 1024) > fact, "a long answer asked for");
    }

    #[test]
    fn confidence_is_the_geometric_mean_probability() {
        let half = 0.5f32.ln();
        assert!((confidence(&[half, half]).expect("tokens") - 0.5).abs() < 1e-6);
        assert!((confidence(&[0.0, 0.25f32.ln()]).expect("tokens") - 0.5).abs() < 1e-6);
        assert_eq!(confidence(&[]), None);
        assert_eq!(confidence(&[f32::NAN]), None);
        assert_eq!(confidence(&[f32::NEG_INFINITY]), Some(0.0));
    }
}
