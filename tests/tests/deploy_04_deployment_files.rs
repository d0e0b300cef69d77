//! The deployment files in `deploy/` and the edge's `wrangler.toml` environments, each through the
//! validator an operator would run: `systemd-analyze verify` and `security` for the units,
//! kubernetes-validate (strict, against two Kubernetes versions' schemas) for the objects, hadolint for
//! the container files, each daemon's own `--print-config` for every configuration they carry, and
//! `wrangler deploy --dry-run` for each edge environment. A pod started as systemd starts a `Type=notify`
//! unit tells the socket it is ready (and then stopping), and serves the plain probe port the
//! Kubernetes objects probe.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context as _};
use mesh_harness::{paths, ports, process::ManagedProcess, wrangler};

fn run(command: &mut Command) -> anyhow::Result<Output> {
    let output = command.output().with_context(|| format!("running {command:?}"))?;
    Ok(output)
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn files(dir: &Path, suffix: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    found.sort();
    ensure!(!found.is_empty(), "no {suffix} files in {}", dir.display());
    Ok(found)
}

fn scratch(name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("mesh-test-deploy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[test]
fn systemd_units_verify_and_are_hardened() -> anyhow::Result<()> {
    // The units name the installed binaries; verify checks that ExecStart exists, so the copies checked
    // here name the ones just built.
    let dir = scratch("systemd")?;
    let bin = paths::bin_dir();
    let mut units = Vec::new();
    for unit in files(&paths::deploy_dir().join("systemd"), ".service")? {
        let text = std::fs::read_to_string(&unit)?;
        ensure!(text.contains("Type=notify") && text.contains("User=mesh") && text.contains("LimitNOFILE="));
        let copy = dir.join(unit.file_name().context("a unit's name")?);
        std::fs::write(&copy, text.replace("/usr/local/bin/", &format!("{}/", bin.display())))?;
        units.push(copy);
    }
    let verified = run(Command::new("systemd-analyze").arg("verify").args(&units))?;
    ensure!(
        verified.status.success() && text(&verified).trim().is_empty(),
        "systemd-analyze verify: {}",
        text(&verified)
    );
    for unit in &units {
        let scored = run(Command::new("systemd-analyze")
            .args(["security", "--offline=true", "--no-pager"])
            .arg(unit))?;
        let report = text(&scored);
        let line =
            report.lines().find(|l| l.contains("Overall exposure level")).context("no exposure level")?;
        let score: f64 = line
            .split(':')
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("no score in {line:?}"))?;
        println!("{}: exposure {score} of 10", unit.display());
        // systemd rates up to 2.0 "OK", the best of its five levels.
        ensure!(score <= 2.0, "{line}");
    }
    Ok(())
}

#[test]
fn kubernetes_objects_match_the_api_schemas_and_their_configs_parse() -> anyhow::Result<()> {
    let tools = paths::deploy_tools();
    ensure!(tools.join("kubernetes_validate").exists(), "run `.ci/setup.sh deploy-tools`");
    let kube = paths::deploy_dir().join("kubernetes");
    let mut objects = files(&kube, ".yaml")?;
    objects.extend(files(&kube.join("cert-manager"), ".yaml")?);
    for version in ["1.29.0", "1.37.0"] {
        let checked = run(Command::new("python3")
            .env("PYTHONPATH", &tools)
            .args(["-m", "kubernetes_validate", "--strict", "-k", version])
            .args(&objects))?;
        let report = text(&checked);
        ensure!(checked.status.success(), "kubernetes-validate {version}: {report}");
        // cert-manager's kinds are not in the Kubernetes schemas; everything else must pass.
        for line in report.lines().filter(|l| !l.starts_with("INFO")) {
            ensure!(
                line.contains("Couldn't find schema for kind") && line.contains("cert-manager.io"),
                "{line}"
            );
        }
        println!(
            "kubernetes {version}: {} objects passed",
            report.lines().filter(|l| l.contains(" passed ")).count()
        );
    }
    // Each daemon accepts the configuration file its ConfigMap mounts.
    let extract = "import json, sys, yaml\nout = {}\nfor path in sys.argv[1:]:\n    for doc in yaml.safe_load_all(open(path)):\n        if doc and doc.get('kind') == 'ConfigMap':\n            out.update(doc.get('data', {}))\nprint(json.dumps(out))\n";
    let dumped = run(Command::new("python3").env("PYTHONPATH", &tools).args(["-c", extract]).args(&objects))?;
    ensure!(dumped.status.success(), "{}", text(&dumped));
    let configs: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&dumped.stdout)?;
    let dir = scratch("configmaps")?;
    for (name, body) in &configs {
        let path = dir.join(name);
        std::fs::write(&path, body.as_str().context("a ConfigMap value")?)?;
        check_config(&path)?;
    }
    ensure!(configs.len() == 3, "a configuration for each daemon: {:?}", configs.keys());
    Ok(())
}

/// `--print-config` of the daemon the file is named for accepts it (a key that names no setting, or a
/// bad value, is an error).
fn check_config(path: &Path) -> anyhow::Result<()> {
    let name = path.file_stem().and_then(|s| s.to_str()).context("a file name")?;
    let mut command = Command::new(paths::binary(name));
    command.arg("--config").arg(path).arg("--print-config");
    if name == "core-node" {
        command.args(["--id", "1"]);
    }
    let printed = run(&mut command)?;
    ensure!(printed.status.success(), "{name} refuses {}: {}", path.display(), text(&printed));
    Ok(())
}

#[test]
fn configuration_files_parse() -> anyhow::Result<()> {
    let found = files(&paths::deploy_dir().join("config"), ".toml")?;
    ensure!(found.len() == 3);
    for path in found {
        check_config(&path)?;
    }
    Ok(())
}

#[test]
fn container_files_pass_hadolint() -> anyhow::Result<()> {
    let hadolint = paths::deploy_tools().join("bin/hadolint");
    ensure!(hadolint.exists(), "run `.ci/setup.sh deploy-tools`");
    let containers = files(&paths::deploy_dir().join("containers"), ".Dockerfile")?;
    ensure!(containers.len() == 3, "one per daemon");
    for file in &containers {
        let text_of = std::fs::read_to_string(file)?;
        ensure!(
            text_of.contains("AS build") && text_of.contains("USER 10001"),
            "{}: multi-stage, non-root",
            file.display()
        );
        let dockerignore = PathBuf::from(format!("{}.dockerignore", file.display()));
        ensure!(dockerignore.exists(), "{} keeps target/ out of the context", dockerignore.display());
    }
    let linted = run(Command::new(&hadolint).args(&containers))?;
    ensure!(linted.status.success(), "hadolint: {}", text(&linted));
    Ok(())
}

#[test]
fn each_edge_environment_builds() -> anyhow::Result<()> {
    for env in ["staging", "production"] {
        let out = scratch(&format!("wrangler-{env}"))?;
        let built =
            run(wrangler::command()?.args(["deploy", "--dry-run", "--env", env, "--outdir"]).arg(&out))?;
        let report = text(&built);
        ensure!(built.status.success(), "wrangler deploy --dry-run --env {env}: {report}");
        ensure!(!report.contains("WARNING"), "{env}: {report}");
        for binding in ["REGIONAL_MTLS", "HOTSET", "REGIONAL_URLS"] {
            ensure!(report.contains(binding), "{env} binds {binding}: {report}");
        }
    }
    Ok(())
}

#[test]
fn a_pod_tells_systemd_it_is_ready_and_serves_the_plain_probes() -> anyhow::Result<()> {
    let dir = scratch("notify")?;
    let socket_path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path)?;
    socket.set_read_timeout(Some(Duration::from_secs(120)))?;
    let (listen, probes) = (ports::free_port()?, ports::free_port()?);
    let mut command = Command::new(paths::binary("inference-pod"));
    command
        .arg("--model-path")
        .arg(paths::smollm2_gguf())
        .args(["--listen", &format!("127.0.0.1:{listen}"), "--probe-listen", &format!("127.0.0.1:{probes}")])
        .env("NOTIFY_SOCKET", &socket_path)
        .env("MESH_INSECURE_TIER_SECRET", "deploy-test-secret-of-at-least-32-bytes")
        .stdin(Stdio::null());
    let mut pod = ManagedProcess::spawn("inference-pod", command, &dir)?;
    let mut buffer = [0u8; 256];
    let got = socket.recv(&mut buffer).context("no READY=1 within 120 s")?;
    ensure!(&buffer[..got] == b"READY=1", "{:?}", String::from_utf8_lossy(&buffer[..got]));
    // Ready means /readyz says so, on the plain probe port that needs no certificate.
    let agent = mesh_harness::client::agent(Duration::from_secs(5));
    for path in ["/livez", "/readyz"] {
        let reply = agent.get(format!("http://127.0.0.1:{probes}{path}")).call()?;
        ensure!(reply.status().as_u16() == 200, "{path}");
    }
    let status = match agent.get(format!("http://127.0.0.1:{probes}/metrics")).call() {
        Ok(reply) => reply.status().as_u16(),
        Err(ureq::Error::StatusCode(code)) => code,
        Err(error) => bail!("the probe port: {error}"),
    };
    ensure!(status == 404, "the probe port serves only the probes, not /metrics ({status})");
    pod.stop(Duration::from_secs(10));
    let got = socket.recv(&mut buffer).context("no STOPPING=1")?;
    ensure!(&buffer[..got] == b"STOPPING=1", "{:?}", String::from_utf8_lossy(&buffer[..got]));
    Ok(())
}
