//! The workload both clusters get: the same keys, the same value sizes, the same phases, through the same
//! load generator. A system under test only says how to put one key and how to read one key back.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::bench::common::cpu_time::{CpuMark, CpuPerOp};
use crate::bench::common::load::{closed_loop, LoadResult};

/// Keys written before the read phase and read back during it.
const READ_KEYS: usize = 64;

/// One replicated key-value store under test.
pub trait KvTarget: Send + Sync + 'static {
    /// Writes `key` with the workload's value and returns once the write is durable (committed).
    fn put(&self, key: String) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// Reads `key` with linearizable consistency; `Ok(false)` when it is absent.
    fn read(&self, key: String) -> impl Future<Output = anyhow::Result<bool>> + Send;
}

/// How long and how hard to drive one system.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Measured time of each phase.
    pub duration: Duration,
    /// Client counts of the put phases, in order.
    pub put_clients: Vec<usize>,
    /// Client count of the linearizable read phase.
    pub read_clients: usize,
    /// Set to end the run early (Ctrl-C): the current phase ends and the run fails.
    pub stop: &'static AtomicBool,
    /// Which round of a run this is: each round writes keys of its own, so that a later round inserts
    /// as the first did rather than overwriting.
    pub round: usize,
    /// The system's server processes, whose CPU time each put phase reports per put.
    pub server_pids: Vec<u32>,
}

/// What one system did under the workload.
#[derive(Clone, Debug)]
pub struct KvFigures {
    /// One result per entry of [`Workload::put_clients`].
    pub puts: Vec<LoadResult>,
    /// The CPU time each put cost, per entry of [`Workload::put_clients`] (`None`: not measurable here).
    pub put_cpu: Vec<Option<CpuPerOp>>,
    /// The linearizable read phase.
    pub reads: LoadResult,
}

/// A cache key in the project's format (`v1:` + 64 lowercase hex), distinct for each phase, client and
/// sequence number; both systems store under the same key strings.
pub fn bench_key(phase: &str, client: usize, seq: u64) -> String {
    let digest = Sha256::digest(format!("{phase}/{client}/{seq}").as_bytes());
    format!("v1:{}", shared::hex::encode(&digest))
}

/// Drives `target`: a short unmeasured warm-up, one put phase per client count, then reads of keys that
/// were written just before.
pub async fn drive<T: KvTarget>(target: Arc<T>, workload: &Workload) -> anyhow::Result<KvFigures> {
    let warm_clients = workload.put_clients.iter().copied().max().unwrap_or(1);
    let warm_up = workload.duration.min(Duration::from_secs(1));
    let round = workload.round;
    put_phase(&target, &format!("r{round}/warm"), warm_clients, warm_up, workload.stop).await;
    let mut puts = Vec::new();
    let mut put_cpu = Vec::new();
    for &clients in &workload.put_clients {
        let phase = format!("r{round}/c{clients}");
        let mark = CpuMark::now(&workload.server_pids);
        let result = put_phase(&target, &phase, clients, workload.duration, workload.stop).await;
        put_cpu.push(mark.per_op(result.ops));
        check(&result, &format!("puts at {clients} clients"), workload.stop)?;
        puts.push(result);
    }
    let read_phase = format!("r{round}/read");
    for i in 0..READ_KEYS {
        target.put(bench_key(&read_phase, i, 0)).await?;
    }
    let reader = Arc::clone(&target);
    let reads = closed_loop(workload.read_clients, workload.duration, workload.stop, move |client, seq| {
        let target = Arc::clone(&reader);
        let key = bench_key(&read_phase, (client + seq as usize) % READ_KEYS, 0);
        async move {
            match target.read(key).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(anyhow::anyhow!("a key written before the read phase is missing")),
                Err(e) => Err(e),
            }
        }
    })
    .await;
    check(&reads, &format!("linearizable reads at {} clients", workload.read_clients), workload.stop)?;
    Ok(KvFigures { puts, put_cpu, reads })
}

/// Puts under `phase`'s keys from `clients` concurrent clients for `duration`.
pub(crate) async fn put_phase<T: KvTarget>(
    target: &Arc<T>,
    phase: &str,
    clients: usize,
    duration: Duration,
    stop: &'static AtomicBool,
) -> LoadResult {
    let target = Arc::clone(target);
    let phase = phase.to_owned();
    closed_loop(clients, duration, stop, move |client, seq| {
        let target = Arc::clone(&target);
        let key = bench_key(&phase, client, seq);
        async move { target.put(key).await }
    })
    .await
}

/// Fails an interrupted phase or one in which nothing succeeded; warns about a phase with some errors.
fn check(result: &LoadResult, what: &str, stop: &AtomicBool) -> anyhow::Result<()> {
    if stop.load(Ordering::Relaxed) {
        anyhow::bail!("{what}: interrupted");
    }
    let first = result.first_error.as_deref().unwrap_or("");
    if result.ops == 0 {
        anyhow::bail!("{what}: no operation succeeded ({} errors; first: {first})", result.errors);
    }
    if result.errors > 0 {
        let total = result.errors + result.ops;
        eprintln!("warning: {what}: {} of {total} operations failed; first: {first}", result.errors);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_keys_are_cache_keys_and_distinct() {
        let a = bench_key("c1", 0, 0);
        assert_eq!(a.len(), 3 + 64);
        assert!(a.starts_with("v1:"));
        assert!(a[3..].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_ne!(a, bench_key("c1", 0, 1));
        assert_ne!(a, bench_key("c64", 0, 0));
    }
}
