//! Replication links between regional nodes through fault proxies owned by the harness
//! ([`MeshSpec::peer_fault_proxies`](super::MeshSpec::peer_fault_proxies)), and Raft links between core
//! nodes ([`MeshSpec::core_fault_proxies`](super::MeshSpec::core_fault_proxies)), so a test can cut them.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::bail;

use super::ports::unique_free_port;
use super::Mesh;
use crate::fault_proxy::FaultProxy;

impl Mesh {
    /// Cuts every replication link to and from regional node `index` (needs `peer_fault_proxies`).
    pub fn partition_regional(&self, index: usize) -> anyhow::Result<()> {
        self.each_peer_proxy_of(index, FaultProxy::block_all)
    }

    /// Restores every replication link to and from regional node `index`.
    pub fn heal_regional(&self, index: usize) -> anyhow::Result<()> {
        self.each_peer_proxy_of(index, FaultProxy::heal)
    }

    /// Cuts core node `index` off from the other core nodes, both ways (needs `core_fault_proxies`);
    /// regional nodes and clients still reach it. Replaces any earlier core partition.
    pub fn partition_core(&self, index: usize) -> anyhow::Result<()> {
        if self.core_proxies.is_empty() {
            bail!("the mesh was started without core_fault_proxies");
        }
        for (to, proxy) in self.core_proxies.iter().enumerate() {
            let blocked: HashSet<IpAddr> = if to == index {
                (0..self.core_proxies.len()).filter(|i| *i != index).map(core_ip).collect()
            } else {
                HashSet::from([core_ip(index)])
            };
            proxy.set_blocked_sources(blocked);
        }
        Ok(())
    }

    /// Restores every Raft link between core nodes.
    pub fn heal_cores(&self) {
        self.core_proxies.iter().for_each(FaultProxy::heal);
    }

    /// The address core node `index` listens on (and sends from): its own with core fault proxies.
    pub(super) fn core_listen_ip(&self, index: usize) -> IpAddr {
        if self.core_proxies.is_empty() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            core_ip(index)
        }
    }

    /// The address the other core nodes dial to reach core node `index` (its Raft address, as
    /// `core-node admin add-learner --addr` takes it).
    pub fn core_raft_addr(&self, index: usize) -> SocketAddr {
        self.core_peer_addr(index, self.ports.cores[index])
    }

    /// The address the other core nodes dial to reach core node `index`.
    pub(super) fn core_peer_addr(&self, index: usize, port: u16) -> SocketAddr {
        match self.core_proxies.get(index) {
            Some(proxy) => proxy.addr(),
            None => SocketAddr::new(self.core_listen_ip(index), port),
        }
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
}

/// One fault proxy per ordered pair of regional nodes, forwarding to the second's replication port, each
/// on a port none of the mesh's processes will take.
pub(super) fn peer_proxies(
    peer_ports: &[u16],
    mut taken: HashSet<u16>,
) -> anyhow::Result<Vec<Vec<Option<FaultProxy>>>> {
    let mut rows = Vec::with_capacity(peer_ports.len());
    for from in 0..peer_ports.len() {
        let mut row = Vec::with_capacity(peer_ports.len());
        for (to, port) in peer_ports.iter().enumerate() {
            row.push(if from == to {
                None
            } else {
                let listen = SocketAddr::from(([127, 0, 0, 1], unique_free_port(&mut taken)?));
                Some(FaultProxy::bind(listen, SocketAddr::from(([127, 0, 0, 1], *port)))?)
            });
        }
        rows.push(row);
    }
    Ok(rows)
}

/// Core node `index`'s own loopback address when its Raft links pass fault proxies.
fn core_ip(index: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 11 + u8::try_from(index).unwrap_or(200)))
}

/// One fault proxy in front of each core node, forwarding to its port on its own address.
pub(super) fn core_proxies(core_ports: &[u16], mut taken: HashSet<u16>) -> anyhow::Result<Vec<FaultProxy>> {
    core_ports
        .iter()
        .enumerate()
        .map(|(index, port)| {
            let listen = SocketAddr::from(([127, 0, 0, 1], unique_free_port(&mut taken)?));
            Ok(FaultProxy::bind(listen, SocketAddr::new(core_ip(index), *port))?)
        })
        .collect()
}
