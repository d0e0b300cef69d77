//! The faults a soak injects, one at a time, chosen by its seeded generator: SIGKILL of the core's leader or
//! of a follower (started again after a pause), SIGKILL or SIGTERM of a regional node (started again), and a
//! regional node cut off from its peers for a while.

use std::time::Duration;

use crate::seeded::SeededRng;
use crate::Mesh;

/// How long a killed process stays down, and a partition lasts.
const DOWN: Duration = Duration::from_secs(3);

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL the core's leader.
    KillCoreLeader,
    /// SIGKILL a core follower.
    KillCoreFollower,
    /// SIGKILL a regional node.
    KillRegional,
    /// SIGTERM a regional node (it flushes its store).
    StopRegional,
    /// Cut a regional node's replication links (needs the mesh's peer fault proxies).
    PartitionRegional,
}

impl Fault {
    /// Every kind, in the order the generator picks from.
    pub const ALL: [Fault; 5] = [
        Self::KillCoreLeader,
        Self::KillCoreFollower,
        Self::KillRegional,
        Self::StopRegional,
        Self::PartitionRegional,
    ];

    /// A kind picked by `rng`.
    pub fn pick(rng: &mut SeededRng) -> Self {
        Self::ALL[rng.below(Self::ALL.len())]
    }

    /// Injects this fault into `mesh` (a target picked by `rng`), waits [`DOWN`], and restores the mesh
    /// (starts what was stopped, heals what was cut); returns what it did, for the report.
    pub fn inject(self, mesh: &mut Mesh, rng: &mut SeededRng) -> anyhow::Result<String> {
        let regional = rng.below(mesh.regional_nodes().max(1));
        let done = match self {
            Self::KillCoreLeader | Self::KillCoreFollower => {
                let leader = mesh.leader_index();
                let index = match (self, leader) {
                    (Self::KillCoreLeader, Some(leader)) => leader,
                    (_, leader) => {
                        let followers: Vec<usize> =
                            (0..mesh.core_nodes()).filter(|i| Some(*i) != leader).collect();
                        followers[rng.below(followers.len())]
                    }
                };
                mesh.kill_core(index);
                std::thread::sleep(DOWN);
                format!(
                    "SIGKILL core-{} ({})",
                    index + 1,
                    if leader == Some(index) { "leader" } else { "follower" }
                )
            }
            Self::KillRegional => {
                mesh.kill_regional(regional);
                std::thread::sleep(DOWN);
                format!("SIGKILL regional-{}", regional + 1)
            }
            Self::StopRegional => {
                mesh.stop_regional(regional);
                std::thread::sleep(DOWN);
                format!("SIGTERM regional-{}", regional + 1)
            }
            Self::PartitionRegional => {
                mesh.partition_regional(regional)?;
                std::thread::sleep(DOWN);
                mesh.heal_regional(regional)?;
                format!("partition regional-{} from its peers", regional + 1)
            }
        };
        mesh.start_all()?;
        Ok(done)
    }
}
