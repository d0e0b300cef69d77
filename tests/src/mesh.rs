//! A whole local mesh on loopback: `core_nodes` Raft nodes, one inference pod, `regional_nodes` regional
//! daemons and (optionally) the edge worker under `wrangler dev`. Ports are chosen once, so the mesh can be
//! stopped and started again on the same ports and data directories (Raft membership records addresses).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context as _};
use sha2::{Digest, Sha256};

use crate::client::ChatClient;
use crate::daemon_config::DaemonConfig;
use crate::fault_proxy::FaultProxy;
use crate::paths;
use crate::ports::free_port;
use crate::process::ManagedProcess;

/// What to start.
#[derive(Clone, Debug)]
pub struct MeshSpec {
    /// Data directories (`core-<id>/`, `edge/`) and logs (`logs/`) live here.
    pub data_dir: PathBuf,
    /// Number of core nodes (Raft voters).
    pub core_nodes: usize,
    /// Number of regional nodes.
    pub regional_nodes: usize,
    /// Whether to run the edge worker under `wrangler dev`.
    pub edge: bool,
    /// Port of the edge; a free one when `None`.
    pub edge_port: Option<u16>,
    /// First of a fixed range of ports for the pod (`base`), core nodes (`base+1..`), regional nodes
    /// (`base+11..`), the edge inspector (`base+21`) and the regional nodes' replication
    /// (`base+31..`); free ports when `None`. A mesh that is started
    /// again on the same data directory needs the same core ports, since Raft membership records them.
    pub base_port: Option<u16>,
    /// The development tenant's name.
    pub tenant: String,
    /// The development tenant's API key.
    pub api_key: String,
    /// More tenants, `(name, API key)`, known to every tier like the development one.
    pub other_tenants: Vec<(String, String)>,
    /// Served models (`name@version`).
    pub models: String,
    /// Route replication between regional nodes through fault proxies owned by the harness, so a test
    /// can cut links ([`Mesh::partition_regional`]); otherwise the nodes dial each other directly.
    pub peer_fault_proxies: bool,
    /// Milliseconds between anti-entropy rounds of the regional nodes (their default when `None`).
    pub anti_entropy_ms: Option<u64>,
    /// Extra flags for every regional node (TTLs, admission, breaker...).
    pub regional_args: Vec<String>,
    /// Extra `--var NAME:value` settings of the edge worker (`HOTSET_REFRESH_S`, ...).
    pub edge_vars: Vec<(String, String)>,
    /// Mutual TLS on every hop between daemons, with a development CA written to `<data_dir>/certs`
    /// (one certificate per node: `pod`, `core-<id>`, `regional-<n>`, `edge`, `admin`); the regional
    /// nodes also admit the local edge by the insecure secret, since `wrangler dev` cannot present a
    /// client certificate. Without it the mesh runs in insecure development mode.
    pub tls: bool,
    /// CPU threads of the pod's kernels (its default, 1, when `None`).
    pub pod_threads: Option<usize>,
}

impl MeshSpec {
    /// The full local mesh: 3 core nodes, 2 regional nodes, the edge; tenant `dev` with key `sk-dev`.
    pub fn local(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            core_nodes: 3,
            regional_nodes: 2,
            edge: true,
            edge_port: None,
            base_port: None,
            tenant: "dev".into(),
            api_key: "sk-dev".into(),
            other_tenants: Vec::new(),
            models: shared::models::DEFAULT_MODELS.into(),
            peer_fault_proxies: false,
            anti_entropy_ms: None,
            regional_args: Vec::new(),
            edge_vars: Vec::new(),
            tls: false,
            pod_threads: None,
        }
    }
}

#[derive(Clone, Debug)]
struct Ports {
    pod: u16,
    cores: Vec<u16>,
    regionals: Vec<u16>,
    /// Replication (gRPC) ports of the regional nodes.
    regional_peers: Vec<u16>,
    edge: u16,
    edge_inspector: u16,
}

impl Ports {
    fn free(spec: &MeshSpec) -> anyhow::Result<Self> {
        let mut taken = std::collections::HashSet::new();
        let mut pick =
            |n: usize| -> anyhow::Result<Vec<u16>> { (0..n).map(|_| unique_free_port(&mut taken)).collect() };
        Ok(Self {
            pod: pick(1)?[0],
            cores: pick(spec.core_nodes)?,
            regionals: pick(spec.regional_nodes)?,
            regional_peers: pick(spec.regional_nodes)?,
            edge: match spec.edge_port {
                Some(port) => port,
                None => pick(1)?[0],
            },
            edge_inspector: pick(1)?[0],
        })
    }

    /// Every port of the mesh.
    fn all(&self) -> std::collections::HashSet<u16> {
        let mut all: std::collections::HashSet<u16> = [self.pod, self.edge, self.edge_inspector].into();
        all.extend(self.cores.iter().chain(&self.regionals).chain(&self.regional_peers));
        all
    }

    fn fixed(base: u16, spec: &MeshSpec) -> anyhow::Result<Self> {
        if spec.core_nodes > 10 || spec.regional_nodes > 10 || base > u16::MAX - 42 {
            bail!(
                "fixed ports: at most 10 core and 10 regional nodes, and a base port below {}",
                u16::MAX - 42
            );
        }
        let ports = Self {
            pod: base,
            cores: (0..spec.core_nodes as u16).map(|i| base + 1 + i).collect(),
            regionals: (0..spec.regional_nodes as u16).map(|i| base + 11 + i).collect(),
            regional_peers: (0..spec.regional_nodes as u16).map(|i| base + 31 + i).collect(),
            edge: spec.edge_port.unwrap_or(base + 20),
            edge_inspector: base + 21,
        };
        let mut all = vec![ports.pod, ports.edge, ports.edge_inspector];
        all.extend(&ports.cores);
        all.extend(&ports.regionals);
        all.extend(&ports.regional_peers);
        for port in all {
            std::net::TcpListener::bind(("127.0.0.1", port)).with_context(|| {
                format!("port {port} is taken (is another mesh running? change MESH_BASE_PORT)")
            })?;
        }
        Ok(ports)
    }
}

/// A running mesh; every process is stopped when it is dropped.
#[derive(Debug)]
pub struct Mesh {
    spec: MeshSpec,
    ports: Ports,
    secret: String,
    /// Each node's TLS files, by name, when the mesh runs TLS.
    certs: std::collections::HashMap<String, daemon_runtime::identity::TlsFiles>,
    /// The mesh's CA, when it runs TLS (tests issue more certificates with it).
    ca: Option<crate::certs::DevCa>,
    pod: Option<ManagedProcess>,
    cores: Vec<Option<ManagedProcess>>,
    regionals: Vec<Option<ManagedProcess>>,
    edge: Option<ManagedProcess>,
    /// `peer_proxies[i][j]`: the proxy regional node `i` dials to reach node `j` (when the spec asks).
    peer_proxies: Vec<Vec<Option<FaultProxy>>>,
}

const POD_READY: Duration = Duration::from_secs(120);
const CORE_READY: Duration = Duration::from_secs(60);
const REGIONAL_READY: Duration = Duration::from_secs(30);
const EDGE_READY: Duration = Duration::from_secs(300);

impl Mesh {
    /// Core nodes in the mesh.
    pub fn core_nodes(&self) -> usize {
        self.spec.core_nodes
    }

    /// Regional nodes in the mesh.
    pub fn regional_nodes(&self) -> usize {
        self.spec.regional_nodes
    }

    /// Starts every process and waits until each is ready.
    pub fn start(mut spec: MeshSpec) -> anyhow::Result<Self> {
        // Absolute: wrangler runs in edge-worker/, and reads its env file and state from here.
        spec.data_dir = std::path::absolute(&spec.data_dir)?;
        for binary in ["core-node", "inference-pod", "regional-node"] {
            let path = paths::binary(binary);
            if !path.exists() {
                bail!("{} is not built (run `make build`, or set MESH_BIN_DIR)", path.display());
            }
        }
        let ports = match spec.base_port {
            Some(base) => Ports::fixed(base, &spec)?,
            None => Ports::free(&spec)?,
        };
        let peer_proxies = if spec.peer_fault_proxies {
            peer_proxies(&ports.regional_peers, ports.all())?
        } else {
            Vec::new()
        };
        let (ca, certs) = if spec.tls { mesh_certs(&spec)? } else { Default::default() };
        let mut mesh = Self {
            ca,
            certs,
            peer_proxies,
            cores: (0..spec.core_nodes).map(|_| None).collect(),
            regionals: (0..spec.regional_nodes).map(|_| None).collect(),
            spec,
            ports,
            secret: random_secret()?,
            pod: None,
            edge: None,
        };
        mesh.start_all()?;
        Ok(mesh)
    }

    /// Starts whatever is not running, in dependency order, and waits for readiness.
    pub fn start_all(&mut self) -> anyhow::Result<()> {
        if self.pod.is_none() {
            let mut pod = self.spawn_pod()?;
            pod.wait_ready(&format!("{}/healthz", self.pod_url()), POD_READY)?;
            self.pod = Some(pod);
        }
        for index in 0..self.cores.len() {
            if self.cores[index].is_none() {
                self.cores[index] = Some(self.spawn_core(index)?);
            }
        }
        for index in 0..self.cores.len() {
            let url = format!("{}/healthz", self.core_url(index));
            if let Some(core) = self.cores[index].as_mut() {
                core.wait_ready(&url, CORE_READY)?;
            }
        }
        self.wait_core_seeded(CORE_READY)?;
        for index in 0..self.regionals.len() {
            if self.regionals[index].is_none() {
                let mut regional = self.spawn_regional(index)?;
                regional.wait_ready(&format!("{}/healthz", self.regional_url(index)), REGIONAL_READY)?;
                self.regionals[index] = Some(regional);
            }
        }
        if self.spec.edge && self.edge.is_none() {
            let mut edge = self.spawn_edge()?;
            edge.wait_ready(&format!("http://127.0.0.1:{}/healthz", self.ports.edge), EDGE_READY)?;
            self.edge = Some(edge);
        }
        Ok(())
    }

    /// Stops every process, the edge first and the core last.
    pub fn stop_all(&mut self) {
        let grace = Duration::from_secs(5);
        if let Some(mut edge) = self.edge.take() {
            edge.stop(grace);
        }
        for regional in &mut self.regionals {
            if let Some(mut p) = regional.take() {
                p.stop(grace);
            }
        }
        for core in &mut self.cores {
            if let Some(mut p) = core.take() {
                p.stop(grace);
            }
        }
        if let Some(mut pod) = self.pod.take() {
            pod.stop(grace);
        }
    }

    /// Stops everything and starts it again on the same ports and data directories.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop_all();
        self.start_all()
    }

    /// Stops regional node `index` (0-based; SIGTERM, so it flushes its store) and starts it again
    /// on the same port and data directory.
    pub fn restart_regional(&mut self, index: usize) -> anyhow::Result<()> {
        if let Some(mut regional) = self.regionals.get_mut(index).and_then(Option::take) {
            regional.stop(Duration::from_secs(5));
        }
        self.start_all()
    }

    /// Stops regional node `index` (SIGTERM); [`Mesh::start_all`] starts it again on the same port and data.
    pub fn stop_regional(&mut self, index: usize) {
        if let Some(mut regional) = self.regionals.get_mut(index).and_then(Option::take) {
            regional.stop(Duration::from_secs(5));
        }
    }

    /// Cuts every replication link to and from regional node `index` (needs `peer_fault_proxies`).
    pub fn partition_regional(&self, index: usize) -> anyhow::Result<()> {
        self.each_peer_proxy_of(index, FaultProxy::block_all)
    }

    /// Restores every replication link to and from regional node `index`.
    pub fn heal_regional(&self, index: usize) -> anyhow::Result<()> {
        self.each_peer_proxy_of(index, FaultProxy::heal)
    }

    fn each_peer_proxy_of(&self, index: usize, action: fn(&FaultProxy)) -> anyhow::Result<()> {
        if self.peer_proxies.is_empty() {
            bail!("the mesh was started without peer_fault_proxies");
        }
        for (from, row) in self.peer_proxies.iter().enumerate() {
            for (to, proxy) in row.iter().enumerate() {
                if let Some(proxy) = proxy.as_ref().filter(|_| from == index || to == index) {
                    action(proxy);
                }
            }
        }
        Ok(())
    }

    /// The replication gRPC URL of regional node `index` (direct, not through a fault proxy).
    pub fn regional_peer_url(&self, index: usize) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.ports.regional_peers[index])
    }

    /// `https` when the mesh runs TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.spec.tls {
            "https"
        } else {
            "http"
        }
    }

    /// The TLS files of node `name` (`pod`, `core-1`, `regional-1`, `edge`, `admin`), when the mesh
    /// runs TLS.
    pub fn tls_files(&self, name: &str) -> Option<&daemon_runtime::identity::TlsFiles> {
        self.certs.get(name)
    }

    /// The mesh's CA, when it runs TLS.
    pub fn ca(&self) -> Option<&crate::certs::DevCa> {
        self.ca.as_ref()
    }

    /// Base URL of the inference pod (gRPC and `/healthz`).
    pub fn pod_url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.ports.pod)
    }

    /// The shared secret between tiers of this mesh.
    pub fn tier_secret(&self) -> &str {
        &self.secret
    }

    /// `GET /v1/replication` of regional node `index`: its replicated state and peer links.
    pub fn replication_status(&self, index: usize) -> anyhow::Result<serde_json::Value> {
        let reply = crate::client::agent(Duration::from_secs(5))
            .get(format!("{}/v1/replication", self.regional_url(index)))
            .call()?;
        Ok(serde_json::from_reader(reply.into_body().into_reader())?)
    }

    /// `GET /v1/hotset` of regional node `index` (with the tier secret unless `secret` says otherwise),
    /// `since` a version or none: the status and the JSON body.
    pub fn hotset(
        &self,
        index: usize,
        since: Option<&str>,
        secret: Option<&str>,
    ) -> anyhow::Result<(u16, serde_json::Value)> {
        let mut url = format!("{}/v1/hotset", self.regional_url(index));
        if let Some(since) = since {
            url.push_str(&format!("?since={since}"));
        }
        let mut request = crate::client::agent(Duration::from_secs(10)).get(url);
        if let Some(secret) = secret.or(Some(self.secret.as_str())).filter(|s| !s.is_empty()) {
            request = request.header(shared::TIER_SECRET_HEADER, secret);
        }
        let mut reply = request.call()?;
        let status = reply.status().as_u16();
        Ok((status, serde_json::from_reader(reply.body_mut().as_reader())?))
    }

    /// Kills regional node `index` with SIGKILL (restart it with [`Mesh::start_all`]).
    pub fn kill_regional(&mut self, index: usize) {
        if let Some(mut regional) = self.regionals.get_mut(index).and_then(Option::take) {
            regional.kill();
        }
    }

    /// Kills core node `index` with SIGKILL (restart it with [`Mesh::start_all`]).
    pub fn kill_core(&mut self, index: usize) {
        if let Some(mut core) = self.cores.get_mut(index).and_then(Option::take) {
            core.kill();
        }
    }

    /// The Raft node id of core `index` (ids start at 1).
    pub fn core_id(index: usize) -> u64 {
        index as u64 + 1
    }

    /// The leader's node id, as reported by the first live core node that knows one.
    pub fn leader_id(&self) -> Option<u64> {
        let agent = crate::client::agent(Duration::from_secs(2));
        (0..self.cores.len()).filter(|i| self.cores[*i].is_some()).find_map(|i| {
            let mut response = agent.get(format!("{}/healthz", self.core_url(i))).call().ok()?;
            let health: serde_json::Value =
                serde_json::from_str(&response.body_mut().read_to_string().ok()?).ok()?;
            health["leader"].as_u64()
        })
    }

    /// Waits until a core node has every tenant and the models (seeded when the cluster forms;
    /// a cluster restarted from its data has them at once).
    fn wait_core_seeded(&self, timeout: Duration) -> anyhow::Result<()> {
        let agent = crate::client::agent(Duration::from_secs(2));
        let deadline = std::time::Instant::now() + timeout;
        let tenants = self.tenant_names().len() as u64;
        loop {
            let seeded = (0..self.cores.len()).filter(|i| self.cores[*i].is_some()).any(|i| {
                let health = agent
                    .get(format!("{}/healthz", self.core_url(i)))
                    .call()
                    .ok()
                    .and_then(|mut r| r.body_mut().read_to_string().ok())
                    .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok());
                health.is_some_and(|h| {
                    h["tenants"].as_u64() >= Some(tenants) && h["models"].as_u64() >= Some(1)
                })
            });
            if seeded {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                bail!("the core cluster did not register its tenant and models within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until every running core node knows the leader and has applied as much as the others.
    pub fn wait_core_converged(&self, timeout: Duration) -> anyhow::Result<()> {
        let agent = crate::client::agent(Duration::from_secs(2));
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let applied: Vec<Option<u64>> = (0..self.cores.len())
                .filter(|i| self.cores[*i].is_some())
                .map(|i| {
                    let mut response = agent.get(format!("{}/healthz", self.core_url(i))).call().ok()?;
                    let health: serde_json::Value =
                        serde_json::from_str(&response.body_mut().read_to_string().ok()?).ok()?;
                    health["leader"].as_u64()?;
                    health["last_applied"].as_u64()
                })
                .collect();
            if applied.iter().all(Option::is_some) && applied.windows(2).all(|w| w[0] == w[1]) {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                bail!("core nodes did not converge within {timeout:?}: last applied {applied:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Base URL of core node `index` (gRPC and `/healthz`).
    pub fn core_url(&self, index: usize) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.ports.cores[index])
    }

    /// Base URL of regional node `index`.
    pub fn regional_url(&self, index: usize) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.ports.regionals[index])
    }

    /// Base URL of the edge, if it runs.
    pub fn edge_url(&self) -> Option<String> {
        self.spec.edge.then(|| format!("http://127.0.0.1:{}", self.ports.edge))
    }

    /// The development API key.
    pub fn api_key(&self) -> &str {
        &self.spec.api_key
    }

    /// A client of the mesh's public endpoint (the edge, else the first regional node) with the dev key.
    pub fn client(&self) -> ChatClient {
        let url = self.edge_url().unwrap_or_else(|| self.regional_url(0));
        ChatClient::new(&url, Some(&self.spec.api_key))
    }

    /// A client of regional node `index` with the dev key.
    pub fn regional_client(&self, index: usize) -> ChatClient {
        ChatClient::new(&self.regional_url(index), Some(&self.spec.api_key))
    }

    /// A client of the mesh's public endpoint with another API key (one of `other_tenants`).
    pub fn client_with_key(&self, api_key: &str) -> ChatClient {
        let url = self.edge_url().unwrap_or_else(|| self.regional_url(0));
        ChatClient::new(&url, Some(api_key))
    }

    /// Where the processes' logs are.
    pub fn log_dir(&self) -> PathBuf {
        self.spec.data_dir.join("logs")
    }

    fn key_table(&self) -> String {
        std::iter::once((&self.spec.tenant, &self.spec.api_key))
            .chain(self.spec.other_tenants.iter().map(|(tenant, key)| (tenant, key)))
            .map(|(tenant, key)| format!("{tenant}:{}", shared::hex::encode(&Sha256::digest(key.as_bytes()))))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn tenant_names(&self) -> Vec<String> {
        std::iter::once(self.spec.tenant.clone())
            .chain(self.spec.other_tenants.iter().map(|(tenant, _)| tenant.clone()))
            .collect()
    }

    /// Where the configuration file of the daemon `name` goes.
    fn config_path(&self, name: &str) -> PathBuf {
        self.spec.data_dir.join("config").join(format!("{name}.toml"))
    }

    fn spawn_pod(&self) -> anyhow::Result<ManagedProcess> {
        let mut config = DaemonConfig::new()
            .set("listen", format!("127.0.0.1:{}", self.ports.pod))
            .path("model_path", &paths::smollm2_gguf());
        if let Some(threads) = self.spec.pod_threads {
            config = config.set("threads", threads as i64);
        }
        let config = config.write(&self.config_path("inference-pod"))?;
        let mut command = Command::new(paths::binary("inference-pod"));
        command.arg("--config").arg(config);
        self.give_identity(&mut command, "inference-pod");
        ManagedProcess::spawn("inference-pod", command, &self.log_dir())
    }

    fn spawn_core(&self, index: usize) -> anyhow::Result<ManagedProcess> {
        let peers: Vec<String> = self
            .ports
            .cores
            .iter()
            .enumerate()
            .map(|(i, port)| format!("{}=127.0.0.1:{port}", Self::core_id(i)))
            .collect();
        let data = self.spec.data_dir.join(format!("core-{}", Self::core_id(index)));
        std::fs::create_dir_all(&data)?;
        let name = format!("core-{}", Self::core_id(index));
        let config = DaemonConfig::new()
            .set("id", i64::try_from(Self::core_id(index))?)
            .set("listen", format!("127.0.0.1:{}", self.ports.cores[index]))
            .path("data_dir", &data)
            .set("peers", peers)
            .set("pods", vec![self.pod_url()])
            .set("tenants", self.tenant_names())
            .set("bootstrap", index == 0)
            .write(&self.config_path(&name))?;
        let mut command = Command::new(paths::binary("core-node"));
        command.arg("--config").arg(config);
        self.give_identity(&mut command, &name);
        ManagedProcess::spawn(&name, command, &self.log_dir())
    }

    /// The identity daemon `name` starts with: its TLS files, or the insecure secret. Regional nodes
    /// of a TLS mesh get the secret too, for the local edge.
    fn give_identity(&self, command: &mut Command, name: &str) {
        match self.certs.get(name) {
            Some(files) => {
                command.envs(crate::certs::env(files));
                if name.starts_with("regional") {
                    command.env("MESH_INSECURE_TIER_SECRET", &self.secret);
                }
            }
            None => {
                command.env("MESH_INSECURE_TIER_SECRET", &self.secret);
            }
        }
    }

    fn spawn_regional(&self, index: usize) -> anyhow::Result<ManagedProcess> {
        // Each regional node prefers a different core node first, so core failover is exercised.
        let n = self.cores.len();
        let cores: Vec<String> = (0..n).map(|i| self.core_url((i + index) % n)).collect();
        let name = format!("regional-{}", index + 1);
        let mut config = DaemonConfig::new()
            .set("listen", format!("127.0.0.1:{}", self.ports.regionals[index]))
            .set("region", format!("region-{}", index + 1))
            .set("core", cores)
            .set("api_keys", self.key_table())
            .set("models", self.spec.models.clone())
            .path("semantic_model_dir", &paths::minilm_dir())
            .path("data_dir", &self.spec.data_dir.join(&name))
            .set("peer_listen", format!("127.0.0.1:{}", self.ports.regional_peers[index]));
        let peers: Vec<String> = (0..self.regionals.len())
            .filter(|&peer| peer != index)
            .map(|peer| match self.peer_proxies.get(index).and_then(|row| row[peer].as_ref()) {
                Some(proxy) => format!("{}://{}", self.scheme(), proxy.addr()),
                None => self.regional_peer_url(peer),
            })
            .collect();
        if !peers.is_empty() {
            config = config.set("peers", peers);
        }
        if paths::edge_table().exists() {
            config = config.path("edge_table", &paths::edge_table());
        }
        if let Some(ms) = self.spec.anti_entropy_ms {
            config = config.set("anti_entropy_interval_ms", i64::try_from(ms)?);
        }
        let config = config.write(&self.config_path(&name))?;
        let mut command = Command::new(paths::binary("regional-node"));
        command.arg("--config").arg(config);
        self.give_identity(&mut command, &name);
        // Extra flags of the spec override the file.
        command.args(&self.spec.regional_args);
        ManagedProcess::spawn(&name, command, &self.log_dir())
    }

    /// Writes the edge's secrets to an env file only the owner can read: wrangler shows values passed
    /// with `--var` in its logs, but hides those from an env file.
    fn write_edge_secrets(&self) -> anyhow::Result<PathBuf> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let path = self.spec.data_dir.join("edge-secrets.env");
        let mut file =
            std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(&path)?;
        writeln!(file, "API_KEYS=\"{}\"\nTIER_SECRET=\"{}\"", self.key_table(), self.secret)?;
        Ok(path)
    }

    fn spawn_edge(&self) -> anyhow::Result<ManagedProcess> {
        let regionals: Vec<String> = (0..self.regionals.len()).map(|i| self.regional_url(i)).collect();
        let persist = self.spec.data_dir.join("edge");
        let mut command = crate::wrangler::dev_command(self.ports.edge, self.ports.edge_inspector, &persist)?;
        if let Some(files) = self.certs.get("edge") {
            // The local Workers runtime trusts the mesh CA for the regional nodes' https:// URLs.
            command.env("NODE_EXTRA_CA_CERTS", &files.ca);
        }
        command
            .arg("--env-file")
            .arg(self.write_edge_secrets()?)
            .arg("--var")
            .arg(format!("REGIONAL_URLS:{}", regionals.join(",")))
            .arg("--var")
            .arg(format!("MODELS:{}", self.spec.models))
            .args(
                self.spec
                    .edge_vars
                    .iter()
                    .flat_map(|(name, value)| ["--var".to_owned(), format!("{name}:{value}")]),
            );
        ManagedProcess::spawn("edge", command, &self.log_dir()).context("starting wrangler dev")
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The development CA and every node's certificate of a TLS mesh, in `<data_dir>/certs`; the
/// harness's own clients trust the CA from now on.
#[allow(clippy::type_complexity)]
fn mesh_certs(
    spec: &MeshSpec,
) -> anyhow::Result<(
    Option<crate::certs::DevCa>,
    std::collections::HashMap<String, daemon_runtime::identity::TlsFiles>,
)> {
    use daemon_runtime::Role;
    let mut nodes = vec![("inference-pod".to_owned(), Role::Pod), ("edge".to_owned(), Role::Edge)];
    nodes.push(("admin".to_owned(), Role::Admin));
    nodes.extend((0..spec.core_nodes).map(|i| (format!("core-{}", Mesh::core_id(i)), Role::Core)));
    nodes.extend((0..spec.regional_nodes).map(|i| (format!("regional-{}", i + 1), Role::Regional)));
    let dir = spec.data_dir.join("certs");
    let (ca, files) = crate::certs::write_mesh_certs(&dir, &nodes)?;
    crate::client::trust_mesh_ca(ca.pem().as_bytes());
    Ok((Some(ca), files.into_iter().collect()))
}

/// 32 random bytes as hex, from the operating system.
fn random_secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(shared::hex::encode(&bytes))
}

/// A free port not in `taken` (which it joins): ports picked one after another must differ.
fn unique_free_port(taken: &mut std::collections::HashSet<u16>) -> anyhow::Result<u16> {
    for _ in 0..100 {
        let port = free_port()?;
        if taken.insert(port) {
            return Ok(port);
        }
    }
    bail!("no free port found")
}

/// One fault proxy per ordered pair of regional nodes, forwarding to the second's replication port, each
/// on a port none of the mesh's processes will take.
fn peer_proxies(
    peer_ports: &[u16],
    mut taken: std::collections::HashSet<u16>,
) -> anyhow::Result<Vec<Vec<Option<FaultProxy>>>> {
    let mut rows = Vec::with_capacity(peer_ports.len());
    for from in 0..peer_ports.len() {
        let mut row = Vec::with_capacity(peer_ports.len());
        for (to, port) in peer_ports.iter().enumerate() {
            row.push(if from == to {
                None
            } else {
                let listen = std::net::SocketAddr::from(([127, 0, 0, 1], unique_free_port(&mut taken)?));
                Some(FaultProxy::bind(listen, std::net::SocketAddr::from(([127, 0, 0, 1], *port)))?)
            });
        }
        rows.push(row);
    }
    Ok(rows)
}
