//! Start-up of each tier: the configuration file and command line of the inference pod, a core node, a
//! regional node and the edge (`wrangler dev`), each started as a [`ManagedProcess`] logging to
//! [`Mesh::log_dir`]. Waiting for readiness is [`Mesh::start_all`]'s.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context as _;
use sha2::{Digest, Sha256};

use super::Mesh;
use crate::daemon_config::DaemonConfig;
use crate::fake_clock::FakeClock;
use crate::paths;
use crate::process::ManagedProcess;

impl Mesh {
    /// `tenant:sha256(key)` of every tenant, comma-separated: what the regional nodes and the edge check
    /// API keys against.
    fn key_table(&self) -> String {
        std::iter::once((&self.spec.tenant, &self.spec.api_key))
            .chain(self.spec.other_tenants.iter().map(|(tenant, key)| (tenant, key)))
            .map(|(tenant, key)| format!("{tenant}:{}", shared::hex::encode(&Sha256::digest(key.as_bytes()))))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The development tenant and the other tenants, by name.
    pub(super) fn tenant_names(&self) -> Vec<String> {
        std::iter::once(self.spec.tenant.clone())
            .chain(self.spec.other_tenants.iter().map(|(tenant, _)| tenant.clone()))
            .collect()
    }

    /// Where the configuration file of the daemon `name` goes.
    fn config_path(&self, name: &str) -> PathBuf {
        self.spec.data_dir.join("config").join(format!("{name}.toml"))
    }

    /// Starts the inference pod (not waiting for it).
    pub(super) fn spawn_pod(&self) -> anyhow::Result<ManagedProcess> {
        let mut config = DaemonConfig::new()
            .set("listen", format!("127.0.0.1:{}", self.ports.pod))
            .path("model_path", &paths::smollm2_gguf());
        if let Some(threads) = self.spec.pod_threads {
            config = config.set("threads", threads as i64);
        }
        let config = config.write(&self.config_path("inference-pod"))?;
        let mut command = Command::new(paths::binary("inference-pod"));
        command.arg("--config").arg(config).args(&self.spec.pod_args);
        self.give_identity(&mut command, "inference-pod");
        ManagedProcess::spawn("inference-pod", command, &self.log_dir())
    }

    /// Starts core node `index`; the first bootstraps the cluster.
    pub(super) fn spawn_core(&self, index: usize) -> anyhow::Result<ManagedProcess> {
        let peers: Vec<String> = self
            .ports
            .cores
            .iter()
            .enumerate()
            // Every node's Raft address, its own included (the cluster's membership records them), is its
            // fault proxy when the spec asks for them.
            .map(|(i, port)| format!("{}={}", Self::core_id(i), self.core_peer_addr(i, *port)))
            .collect();
        let data = self.spec.data_dir.join(format!("core-{}", Self::core_id(index)));
        std::fs::create_dir_all(&data)?;
        let name = format!("core-{}", Self::core_id(index));
        let config = DaemonConfig::new()
            .set("id", i64::try_from(Self::core_id(index))?)
            .set("listen", format!("{}:{}", self.core_listen_ip(index), self.ports.cores[index]))
            .path("data_dir", &data)
            .set("peers", peers)
            .set("tenants", self.tenant_names());
        let config = match (self.spec.openai_backends.is_empty(), self.spec.pod_as_openai_backend) {
            (false, _) => config.set("openai_backends", self.spec.openai_backends.clone()),
            (true, true) => config.set("openai_backends", vec![self.pod_as_openai_backend()]),
            (true, false) => config.set("pods", vec![self.pod_url()]),
        };
        let config = match self.spec.pod_beside_openai_backends {
            true => config.set("pods", vec![self.pod_url()]),
            false => config,
        };
        let config = config.set("bootstrap", index == 0).write(&self.config_path(&name))?;
        let mut command = Command::new(paths::binary("core-node"));
        command.arg("--config").arg(config);
        self.give_identity(&mut command, &name);
        // Extra flags of the spec override the file.
        command.args(&self.spec.core_args);
        self.give_clock(&mut command, &name)?;
        ManagedProcess::spawn(&name, command, &self.log_dir())
    }

    /// The pod as a `--openai-backends` value: the spec's first model at the pod's `/v1` (plain HTTP:
    /// the pod's certificate names its role, not the loopback address a client dials).
    fn pod_as_openai_backend(&self) -> String {
        let model = self.spec.models.split(',').next().unwrap_or_default();
        let model = model.split('@').next().unwrap_or_default().trim();
        format!("{model}=http://127.0.0.1:{}/v1", self.ports.pod)
    }

    /// Starts regional node `index`, with its peers (through the fault proxies when the spec asks).
    pub(super) fn spawn_regional(&self, index: usize) -> anyhow::Result<ManagedProcess> {
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
        self.give_clock(&mut command, &name)?;
        ManagedProcess::spawn(&name, command, &self.log_dir())
    }

    /// Runs node `name` on its own steppable wall clock when the spec asks for fake clocks.
    fn give_clock(&self, command: &mut Command, name: &str) -> anyhow::Result<()> {
        match self.spec.fake_clocks {
            true => self.clock(name)?.apply(command),
            false => Ok(()),
        }
    }

    /// Node `name`'s steppable wall clock (its offset file under the data directory).
    pub(super) fn clock(&self, name: &str) -> anyhow::Result<FakeClock> {
        FakeClock::at(self.spec.data_dir.join("clocks").join(name))
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

    /// Starts the edge worker under `wrangler dev`.
    pub(super) fn spawn_edge(&self) -> anyhow::Result<ManagedProcess> {
        let regionals: Vec<String> = (0..self.regionals.len()).map(|i| self.regional_url(i)).collect();
        let persist = self.spec.data_dir.join("edge");
        let mut command = crate::wrangler::dev_command(self.ports.edge, self.ports.edge_inspector, &persist)?;
        if let Some(files) = self.certs.get("edge") {
            // The local Workers runtime trusts the mesh CA for the regional nodes' https:// URLs, and the
            // edge keeps only answers the core signed.
            command.env("NODE_EXTRA_CA_CERTS", &files.ca);
            let public = crate::certs::answer_keys(files).public_hex()?;
            command.arg("--var").arg(format!("ANSWER_PUBLIC_KEY:{public}"));
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
