//! A whole local mesh on loopback: `core_nodes` Raft nodes, one inference pod, `regional_nodes` regional
//! daemons and (optionally) the edge worker under `wrangler dev`. Ports are chosen once, so the mesh can be
//! stopped and started again on the same ports and data directories (Raft membership records addresses).
//!
//! # Layout
//! The modules are private ([`MeshSpec`] is re-exported here); most add methods to [`Mesh`].
//! - this file: [`Mesh`] and its life cycle (start in dependency order, stop, restart, kill).
//! - `spec`: [`MeshSpec`], what to start.
//! - `ports`: the mesh's ports, free ones or a fixed range.
//! - `identity`: the certificates of a TLS mesh and the secret shared between tiers.
//! - `spawn`: start-up of each tier (its configuration file and command line).
//! - `core`: the core nodes' ids and leader, and the waits for seeding and convergence.
//! - `peers`: replication links through fault proxies, to partition a regional node.
//! - `access`: URLs, clients, logs and the regional nodes' status endpoints.

mod access;
mod core;
mod identity;
mod peers;
mod ports;
mod spawn;
mod spec;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::bail;
use daemon_runtime::identity::TlsFiles;

use self::ports::Ports;
pub use self::spec::MeshSpec;
use crate::certs::DevCa;
use crate::fault_proxy::FaultProxy;
use crate::paths;
use crate::process::ManagedProcess;

/// A running mesh; every process is stopped when it is dropped.
#[derive(Debug)]
pub struct Mesh {
    spec: MeshSpec,
    ports: Ports,
    secret: String,
    /// Each node's TLS files, by name, when the mesh runs TLS.
    certs: HashMap<String, TlsFiles>,
    /// The mesh's CA, when it runs TLS (tests issue more certificates with it).
    ca: Option<DevCa>,
    pod: Option<ManagedProcess>,
    cores: Vec<Option<ManagedProcess>>,
    regionals: Vec<Option<ManagedProcess>>,
    edge: Option<ManagedProcess>,
    /// `peer_proxies[i][j]`: the proxy regional node `i` dials to reach node `j` (when the spec asks).
    peer_proxies: Vec<Vec<Option<FaultProxy>>>,
    /// `core_proxies[i]`: the proxy the other core nodes dial to reach core node `i` (when the spec asks).
    core_proxies: Vec<FaultProxy>,
}

const POD_READY: Duration = Duration::from_secs(120);
const CORE_READY: Duration = Duration::from_secs(60);
const REGIONAL_READY: Duration = Duration::from_secs(30);
const EDGE_READY: Duration = Duration::from_secs(300);
/// How long a stopped process has to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

impl Mesh {
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
        let ports = Ports::for_spec(&spec)?;
        let peer_proxies = if spec.peer_fault_proxies {
            peers::peer_proxies(&ports.regional_peers, ports.all())?
        } else {
            Vec::new()
        };
        let core_proxies = if spec.core_fault_proxies {
            peers::core_proxies(&ports.cores, ports.all())?
        } else {
            Vec::new()
        };
        let (ca, certs) = if spec.tls { identity::mesh_certs(&spec)? } else { Default::default() };
        let mut mesh = Self {
            ca,
            certs,
            peer_proxies,
            core_proxies,
            cores: (0..spec.core_nodes).map(|_| None).collect(),
            regionals: (0..spec.regional_nodes).map(|_| None).collect(),
            spec,
            ports,
            secret: identity::random_secret()?,
            pod: None,
            edge: None,
        };
        mesh.start_all()?;
        Ok(mesh)
    }

    /// Steps the wall clock of node `name` (`core-<id>`, `regional-<n>`) to `seconds` away from the
    /// host's while it runs; the mesh must have been started with [`MeshSpec::fake_clocks`].
    pub fn set_clock_offset(&self, name: &str, seconds: i64) -> anyhow::Result<()> {
        anyhow::ensure!(self.spec.fake_clocks, "the mesh runs on the host's clock (MeshSpec::fake_clocks)");
        self.clock(name)?.set_offset_s(seconds)
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
        if let Some(mut edge) = self.edge.take() {
            edge.stop(STOP_GRACE);
        }
        for regional in &mut self.regionals {
            if let Some(mut p) = regional.take() {
                p.stop(STOP_GRACE);
            }
        }
        for core in &mut self.cores {
            if let Some(mut p) = core.take() {
                p.stop(STOP_GRACE);
            }
        }
        if let Some(mut pod) = self.pod.take() {
            pod.stop(STOP_GRACE);
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
            regional.stop(STOP_GRACE);
        }
        self.start_all()
    }

    /// Stops regional node `index` (SIGTERM); [`Mesh::start_all`] starts it again on the same port and data.
    pub fn stop_regional(&mut self, index: usize) {
        if let Some(mut regional) = self.regionals.get_mut(index).and_then(Option::take) {
            regional.stop(STOP_GRACE);
        }
    }

    /// Kills regional node `index` with SIGKILL (restart it with [`Mesh::start_all`]).
    pub fn kill_regional(&mut self, index: usize) {
        if let Some(mut regional) = self.regionals.get_mut(index).and_then(Option::take) {
            regional.kill();
        }
    }

    /// Stops the inference pod (SIGTERM); [`Mesh::start_all`] starts it again on the same port.
    pub fn stop_pod(&mut self) {
        if let Some(mut pod) = self.pod.take() {
            pod.stop(STOP_GRACE);
        }
    }

    /// Kills core node `index` with SIGKILL (restart it with [`Mesh::start_all`]).
    pub fn kill_core(&mut self, index: usize) {
        if let Some(mut core) = self.cores.get_mut(index).and_then(Option::take) {
            core.kill();
        }
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        self.stop_all();
    }
}
