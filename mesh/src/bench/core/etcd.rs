//! The peer of the core cluster: a three-member etcd cluster (the Debian `etcd-server` package) on
//! loopback, with etcd's default durability (an fsync per WAL batch), driven through its gRPC API with the
//! `etcd-client` crate. Members are stopped when the cluster is dropped.

use std::path::Path;
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
        let mut cluster = Self { members: Vec::new(), client_urls: Vec::new() };
        for (i, (client_url, peer_url)) in client_urls.iter().zip(&peer_urls).enumerate() {
            let name = format!("etcd{}", i + 1);
            let mut command = Command::new(etcd_binary());
            command
                .arg("--name")
                .arg(&name)
                .arg("--data-dir")
                .arg(dir.join(&name))
                .args(["--listen-client-urls", client_url])
                .args(["--advertise-client-urls", client_url])
                .args(["--listen-peer-urls", peer_url])
                .args(["--initial-advertise-peer-urls", peer_url])
                .args(["--initial-cluster", &initial_cluster])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", &token])
                .args(["--logger", "zap", "--log-level", "warn"]);
            cluster.members.push(ManagedProcess::spawn(&name, command, log_dir)?);
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
