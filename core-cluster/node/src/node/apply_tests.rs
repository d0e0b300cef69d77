//! The rules of every command, over the in-memory tables.

use super::*;
use crate::node::memory_tables::Memory;
use crate::node::types::{Prompt, TenantPolicy};
use shared::completion::CachedCompletion;
use shared::normalize::{ChatRole, Message, Sampling};

fn entry(key: &str, tenant: &str, version: u64, content: &str) -> CachedCompletion {
    CachedCompletion {
        tenant: tenant.into(),
        model_version: version,
        ..CachedCompletion::example(key, content)
    }
}

fn put(key: &str, tenant: &str, version: u64) -> Command {
    let prompt = Prompt {
        messages: vec![Message { role: ChatRole::User, content: format!("q {key}") }],
        sampling: Sampling::greedy(8),
        tags: Vec::new(),
    };
    Command::Put {
        entry: entry(key, tenant, version, "answer"),
        content_class: "default".into(),
        prompt: Some(prompt),
    }
}

fn req(id: &str, command: Command) -> Request {
    Request { id: id.into(), command }
}

fn one(tables: &mut Memory, clock: i64, request: Request) -> Applied {
    let mut applied = apply_proposal(tables, 1, clock, &[request]).expect("in memory");
    applied.remove(0)
}

fn seeded() -> Memory {
    let mut t = Memory::default();
    let setup = [
        req("", Command::RegisterModel { model: "m".into(), version: 1, spec: None }),
        req("", Command::SetTenantPolicy { tenant: "a".into(), policy: TenantPolicy::default() }),
        req("", Command::SetTenantPolicy { tenant: "b".into(), policy: TenantPolicy::default() }),
    ];
    apply_proposal(&mut t, 1, 1, &setup).expect("in memory");
    t
}

fn live(t: &mut Memory, key: &str, now: i64) -> bool {
    let Some(stored) = t.entries.get(key).cloned() else { return false };
    let tenant = t.tenants.get(&stored.entry.tenant).cloned();
    let model = t.models.get(&stored.entry.model).cloned();
    stored.is_live(tenant.as_ref(), model.as_ref(), now)
}

#[test]
fn a_put_sees_the_tenant_as_written_earlier_in_its_proposal() {
    let mut t = seeded();
    let strict = TenantPolicy { max_value_bytes: 3, ..TenantPolicy::default() };
    let requests = [
        req("", Command::SetTenantPolicy { tenant: "a".into(), policy: strict }),
        req("", put("k1", "a", 1)),
        req("", Command::Invalidate { scope: InvalidateScope::Tenant { tenant: "b".into() } }),
        req("", put("k2", "b", 1)),
    ];
    let applied = apply_proposal(&mut t, 2, 2, &requests).expect("in memory");
    assert!(
        matches!(&applied[1].outcome, Outcome::Rejected { reason: Rejection::ValueTooLarge, .. }),
        "the stricter policy applies to the put after it: {applied:?}"
    );
    let stored = t.entry("k2").expect("in memory").expect("stored");
    let tenant = t.tenant("b").expect("in memory").expect("known");
    assert_eq!((stored.tenant_epoch, tenant.epoch), (1, 1), "the put carries the epoch raised before it");
}

#[test]
fn puts_take_the_leader_clock_and_dedupe_by_request_id() {
    let mut t = seeded();
    let first = one(&mut t, 1000, req("r1", put("k1", "a", 1)));
    assert!(matches!(first.outcome, Outcome::Stored { created_ms: 1000, .. }));
    assert!(!first.duplicate);
    let again = one(&mut t, 2000, req("r1", put("k1", "a", 1)));
    assert!(again.duplicate);
    assert_eq!(again.outcome, first.outcome);
    assert_eq!(t.entries["k1"].entry.created_ms, 1000);
}

#[test]
fn rejects_unknown_tenants_models_versions_and_big_values() {
    let mut t = seeded();
    let reason = |a: Applied| match a.outcome {
        Outcome::Rejected { reason, .. } => Some(reason),
        _ => None,
    };
    assert_eq!(reason(one(&mut t, 5, req("", put("k", "nobody", 1)))), Some(Rejection::UnknownTenant));
    let mut other_model = put("k", "a", 1);
    if let Command::Put { entry, .. } = &mut other_model {
        entry.model = "x".into();
    }
    assert_eq!(reason(one(&mut t, 5, req("", other_model))), Some(Rejection::UnknownModel));
    assert_eq!(reason(one(&mut t, 5, req("", put("k", "a", 2)))), Some(Rejection::Conflict));
    let small = TenantPolicy { max_value_bytes: 3, ..Default::default() };
    one(&mut t, 5, req("", Command::SetTenantPolicy { tenant: "a".into(), policy: small }));
    assert_eq!(reason(one(&mut t, 5, req("", put("k", "a", 1)))), Some(Rejection::ValueTooLarge));
    assert!(t.entries.is_empty(), "nothing stored by a rejected put");
}

#[test]
fn ttl_comes_from_the_policy_and_expiry_from_the_put_clock() {
    let mut t = seeded();
    let policy = TenantPolicy { default_ttl_s: 10, max_ttl_s: 60, ..Default::default() };
    one(&mut t, 5, req("", Command::SetTenantPolicy { tenant: "a".into(), policy }));
    one(&mut t, 1_000, req("", put("k", "a", 1)));
    assert_eq!(t.entries["k"].entry.ttl_s, 10);
    assert!(live(&mut t, "k", 10_999));
    assert!(!live(&mut t, "k", 11_000));
    let mut long = put("k2", "a", 1);
    if let Command::Put { entry, .. } = &mut long {
        entry.ttl_s = 3600;
    }
    one(&mut t, 1_000, req("", long));
    assert_eq!(t.entries["k2"].entry.ttl_s, 60);
}

#[test]
fn invalidation_by_key_tenant_and_model_version() {
    let mut t = seeded();
    for (k, tenant) in [("k1", "a"), ("k2", "a"), ("k3", "b")] {
        one(&mut t, 10, req("", put(k, tenant, 1)));
    }
    let wrong = one(
        &mut t,
        11,
        req("", Command::Invalidate { scope: InvalidateScope::Key { tenant: "b".into(), key: "k1".into() } }),
    );
    // Indistinguishable from a key nobody holds, and the owner's entry stays.
    assert!(matches!(wrong.outcome, Outcome::Invalidated { removed: 0, .. }), "{:?}", wrong.outcome);
    assert!(t.entries.contains_key("k1"));
    let absent = one(
        &mut t,
        11,
        req("", Command::Invalidate { scope: InvalidateScope::Key { tenant: "b".into(), key: "k9".into() } }),
    );
    assert!(matches!(absent.outcome, Outcome::Invalidated { removed: 0, .. }));
    one(
        &mut t,
        11,
        req("", Command::Invalidate { scope: InvalidateScope::Key { tenant: "a".into(), key: "k1".into() } }),
    );
    assert!(!t.entries.contains_key("k1"));
    one(&mut t, 12, req("", Command::Invalidate { scope: InvalidateScope::Tenant { tenant: "a".into() } }));
    assert!(!live(&mut t, "k2", 13));
    assert!(live(&mut t, "k3", 13));
    one(&mut t, 14, req("", put("k2", "a", 1)));
    assert!(live(&mut t, "k2", 15), "a put after the invalidation is live");
    one(
        &mut t,
        16,
        req(
            "",
            Command::Invalidate { scope: InvalidateScope::ModelVersion { model: "m".into(), version: 1 } },
        ),
    );
    assert!(!live(&mut t, "k2", 17) && !live(&mut t, "k3", 17));
}

/// A put of `key` for tenant `a` carrying `tags`, with its prompt.
fn tagged_put(key: &str, tags: &[&str]) -> Command {
    let tags: Vec<String> = tags.iter().map(|t| (*t).to_owned()).collect();
    let Command::Put { entry, content_class, prompt } = put(key, "a", 1) else { unreachable!("a put") };
    let prompt = prompt.map(|p| Prompt { tags: tags.clone(), ..p });
    Command::Put { entry: CachedCompletion { tags, ..entry }, content_class, prompt }
}

fn tag(tenant: &str, tag: &str, refresh: bool) -> Command {
    Command::Invalidate { scope: InvalidateScope::Tag { tenant: tenant.into(), tag: tag.into(), refresh } }
}

#[test]
fn a_tag_invalidation_kills_its_tenants_tagged_entries_and_lists_the_hottest_to_refresh() {
    let mut t = seeded();
    one(&mut t, 1, req("", tagged_put("k1", &["news", "stock:AAPL"])));
    one(&mut t, 1, req("", tagged_put("k2", &["stock:AAPL"])));
    one(&mut t, 1, req("", tagged_put("k3", &["stock:MSFT"])));
    one(&mut t, 1, req("", put("k4", "a", 1)));
    one(&mut t, 1, req("", Command::RecordHits { hits: vec![("k2".into(), 40), ("k1".into(), 3)] }));
    let (outcome, changes) = fed(&mut t, 2, tag("a", "stock:AAPL", true));
    let Outcome::Invalidated { removed: 0, at_ms: 2, refresh } = outcome else { panic!("{outcome:?}") };
    let order: Vec<&str> = refresh.iter().map(|j| j.prompt.messages[0].content.as_str()).collect();
    assert_eq!(order, ["q k2", "q k1"], "the tag's live entries, hottest first");
    assert!(refresh
        .iter()
        .all(|j| j.model == "m" && j.model_version == 1 && j.prompt.tags.contains(&"stock:AAPL".into())));
    assert_eq!(changes, [Change::Tag { tenant: "a".into(), tag: "stock:AAPL".into() }]);
    assert!(!live(&mut t, "k1", 3) && !live(&mut t, "k2", 3));
    assert!(live(&mut t, "k3", 3) && live(&mut t, "k4", 3), "another tag's and an untagged entry stay");
    one(&mut t, 3, req("", tagged_put("k2", &["stock:AAPL"])));
    assert!(live(&mut t, "k2", 4), "a put after the invalidation is live");
    let (again, _) = fed(&mut t, 5, tag("a", "stock:AAPL", false));
    assert!(matches!(again, Outcome::Invalidated { ref refresh, .. } if refresh.is_empty()), "{again:?}");
    let (unknown, _) = fed(&mut t, 6, tag("nobody", "stock:AAPL", false));
    assert!(matches!(unknown, Outcome::Rejected { reason: Rejection::UnknownTenant, .. }));
    // Tenant b's tag of the same name is b's own: a's entry carrying it stays.
    fed(&mut t, 8, tag("b", "stock:MSFT", false));
    assert!(live(&mut t, "k3", 9));
}

#[test]
fn a_version_bump_stales_everything_and_lists_the_hottest_prompts() {
    let mut t = seeded();
    for k in ["k1", "k2", "k3"] {
        one(&mut t, 10, req("", put(k, "a", 1)));
    }
    one(
        &mut t,
        11,
        req("", Command::RecordHits { hits: vec![("k2".into(), 50), ("k3".into(), 5), ("gone".into(), 9)] }),
    );
    let bump = one(
        &mut t,
        12,
        req("", Command::BumpModelVersion { model: "m".into(), version: 0, canary_percent: 0 }),
    );
    let Outcome::ModelVersion { previous, version, refresh, .. } = bump.outcome else {
        panic!("bump failed: {bump:?}");
    };
    assert_eq!((previous, version), (1, 2));
    let order: Vec<&str> = refresh.iter().map(|j| j.prompt.messages[0].content.as_str()).collect();
    assert_eq!(order, vec!["q k2", "q k3", "q k1"]);
    assert!(!live(&mut t, "k1", 13));
    let stale = one(&mut t, 13, req("", put("k9", "a", 1)));
    assert!(matches!(stale.outcome, Outcome::Rejected { reason: Rejection::StaleModelVersion, .. }));
    let back = one(
        &mut t,
        13,
        req("", Command::BumpModelVersion { model: "m".into(), version: 2, canary_percent: 0 }),
    );
    assert!(matches!(back.outcome, Outcome::Rejected { reason: Rejection::Conflict, .. }));
}

/// Applies `command` alone at log index `index`; its outcome and the changes it fed.
fn fed(t: &mut Memory, index: u64, command: Command) -> (Outcome, Vec<Change>) {
    let mut applied = apply_proposal(t, index, index as i64, &[req("", command)]).expect("in memory");
    let changes = t.feed.get(&index).map(|row| row.changes.clone()).unwrap_or_default();
    (applied.remove(0).outcome, changes)
}

#[test]
fn a_spec_is_registered_replaced_at_any_version_and_fed_only_when_it_changes() {
    let mut t = seeded();
    let spec = |context_length| shared::model_spec::ModelSpec { context_length, ..Default::default() };
    let register = |model: &str, version, spec| Command::RegisterModel { model: model.into(), version, spec };
    let (outcome, changes) = fed(&mut t, 2, register("m", 0, Some(spec(4096))));
    assert!(matches!(outcome, Outcome::ModelRegistered { version: 1, .. }), "{outcome:?}");
    assert_eq!(changes, [Change::ModelSpec { model: "m".into(), spec: spec(4096) }]);
    assert_eq!(t.models["m"].spec, Some(spec(4096)));
    assert_eq!(fed(&mut t, 3, register("m", 1, Some(spec(4096)))).1, [], "the same spec changes nothing");
    assert_eq!(fed(&mut t, 4, register("m", 1, None)).1, []);
    assert_eq!(t.models["m"].spec, Some(spec(4096)), "no spec keeps the registry's");
    let conflict = |o: &Outcome| matches!(o, Outcome::Rejected { reason: Rejection::Conflict, .. });
    assert!(conflict(&fed(&mut t, 5, register("m", 7, Some(spec(1)))).0), "another version");
    assert!(conflict(&fed(&mut t, 6, register("new", 0, Some(spec(1)))).0), "no version to describe");
    let (_, changes) = fed(&mut t, 7, register("new", 2, Some(spec(1))));
    assert_eq!(changes.len(), 2, "a new model's version and spec: {changes:?}");
}

fn canary(percent: u8) -> Command {
    Command::BumpModelVersion { model: "m".into(), version: 0, canary_percent: percent }
}

fn end(promote: bool) -> Command {
    Command::EndCanary { model: "m".into(), promote }
}

#[test]
fn a_canary_serves_beside_the_current_version_until_it_is_rolled_back_or_promoted() {
    let mut t = seeded();
    one(&mut t, 1, req("", put("k1", "a", 1)));
    let (started, changes) = fed(&mut t, 2, canary(20));
    assert!(
        matches!(started, Outcome::CanaryStarted { current: 1, version: 2, percent: 20, .. }),
        "{started:?}"
    );
    assert_eq!(changes, [Change::ModelCanary { model: "m".into(), version: 2, percent: 20 }]);
    let (second, _) = fed(&mut t, 3, canary(50));
    assert!(matches!(second, Outcome::Rejected { reason: Rejection::Conflict, .. }), "one trial at a time");
    one(&mut t, 4, req("", put("k2", "a", 2)));
    assert!(live(&mut t, "k1", 5) && live(&mut t, "k2", 5), "both arms are live");
    let three = one(&mut t, 5, req("", put("k3", "a", 3)));
    assert!(
        matches!(three.outcome, Outcome::Rejected { reason: Rejection::Conflict, .. }),
        "no other version"
    );

    let (rolled, changes) = fed(&mut t, 6, end(false));
    assert!(matches!(rolled, Outcome::CanaryEnded { version: 2, promoted: false, .. }), "{rolled:?}");
    assert_eq!(
        changes,
        [
            Change::ModelCanary { model: "m".into(), version: 2, percent: 0 },
            Change::ModelVersion { model: "m".into(), version: 2 },
        ]
    );
    assert!(
        !live(&mut t, "k2", 7) && live(&mut t, "k1", 7),
        "the trial's answers are gone, the current stay"
    );
    assert!(matches!(fed(&mut t, 8, end(true)).0, Outcome::Rejected { reason: Rejection::Conflict, .. }));
    // A rolled-back version's number is never used again, so its answers never come back.
    let (again, _) = fed(&mut t, 9, canary(50));
    assert!(matches!(again, Outcome::CanaryStarted { version: 3, .. }), "{again:?}");
    let reused =
        fed(&mut t, 10, Command::BumpModelVersion { model: "m".into(), version: 2, canary_percent: 0 });
    assert!(matches!(reused.0, Outcome::Rejected { reason: Rejection::Conflict, .. }));

    one(&mut t, 11, req("", put("k3", "a", 3)));
    let (promoted, changes) = fed(&mut t, 12, end(true));
    let Outcome::CanaryEnded { version: 3, promoted: true, refresh, .. } = promoted else {
        panic!("{promoted:?}")
    };
    assert_eq!(refresh.len(), 1, "the old version's live prompt (k1), not the trial's own (k3)");
    assert_eq!(changes[1], Change::ModelCurrent { model: "m".into(), version: 3 });
    assert!(live(&mut t, "k3", 13), "the trial's answers stay live once promoted");
    assert!(!live(&mut t, "k1", 13), "the old version's go stale");
}
