//! The verifier's tests through [`verify`]: the case table (`data/cases.tsv`, one row per example,
//! walked rule by rule), the labelled set `data/semantic_pairs.jsonl` as a regression gate (the
//! `semantic-eval` command of `regional-node` prints the full precision/recall table on every
//! labelled set), and the few examples that are not a simple pair.

use std::collections::BTreeMap;

use super::*;
use crate::rules::is_nominalized;

/// One row of `data/cases.tsv`.
pub(crate) struct Case {
    /// The rule the row is an example of.
    pub rule: Rule,
    /// The cached question.
    pub a: String,
    /// The question asked.
    pub b: String,
    /// `None` for a hit, the refusing rule otherwise.
    pub expect: Option<Rule>,
    /// The row's line in the file.
    pub line: usize,
}

/// The case table: `rule`, `a`, `b`, `expect` (`hit` or the refusing rule's name), tab-separated,
/// after a header line; `#` starts a comment line.
pub(crate) fn cases() -> Vec<Case> {
    let table = include_str!("../data/cases.tsv");
    let rule = |name: &str, line: usize| {
        Rule::named(name).unwrap_or_else(|| panic!("line {line}: no rule {name:?}"))
    };
    table
        .lines()
        .enumerate()
        .skip(1)
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|(i, l)| {
            let line = i + 1;
            let [name, a, b, expect] = l.split('\t').collect::<Vec<_>>()[..] else {
                panic!("line {line}: four tab-separated columns expected: {l:?}")
            };
            let expect = (expect != "hit").then(|| rule(expect, line));
            Case { rule: rule(name, line), a: a.into(), b: b.into(), expect, line }
        })
        .collect()
}

#[test]
fn every_case_in_the_table_gets_its_verdict_both_ways() {
    let mut failures: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for case in cases() {
        *counts.entry(case.rule.name()).or_default() += 1;
        let forward = verify(&case.a, &case.b);
        let backward = verify(&case.b, &case.a);
        let got = forward.as_ref().err().map(|why| why.rule);
        let mut fail = |what: String| failures.entry(case.rule.name()).or_default().push(what);
        if got != case.expect {
            let expected = case.expect.map_or("hit", Rule::name);
            fail(format!(
                "line {}: {:?} / {:?}: expected {expected}, got {forward:?}",
                case.line, case.a, case.b
            ));
        }
        if forward.is_ok() != backward.is_ok() {
            fail(format!("line {}: {:?} / {:?}: not symmetric ({backward:?})", case.line, case.b, case.a));
        }
    }
    for (rule, count) in &counts {
        let failed = failures.get(rule).map_or(0, Vec::len);
        eprintln!("{rule:>12}: {} of {count} cases pass", count - failed);
    }
    let report: Vec<String> =
        failures.iter().map(|(rule, fails)| format!("{rule}:\n  {}", fails.join("\n  "))).collect();
    assert!(failures.is_empty(), "cases that fail, by rule:\n{}", report.join("\n"));
}

#[test]
fn every_rule_has_cases_that_hit_and_cases_it_refuses() {
    let cases = cases();
    for rule in Rule::all() {
        let refused = cases.iter().any(|c| c.rule == rule && c.expect == Some(rule));
        let hit = cases.iter().any(|c| c.rule == rule && c.expect.is_none());
        assert!(refused && hit, "{rule}: a case it refuses {refused}, a case that hits {hit}");
    }
}

#[test]
fn a_refusal_names_its_rule_and_what_differs() {
    let why = verify("Is it legal to drive at 16 in Texas?", "Is it illegal to drive at 16 in Texas?");
    assert_eq!(why, Err(NearMiss::new(Rule::Antonym, "legal vs illegal")));
    let why = verify("Write a sorting function in Python", "Write a sorting function in Java");
    assert_eq!(why.map_err(|w| w.to_string()), Err("substitution: python vs java".to_string()));
    let why = verify("Can I use Python on Windows?", "Can't I use Python on Windows?");
    assert_eq!(why.map_err(|w| w.rule), Err(Rule::Negation));
    assert!(Rule::all().all(|rule| Rule::named(rule.name()) == Some(rule)));
}

#[test]
fn a_verb_and_a_noun_made_of_it_are_told_apart() {
    assert!(is_nominalized("ironing", "iron") && is_nominalized("invented", "inventor"));
    assert!(is_nominalized("author", "wrote") && !is_nominalized("author", "writer"));
    assert!(!is_nominalized("water", "water") && !is_nominalized("germany", "poland"));
}

/// The labelled pair set, as a regression guard for the verifier on its own (no embedding): it
/// must keep refusing near misses.
#[test]
fn the_verifier_alone_keeps_its_precision_on_the_labelled_pairs() {
    let pairs = include_str!("../data/semantic_pairs.jsonl");
    let (mut served, mut wrong, mut hits, mut labelled_hits) = (0usize, 0usize, 0usize, 0usize);
    for line in pairs.lines().filter(|l| !l.trim().is_empty()) {
        let pair: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        let text = |key: &str| pair[key].as_str().expect("a string field").to_string();
        let should_hit = text("label") == "hit";
        labelled_hits += usize::from(should_hit);
        if verify(&text("a"), &text("b")).is_ok() {
            served += 1;
            if should_hit {
                hits += 1;
            } else {
                wrong += 1;
            }
        }
    }
    let precision = hits as f64 / served as f64;
    let recall = hits as f64 / labelled_hits as f64;
    eprintln!("verifier alone: precision {precision:.3} ({wrong} wrong of {served}), recall {recall:.3}");
    assert!(precision >= 0.99, "precision {precision:.3}");
    assert!(recall >= 0.35, "recall {recall:.3}");
}
