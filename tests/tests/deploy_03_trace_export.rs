//! OpenTelemetry trace export (`--otlp-endpoint`): a request sent to a regional node with a
//! `traceparent` reaches a small OTLP collector as one trace, with a span from the regional node, the
//! core node and the pod, each tier's span the child of the one that called it.

use std::time::Duration;

use mesh_harness::otlp_receiver::{OtlpReceiver, ReceivedSpan};
use mesh_harness::poll::poll_until;
use mesh_harness::{Mesh, MeshSpec};
use serde_json::json;

const TRACE_ID: &str = "5af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";

/// The span of `service` named `name` in the trace.
fn span<'a>(spans: &'a [ReceivedSpan], service: &str, name: &str) -> Option<&'a ReceivedSpan> {
    spans.iter().find(|s| s.service == service && s.name == name)
}

#[test]
fn a_request_is_exported_as_one_trace_across_the_tiers() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-otlp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let collector = OtlpReceiver::start()?;
    let export = vec!["--otlp-endpoint".to_owned(), collector.endpoint()];
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        regional_args: export.clone(),
        core_args: export.clone(),
        pod_args: export,
        ..MeshSpec::local(&dir)
    })?;

    let question = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 4,
                          "messages": [{"role": "user", "content": "Name a planet."}]});
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let answer = mesh.regional_client(0).chat_with_headers(&question, &[("traceparent", &traceparent)])?;
    assert_eq!(answer.status, 200);

    poll_until(Duration::from_secs(15), "the three tiers' spans", || {
        let spans: Vec<ReceivedSpan> =
            collector.spans().into_iter().filter(|s| s.trace_id == TRACE_ID).collect();
        let tiers = [("mesh-regional", "chat"), ("mesh-core", "core.complete"), ("mesh-pod", "generate")];
        Ok(tiers.iter().all(|(service, name)| span(&spans, service, name).is_some()).then_some(()))
    })?;
    // What closed after those (a generation's own span) has had a flush to arrive in.
    std::thread::sleep(Duration::from_millis(2_500));
    let spans: Vec<ReceivedSpan> = collector.spans().into_iter().filter(|s| s.trace_id == TRACE_ID).collect();
    let names: Vec<String> = spans.iter().map(|s| format!("{}/{}", s.service, s.name)).collect();
    let regional =
        span(&spans, "mesh-regional", "chat").ok_or_else(|| anyhow::anyhow!("no chat span: {names:?}"))?;
    let core = span(&spans, "mesh-core", "core.complete")
        .ok_or_else(|| anyhow::anyhow!("no core span: {names:?}"))?;
    let pod =
        span(&spans, "mesh-pod", "generate").ok_or_else(|| anyhow::anyhow!("no pod span: {names:?}"))?;
    // Each tier serves its caller: a server span whose parent is the caller's span.
    assert_eq!(regional.parent_span_id.as_deref(), Some(CALLER_SPAN));
    assert_eq!(core.parent_span_id.as_deref(), Some(regional.span_id.as_str()), "{spans:#?}");
    assert_eq!(pod.parent_span_id.as_deref(), Some(core.span_id.as_str()), "{spans:#?}");
    assert!([regional, core, pod].iter().all(|s| s.kind == 2 && s.span_id.len() == 16));
    assert!(regional.attributes.iter().any(|(k, v)| k == "tenant" && v == mesh.tenant()), "{regional:?}");
    // Steps inside a tier hang off that tier's span.
    let ids: Vec<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let inner: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.kind == 1).collect();
    assert!(
        inner.iter().all(|s| s.parent_span_id.as_deref().is_some_and(|p| ids.contains(&p))),
        "{inner:#?}"
    );
    println!("exported: {} spans of the trace: {names:?}", spans.len());
    Ok(())
}
