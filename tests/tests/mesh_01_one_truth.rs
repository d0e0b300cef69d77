//! One truth across the tiers, through the real binaries: an invalidation of one key at one regional
//! node, of a whole tenant, and a model-version bump at the core each reach every tier (the edge, both
//! regional nodes, all three core nodes) within the documented bound, and a bumped model's old answers
//! are generated again under the new version at every tier, edge included. Prints the propagation time
//! per tier (`mesh bench propagation` measures more rounds).

use mesh_harness::propagation::{self, Tiers};
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

/// The documented bound at the edge (`CHANGES_BOUND_MS`, its default) plus the regional node's share
/// (the feed's delivery, milliseconds) and the probe's own latency.
const BOUND_MS: f64 = 1_000.0 + 1_000.0;

#[test]
fn invalidations_and_bumps_reach_every_tier_within_the_bound() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-truth-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec::local(&dir))?;
    let tiers = Tiers::of(&mesh, "dev")?;

    let keys = propagation::keys(&tiers, &mesh.regional_client(0), 6, "truth")?;
    let tenant = propagation::tenant(&mesh, &tiers, 1, 3, "truth")?;
    let old = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 6,
                     "messages": [{"role": "user", "content": "Name a color of the sea."}]});
    let before = tiers.warm(old.clone())?;
    let model = propagation::model_version(&mesh, &tiers, 1, "truth")?;
    for scope in [&keys, &tenant, &model] {
        print!("{}", scope.table());
        assert!(
            scope.worst_p99() < BOUND_MS,
            "{} reached a tier after {} ms",
            scope.scope,
            scope.worst_p99()
        );
    }

    // After the bump the old question is answered under the new version, through the edge too (its
    // answer may already be the core's refresh of the old version's hottest prompts).
    let reply = mesh.client().chat(&old)?;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_ne!(reply.header("x-cache-key"), Some(before.key.as_str()), "keyed under the new version");
    assert_ne!(
        reply.header("etag").filter(|_| reply.header("x-cache") == Some("HIT-EDGE")),
        Some(before.etag.as_str())
    );
    for i in 0..mesh.regional_nodes() {
        let regional = mesh.regional_client(i).chat(&old)?;
        assert_eq!(regional.status, 200, "{}", regional.body);
        assert_eq!(regional.header("x-cache-key"), reply.header("x-cache-key"), "regional-{i} agrees");
    }
    Ok(())
}
