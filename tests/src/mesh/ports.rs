//! The mesh's ports: free ones picked once, or a fixed range from a base port, so a mesh can stop and
//! start again on the same ports (Raft membership records the core nodes' addresses).

use std::collections::HashSet;

use anyhow::{bail, Context as _};

use super::MeshSpec;
use crate::ports::free_port;

/// Every port of a mesh.
#[derive(Clone, Debug)]
pub(super) struct Ports {
    /// The inference pod's.
    pub(super) pod: u16,
    /// The core nodes' (gRPC and `/healthz`).
    pub(super) cores: Vec<u16>,
    /// The regional nodes' HTTP ports.
    pub(super) regionals: Vec<u16>,
    /// Replication (gRPC) ports of the regional nodes.
    pub(super) regional_peers: Vec<u16>,
    /// The edge's (`wrangler dev`).
    pub(super) edge: u16,
    /// The edge's inspector.
    pub(super) edge_inspector: u16,
}

impl Ports {
    /// The ports `spec` asks for: a fixed range from its base port, else free ones.
    pub(super) fn for_spec(spec: &MeshSpec) -> anyhow::Result<Self> {
        match spec.base_port {
            Some(base) => Self::fixed(base, spec),
            None => Self::free(spec),
        }
    }

    /// Free ports, all different.
    fn free(spec: &MeshSpec) -> anyhow::Result<Self> {
        let mut taken = HashSet::new();
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
    pub(super) fn all(&self) -> HashSet<u16> {
        let mut all: HashSet<u16> = [self.pod, self.edge, self.edge_inspector].into();
        all.extend(self.cores.iter().chain(&self.regionals).chain(&self.regional_peers));
        all
    }

    /// The fixed range from `base` (see [`MeshSpec::base_port`]), each port checked free.
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

/// A free port not in `taken` (which it joins): ports picked one after another must differ.
pub(super) fn unique_free_port(taken: &mut HashSet<u16>) -> anyhow::Result<u16> {
    for _ in 0..100 {
        let port = free_port()?;
        if taken.insert(port) {
            return Ok(port);
        }
    }
    bail!("no free port found")
}
