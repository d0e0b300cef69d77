//! One truth across a membership change, as an operator makes it: core node 1, whose change feed the
//! regional nodes follow from the start, is removed with `core-node admin set-voters --voters 2,3
//! --remove 1` and left running. A tenant-wide invalidation and a model bump acknowledged afterwards by
//! nodes 2 and 3 must still reach the edge and both regional nodes within the documented bound: the
//! removed node ends its feed streams and the regional nodes follow the feed on the remaining nodes.

use std::time::Duration;

use mesh_harness::poll::poll_every;
use mesh_harness::propagation::{self, Tiers};
use mesh_harness::{Mesh, MeshSpec};

/// The edge's bound against the core (`CHANGES_BOUND_MS`, 1000 ms) plus the time for the regional nodes
/// to leave the removed node (its streams end within the core's progress interval of the removal) and the
/// probes' own latency.
const BOUND_MS: f64 = 1_000.0 + 1_000.0;

#[test]
fn a_removed_core_node_left_running_does_not_freeze_the_feed() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-membership-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec::local(&dir))?;

    propagation::admin(&mesh, &["set-voters", "--voters", "2,3", "--remove", "1"])?;
    poll_every(Duration::from_millis(100), Duration::from_secs(20), "a leader among nodes 2 and 3", || {
        Ok(mesh.leader_id().filter(|leader| [2, 3].contains(leader)))
    })?;
    // Node 1 keeps its frozen state: it is no longer one of the tiers that must refuse.
    let tiers = Tiers::of(&mesh, "dev")?.without("core-0");

    let tenant = propagation::tenant(&mesh, &tiers, 1, 2, "membership")?;
    let model = propagation::model_version(&mesh, &tiers, 1, "membership")?;
    for scope in [&tenant, &model] {
        print!("{}", scope.table());
        assert!(
            scope.worst_p99() < BOUND_MS,
            "{} reached a tier after {} ms",
            scope.scope,
            scope.worst_p99()
        );
    }
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
