use proptest::prelude::*;

use super::*;

pub(crate) fn answer(key: &str, content: &str, created_ms: i64) -> CachedCompletion {
    CachedCompletion {
        tenant: "acme".into(),
        prompt_tokens: 3,
        completion_tokens: 2,
        created_ms,
        ..CachedCompletion::example(key, content)
    }
}

fn tombstone() -> Value {
    Value::Tombstone(Tombstone { tenant: "acme".into(), invalidated_ms: 5, covers_until_ms: None })
}

fn clock(dots: &[(&str, u64)]) -> Clock {
    let mut clock = Clock::new();
    for (actor, counter) in dots {
        clock.dots.insert((*actor).to_owned(), *counter);
    }
    clock
}

fn live(content: &str, created_ms: i64) -> Value {
    Value::Live(answer("k", content, created_ms))
}

#[test]
fn a_write_supersedes_everything_it_saw() {
    let mut record = Record::default();
    record.write("a", live("one", 1));
    let first = record.clone();
    record.write("b", live("two", 2));
    assert_eq!(record.versions().len(), 1);
    assert_eq!(record.clock(), clock(&[("a", 1), ("b", 1)]));
    let mut merged = record.clone();
    merged.merge(&first);
    assert_eq!(merged, record, "the older write changes nothing");
}

#[test]
fn concurrent_writes_are_both_kept_and_read_the_same_everywhere() {
    let mut at_a = Record::default();
    at_a.write("a", live("from a", 10));
    let mut at_b = Record::default();
    at_b.write("b", live("from b", 20));
    let mut left = at_a.clone();
    left.merge(&at_b);
    let mut right = at_b.clone();
    right.merge(&at_a);
    assert_eq!(left, right);
    assert_eq!(left.versions().len(), 2);
    match left.resolve() {
        Some(Resolved::Live(entry)) => assert_eq!(entry.content, "from b", "the newer answer is served"),
        other => panic!("expected a live answer, got {other:?}"),
    }
}

#[test]
fn an_invalidation_beats_a_concurrent_write_and_a_stale_one() {
    let mut base = Record::default();
    base.write("a", live("old", 1));
    let stale = base.clone();
    let mut invalidated = base.clone();
    invalidated.write("c", tombstone());
    let mut racing = base.clone();
    racing.write("a", live("rewritten in the partition", 2));

    let mut healed = invalidated.clone();
    healed.merge(&racing);
    healed.merge(&stale);
    assert_eq!(healed.resolve(), Some(Resolved::Invalidated));

    // A write that saw the invalidation brings the key back.
    healed.write("b", live("regenerated", 3));
    healed.merge(&invalidated);
    assert!(matches!(healed.resolve(), Some(Resolved::Live(e)) if e.content == "regenerated"));
}

#[test]
fn versions_a_collected_tombstone_saw_are_forgotten() {
    let mut record = Record::from_versions(vec![
        Version { clock: clock(&[("a", 1)]), value: live("stale", 1) },
        Version { clock: clock(&[("b", 1)]), value: live("newer", 2) },
    ]);
    assert!(record.forget_seen_by(&clock(&[("a", 2)])));
    assert_eq!(record.versions().len(), 1);
    assert!(!record.forget_seen_by(&clock(&[("a", 2)])));
}

#[test]
fn digests_tell_records_apart() {
    let mut one = Record::default();
    one.write("a", live("x", 1));
    let mut two = one.clone();
    assert_eq!(one.digest("k"), two.digest("k"));
    assert_ne!(one.digest("k"), one.digest("j"));
    two.write("a", live("x", 1));
    assert_ne!(one.digest("k"), two.digest("k"), "same value, later clock");
}

fn arb_clock() -> impl Strategy<Value = Clock> {
    proptest::collection::btree_map(prop_oneof![Just("a"), Just("b"), Just("c")], 1u64..4, 0..3).prop_map(
        |dots| {
            let mut clock = Clock::new();
            for (actor, counter) in dots {
                clock.dots.insert(actor.to_owned(), counter);
            }
            clock
        },
    )
}

fn arb_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0usize..3, 0i64..3).prop_map(|(content, created)| live(["p", "q", "r"][content], created)),
        (0i64..2).prop_map(|at| Value::Tombstone(Tombstone {
            tenant: "acme".into(),
            invalidated_ms: at,
            covers_until_ms: None
        })),
    ]
}

pub(crate) fn arb_record() -> impl Strategy<Value = Record> {
    proptest::collection::vec((arb_clock(), arb_value()), 0..4).prop_map(|versions| {
        Record::from_versions(versions.into_iter().map(|(clock, value)| Version { clock, value }).collect())
    })
}

fn merged(a: &Record, b: &Record) -> Record {
    let mut out = a.clone();
    out.merge(b);
    out
}

proptest! {
    #[test]
    fn merge_is_commutative(a in arb_record(), b in arb_record()) {
        prop_assert_eq!(merged(&a, &b), merged(&b, &a));
    }

    #[test]
    fn merge_is_associative(a in arb_record(), b in arb_record(), c in arb_record()) {
        prop_assert_eq!(merged(&merged(&a, &b), &c), merged(&a, &merged(&b, &c)));
    }

    #[test]
    fn merge_is_idempotent(a in arb_record(), b in arb_record()) {
        prop_assert_eq!(merged(&a, &a), a.clone());
        let once = merged(&a, &b);
        prop_assert_eq!(merged(&once, &b), once);
    }

    #[test]
    fn a_write_dominates_its_inputs(a in arb_record(), b in arb_record(), invalidate in any::<bool>()) {
        let mut written = merged(&a, &b);
        let value = if invalidate { tombstone() } else { live("w", 9) };
        written.write("a", value);
        prop_assert_eq!(merged(&written, &a), written.clone());
        prop_assert_eq!(merged(&written, &b), written.clone());
        prop_assert_eq!(written.is_tombstone(), invalidate);
    }
}
