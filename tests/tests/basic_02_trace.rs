//! One trace id from the edge to the pod: a request that carries a W3C `traceparent` is logged under
//! that trace id by the edge, the regional node, the core node and the pod it passes through.

use std::ops::ControlFlow::{Break, Continue};
use std::time::Duration;

use mesh_harness::poll::poll_reporting;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

#[test]
fn a_traceparent_is_followed_and_logged_by_every_tier() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-trace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec { core_nodes: 1, regional_nodes: 1, ..MeshSpec::local(&dir) })?;
    let trace_id = "5a1e0f00ddba11c0ffee0123456789ab";
    let traceparent = format!("00-{trace_id}-b7ad6b7169203331-01");
    let question = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 4,
        "messages": [{"role": "user", "content": "Name one planet with rings."}]});
    let reply = mesh.client().chat_with_headers(&question, &[("traceparent", &traceparent)])?;
    assert_eq!((reply.status, reply.header("x-cache")), (200, Some("MISS")), "{}", reply.body);

    // Every tier's log names the trace (the edge's reaches its log through wrangler a moment later).
    let tiers = ["edge", "regional-1", "core-1", "inference-pod"];
    let what = "a log line with the trace id from every tier";
    poll_reporting(Duration::from_millis(200), Duration::from_secs(10), what, || {
        let missing: Vec<&str> = tiers
            .iter()
            .copied()
            .filter(|tier| {
                std::fs::read_dir(mesh.log_dir())
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|file| file.file_name().to_string_lossy().starts_with(tier))
                    .all(|file| !std::fs::read_to_string(file.path()).unwrap_or_default().contains(trace_id))
            })
            .collect();
        Ok(if missing.is_empty() {
            Break(())
        } else {
            Continue(format!("none from {missing:?} (logs in {})", mesh.log_dir().display()))
        })
    })?;
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
