//! The operator's dashboard as a person sees it: a mesh serves traffic (misses, exact and semantic
//! hits), `mesh dashboard` scrapes it, and headless Chromium (Debian's `chromium`) opens the page. The
//! page must draw every chart, most of them with data, and a screenshot is kept in
//! `target/dashboard.png`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use mesh_harness::{paths, Mesh, MeshSpec};
use serde_json::json;

const CHROMIUM: &str = "/usr/bin/chromium";

/// Runs headless Chromium on `url` with `action` (`--dump-dom`, `--screenshot=...`); returns stdout.
fn chromium(url: &str, action: &str, profile: &Path) -> anyhow::Result<String> {
    // Without the background-networking flags Chromium dials Google's hosts at start, which this
    // closed network refuses.
    let output = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1400,2400",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(action)
        .arg(url)
        .output()?;
    anyhow::ensure!(output.status.success(), "chromium: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The value of `data-<name>` on the page's `<body>`.
fn body_attribute(dom: &str, name: &str) -> Option<u64> {
    let body = &dom[dom.find("<body")?..];
    let body = &body[..body.find('>')?];
    let rest = &body[body.find(&format!("data-{name}=\""))? + name.len() + 7..];
    rest[..rest.find('"')?].parse().ok()
}

#[test]
fn the_dashboard_draws_every_chart_with_live_data() -> anyhow::Result<()> {
    assert!(Path::new(CHROMIUM).exists(), "{CHROMIUM} is missing: run .ci/setup.sh apt");
    let dir = std::env::temp_dir().join(format!("mesh-test-dashboard-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        regional_args: vec!["--semantic-audit-fraction".into(), "1".into()],
        ..MeshSpec::local(&dir)
    })?;
    let mut options = mesh_tool::dashboard::DashboardOptions::for_mesh(&mesh, "127.0.0.1:0")?;
    options.interval = Duration::from_millis(500);
    let dashboard = mesh_tool::dashboard::Dashboard::start(options)?;

    let regional = mesh.regional_client(0);
    let ask = |question: &str| {
        json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 16,
               "messages": [{"role": "user", "content": question}]})
    };
    let questions =
        ["How do I reverse a list in Python?", "What is the boiling point of water at sea level?"];
    let paraphrases =
        ["How can I reverse a list in python", "What's the boiling point of water at sea level?"];
    for round in 0..4 {
        for question in questions.iter().chain(if round > 0 { paraphrases.iter() } else { [].iter() }) {
            assert_eq!(regional.chat(&ask(question))?.status, 200);
        }
        std::thread::sleep(Duration::from_millis(600));
    }

    let profile = dir.join("chromium-profile");
    let dom = chromium(&format!("{}/?interval=500", dashboard.url), "--dump-dom", &profile)?;
    let charts = body_attribute(&dom, "charts");
    let with_data = body_attribute(&dom, "nonzero-charts");
    let panels = mesh_tool::dashboard::panels::all().len() as u64;
    println!("dashboard: {charts:?} charts drawn of {panels}, {with_data:?} with non-zero data");
    assert_eq!(charts, Some(panels), "every chart drawn: {}", &dom[..dom.len().min(2000)]);
    assert!(with_data.unwrap_or(0) >= 8, "most charts carry data after traffic, got {with_data:?}");

    let screenshot = paths::repo_root().join("target/dashboard.png");
    chromium(&dashboard.url, &format!("--screenshot={}", screenshot.display()), &profile)?;
    let size = std::fs::metadata(&screenshot)?.len();
    println!("dashboard: screenshot {} ({size} bytes)", screenshot.display());
    assert!(size > 20_000, "a screenshot of drawn charts, not a blank page");
    drop(dashboard);
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
