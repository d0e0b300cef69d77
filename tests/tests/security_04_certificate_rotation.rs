//! Certificates rotate without a restart, through the real binaries and the operator's command: node
//! certificates renewed under the same CA (`mesh certs --renew`), then the whole mesh moved to a new CA
//! in the three steps an operator takes (both CAs trusted, certificates of the new CA, the new CA
//! alone). The core node and the pod read their files again on a timer (`--tls-reload-secs 1`), the
//! regional node only on SIGHUP (`--tls-reload-secs 0`). After each step every listener serves the
//! new certificate, a certificate of the retired CA is refused, and connections the daemons open
//! afterwards (to a restarted pod, to a restarted core node) present their reloaded certificates.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use daemon_runtime::TierRole;
use mesh_harness::certs::{DevCa, Validity};
use mesh_harness::{client, paths, Mesh, MeshSpec};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::json;

/// Each certified node of the mesh below, as `mesh certs` names it.
const NODES: [(&str, TierRole); 6] = [
    ("inference-pod", TierRole::Pod),
    ("edge", TierRole::Edge),
    ("admin", TierRole::Admin),
    ("prometheus", TierRole::Metrics),
    ("core-1", TierRole::Core),
    ("regional-1", TierRole::Regional),
];

/// How long a reload may take: the timer's second, or the signal, and a handshake.
const RELOAD_WITHIN: Duration = Duration::from_secs(15);

#[test]
fn certificates_and_the_ca_rotate_without_a_restart() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-cert-rotation-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let reload_each_second = ["--tls-reload-secs", "1"].map(String::from).to_vec();
    let mut mesh = Mesh::start(MeshSpec {
        core_nodes: 1,
        regional_nodes: 1,
        edge: false,
        tls: true,
        core_args: reload_each_second.clone(),
        pod_args: reload_each_second,
        regional_args: ["--tls-reload-secs", "0"].map(String::from).to_vec(),
        ..MeshSpec::local(&dir)
    })?;
    let certs = std::path::absolute(&dir)?.join("certs");
    let listeners = [
        ("core-1", mesh.core_url(0), TierRole::Core),
        ("inference-pod", mesh.pod_url(), TierRole::Pod),
        ("regional-1", mesh.regional_url(0), TierRole::Regional),
    ];
    let old_ca = mesh.ca().expect("a TLS mesh").pem().to_owned();
    ask(&mesh, "Name a colour of the sky.")?;

    // 1. Renewed under the same CA by the operator's command.
    let before: Vec<Vec<u8>> = listeners
        .iter()
        .map(|(_, url, role)| served_certificate(url, *role, &old_ca, &certs))
        .collect::<Result<_, _>>()?;
    let renew = Command::new(paths::binary("mesh"))
        .args(["certs", "--renew", "--dir"])
        .arg(&certs)
        .args(["--nodes", "core-1=core,inference-pod=pod,regional-1=regional"])
        .output()?;
    anyhow::ensure!(renew.status.success(), "mesh certs --renew: {}", String::from_utf8_lossy(&renew.stderr));
    hang_up(&mesh, "regional-1")?;
    for ((name, url, role), old) in listeners.iter().zip(&before) {
        let took = wait_for(|| Ok(served_certificate(url, *role, &old_ca, &certs)? != *old))?;
        println!("rotation: {name} serves its renewed certificate after {took:?}");
    }
    ask(&mesh, "Name a colour of grass.")?;

    // 2. A new CA. First both are trusted everywhere...
    let new_ca = DevCa::new("llm-cache-mesh rotated CA")?;
    let both = format!("{old_ca}{}", new_ca.pem());
    std::fs::write(certs.join("ca.pem"), &both)?;
    client::trust_mesh_ca(both.as_bytes());
    hang_up(&mesh, "regional-1")?;
    // ...then every node gets a certificate of the new CA (the harness's own clients too)...
    let old_admin = read_pair(&certs, "admin")?;
    for (name, role) in NODES {
        new_ca.issue(name, role, Validity::Current)?.write(&certs, name)?;
    }
    let prometheus = read_pair(&certs, "prometheus")?;
    client::present_by_default(&prometheus.0, &prometheus.1);
    hang_up(&mesh, "regional-1")?;
    for (name, url, role) in &listeners {
        let took = wait_for(|| Ok(served_certificate(url, *role, new_ca.pem(), &certs).is_ok()))?;
        println!("rotation: {name} serves a certificate of the new CA after {took:?}");
    }
    ask(&mesh, "Name a colour of snow.")?;
    // ...and last the old CA goes.
    std::fs::write(certs.join("ca.pem"), new_ca.pem())?;
    client::trust_mesh_ca(new_ca.pem().as_bytes());
    hang_up(&mesh, "regional-1")?;
    for (name, url, _) in &listeners {
        let took = wait_for(|| Ok(get_healthz(url, &old_admin).is_err()))?;
        println!("rotation: {name} refuses a certificate of the retired CA after {took:?}");
        anyhow::ensure!(
            get_healthz(url, &read_pair(&certs, "admin")?)? == 200,
            "{name}: the new admin certificate"
        );
    }

    // New connections between the daemons present the reloaded certificates: the core dials a
    // restarted pod (which trusts only the new CA), the regional node a restarted core node.
    mesh.stop_pod();
    mesh.start_all()?;
    wait_for(|| ask(&mesh, "Name a colour of coal.").map(|()| true))?;
    mesh.kill_core(0);
    mesh.start_all()?;
    wait_for(|| ask(&mesh, "Name a colour of blood.").map(|()| true))?;
    println!("rotation: the mesh answered at every step; the restarted pod and core node were dialled with reloaded certificates");
    drop(mesh);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// A new question through the regional node, answered by the pod (200, with content).
fn ask(mesh: &Mesh, question: &str) -> anyhow::Result<()> {
    let body = json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 6,
                      "messages": [{"role": "user", "content": question}]});
    let reply = mesh.regional_client(0).chat(&body)?;
    anyhow::ensure!(
        reply.status == 200 && reply.content().is_some(),
        "{question}: {} {}",
        reply.status,
        reply.body
    );
    Ok(())
}

/// Sends SIGHUP to the mesh's process `name`.
fn hang_up(mesh: &Mesh, name: &str) -> anyhow::Result<()> {
    let (_, pid, _) = mesh.processes().into_iter().find(|(n, _, _)| n == name).expect("running");
    anyhow::ensure!(Command::new("kill").args(["-HUP", &pid.to_string()]).status()?.success(), "kill -HUP");
    Ok(())
}

/// Polls `done` every 100 ms until it holds; how long that took.
fn wait_for(mut done: impl FnMut() -> anyhow::Result<bool>) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        match done() {
            Ok(true) => return Ok(started.elapsed()),
            outcome if started.elapsed() > RELOAD_WITHIN => {
                anyhow::bail!("not within {RELOAD_WITHIN:?}: last {outcome:?}")
            }
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Node `name`'s certificate and key as they are on disk now.
fn read_pair(certs: &std::path::Path, name: &str) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    Ok((std::fs::read(certs.join(format!("{name}.pem")))?, std::fs::read(certs.join(format!("{name}.key")))?))
}

/// `GET /healthz` of `url` presenting `client`: the status, or the error of a refused handshake.
fn get_healthz(url: &str, client: &(Vec<u8>, Vec<u8>)) -> anyhow::Result<u16> {
    let agent = client::agent_with_certificate(Duration::from_secs(5), Some((&client.0, &client.1)));
    Ok(agent.get(format!("{url}/healthz")).call()?.status().as_u16())
}

/// The certificate the server of `role` at `url` presents, checked against `ca_pem` alone (an error
/// when it is not of that CA). The client presents the current `prometheus` certificate in `certs`
/// (the listeners of the core and the pod want one).
fn served_certificate(
    url: &str,
    role: TierRole,
    ca_pem: &str,
    certs: &std::path::Path,
) -> anyhow::Result<Vec<u8>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let chain =
        CertificateDer::pem_file_iter(certs.join("prometheus.pem"))?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(certs.join("prometheus.key"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)?;
    let name = ServerName::try_from(role.dns_name())?.to_owned();
    let mut connection = rustls::ClientConnection::new(Arc::new(config), name)?;
    let mut tcp = std::net::TcpStream::connect(url.trim_start_matches("https://"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
    while connection.is_handshaking() {
        connection.complete_io(&mut tcp)?;
    }
    let leaf = connection
        .peer_certificates()
        .and_then(|chain| chain.first())
        .ok_or_else(|| anyhow::anyhow!("no certificate"))?;
    Ok(leaf.as_ref().to_vec())
}
