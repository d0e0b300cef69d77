//! The peer of the core cluster: a three-member etcd cluster (the Debian `etcd-server` package) on
//! loopback, with etcd's default durability (an fsync per WAL batch), driven through its gRPC API with the
//! `etcd-client` crate. Members are stopped when the cluster is dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::bench::core::kv_target::KvTarget;
use mesh_harness::ports::free_port;
use mesh_harness::process::ManagedProcess;

/// The etcd binary: `MESH_ETCD_BIN`, else the Debian package's.
pub fn etcd_binary() -> String {
    std::env::var("MESH_ETCD_BIN").unwrap_or_else(|_| "/usr/bin/etcd".into())
}

/// A running etcd cluster.
#[derive(Debug)]
pub struct EtcdCluster {
    /// The members, in order; stopped on drop.
    members: Vec<ManagedProcess>,
    /// Client URL of each member (`http://127.0.0.1:PORT`).
    client_urls: Vec<String>,
    /// Each member's arguments, to start it again on the same data.
    args: Vec<Vec<String>>,
    log_dir: PathBuf,
}

impl EtcdCluster {
    /// Starts `n` members with data under `dir` and logs under `log_dir`, and waits until each reports
    /// itself healthy (which needs an elected leader).
    pub fn start(n: usize, dir: &Path, log_dir: &Path) -> anyhow::Result<Self> {
        let mut client_urls = Vec::new();
        let mut peer_urls = Vec::new();
        for _ in 0..n {
            client_urls.push(format!("http://127.0.0.1:{}", free_port()?));
            peer_urls.push(format!("http://127.0.0.1:{}", free_port()?));
        }
        let initial_cluster = peer_urls
            .iter()
            .enumerate()
            .map(|(i, url)| format!("etcd{}={url}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("bench-{}", std::process::id());
        let mut cluster = Self {
            members: Vec::new(),
            client_urls: Vec::new(),
            args: Vec::new(),
            log_dir: log_dir.to_owned(),
        };
        for (i, (client_url, peer_url)) in client_urls.iter().zip(&peer_urls).enumerate() {
            let name = format!("etcd{}", i + 1);
            let data_dir = dir.join(&name).to_string_lossy().into_owned();
            let args = [
                ["--name", &name],
                ["--data-dir", &data_dir],
                ["--listen-client-urls", client_url],
                ["--advertise-client-urls", client_url],
                ["--listen-peer-urls", peer_url],
                ["--initial-advertise-peer-urls", peer_url],
                ["--initial-cluster", &initial_cluster],
                ["--initial-cluster-state", "new"],
                ["--initial-cluster-token", &token],
                ["--logger", "zap"],
                ["--log-level", "warn"],
            ];
            let args: Vec<String> = args.iter().flatten().map(|arg| (*arg).to_owned()).collect();
            cluster.members.push(ManagedProcess::spawn(&name, etcd_command(&args), log_dir)?);
            cluster.args.push(args);
        }
        cluster.client_urls = client_urls;
        for (member, url) in cluster.members.iter_mut().zip(&cluster.client_urls) {
            member.wait_ready(&format!("{url}/health"), Duration::from_secs(30))?;
        }
        Ok(cluster)
    }

    /// The process id of every member.
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().map(ManagedProcess::pid).collect()
    }

    /// The client URL of every member.
    pub fn client_urls(&self) -> &[String] {
        &self.client_urls
    }

    /// Stops a member that is not the leader (SIGTERM, or SIGKILL when `kill`), starts it again on its
    /// data, and returns how long it took from the start until it had applied everything the leader had
    /// applied before the stop. Runs its client calls on `runtime`.
    pub fn restart_follower(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        kill: bool,
    ) -> anyhow::Result<Duration> {
        let leader = runtime.block_on(self.leader_url(Duration::from_secs(20)))?;
        let goal = runtime.block_on(applied_index(&leader))?;
        let index = self.client_urls.iter().position(|url| *url != leader).context("a follower")?;
        let member = &mut self.members[index];
        if kill {
            member.kill();
        } else {
            member.stop(Duration::from_secs(30));
        }
        let name = member.name().to_owned();
        let started = Instant::now();
        *member = ManagedProcess::spawn(&name, etcd_command(&self.args[index]), &self.log_dir)?;
        let url = self.client_urls[index].clone();
        loop {
            if runtime.block_on(applied_index(&url)).is_ok_and(|applied| applied >= goal) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > Duration::from_secs(600) {
                bail!("{name} did not catch up after its restart");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The client URL of the current leader, waiting up to `timeout` for one to be elected.
    pub async fn leader_url(&self, timeout: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            for url in &self.client_urls {
                let Ok(mut client) = etcd_client::Client::connect([url.as_str()], None).await else {
                    continue;
                };
                if let Ok(status) = client.status().await {
                    let own = status.header().map(|h| h.member_id());
                    if status.leader() != 0 && own == Some(status.leader()) {
                        return Ok(url.clone());
                    }
                }
            }
            if Instant::now() > deadline {
                bail!("no etcd leader after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// An etcd member's command with `args`.
fn etcd_command(args: &[String]) -> Command {
    let mut command = Command::new(etcd_binary());
    command.args(args);
    command
}

/// The Raft index the member at `url` has applied.
async fn applied_index(url: &str) -> anyhow::Result<u64> {
    let mut client = etcd_client::Client::connect([url], None).await?;
    Ok(client.status().await?.raft_applied_index())
}

/// Puts and linearizable gets of one etcd cluster through one client connection.
pub struct EtcdTarget {
    /// The KV service client (cheap to clone: one shared HTTP/2 channel).
    kv: etcd_client::KvClient,
    /// The value every put writes.
    value: Vec<u8>,
}

impl EtcdTarget {
    /// Connects to `endpoint` (a member's client URL); every put writes `value_bytes` bytes.
    pub async fn connect(endpoint: &str, value_bytes: usize) -> anyhow::Result<Self> {
        let client = etcd_client::Client::connect([endpoint], None)
            .await
            .with_context(|| format!("connecting to etcd at {endpoint}"))?;
        Ok(Self { kv: client.kv_client(), value: vec![b'x'; value_bytes] })
    }
}

impl KvTarget for EtcdTarget {
    async fn put(&self, key: String) -> anyhow::Result<()> {
        let mut kv = self.kv.clone();
        kv.put(key, self.value.clone(), None).await?;
        Ok(())
    }

    async fn read(&self, key: String) -> anyhow::Result<bool> {
        let mut kv = self.kv.clone();
        // etcd's Range is linearizable unless the request asks for a serializable read.
        let response = kv.get(key, None).await?;
        Ok(!response.kvs().is_empty())
    }
}
