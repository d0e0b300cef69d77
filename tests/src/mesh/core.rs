//! The core cluster inside a mesh, as its nodes' `/healthz` reports it: Raft ids, the leader, and the
//! waits for the cluster to be seeded and to converge.

use std::ops::ControlFlow::{Break, Continue};
use std::time::Duration;

use serde_json::Value;

use super::Mesh;
use crate::poll::{poll_every, poll_reporting};

/// Pause between two rounds of `/healthz` requests while waiting.
const HEALTH_POLL: Duration = Duration::from_millis(100);

impl Mesh {
    /// The Raft node id of core `index` (ids start at 1).
    pub fn core_id(index: usize) -> u64 {
        index as u64 + 1
    }

    /// The leader's node id, as reported by the first live core node that knows one.
    pub fn leader_id(&self) -> Option<u64> {
        let agent = crate::client::agent(Duration::from_secs(2));
        self.running_cores().find_map(|i| self.core_health(&agent, i)?["leader"].as_u64())
    }

    /// The index of the core node that leads, as the first live core node that knows one reports it.
    pub fn leader_index(&self) -> Option<usize> {
        self.leader_id().and_then(|id| (0..self.cores.len()).find(|i| Self::core_id(*i) == id))
    }

    /// The leader core node `index` knows of, from its `/healthz`.
    pub fn leader_seen_by(&self, index: usize) -> Option<u64> {
        self.core_health(&crate::client::agent(Duration::from_secs(2)), index)?["leader"].as_u64()
    }

    /// Waits until a core node has every tenant and the models (seeded when the cluster forms;
    /// a cluster restarted from its data has them at once).
    pub(super) fn wait_core_seeded(&self, timeout: Duration) -> anyhow::Result<()> {
        let agent = crate::client::agent(Duration::from_secs(2));
        let tenants = self.tenant_names().len() as u64;
        poll_every(HEALTH_POLL, timeout, "the core cluster registering its tenants and models", || {
            let seeded = self.running_cores().any(|i| {
                self.core_health(&agent, i).is_some_and(|h| {
                    h["tenants"].as_u64() >= Some(tenants) && h["models"].as_u64() >= Some(1)
                })
            });
            Ok(seeded.then_some(()))
        })
    }

    /// Waits until every running core node knows the leader and has applied as much as the others.
    pub fn wait_core_converged(&self, timeout: Duration) -> anyhow::Result<()> {
        let agent = crate::client::agent(Duration::from_secs(2));
        poll_reporting(HEALTH_POLL, timeout, "core nodes converging", || {
            let applied: Vec<Option<u64>> = self
                .running_cores()
                .map(|i| {
                    let health = self.core_health(&agent, i)?;
                    health["leader"].as_u64()?;
                    health["last_applied"].as_u64()
                })
                .collect();
            Ok(if applied.iter().all(Option::is_some) && applied.windows(2).all(|w| w[0] == w[1]) {
                Break(())
            } else {
                Continue(format!("last applied {applied:?}"))
            })
        })
    }

    /// Indexes of the core nodes whose process runs.
    fn running_cores(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.cores.len()).filter(|i| self.cores[*i].is_some())
    }

    /// What core node `index`'s `/healthz` says, if it answers with JSON.
    fn core_health(&self, agent: &ureq::Agent, index: usize) -> Option<Value> {
        let mut response = agent.get(format!("{}/healthz", self.core_url(index))).call().ok()?;
        serde_json::from_str(&response.body_mut().read_to_string().ok()?).ok()
    }
}
