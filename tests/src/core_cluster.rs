//! A core cluster of real `core-node` processes without inference pods, for the store's fault tests and
//! benchmarks.
//!
//! Node `k` (Raft id `k`, from 1) listens on `127.0.0.(10+k)` at a free port and dials its peers from that
//! IP. In front of every node runs a [`FaultProxy`] on `127.0.0.1`, and `--peers` names the proxies, so all
//! Raft traffic passes a proxy, and a partition is a set of proxy rules on the peers' source IPs. Clients
//! (the tests) talk to the nodes' real addresses, which no partition touches.
//!
//! The API is synchronous; the cluster owns a tokio runtime for the async [`CoreClient`]s it hands out
//! ([`CoreCluster::block_on`], [`CoreCluster::runtime`]), so drive it from a plain `#[test]`.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::ControlFlow::{Break, Continue};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use core_client::CoreClient;
use proto::core::StatusReply;
use sha2::{Digest, Sha256};
use shared::completion::CachedCompletion;

use crate::fault_proxy::FaultProxy;
use crate::paths;
use crate::poll::{poll_reporting, poll_until, POLL_INTERVAL};
use crate::process::ManagedProcess;

/// How long a starting node may take to answer `/healthz` with 200 (a leader known).
const NODE_READY: Duration = Duration::from_secs(60);

/// Tenants and model the bootstrap node registers.
const TENANTS: &str = "t1,t2";
/// How many tenants [`TENANTS`] names.
const SEEDED_TENANTS: u64 = 2;
const MODELS: &str = "m@1";

/// What to start.
#[derive(Clone, Debug)]
pub struct CoreClusterSpec {
    /// Data directories (`core-<id>/`) and logs (`logs/`) live here.
    pub dir: PathBuf,
    /// Number of nodes formed at start (all voters); node 1 bootstraps the cluster.
    pub nodes: u64,
    /// Raft heartbeat interval in milliseconds.
    pub heartbeat_ms: u64,
    /// Lower bound of the election timeout in milliseconds.
    pub election_timeout_min_ms: u64,
    /// Upper bound of the election timeout in milliseconds.
    pub election_timeout_max_ms: u64,
    /// More `core-node` flags, given to every node.
    pub extra_args: Vec<String>,
    /// Where the data directories live when not under `dir` (a test's own file system); logs stay in
    /// `dir`.
    pub data_root: Option<PathBuf>,
    /// Whether Raft traffic goes straight to the nodes (no fault proxies on the path; partitions are then
    /// impossible). The benchmark uses this so that the proxy hop is not measured.
    pub direct_peers: bool,
}

impl CoreClusterSpec {
    /// `nodes` nodes under `dir` with fast elections (heartbeat 100 ms, election timeout 300-600 ms).
    pub fn new(nodes: u64, dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            nodes,
            heartbeat_ms: 100,
            election_timeout_min_ms: 300,
            election_timeout_max_ms: 600,
            extra_args: Vec::new(),
            data_root: None,
            direct_peers: false,
        }
    }
}

/// One node: its addresses, its proxy, its data and (while it runs) its process.
#[derive(Debug)]
struct Node {
    /// The node's own listener (gRPC and HTTP), on its own loopback IP.
    listen: SocketAddr,
    /// The proxy the other nodes reach this one through.
    proxy: FaultProxy,
    /// The node's sled directory.
    data_dir: PathBuf,
    /// The `--peers` value it was started with.
    peers: String,
    /// Whether it is given `--bootstrap`.
    bootstrap: bool,
    /// The running process, if any.
    process: Option<ManagedProcess>,
}

/// What `/healthz` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Health {
    /// The leader the node knows, if any.
    pub leader: Option<u64>,
    /// The node's current term.
    pub term: u64,
    /// The node's last applied log index.
    pub last_applied: u64,
    /// Tenants in its state machine.
    pub tenants: u64,
    /// Models in its state machine.
    pub models: u64,
}

/// A running core cluster; every process is stopped when it is dropped.
#[derive(Debug)]
pub struct CoreCluster {
    spec: CoreClusterSpec,
    secret: String,
    nodes: BTreeMap<u64, Node>,
    /// Dropped last: the clients' connections live on it.
    runtime: tokio::runtime::Runtime,
}

impl CoreCluster {
    /// Starts `n` nodes under `dir` (see [`CoreClusterSpec::new`]) and waits for them to agree on a leader.
    pub fn start(n: u64, dir: impl Into<PathBuf>) -> anyhow::Result<Self> {
        Self::start_with(CoreClusterSpec::new(n, dir))
    }

    /// Starts the cluster `spec` describes and waits until every node knows the same leader.
    pub fn start_with(spec: CoreClusterSpec) -> anyhow::Result<Self> {
        let binary = paths::binary("core-node");
        if !binary.exists() {
            bail!(
                "{} is not built (run `cargo build --release --bins`, or set MESH_BIN_DIR)",
                binary.display()
            );
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("core-cluster-clients")
            .enable_all()
            .build()?;
        let mut cluster =
            Self { secret: random_secret()?, nodes: BTreeMap::new(), runtime, spec: spec.clone() };
        let mut planned = BTreeMap::new();
        for id in 1..=spec.nodes {
            planned.insert(id, cluster.plan_node(id)?);
        }
        let peers: Vec<String> =
            planned
                .iter()
                .map(|(id, (listen, proxy))| {
                    if spec.direct_peers {
                        format!("{id}={listen}")
                    } else {
                        format!("{id}={}", proxy.addr())
                    }
                })
                .collect();
        for (id, (listen, proxy)) in planned {
            let node = Node {
                listen,
                proxy,
                data_dir: spec.data_root.as_ref().unwrap_or(&spec.dir).join(format!("core-{id}")),
                peers: peers.join(","),
                bootstrap: id == 1,
                process: None,
            };
            cluster.nodes.insert(id, node);
        }
        cluster.start_all()?;
        cluster.wait_seeded(NODE_READY)?;
        Ok(cluster)
    }

    /// Waits until node 1 has applied the tenants and model that it seeds when it forms the cluster.
    fn wait_seeded(&self, timeout: Duration) -> anyhow::Result<()> {
        poll_reporting(POLL_INTERVAL, timeout, "the cluster seeded", || {
            let health = self.health(1);
            Ok(match health {
                Some(h) if h.tenants >= SEEDED_TENANTS && h.models >= 1 => Break(()),
                _ => Continue(format!("{health:?}")),
            })
        })
    }

    /// Starts another node `id` (not a member yet: `--peers` names only itself, no bootstrap) and waits
    /// until it accepts connections. Make it a member with [`CoreClient::add_learner`] at
    /// [`CoreCluster::proxy_addr`].
    pub fn add_node(&mut self, id: u64) -> anyhow::Result<()> {
        if self.nodes.contains_key(&id) {
            bail!("node {id} already exists");
        }
        let (listen, proxy) = self.plan_node(id)?;
        let peers = format!("{id}={}", proxy.addr());
        let data_dir = self.spec.data_root.as_ref().unwrap_or(&self.spec.dir).join(format!("core-{id}"));
        self.nodes.insert(id, Node { listen, proxy, data_dir, peers, bootstrap: false, process: None });
        self.spawn(id)?;
        poll_until(NODE_READY, &format!("node {id} accepting connections at {listen}"), || {
            Ok(std::net::TcpStream::connect_timeout(&listen, Duration::from_millis(200)).ok())
        })
        .map(drop)
        .map_err(|e| anyhow!("{e}; log tail:\n{}", self.log_tail(id)))
    }

    /// Node ids, in order.
    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// Ids of the nodes whose process runs.
    pub fn running_ids(&self) -> Vec<u64> {
        self.nodes.iter().filter(|(_, n)| n.process.is_some()).map(|(id, _)| *id).collect()
    }

    /// Node `id`'s real listen address (`host:port`), for clients.
    pub fn node_addr(&self, id: u64) -> String {
        self.nodes.get(&id).map(|n| n.listen.to_string()).unwrap_or_default()
    }

    /// The address of node `id`'s proxy (`host:port`): what the Raft membership records.
    pub fn proxy_addr(&self, id: u64) -> String {
        self.nodes.get(&id).map(|n| n.proxy.addr().to_string()).unwrap_or_default()
    }

    /// The loopback IP node `id` listens on and dials from.
    pub fn node_ip(id: u64) -> anyhow::Result<IpAddr> {
        let last = u8::try_from(10 + id).ok().filter(|b| *b < 255).context("node ids go up to 244")?;
        Ok(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
    }

    /// The tier secret every node and client uses.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Where the nodes' logs are (`core-<id>.log`).
    pub fn log_dir(&self) -> PathBuf {
        self.spec.dir.join("logs")
    }

    /// The last few KiB of node `id`'s log.
    pub fn log_tail(&self, id: u64) -> String {
        self.nodes.get(&id).and_then(|n| n.process.as_ref()).map(|p| p.log_tail(6000)).unwrap_or_else(|| {
            let text = std::fs::read_to_string(self.log_dir().join(format!("core-{id}.log")));
            let text = text.unwrap_or_default();
            let start = text.len().saturating_sub(6000);
            let start = (start..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
            text[start..].to_owned()
        })
    }

    /// The runtime the clients run on (spawn load generators here).
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }

    /// Runs a future on the cluster's runtime; call it from synchronous code only.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// The process ids of the nodes running now, in node order.
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.values().filter_map(|node| node.process.as_ref().map(ManagedProcess::pid)).collect()
    }

    /// A client over every node's real address.
    pub fn client(&self) -> anyhow::Result<CoreClient> {
        self.client_for(&self.ids())
    }

    /// Puts `count` entries of tenant `t1` named `prefix/i` through `client`, one after another; each must
    /// be acknowledged. Returns their keys and contents.
    pub fn put_numbered(
        &self,
        client: &CoreClient,
        prefix: &str,
        count: usize,
    ) -> anyhow::Result<Vec<(String, String)>> {
        self.block_on(async {
            let mut written = Vec::new();
            for i in 0..count {
                let content = format!("{prefix} answer {i}");
                let put = entry("t1", &format!("{prefix}/{i}"), &content);
                let key = put.key.clone();
                client
                    .put(&format!("{prefix}-{i}"), put, "default")
                    .await
                    .with_context(|| format!("{prefix} put {i}"))?;
                written.push((key, content));
            }
            anyhow::Ok(written)
        })
    }

    /// A client that knows only these nodes' real addresses.
    pub fn client_for(&self, ids: &[u64]) -> anyhow::Result<CoreClient> {
        let addrs = ids.iter().map(|id| self.node_addr(*id)).collect();
        // The client's channels spawn their workers on the current runtime.
        let _guard = self.runtime.enter();
        Ok(CoreClient::new(addrs, daemon_runtime::TierIdentity::insecure_secret(&self.secret)?)?)
    }

    /// Node `id`'s `/healthz`, if it answers.
    pub fn health(&self, id: u64) -> Option<Health> {
        let listen = self.nodes.get(&id)?.listen;
        let agent = crate::client::agent(Duration::from_secs(2));
        let mut response = agent.get(format!("http://{listen}/healthz")).call().ok()?;
        let body: serde_json::Value =
            serde_json::from_str(&response.body_mut().read_to_string().ok()?).ok()?;
        Some(Health {
            leader: body["leader"].as_u64().filter(|l| *l != 0),
            term: body["term"].as_u64().unwrap_or(0),
            last_applied: body["last_applied"].as_u64().unwrap_or(0),
            tenants: body["tenants"].as_u64().unwrap_or(0),
            models: body["models"].as_u64().unwrap_or(0),
        })
    }

    /// The leader of the highest term any running node reports (`/healthz`).
    pub fn leader_id(&self) -> Option<u64> {
        self.running_ids()
            .into_iter()
            .filter_map(|id| self.health(id))
            .filter_map(|h| h.leader.map(|leader| (h.term, leader)))
            .max()
            .map(|(_, leader)| leader)
    }

    /// Waits until every running node among `ids` reports the same leader, itself one of `ids`.
    pub fn wait_leader_among(&self, ids: &[u64], timeout: Duration) -> anyhow::Result<u64> {
        let what = format!("nodes {ids:?} agreeing on a leader among them");
        poll_reporting(POLL_INTERVAL, timeout, &what, || {
            let running = self.running_ids();
            let leaders: Vec<Option<u64>> = ids
                .iter()
                .filter(|id| running.contains(id))
                .map(|id| self.health(*id).and_then(|h| h.leader))
                .collect();
            Ok(match leaders.first() {
                Some(&Some(leader))
                    if ids.contains(&leader) && leaders.iter().all(|l| *l == Some(leader)) =>
                {
                    Break(leader)
                }
                _ => Continue(format!("leaders {leaders:?}")),
            })
        })
    }

    /// Waits until every running node reports the same leader.
    pub fn wait_leader(&self, timeout: Duration) -> anyhow::Result<u64> {
        self.wait_leader_among(&self.running_ids(), timeout)
    }

    /// Node `id`'s data directory (its write-ahead log is `wal/` in it).
    pub fn data_dir(&self, id: u64) -> Option<PathBuf> {
        self.nodes.get(&id).map(|node| node.data_dir.clone())
    }

    /// Kills node `id` with SIGKILL, as a crash would.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut process) = self.nodes.get_mut(&id).and_then(|n| n.process.take()) {
            process.kill();
        }
    }

    /// Kills every node with SIGKILL.
    pub fn kill_all(&mut self) {
        for id in self.ids() {
            self.kill(id);
        }
    }

    /// Asks node `id` to stop (SIGTERM), waits up to `grace` for it to exit, then kills it; returns
    /// whether it exited by itself.
    pub fn stop_node(&mut self, id: u64, grace: Duration) -> bool {
        match self.nodes.get_mut(&id).and_then(|n| n.process.take()) {
            Some(mut process) => {
                process.stop(grace);
                process.exit_status().is_some_and(|status| status.code().is_some())
            }
            None => false,
        }
    }

    /// Starts node `id` again on its data directory without waiting for it.
    pub fn spawn_node(&mut self, id: u64) -> anyhow::Result<()> {
        self.spawn(id)
    }

    /// Starts node `id` again on its data directory and waits until it knows a leader.
    pub fn start_node(&mut self, id: u64) -> anyhow::Result<()> {
        self.spawn(id)?;
        self.wait_ready(id)
    }

    /// Starts every node that is not running, then waits until all know the same leader.
    pub fn start_all(&mut self) -> anyhow::Result<()> {
        let stopped: Vec<u64> =
            self.nodes.iter().filter(|(_, n)| n.process.is_none()).map(|(id, _)| *id).collect();
        for id in &stopped {
            self.spawn(*id)?;
        }
        for id in &stopped {
            self.wait_ready(*id)?;
        }
        self.wait_leader(NODE_READY)?;
        Ok(())
    }

    /// Cuts the nodes in `side` off from every node outside it, both ways: each node's proxy refuses (and
    /// cuts) connections from the other side's IPs. Replaces any earlier partition.
    pub fn partition(&self, side: &HashSet<u64>) -> anyhow::Result<()> {
        for (id, node) in &self.nodes {
            let mut blocked = HashSet::new();
            for other in self.nodes.keys() {
                if side.contains(id) != side.contains(other) {
                    blocked.insert(Self::node_ip(*other)?);
                }
            }
            node.proxy.set_blocked_sources(blocked);
        }
        Ok(())
    }

    /// Removes every partition.
    pub fn heal(&self) {
        for node in self.nodes.values() {
            node.proxy.heal();
        }
    }

    /// Node `id`'s view of the cluster (`CoreAdmin/Status`).
    pub fn status(&self, id: u64) -> anyhow::Result<StatusReply> {
        let client = self.client_for(&[id])?;
        let addr = self.node_addr(id);
        Ok(self.block_on(async { client.with_timeout(Duration::from_secs(3)).status(&addr).await })?)
    }

    /// Waits until every running node knows the same leader and reports the same applied index and state
    /// digest; returns their statuses.
    pub fn wait_converged(&self, timeout: Duration) -> anyhow::Result<Vec<StatusReply>> {
        self.wait_converged_among(&self.running_ids(), timeout)
    }

    /// [`CoreCluster::wait_converged`] over the nodes `ids` only.
    pub fn wait_converged_among(&self, ids: &[u64], timeout: Duration) -> anyhow::Result<Vec<StatusReply>> {
        poll_reporting(Duration::from_millis(100), timeout, &format!("nodes {ids:?} converged"), || {
            let statuses: Vec<anyhow::Result<StatusReply>> = ids.iter().map(|id| self.status(*id)).collect();
            if !statuses.iter().all(Result::is_ok) {
                let errors: Vec<String> =
                    statuses.iter().map(|s| format!("{:?}", s.as_ref().err())).collect();
                return Ok(Continue(format!("not all answered Status: {errors:?}")));
            }
            let statuses: Vec<StatusReply> = statuses.into_iter().flatten().collect();
            let same = statuses.first().is_some_and(|first| {
                statuses.iter().all(|s| {
                    s.leader_id != 0
                        && s.leader_id == first.leader_id
                        && s.applied_index == first.applied_index
                        && s.state_digest == first.state_digest
                })
            });
            if same {
                return Ok(Break(statuses));
            }
            let views: Vec<String> = statuses.iter().map(describe).collect();
            Ok(Continue(views.join("; ")))
        })
    }

    /// Picks node `id`'s listen address (its own IP, a free port) and starts its proxy.
    fn plan_node(&self, id: u64) -> anyhow::Result<(SocketAddr, FaultProxy)> {
        let ip = Self::node_ip(id)?;
        let port = std::net::TcpListener::bind((ip, 0))
            .and_then(|l| l.local_addr())
            .with_context(|| format!("no free port on {ip}"))?
            .port();
        let listen = SocketAddr::new(ip, port);
        let proxy = FaultProxy::start(listen).with_context(|| format!("starting the proxy of node {id}"))?;
        Ok((listen, proxy))
    }

    /// Starts node `id`'s process if it is not running.
    fn spawn(&mut self, id: u64) -> anyhow::Result<()> {
        let log_dir = self.log_dir();
        let spec = &self.spec;
        let Some(node) = self.nodes.get_mut(&id) else { bail!("no node {id}") };
        if node.process.is_some() {
            return Ok(());
        }
        std::fs::create_dir_all(&node.data_dir)?;
        let mut command = Command::new(paths::binary("core-node"));
        command
            .arg("--id")
            .arg(id.to_string())
            .arg("--listen")
            .arg(node.listen.to_string())
            .arg("--data-dir")
            .arg(&node.data_dir)
            .arg("--peers")
            .arg(&node.peers)
            .args(["--models", MODELS, "--tenants", TENANTS])
            .arg("--heartbeat-ms")
            .arg(spec.heartbeat_ms.to_string())
            .arg("--election-timeout-min-ms")
            .arg(spec.election_timeout_min_ms.to_string())
            .arg("--election-timeout-max-ms")
            .arg(spec.election_timeout_max_ms.to_string())
            .args(&spec.extra_args)
            .env("MESH_INSECURE_TIER_SECRET", &self.secret);
        if node.bootstrap {
            command.arg("--bootstrap");
        }
        node.process = Some(ManagedProcess::spawn(&format!("core-{id}"), command, &log_dir)?);
        Ok(())
    }

    /// Waits until node `id` answers `/healthz` with 200.
    fn wait_ready(&mut self, id: u64) -> anyhow::Result<()> {
        let Some(node) = self.nodes.get_mut(&id) else { bail!("no node {id}") };
        let url = format!("http://{}/healthz", node.listen);
        match node.process.as_mut() {
            Some(process) => process.wait_ready(&url, NODE_READY),
            None => bail!("node {id} is not running"),
        }
    }
}

impl Drop for CoreCluster {
    fn drop(&mut self) {
        for node in self.nodes.values_mut() {
            if let Some(mut process) = node.process.take() {
                process.stop(Duration::from_secs(3));
            }
        }
    }
}

/// A cache entry for tests: tenant `tenant`, model `m` version 1, no expiry, the key derived from `name`.
pub fn entry(tenant: &str, name: &str, content: &str) -> CachedCompletion {
    let key = format!("v1:{}", shared::hex::encode(&Sha256::digest(format!("{tenant}/{name}").as_bytes())));
    let created_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    CachedCompletion {
        key,
        tenant: tenant.to_owned(),
        model: "m".to_owned(),
        model_version: 1,
        content: content.to_owned(),
        finish_reason: "stop".to_owned(),
        prompt_tokens: 8,
        completion_tokens: 4,
        etag: CachedCompletion::etag_of(content, "stop"),
        created_ms,
        ttl_s: 0,
        question: None,
        signature: String::new(),
        tags: Vec::new(),
    }
}

/// One line per status, for failure messages and test output.
pub fn describe(status: &StatusReply) -> String {
    format!(
        "node {} leader {} term {} applied {} entries {} voters {:?} learners {:?} digest {}",
        status.id,
        status.leader_id,
        status.term,
        status.applied_index,
        status.entries,
        status.voters,
        status.learners,
        status.state_digest.get(..12).unwrap_or(&status.state_digest)
    )
}

/// 32 random bytes as hex, from the operating system.
fn random_secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(shared::hex::encode(&bytes))
}

/// A fresh, empty data directory `<tmp>/<name>-<pid>` for one test; the test removes it when it passes, so
/// a failed run leaves the logs to read.
pub fn test_dir(name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
