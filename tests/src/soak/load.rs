//! The soak's write load: `clients` tasks that together put cached completions at a fixed rate through the
//! core's client (each put under a new request id, so every one leaves a request id to collect), over a
//! fixed key space with a short time to live (so entries die and are swept), and turn one operation in
//! `invalidate_one_in` into a key invalidation (so the change feed grows and is compacted).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use core_client::CoreClient;
use proto::core::{invalidate, write_request, Invalidate};
use shared::completion::CachedCompletion;
use tokio::time::MissedTickBehavior;

use crate::seeded::SeededRng;

/// What the load does.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// Operations a second, all clients together.
    pub ops_per_s: u64,
    /// Concurrent clients (tasks), each at `ops_per_s / clients`.
    pub clients: usize,
    /// Distinct keys written.
    pub keys: u64,
    /// Time to live of each entry put, in seconds.
    pub entry_ttl_s: u64,
    /// One operation in this many invalidates a key instead of putting one (0: none does).
    pub invalidate_one_in: u64,
    /// The tenant, model and model version every entry belongs to.
    pub tenant: String,
    /// The model.
    pub model: String,
    /// The model's version.
    pub model_version: u64,
    /// Seeds each client's choice of keys.
    pub seed: u64,
}

/// What the load did so far; read while it runs.
#[derive(Debug, Default)]
pub struct LoadCounters {
    /// Puts acknowledged.
    pub puts: AtomicU64,
    /// Key invalidations acknowledged.
    pub invalidations: AtomicU64,
    /// Operations that failed (after the client's own retries).
    pub errors: AtomicU64,
    /// The last error, for the report.
    pub last_error: Mutex<Option<String>>,
}

impl LoadCounters {
    /// Acknowledged operations (puts and invalidations).
    pub fn acknowledged(&self) -> u64 {
        self.puts.load(Ordering::Relaxed) + self.invalidations.load(Ordering::Relaxed)
    }
}

/// Runs the load on the current tokio runtime until `stop` is set.
pub async fn run(client: CoreClient, spec: LoadSpec, counters: Arc<LoadCounters>, stop: Arc<AtomicBool>) {
    let clients = spec.clients.max(1);
    let period = Duration::from_secs_f64(clients as f64 / spec.ops_per_s.max(1) as f64);
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..clients {
        let (client, spec, counters, stop) = (client.clone(), spec.clone(), counters.clone(), stop.clone());
        tasks.spawn(async move {
            let mut rng = SeededRng::new(spec.seed ^ (index as u64).wrapping_mul(0x9e37_79b9));
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A client still busy at its next tick skips it: the report shows the rate achieved.
                ticks.tick().await;
                let request_id = format!("soak-{}-{index}-{sent}", spec.seed);
                sent += 1;
                let key = key_of(rng.next_u64() % spec.keys.max(1));
                let invalidate =
                    spec.invalidate_one_in > 0 && rng.next_u64().is_multiple_of(spec.invalidate_one_in);
                let outcome = if invalidate {
                    let command = write_request::Command::Invalidate(Invalidate {
                        scope: Some(invalidate::Scope::Key(key)),
                        key_tenant: spec.tenant.clone(),
                        refresh: false,
                    });
                    client.write(&request_id, command).await.map(|_| &counters.invalidations)
                } else {
                    client.put(&request_id, entry(&spec, key), "default").await.map(|_| &counters.puts)
                };
                match outcome {
                    Ok(counter) => {
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        counters.errors.fetch_add(1, Ordering::Relaxed);
                        *counters.last_error.lock().expect("last error") = Some(e.to_string());
                    }
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// The cache key of key number `k` (`v1:` and 64 hex digits, as the core requires).
fn key_of(k: u64) -> String {
    format!("v1:{k:064x}")
}

fn entry(spec: &LoadSpec, key: String) -> CachedCompletion {
    let content = format!("soak answer for {key}");
    CachedCompletion {
        etag: CachedCompletion::etag_of(&content, "stop"),
        key,
        tenant: spec.tenant.clone(),
        model: spec.model.clone(),
        model_version: spec.model_version,
        content,
        finish_reason: "stop".into(),
        prompt_tokens: 12,
        completion_tokens: 8,
        created_ms: 0,
        ttl_s: spec.entry_ttl_s,
        question: None,
        signature: String::new(),
        tags: Vec::new(),
    }
}
