//! Faults of the walking skeleton, through the real processes: a killed core follower does not stop new
//! requests, and a whole-mesh restart on the same data directories keeps what was committed.

use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

fn request(question: &str) -> serde_json::Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 24,
           "messages": [{"role": "user", "content": question}]})
}

#[test]
fn follower_loss_and_full_restart_keep_serving_and_keep_entries() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-faults-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut mesh = Mesh::start(MeshSpec { edge: false, regional_nodes: 2, ..MeshSpec::local(&dir) })?;

    let first = request("Name a primary color.");
    let before = mesh.regional_client(0).chat(&first)?;
    assert_eq!(before.status, 200, "{}", before.body);
    assert_eq!(before.header("x-cache"), Some("MISS"));
    let answer = before.content().expect("content");

    // Kill one follower with SIGKILL; a new request still completes, through either regional node.
    let leader = mesh.leader_id().expect("a leader");
    let follower = (0..3).find(|i| Mesh::core_id(*i) != leader).expect("a follower");
    mesh.kill_core(follower);
    for regional in 0..2 {
        let fresh =
            mesh.regional_client(regional).chat(&request(&format!("Count from one to {}.", regional + 3)))?;
        assert_eq!(fresh.status, 200, "after killing core {}: {}", Mesh::core_id(follower), fresh.body);
        assert_eq!(fresh.header("x-cache"), Some("MISS"));
        assert!(!fresh.content().unwrap_or_default().trim().is_empty());
    }

    // Restart every process on the same data directories: the entry is still there, from the core's state.
    mesh.restart()?;
    // Ready means a leader is known; the restarted follower may still be catching up on what it missed.
    mesh.wait_core_converged(std::time::Duration::from_secs(30))?;
    let after = mesh.regional_client(1).chat(&first)?;
    assert_eq!(after.status, 200, "{}", after.body);
    assert_eq!(after.header("x-cache"), Some("HIT-CORE"), "after restart: {:?}", after.headers);
    assert_eq!(after.content().as_deref(), Some(answer.as_str()));
    let again = mesh.regional_client(1).chat(&first)?;
    assert_eq!(again.header("x-cache"), Some("HIT-REGIONAL"));
    assert_eq!(again.content().as_deref(), Some(answer.as_str()));

    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
