//! Three core nodes and a fake inference pod in one process, over real loopback sockets: the cluster
//! forms, completions commit from any node, a dead follower does not stop writes, and a full restart keeps
//! every entry. This file holds the set-up the scenarios share:
//! - [`consensus`]: commits from any node, a dead follower, a full restart, followers catching up;
//! - [`completions`]: a generation nobody stores, a model version bump;
//! - [`store_api`]: the store API's writes and reads;
//! - [`change_feed`]: the change feed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proto::cache::core_cache_client::CoreCacheClient;
use proto::cache::{complete_event, CompleteDone, CompleteRequest, LookupRequest};
use proto::inference::{ChatMessage, GenerateRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::Status;

use super::config::{NodeConfig, RaftTuning};
use super::error::CoreError;
use super::types::NodeId;
use daemon_runtime::TierIdentity;

mod change_feed;
mod completions;
mod consensus;
mod fake_pod;
mod store_api;

use fake_pod::{start_pod, FakePod};

const SECRET: &str = "a-development-secret-of-32-bytes!";

fn credential() -> TierIdentity {
    TierIdentity::insecure_secret(SECRET).expect("secret")
}

/// One running node and how to stop it.
struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), CoreError>>,
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.expect("node task").expect("node ran cleanly");
    }
}

struct Cluster {
    addrs: BTreeMap<NodeId, SocketAddr>,
    dirs: Vec<super::storage_tests::TempDir>,
    pod: SocketAddr,
    tuning: RaftTuning,
}

impl Cluster {
    fn config(&self, id: NodeId) -> NodeConfig {
        NodeConfig {
            probe_listen: None,
            id,
            source_ip: None,
            models: vec![shared::models::ModelRef { name: "fake".into(), version: 1 }],
            tenants: vec!["dev".into()],
            model_registry: None,
            data_dir: self.dirs[(id - 1) as usize].path().to_path_buf(),
            peers: self.addrs.iter().map(|(id, a)| (*id, a.to_string())).collect(),
            pods: vec![format!("http://{}", self.pod)],
            openai_backends: Vec::new(),
            backend_timeouts: crate::node::backends::OpenAiTimeouts::default(),
            backend_routing: crate::node::backends::Routing::default(),
            fallbacks: crate::node::backends::FallbackPolicy::default(),
            bootstrap: id == 1,
            identity: credential(),
            answer_signer: Some(shared::answer_signature::AnswerSigner::from_seed([1; 32])),
            raft: self.tuning.clone(),
            commit_timeout: Duration::from_secs(10),
            canary_rule: crate::node::background::canary_judge::CanaryRule {
                max_error_rate_increase: 0.05,
                max_p99_ratio: 1.5,
                min_samples: 50,
                audit_percent: 10,
                min_agreement: 0.0,
            },
            auto: Default::default(),
        }
    }

    async fn start(&self, id: NodeId) -> Running {
        let listener = TcpListener::bind(self.addrs[&id]).await.expect("bind node");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(super::run(self.config(id), listener, async move {
            let _ = stopped.await;
        }));
        Running { stop, task }
    }
}

/// `GET path` over plain HTTP/1.1 on the node's listener: the status code and the body.
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}

/// Waits until every node in `ids` reports the same leader on `/healthz` and has applied the seeding
/// (tenant `dev`, model `fake`, proposed right after the cluster forms); returns the leader.
async fn wait_for_leader(cluster: &Cluster, ids: &[NodeId]) -> NodeId {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut leaders = Vec::new();
        let mut seen = Vec::new();
        for id in ids {
            let health = http_get(cluster.addrs[id], "/healthz").await;
            if let Some((200, body)) = &health {
                let health: serde_json::Value = serde_json::from_str(body).expect("healthz JSON");
                if health["tenants"].as_u64() >= Some(1) && health["models"].as_u64() >= Some(1) {
                    leaders.push(health["leader"].as_u64());
                }
            }
            seen.push((*id, health));
        }
        if leaders.len() == ids.len() && leaders.windows(2).all(|w| w[0] == w[1]) {
            if let Some(Some(leader)) = leaders.first() {
                return *leader;
            }
        }
        assert!(Instant::now() < deadline, "no agreed leader: {seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn client(addr: SocketAddr) -> CoreCacheClient<tonic::transport::Channel> {
    CoreCacheClient::connect(format!("http://{addr}")).await.expect("connect")
}

/// Tenant `dev` asking the fake model `text`.
fn generate(text: &str) -> GenerateRequest {
    GenerateRequest {
        request_id: text.into(),
        tenant: "dev".into(),
        model: "fake".into(),
        messages: vec![ChatMessage { role: "user".into(), content: text.into() }],
        sampling: None,
        ..Default::default()
    }
}

/// The key of asking `text` of the fake model at `version` (the one a regional node derives).
fn key_at(text: &str, version: u64) -> String {
    generate(text).derived_key(version).expect("a user message").as_str().to_owned()
}

/// The key of asking `text` of the fake model at version 1.
fn key_of(text: &str) -> String {
    key_at(text, 1)
}

/// A completion of `text` at version 1, under its derived key.
fn complete_request(text: &str) -> CompleteRequest {
    complete_request_at(text, 1)
}

/// A completion of `text` at `version`, under its derived key.
fn complete_request_at(text: &str, version: u64) -> CompleteRequest {
    CompleteRequest {
        key: key_at(text, version),
        model_version: version,
        ttl_s: 3600,
        content_class: String::new(),
        generate: Some(generate(text)),
        ..Default::default()
    }
}

/// Runs a completion on `addr`: the streamed text and the final `Done`.
async fn complete(addr: SocketAddr, request: CompleteRequest) -> Result<(String, CompleteDone), Status> {
    let secret = credential();
    let mut stream = client(addr).await.complete(secret.request(request)).await?.into_inner();
    let mut streamed = String::new();
    while let Some(event) = stream.message().await? {
        match event.event {
            Some(complete_event::Event::Delta(d)) => streamed.push_str(&d.text),
            Some(complete_event::Event::Done(done)) => return Ok((streamed, done)),
            Some(
                complete_event::Event::ChoiceDone(_)
                | complete_event::Event::Fallback(_)
                | complete_event::Event::AutoChosen(_),
            )
            | None => {}
        }
    }
    Err(Status::internal("stream ended without Done"))
}

/// The content under `key` on the node at `addr`; `None` also while the node refuses to serve (it has
/// not yet learned it is a member, or no leader has confirmed its state).
async fn lookup(addr: SocketAddr, key: &str) -> Option<String> {
    let secret = credential();
    let request = secret.request(LookupRequest { key: key.into(), tenant: "dev".into() });
    match client(addr).await.lookup(request).await {
        Ok(reply) => reply.into_inner().entry.map(|e| e.content),
        Err(status) if status.code() == tonic::Code::Unavailable => None,
        Err(status) => panic!("lookup: {status}"),
    }
}

/// Waits until `key` reads as `content` on every node in `ids`.
async fn wait_for_entry(cluster: &Cluster, ids: &[NodeId], key: &str, content: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for id in ids {
        while lookup(cluster.addrs[id], key).await.as_deref() != Some(content) {
            assert!(Instant::now() < deadline, "node {id} never saw {key}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Three free loopback ports, fresh data dirs, and a fake pod.
async fn new_cluster(pod: FakePod, tuning: RaftTuning) -> Cluster {
    let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter("info,openraft=warn").try_init();
    let pod_addr = start_pod(pod).await;
    let mut addrs = BTreeMap::new();
    for id in 1..=3 {
        // Reserve a free port, then release it for the node (which must keep it across restarts).
        let probe = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        addrs.insert(id, probe.local_addr().expect("addr"));
    }
    let dirs = (1..=3).map(|_| super::storage_tests::TempDir::new("cluster")).collect();
    Cluster { addrs, dirs, pod: pod_addr, tuning }
}

fn store_client(cluster: &Cluster) -> core_client::CoreClient {
    let addrs = cluster.addrs.values().map(|a| a.to_string()).collect();
    core_client::CoreClient::new(addrs, credential()).expect("client").with_timeout(Duration::from_secs(10))
}

fn entry(key: &str, tenant: &str, model: &str, content: &str) -> shared::completion::CachedCompletion {
    shared::completion::CachedCompletion {
        tenant: tenant.into(),
        model: model.into(),
        etag: String::new(),
        ..shared::completion::CachedCompletion::example(key, content)
    }
}

/// Waits until seeding (model `fake`, tenant `dev`, right after the cluster forms) is done, with probes of
/// their own ids (a refused write's id is remembered, so the ids a test uses must not be refused).
async fn wait_for_seeding(client: &core_client::CoreClient) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for attempt in 0.. {
        match client.put(&format!("probe-{attempt}"), entry("probe", "dev", "fake", "p"), "stable").await {
            Ok(_) => break,
            Err(e) => assert!(Instant::now() < deadline, "seeding never finished: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
