//! Three replicas of the sled state machine apply one random log, each in its own batches and with its
//! own local events in between (snapshots built and installed, crashes that roll back to an older
//! snapshot and apply again, a peer's snapshot installed instead of the log). After every round the full
//! states (entries, dead or alive, tenants, models with their hot summaries, request ids, the change
//! feed and the clock) are equal, and no sweep ever removed an entry that was live at its log time.
//!
//! The log mixes TTLs, version bumps, hit records, puts over dead keys, retried request ids (some past
//! their retention), leader clocks that jump back and far ahead, and sweeps that list random keys.

// openraft's storage error is large, and every trait method returns it.
#![allow(clippy::result_large_err)]

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot};
use proptest::prelude::*;
use shared::completion::CachedCompletion;

use super::apply::apply_proposal;
use super::memory_tables::Memory;
use super::state_machine::{PreviousStop, StateMachineStore};
use super::types::{Command, Entry, InvalidateScope, Proposal, Request, TenantPolicy, TypeConfig};

const KEYS: [&str; 5] = ["k0", "k1", "k2", "k3", "k4"];
const TENANTS: [&str; 2] = ["a", "b"];

/// One generated log entry, before it is stamped with an index and a clock.
#[derive(Clone, Debug)]
enum Op {
    Put { key: usize, tenant: usize, ttl_s: u64, stale: bool, id: Option<u8> },
    InvalidateKey { key: usize, tenant: usize },
    InvalidateTenant { tenant: usize },
    InvalidateVersion { back: u64 },
    Bump,
    Hits { key: usize, count: u32 },
    Policy { tenant: usize, default_ttl_s: u64, cache_sampled: bool },
    Sweep { keys: Vec<usize>, ids: Vec<u8>, feed: Vec<u64> },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..5usize, 0..2usize, prop_oneof![Just(0u64), 1..4u64, Just(3600)], prop::bool::weighted(0.1), prop::option::of(0..6u8))
            .prop_map(|(key, tenant, ttl_s, stale, id)| Op::Put { key, tenant, ttl_s, stale, id }),
        2 => (0..5usize, 0..2usize).prop_map(|(key, tenant)| Op::InvalidateKey { key, tenant }),
        1 => (0..2usize).prop_map(|tenant| Op::InvalidateTenant { tenant }),
        1 => (0..2u64).prop_map(|back| Op::InvalidateVersion { back }),
        1 => Just(Op::Bump),
        2 => (0..5usize, 1..20u32).prop_map(|(key, count)| Op::Hits { key, count }),
        1 => (0..2usize, prop_oneof![Just(0u64), 1..3u64], any::<bool>())
            .prop_map(|(tenant, default_ttl_s, cache_sampled)| Op::Policy { tenant, default_ttl_s, cache_sampled }),
        3 => (prop::collection::vec(0..5usize, 0..5), prop::collection::vec(0..6u8, 0..4), prop::collection::vec(1..60u64, 0..4))
            .prop_map(|(keys, ids, feed)| Op::Sweep { keys, ids, feed }),
    ]
}

/// How the leader's clock moves before an entry: mostly forward a little, sometimes back (a new leader
/// with a slower clock), sometimes far ahead (past request-id and feed retention).
fn clock_step() -> impl Strategy<Value = i64> {
    prop_oneof![8 => 0..2_500i64, 1 => -5_000..0i64, 1 => Just(11 * 60 * 1000), 1 => Just(2 * 3600 * 1000)]
}

/// What one replica does between two of its batches.
#[derive(Clone, Debug)]
enum Local {
    Nothing,
    /// Builds a snapshot (kept as the one to crash back to) and installs it on itself.
    SnapshotAndInstall,
    /// Loses everything after its last kept snapshot, then applies the entries since again.
    Crash,
}

fn local() -> impl Strategy<Value = Local> {
    prop_oneof![6 => Just(Local::Nothing), 1 => Just(Local::SnapshotAndInstall), 1 => Just(Local::Crash)]
}

fn completion(key: &str, tenant: &str, version: u64, ttl_s: u64) -> CachedCompletion {
    CachedCompletion {
        tenant: tenant.into(),
        model_version: version,
        etag: String::new(),
        ttl_s,
        ..CachedCompletion::example(key, format!("answer {key}"))
    }
}

/// The log: a seed entry, then one entry per op, with the model version each op believes current.
fn build_log(ops: &[(Op, i64)]) -> Vec<Entry> {
    let mut clock = 1_000_000i64;
    let mut version = 1u64;
    let mut log = vec![entry(
        1,
        clock,
        vec![
            Command::RegisterModel { model: "m".into(), version: 1, spec: None },
            Command::SetTenantPolicy { tenant: "a".into(), policy: TenantPolicy::default() },
            Command::SetTenantPolicy { tenant: "b".into(), policy: TenantPolicy::default() },
        ],
        String::new(),
    )];
    for (op, step) in ops {
        clock += step;
        let index = log.len() as u64 + 1;
        let (command, id) = match op.clone() {
            Op::Put { key, tenant, ttl_s, stale, id } => {
                let v = if stale { version.saturating_sub(1).max(1) } else { version };
                let entry = completion(KEYS[key], TENANTS[tenant], v, ttl_s);
                (
                    Command::Put { entry, content_class: "default".into(), prompt: None },
                    id.map(|i| format!("put-{i}")),
                )
            }
            Op::InvalidateKey { key, tenant } => (
                Command::Invalidate {
                    scope: InvalidateScope::Key { tenant: TENANTS[tenant].into(), key: KEYS[key].into() },
                },
                None,
            ),
            Op::InvalidateTenant { tenant } => (
                Command::Invalidate { scope: InvalidateScope::Tenant { tenant: TENANTS[tenant].into() } },
                None,
            ),
            Op::InvalidateVersion { back } => (
                Command::Invalidate {
                    scope: InvalidateScope::ModelVersion {
                        model: "m".into(),
                        version: version.saturating_sub(back).max(1),
                    },
                },
                None,
            ),
            Op::Bump => {
                version += 1;
                (Command::BumpModelVersion { model: "m".into(), version: 0, canary_percent: 0 }, None)
            }
            Op::Hits { key, count } => (Command::RecordHits { hits: vec![(KEYS[key].into(), count)] }, None),
            Op::Policy { tenant, default_ttl_s, cache_sampled } => (
                Command::SetTenantPolicy {
                    tenant: TENANTS[tenant].into(),
                    policy: TenantPolicy { default_ttl_s, cache_sampled, ..Default::default() },
                },
                None,
            ),
            Op::Sweep { keys, ids, feed } => (
                Command::Sweep {
                    entries: keys.iter().map(|&k| KEYS[k].to_owned()).collect(),
                    requests: ids.iter().map(|i| format!("put-{i}")).collect(),
                    feed,
                },
                None,
            ),
        };
        log.push(entry(index, clock, vec![command], id.unwrap_or_default()));
    }
    log
}

fn entry(index: u64, issued_ms: i64, commands: Vec<Command>, id: String) -> Entry {
    let requests = commands.into_iter().map(|command| Request { id: id.clone(), command });
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Proposal { issued_ms, requests: requests.collect() }),
    }
}

/// One replica: its store, how far it applied, and the snapshot it would crash back to.
struct Replica {
    store: StateMachineStore,
    applied: usize,
    kept: Option<(usize, Snapshot<TypeConfig>)>,
}

impl Replica {
    fn new() -> Self {
        static REPLICAS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let db = sled::Config::new().temporary(true).open().expect("temporary sled");
        let n = REPLICAS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let snapshots = std::env::temp_dir().join(format!("sm-proptest-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&snapshots);
        Self {
            store: StateMachineStore::open(&db, &snapshots, PreviousStop::Unclean).expect("trees"),
            applied: 0,
            kept: None,
        }
    }

    async fn apply(&mut self, log: &[Entry], upto: usize) {
        if upto > self.applied {
            let batch = log[self.applied..upto].to_vec();
            self.store.apply(batch).await.expect("apply");
            self.applied = upto;
        }
    }

    async fn snapshot(&mut self) -> Snapshot<TypeConfig> {
        self.store.get_snapshot_builder().await.build_snapshot().await.expect("build")
    }

    async fn install(&mut self, snapshot: &Snapshot<TypeConfig>) {
        let data = super::storage_tests::transfer(snapshot, &mut self.store).await;
        self.store.install_snapshot(&snapshot.meta, data).await.expect("install");
        self.applied = snapshot.meta.last_log_id.map_or(0, |id| id.index as usize);
    }

    async fn local(&mut self, event: &Local, log: &[Entry]) {
        match event {
            Local::Nothing => {}
            Local::SnapshotAndInstall => {
                let snapshot = self.snapshot().await;
                self.install(&snapshot).await;
                self.kept = Some((self.applied, snapshot));
            }
            Local::Crash => {
                let upto = self.applied;
                match self.kept.take() {
                    Some((at, snapshot)) => {
                        self.install(&snapshot).await;
                        assert_eq!(self.applied, at);
                        self.kept = Some((at, snapshot));
                    }
                    None => *self = Replica::new(),
                }
                self.apply(log, upto).await;
            }
        }
    }
}

/// Applies the log one entry at a time in memory (the same rules), checking that every sweep removes
/// only entries that were dead at its log time.
fn check_sweeps_remove_only_dead_entries(log: &[Entry]) {
    let mut tables = Memory::default();
    let mut clock = i64::MIN;
    for entry in log {
        let EntryPayload::Normal(proposal) = &entry.payload else { continue };
        clock = clock.max(proposal.issued_ms);
        let live: Vec<String> = tables
            .entries
            .iter()
            .filter(|(_, s)| {
                s.is_live(tables.tenants.get(&s.entry.tenant), tables.models.get(&s.entry.model), clock)
            })
            .map(|(k, _)| k.clone())
            .collect();
        let is_sweep = matches!(proposal.requests[0].command, Command::Sweep { .. });
        apply_proposal(&mut tables, entry.log_id.index, clock, &proposal.requests).expect("in memory");
        if is_sweep {
            for key in live {
                assert!(tables.entries.contains_key(&key), "a sweep removed {key}, live at its log time");
            }
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn replicas_of_one_log_hold_one_state(
        ops in prop::collection::vec((op(), clock_step()), 10..50),
        rounds in prop::collection::vec((1..4usize, prop::collection::vec((1..3usize, local()), 3)), 60),
        peer_installs in prop::collection::vec(prop::option::of(0..3usize), 60),
    ) {
        let log = build_log(&ops);
        check_sweeps_remove_only_dead_entries(&log);
        runtime().block_on(async {
            let mut replicas = [Replica::new(), Replica::new(), Replica::new()];
            let mut at = 0usize;
            for ((length, plans), install) in rounds.iter().zip(&peer_installs) {
                if at == log.len() {
                    break;
                }
                at = (at + length).min(log.len());
                for (replica, (split, event)) in replicas.iter_mut().zip(plans) {
                    // Its own batching: up to `split` batches to reach `at`, its local event in between.
                    let middle = replica.applied + (at - replica.applied) / split;
                    replica.apply(&log, middle).await;
                    replica.local(event, &log).await;
                    replica.apply(&log, at).await;
                }
                if let Some(from) = install {
                    let snapshot = replicas[*from].snapshot().await;
                    replicas[(from + 1) % 3].install(&snapshot).await;
                }
                let states: Vec<serde_json::Value> = replicas.iter().map(|r| r.store.export()).collect();
                prop_assert_eq!(&states[0], &states[1], "replicas 0 and 1 differ at index {}", at);
                prop_assert_eq!(&states[0], &states[2], "replicas 0 and 2 differ at index {}", at);
            }
            Ok(())
        })?;
    }
}
