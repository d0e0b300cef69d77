//! A mesh with mutual TLS on every hop: answers flow from the edge to the pod and back, and each
//! daemon's authorization table holds. For every role's certificate, for no certificate, a certificate
//! of another CA and an expired one of the mesh's CA, every gRPC service and edge-only route is called
//! on every daemon: the roles the table names get through, every other caller is refused.

use std::time::Duration;

use daemon_runtime::TierRole;
use mesh_harness::certs::{DevCa, NodeCert, Validity};
use mesh_harness::{Mesh, MeshSpec};
use proto::core::core_store_client::CoreStoreClient;
use proto::core::write_request::Command;
use proto::core::{
    invalidate, BumpModelVersion, Consistency, Invalidate, PutEntry, ReadRequest, SetTenantPolicy,
    WriteRequest,
};
use serde_json::json;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// A caller of the matrix: its name, the role its certificate names (if it is a valid one of the
/// mesh), and its certificate.
struct Caller {
    name: &'static str,
    role: Option<TierRole>,
    cert: Option<NodeCert>,
}

/// One service or route and the roles its row admits.
struct Row {
    name: &'static str,
    daemon: &'static str,
    allowed: &'static [TierRole],
}

const ROWS: &[Row] = &[
    Row { name: "Raft.Vote", daemon: "core", allowed: &[TierRole::Core] },
    Row { name: "CoreCache.Models", daemon: "core", allowed: &[TierRole::Regional] },
    // Core nodes too: a follower forwards a linearizable read to the leader.
    Row {
        name: "CoreStore.Read",
        daemon: "core",
        allowed: &[TierRole::Regional, TierRole::Admin, TierRole::Core],
    },
    // Per command: a regional node invalidates single keys; answers, tenants and models are the admin's.
    // The admitted calls are refused afterwards as invalid, so the matrix changes nothing.
    Row {
        name: "CoreStore.Write invalidate key",
        daemon: "core",
        allowed: &[TierRole::Regional, TierRole::Admin],
    },
    Row { name: "CoreStore.Write invalidate tenant", daemon: "core", allowed: &[TierRole::Admin] },
    Row { name: "CoreStore.Write put", daemon: "core", allowed: &[TierRole::Admin] },
    Row { name: "CoreStore.Write set tenant", daemon: "core", allowed: &[TierRole::Admin] },
    Row { name: "CoreStore.Write bump model", daemon: "core", allowed: &[TierRole::Admin] },
    Row { name: "CoreAdmin.Status", daemon: "core", allowed: &[TierRole::Admin] },
    Row { name: "InferencePod.Health", daemon: "pod", allowed: &[TierRole::Core] },
    // The standard gRPC health service: any mesh certificate (as `/readyz`), and it says SERVING.
    Row { name: "Health.Check core", daemon: "core", allowed: &TierRole::ALL },
    Row { name: "Health.Check pod", daemon: "pod", allowed: &TierRole::ALL },
    Row { name: "Replication.Digest", daemon: "regional", allowed: &[TierRole::Regional] },
    Row { name: "GET /v1/hotset", daemon: "regional", allowed: &[TierRole::Edge] },
    Row { name: "GET /v1/changes", daemon: "regional", allowed: &[TierRole::Edge] },
    // Operators' routes name tenants and peers: any mesh certificate, none without one.
    Row { name: "GET /metrics", daemon: "regional", allowed: &TierRole::ALL },
    Row { name: "GET /v1/replication", daemon: "regional", allowed: &TierRole::ALL },
];

/// What a call got: a gRPC status code or an HTTP status, or a refused connection.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Grpc(Code),
    Http(u16),
    Refused(String),
}

impl Outcome {
    /// Whether the daemon let the call through to its handler. A handshake the server refused ends
    /// the connection: the call sees it as unavailable, unknown or cancelled.
    fn admitted(&self) -> bool {
        match self {
            Outcome::Grpc(code) => !matches!(
                code,
                Code::PermissionDenied
                    | Code::Unauthenticated
                    | Code::Unavailable
                    | Code::Unknown
                    | Code::Cancelled
            ),
            Outcome::Http(status) => !matches!(status, 401 | 403),
            Outcome::Refused(_) => false,
        }
    }
}

fn request(question: &str) -> serde_json::Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 12,
           "messages": [{"role": "user", "content": question}]})
}

async fn channel(url: &str, server: TierRole, ca: &str, cert: Option<&NodeCert>) -> Result<Channel, String> {
    let mut tls =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)).domain_name(server.dns_name());
    if let Some(cert) = cert {
        tls = tls.identity(Identity::from_pem(&cert.cert_pem, &cert.key_pem));
    }
    let endpoint = Endpoint::from_shared(url.to_owned()).map_err(|e| e.to_string())?;
    let endpoint = endpoint.tls_config(tls).map_err(|e| e.to_string())?.timeout(Duration::from_secs(5));
    endpoint.connect().await.map_err(|e| format!("{e:?}"))
}

fn code<T>(result: Result<tonic::Response<T>, tonic::Status>) -> Outcome {
    match result {
        Ok(_) => Outcome::Grpc(Code::Ok),
        Err(status) => Outcome::Grpc(status.code()),
    }
}

async fn call(mesh: &Mesh, row: &Row, ca: &str, cert: Option<&NodeCert>) -> Outcome {
    use proto::cache::core_cache_client::CoreCacheClient;
    use proto::core::core_admin_client::CoreAdminClient;
    use proto::inference::inference_pod_client::InferencePodClient;
    use proto::raft::raft_client::RaftClient;
    use proto::replication::replication_client::ReplicationClient;
    if row.name.starts_with("GET ") {
        let path = row.name.trim_start_matches("GET ");
        let client = cert.map(|c| (c.cert_pem.as_bytes(), c.key_pem.as_bytes()));
        let agent = mesh_harness::client::agent_with_certificate(Duration::from_secs(5), client);
        return match agent.get(format!("{}{path}", mesh.regional_url(0))).call() {
            Ok(reply) => Outcome::Http(reply.status().as_u16()),
            Err(error) => Outcome::Refused(error.to_string()),
        };
    }
    let (url, server) = match row.daemon {
        "core" => (mesh.core_url(0), TierRole::Core),
        "pod" => (mesh.pod_url(), TierRole::Pod),
        _ => (mesh.regional_peer_url(0), TierRole::Regional),
    };
    let channel = match channel(&url, server, ca, cert).await {
        Ok(channel) => channel,
        Err(error) => return Outcome::Refused(error),
    };
    match row.name {
        "Raft.Vote" => code(RaftClient::new(channel).vote(proto::raft::RaftPayload::default()).await),
        "CoreCache.Models" => {
            code(CoreCacheClient::new(channel).models(proto::cache::ModelsRequest::default()).await)
        }
        "CoreStore.Read" => {
            code(CoreStoreClient::new(channel).read(proto::core::ReadRequest::default()).await)
        }
        "CoreStore.Write invalidate key" => {
            write(channel, invalidation(invalidate::Scope::Key(String::new()))).await
        }
        "CoreStore.Write invalidate tenant" => {
            write(channel, invalidation(invalidate::Scope::Tenant(String::new()))).await
        }
        "CoreStore.Write put" => write(channel, Command::Put(PutEntry::default())).await,
        "CoreStore.Write set tenant" => {
            write(channel, Command::SetTenantPolicy(SetTenantPolicy::default())).await
        }
        "CoreStore.Write bump model" => {
            write(channel, Command::BumpModelVersion(BumpModelVersion::default())).await
        }
        "CoreAdmin.Status" => {
            code(CoreAdminClient::new(channel).status(proto::core::StatusRequest::default()).await)
        }
        "InferencePod.Health" => {
            code(InferencePodClient::new(channel).health(proto::inference::HealthRequest::default()).await)
        }
        "Health.Check core" | "Health.Check pod" => {
            let asked = HealthClient::new(channel).check(HealthCheckRequest { service: String::new() }).await;
            if let Ok(answer) = &asked {
                assert_eq!(answer.get_ref().status(), ServingStatus::Serving, "{}", row.name);
            }
            code(asked)
        }
        "Replication.Digest" => code(
            ReplicationClient::new(channel)
                .digest(proto::replication::DigestRequest { from: "authorization-test".into() })
                .await,
        ),
        other => panic!("no call for {other}"),
    }
}

/// An invalidation of `scope` (with no key tenant).
fn invalidation(scope: invalidate::Scope) -> Command {
    Command::Invalidate(Invalidate { scope: Some(scope), key_tenant: String::new(), refresh: false })
}

/// A `CoreStore.Write` of `command`, invalid in its content (empty names), so that one that passes the
/// role check is refused by validation and changes nothing.
async fn write(channel: Channel, command: Command) -> Outcome {
    let request = WriteRequest { request_id: "authorization-test".into(), command: Some(command) };
    code(CoreStoreClient::new(channel).write(request).await)
}

fn node_cert(mesh: &Mesh, name: &str) -> anyhow::Result<NodeCert> {
    let files = mesh.tls_files(name).ok_or_else(|| anyhow::anyhow!("no certificate for {name}"))?;
    Ok(NodeCert {
        cert_pem: std::fs::read_to_string(&files.cert)?,
        key_pem: std::fs::read_to_string(&files.key)?,
    })
}

#[test]
fn every_hop_is_mutual_tls_and_each_role_reaches_only_its_rows() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-mtls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec { tls: true, ..MeshSpec::local(&dir) })?;
    assert!(mesh.regional_url(0).starts_with("https://") && mesh.core_url(0).starts_with("https://"));

    // The whole path works over TLS: the edge (trusting the mesh CA) to a regional node, on to the
    // core and the pod; the second ask is a hit.
    let client = mesh.client();
    let question = request("What is the boiling point of water at sea level?");
    let first = client.chat(&question)?;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-cache"), Some("MISS"), "{:?}", first.headers);
    let again = client.chat(&question)?;
    assert!(again.header("x-cache").is_some_and(|c| c.starts_with("HIT")), "{:?}", again.headers);
    // A tenant's client with its API key needs no certificate, only the CA.
    let direct = mesh.regional_client(1).chat(&question)?;
    assert_eq!(direct.status, 200, "{}", direct.body);

    let ca = mesh.ca().ok_or_else(|| anyhow::anyhow!("a TLS mesh has a CA"))?;
    let foreign = DevCa::new("not the mesh CA")?.issue("intruder", TierRole::Admin, Validity::Current)?;
    let expired = ca.issue("old-admin", TierRole::Admin, Validity::Expired)?;
    let mut callers = vec![
        Caller { name: "edge", role: Some(TierRole::Edge), cert: Some(node_cert(&mesh, "edge")?) },
        Caller {
            name: "regional-2",
            role: Some(TierRole::Regional),
            cert: Some(node_cert(&mesh, "regional-2")?),
        },
        Caller { name: "core-2", role: Some(TierRole::Core), cert: Some(node_cert(&mesh, "core-2")?) },
        Caller { name: "pod", role: Some(TierRole::Pod), cert: Some(node_cert(&mesh, "inference-pod")?) },
        Caller { name: "admin", role: Some(TierRole::Admin), cert: Some(node_cert(&mesh, "admin")?) },
        Caller {
            name: "prometheus",
            role: Some(TierRole::Metrics),
            cert: Some(node_cert(&mesh, "prometheus")?),
        },
    ];
    callers.push(Caller { name: "no certificate", role: None, cert: None });
    callers.push(Caller { name: "another CA's admin", role: None, cert: Some(foreign) });
    callers.push(Caller { name: "expired admin", role: None, cert: Some(expired) });

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut wrong = Vec::new();
    let (mut admitted, mut refused) = (0, 0);
    for row in ROWS {
        for caller in &callers {
            let outcome = runtime.block_on(call(&mesh, row, ca.pem(), caller.cert.as_ref()));
            let should = caller.role.is_some_and(|role| row.allowed.contains(&role));
            if outcome.admitted() != should {
                wrong.push(format!(
                    "{} as {}: {outcome:?} (should be admitted: {should})",
                    row.name, caller.name
                ));
            }
            if should {
                admitted += 1;
            } else {
                refused += 1;
            }
        }
    }
    println!("authorization matrix: {admitted} calls admitted, {refused} refused as the table says");
    assert!(wrong.is_empty(), "the authorization table was not held:\n{}", wrong.join("\n"));

    // A linearizable read at any core node: a follower forwards it to the leader with its own certificate.
    let regional = node_cert(&mesh, "regional-1")?;
    for index in 0..mesh.core_nodes() {
        let outcome = runtime.block_on(async {
            let channel = channel(&mesh.core_url(index), TierRole::Core, ca.pem(), Some(&regional)).await;
            let read = ReadRequest {
                key: "v1:authorization-test".into(),
                tenant: mesh.tenant().into(),
                consistency: Consistency::Linearizable as i32,
                max_staleness_ms: 0,
            };
            match channel {
                Ok(channel) => code(CoreStoreClient::new(channel).read(read).await),
                Err(error) => Outcome::Refused(error),
            }
        });
        assert_eq!(outcome, Outcome::Grpc(Code::Ok), "a linearizable read at core node {}", index + 1);
    }

    // The core's and the pod's probes answer any mesh certificate (the read-only `metrics` one here);
    // a client without one does not get past the handshake, so it cannot hold a connection slot.
    for url in [mesh.core_url(0), mesh.pod_url()] {
        let health =
            mesh_harness::client::agent(Duration::from_secs(5)).get(format!("{url}/healthz")).call()?;
        assert_eq!(health.status().as_u16(), 200, "{url}");
        let stranger = mesh_harness::client::agent_with_certificate(Duration::from_secs(5), None)
            .get(format!("{url}/healthz"))
            .call();
        assert!(stranger.is_err(), "{url} served a client without a certificate");
    }
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
