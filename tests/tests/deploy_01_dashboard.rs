//! The operator's files under `deploy/`: the Grafana dashboard loads, and every metric it and the
//! Prometheus alert rules name is exported by a running mesh's daemons (the pod, a core node, a
//! regional node with an audited semantic hit).

use std::collections::BTreeSet;
use std::ops::ControlFlow::{Break, Continue};
use std::time::Duration;

use mesh_harness::poll::poll_reporting;
use mesh_harness::{paths, Mesh, MeshSpec};
use serde_json::json;

/// Series names in a PromQL expression, as written: a counter's with `_total`, a histogram's with
/// `_bucket`, `_sum` or `_count`. Names of the old prefixes (`core_`, `inference_`) are collected too, so
/// that one left behind by a renaming is reported as not exported.
fn metric_names(expr: &str) -> BTreeSet<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|word| ["mesh_", "core_", "inference_"].iter().any(|p| word.starts_with(p)))
        .map(str::to_owned)
        .collect()
}

/// The series names a daemon's `/metrics` exports, from the families of its `# TYPE` lines (OpenMetrics):
/// a counter family `x` is queried as `x_total`, a histogram `x` as `x_bucket`, `x_sum` and `x_count`,
/// a gauge as `x`.
fn exported(url: &str) -> anyhow::Result<BTreeSet<String>> {
    let agent = mesh_harness::client::agent(Duration::from_secs(5));
    let text = agent.get(format!("{url}/metrics")).call()?.into_body().read_to_string()?;
    let mut names = BTreeSet::new();
    for family in text.lines().filter_map(|line| line.strip_prefix("# TYPE ")) {
        let mut words = family.split_whitespace();
        let (Some(family), Some(kind)) = (words.next(), words.next()) else { continue };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|suffix| format!("{family}{suffix}")));
    }
    Ok(names)
}

#[test]
fn the_dashboard_and_alerts_name_only_exported_metrics() -> anyhow::Result<()> {
    let deploy = paths::repo_root().join("deploy");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(deploy.join("grafana/mesh-dashboard.json"))?)?;
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8, "a panel per concern");
    let mut referenced = BTreeSet::new();
    for panel in panels {
        assert_eq!(panel["type"], "timeseries", "charts, not tables: {}", panel["title"]);
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{} has no query", panel["title"]);
        for target in targets {
            referenced.extend(metric_names(target["expr"].as_str().expect("an expression")));
        }
    }
    let alerts = std::fs::read_to_string(deploy.join("prometheus/alerts.yml"))?;
    let exprs: Vec<&str> = alerts.lines().filter_map(|l| l.trim().strip_prefix("expr:")).collect();
    assert!(exprs.len() >= 5, "leader lost, breaker open, replication lag, agreement, saturation");
    for expr in exprs {
        referenced.extend(metric_names(expr));
    }

    let dir = std::env::temp_dir().join(format!("mesh-test-deploy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        regional_args: vec!["--semantic-audit-fraction".into(), "1".into()],
        ..MeshSpec::local(&dir)
    })?;
    let ask = |question: &str| {
        json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 16,
               "messages": [{"role": "system", "content": "You are a concise assistant."},
                            {"role": "user", "content": question}]})
    };
    let regional = mesh.regional_client(0);
    assert_eq!(regional.chat(&ask("How do I reverse a list in Python?"))?.status, 200);
    let paraphrase = regional.chat(&ask("How can I reverse a list in python"))?;
    assert_eq!(paraphrase.header("x-cache"), Some("HIT-REGIONAL-SEMANTIC"), "{:?}", paraphrase.headers);
    // The audit of that hit runs off the request path: its agreement metric appears a moment later.
    let what = "the audit's mesh_semantic_agreement exported";
    let exports = poll_reporting(Duration::from_millis(200), Duration::from_secs(20), what, || {
        let mut exports = exported(&mesh.pod_url())?;
        exports.extend(exported(&mesh.core_url(0))?);
        exports.extend(exported(&mesh.regional_url(0))?);
        Ok(if exports.contains("mesh_semantic_agreement") {
            Break(exports)
        } else {
            Continue(format!("not exported: {:?}", referenced.difference(&exports).collect::<Vec<_>>()))
        })
    })?;
    let missing: Vec<&String> = referenced.difference(&exports).collect();
    println!("deploy: {} metrics referenced, all of them exported", referenced.len());
    assert!(missing.is_empty(), "named in deploy/ but exported by no daemon: {missing:?}");
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
