//! A regional node keeps its exact cache on disk (sled): after a restart it answers what it held
//! before from its own cache (`HIT-REGIONAL`), not from the core (`HIT-CORE`).

use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

#[test]
fn a_restarted_regional_node_still_holds_its_hot_set() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-hotset-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut mesh = Mesh::start(MeshSpec { regional_nodes: 1, edge: false, ..MeshSpec::local(&dir) })?;
    let question = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 16,
                          "messages": [{"role": "user", "content": "Name a primary colour."}]});

    let miss = mesh.regional_client(0).chat(&question)?;
    assert_eq!(miss.status, 200, "{}", miss.body);
    assert_eq!(miss.header("x-cache"), Some("MISS"));
    let hit = mesh.regional_client(0).chat(&question)?;
    assert_eq!(hit.header("x-cache"), Some("HIT-REGIONAL"));

    mesh.restart_regional(0)?;
    let after = mesh.regional_client(0).chat(&question)?;
    assert_eq!(after.status, 200, "{}", after.body);
    assert_eq!(after.header("x-cache"), Some("HIT-REGIONAL"), "restored from disk: {:?}", after.headers);
    assert_eq!(after.content(), miss.content());

    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
