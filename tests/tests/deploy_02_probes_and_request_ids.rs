//! What operators expect of each daemon: `/livez` (the process serves) and `/readyz` (it may take
//! traffic) apart on the core node, the regional node and the pod, and an `x-request-id` on every answer
//! at the edge and the regional node: the caller's when a log can hold it, else one of the tier's (at a
//! regional node, the request's trace id), and the edge passes its id on to the regional node. The
//! regional node logs one JSON object a line (`--log-format json`).

use std::time::Duration;

use mesh_harness::client::{self, ChatClient};
use mesh_harness::otlp_receiver::{OtlpReceiver, ReceivedSpan};
use mesh_harness::poll::poll_until;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

fn status(url: &str) -> anyhow::Result<u16> {
    Ok(client::agent(Duration::from_secs(5)).get(url).call()?.status().as_u16())
}

#[test]
fn probes_answer_apart_and_every_answer_has_a_request_id() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-probes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The regional node's spans go to a collector, to see the request id the edge passed on.
    let collector = OtlpReceiver::start()?;
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        regional_args: vec![
            "--log-format".into(),
            "json".into(),
            "--otlp-endpoint".into(),
            collector.endpoint(),
        ],
        ..MeshSpec::local(&dir)
    })?;
    for base in [mesh.core_url(0), mesh.regional_url(0), mesh.pod_url()] {
        for probe in ["/livez", "/readyz"] {
            assert_eq!(status(&format!("{base}{probe}"))?, 200, "{base}{probe}");
        }
    }

    let ask = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 4,
                     "messages": [{"role": "user", "content": "Name a color."}]});
    let edge = mesh.client();
    let given = edge.chat_with_headers(&ask, &[("x-request-id", "req-abc-123")])?;
    assert_eq!((given.status, given.header("x-request-id")), (200, Some("req-abc-123")));
    // The edge passes the id on: the regional node's request span carries it.
    poll_until(Duration::from_secs(15), "the regional span with the edge's request id", || {
        let spans = collector.spans();
        let passed = |s: &ReceivedSpan| {
            s.service == "mesh-regional"
                && s.attributes.iter().any(|(k, v)| k == "request_id" && v == "req-abc-123")
        };
        Ok(spans.iter().any(passed).then_some(()))
    })?;
    let made = edge.chat(&ask)?;
    let id = made.header("x-request-id").unwrap_or_default();
    assert!(id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()), "the edge gave {id:?}");
    let refused = edge.chat_raw("{not json")?;
    assert_eq!(refused.status, 400);
    assert!(refused.header("x-request-id").is_some(), "an error has one too");

    let regional = mesh.regional_client(0);
    let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    // A new question, so that it is generated (and logged with its trace id).
    let fresh = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 4,
                       "messages": [{"role": "user", "content": "Name a fruit."}]});
    let traced = regional.chat_with_headers(&fresh, &[("traceparent", trace)])?;
    assert_eq!(traced.header("x-request-id"), Some("4bf92f3577b34da6a3ce929d0e0e4736"), "the trace id");
    let spaced = regional.chat_with_headers(&ask, &[("x-request-id", "two words")])?;
    let id = spaced.header("x-request-id").unwrap_or_default();
    assert!(id.len() == 32, "an id no log can hold is replaced: {id:?}");
    let unknown = ChatClient::new(&mesh.regional_url(0), Some("sk-dev")).get("/no-such-path")?;
    assert_eq!(unknown.status, 404);
    assert!(unknown.header("x-request-id").is_some());

    // `--log-format json`: every line of the regional node's log is one JSON object, and a request's
    // lines carry its trace id in their spans.
    let log = std::fs::read_to_string(dir.join("logs/regional-1.log"))?;
    let lines: Vec<serde_json::Value> =
        log.lines().filter(|l| !l.trim().is_empty()).map(serde_json::from_str).collect::<Result<_, _>>()?;
    assert!(lines.iter().all(|l| l["level"].is_string() && l["fields"].is_object()), "{log}");
    assert!(log.contains("4bf92f3577b34da6a3ce929d0e0e4736"), "the trace id is in the request's lines");
    Ok(())
}
