//! Replication links between regional nodes through fault proxies owned by the harness
//! ([`MeshSpec::peer_fault_proxies`](super::MeshSpec::peer_fault_proxies)), so a test can cut them.

use std::collections::HashSet;
use std::net::SocketAddr;

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
