//! Three core nodes and a fake inference pod in one process, over real loopback sockets: the cluster
//! forms, completions commit from any node, a dead follower does not stop writes, and a full restart keeps
//! every entry.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::cache::core_cache_client::CoreCacheClient;
use proto::cache::{complete_event, CompleteDone, CompleteRequest, LookupRequest};
use proto::inference::inference_pod_server::{InferencePod, InferencePodServer};
use proto::inference::{
    generate_event, ChatMessage, GenerateDone, GenerateEvent, GenerateRequest, HealthReply, HealthRequest,
    Timings, TokenDelta,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::{Code, Request, Response, Status};

use super::config::{NodeConfig, RaftTuning};
use super::error::CoreError;
use super::types::NodeId;
use daemon_runtime::TierIdentity;
use proto::core::write_outcome;

const SECRET: &str = "a-development-secret-of-32-bytes!";

fn credential() -> TierIdentity {
    TierIdentity::insecure_secret(SECRET).expect("secret")
}

/// An inference pod that answers `echo: <last message>` in two deltas and counts its calls. A message
/// starting with `slow` is answered with a delta every 20 ms and never finishes; the pod counts such
/// streams that the core drops (cancels).
#[derive(Clone, Default)]
struct FakePod {
    calls: Arc<AtomicU64>,
    cancelled: Arc<AtomicU64>,
}

/// Counts its own drop.
struct DropCounter(Arc<AtomicU64>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tonic::async_trait]
impl InferencePod for FakePod {
    type GenerateStream =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<GenerateEvent, Status>> + Send>>;

    async fn generate(
        &self,
        request: Request<GenerateRequest>,
    ) -> Result<Response<Self::GenerateStream>, Status> {
        TierIdentity::insecure_secret(SECRET)
            .map_err(|e| Status::internal(e.to_string()))?
            .check(&request, &[daemon_runtime::Role::Core])?;
        self.calls.fetch_add(1, Ordering::SeqCst);
        let last = request.into_inner().messages.last().map(|m| m.content.clone()).unwrap_or_default();
        let delta = |text: &str| GenerateEvent {
            event: Some(generate_event::Event::Delta(TokenDelta { text: text.into(), ..Default::default() })),
        };
        if last.starts_with("slow") {
            let counter = DropCounter(Arc::clone(&self.cancelled));
            let ticks = futures::stream::unfold(counter, move |counter| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Some((Ok(delta("tick ")), counter))
            });
            return Ok(Response::new(Box::pin(ticks)));
        }
        let done = GenerateDone {
            finish_reason: "stop".into(),
            prompt_tokens: 2,
            completion_tokens: 2,
            timings: Some(Timings { queue_us: 1, prefill_us: 2, decode_us: 3, ttft_us: 4, tpot_us: 1 }),
            ..Default::default()
        };
        let events = vec![
            Ok(delta("echo: ")),
            Ok(delta(&last)),
            Ok(GenerateEvent { event: Some(generate_event::Event::Done(done)) }),
        ];
        Ok(Response::new(Box::pin(tokio_stream::iter(events))))
    }

    async fn health(&self, _: Request<HealthRequest>) -> Result<Response<HealthReply>, Status> {
        Ok(Response::new(HealthReply { model: "fake".into(), ..Default::default() }))
    }
}

async fn start_pod(pod: FakePod) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind pod");
    let addr = listener.local_addr().expect("pod addr");
    let app = tonic::service::Routes::new(InferencePodServer::new(pod)).into_axum_router();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
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
            id,
            source_ip: None,
            models: vec![shared::models::ModelRef { name: "fake".into(), version: 1 }],
            tenants: vec!["dev".into()],
            data_dir: self.dirs[(id - 1) as usize].path().to_path_buf(),
            peers: self.addrs.iter().map(|(id, a)| (*id, a.to_string())).collect(),
            pods: vec![format!("http://{}", self.pod)],
            bootstrap: id == 1,
            identity: credential(),
            raft: self.tuning.clone(),
            commit_timeout: Duration::from_secs(10),
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

fn complete_request(key: &str, text: &str) -> CompleteRequest {
    CompleteRequest {
        key: key.into(),
        model_version: 1,
        ttl_s: 3600,
        content_class: String::new(),
        generate: Some(GenerateRequest {
            request_id: key.into(),
            tenant: "dev".into(),
            model: "fake".into(),
            messages: vec![ChatMessage { role: "user".into(), content: text.into() }],
            sampling: None,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Runs a completion on `addr`: the streamed text and the final `Done`.
async fn complete(addr: SocketAddr, key: &str, text: &str) -> Result<(String, CompleteDone), Status> {
    let secret = credential();
    let mut stream =
        client(addr).await.complete(secret.request(complete_request(key, text))).await?.into_inner();
    let mut streamed = String::new();
    while let Some(event) = stream.message().await? {
        match event.event {
            Some(complete_event::Event::Delta(d)) => streamed.push_str(&d.text),
            Some(complete_event::Event::Done(done)) => return Ok((streamed, done)),
            Some(complete_event::Event::ChoiceDone(_)) | None => {}
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_commits_survives_a_dead_follower_and_restarts() {
    let pod = FakePod::default();
    let cluster = new_cluster(pod.clone(), RaftTuning::default()).await;

    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");

    // A write from a follower is forwarded to the leader, committed, and readable everywhere.
    let (streamed, done) = complete(cluster.addrs[&follower], "k1", "hi").await.expect("complete");
    assert_eq!(streamed, "echo: hi");
    let entry = done.entry.expect("entry");
    assert_eq!(entry.content, "echo: hi");
    assert_eq!(entry.etag, shared::completion::CachedCompletion::etag_of("echo: hi", "stop"));
    assert!(done.commit_us > 0);
    assert_eq!(done.timings.map(|t| t.ttft_us), Some(4));
    wait_for_entry(&cluster, &[1, 2, 3], "k1", "echo: hi").await;

    // A second request for the key is answered from the state machine, without the pod.
    let (streamed, done) = complete(cluster.addrs[&leader], "k1", "hi").await.expect("hit");
    assert_eq!((streamed.as_str(), done.commit_us), ("", 0));
    assert_eq!(pod.calls.load(Ordering::SeqCst), 1);

    // Calls without the secret, and bad input, are refused.
    let unauthenticated = client(cluster.addrs[&leader])
        .await
        .lookup(LookupRequest { key: "k1".into(), tenant: "dev".into() })
        .await;
    assert_eq!(unauthenticated.map_err(|s| s.code()).err(), Some(Code::Unauthenticated));
    assert_eq!(
        complete(cluster.addrs[&leader], "", "hi").await.map_err(|s| s.code()).err(),
        Some(Code::InvalidArgument)
    );
    assert_eq!(lookup(cluster.addrs[&leader], "nope").await, None);
    let (status, metrics) = http_get(cluster.addrs[&leader], "/metrics").await.expect("metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains("mesh_core_cache_requests_total{rpc=\"complete\",result=\"hit\"} 1"),
        "{metrics}"
    );
    // The write-ahead log synced, and each sync covered at least one write.
    let sample = |name: &str| {
        metrics.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    let (syncs, writes) =
        (sample("mesh_core_wal_syncs_total "), sample("mesh_core_wal_synced_writes_total "));
    assert!(syncs > 0.0 && writes >= syncs, "syncs {syncs}, writes {writes}");
    assert!(metrics.contains("\nmesh_core_commits_held_back_total "), "{metrics}");

    // With one follower dead, the other two still commit.
    let dead = (1..=3).find(|id| *id != leader && *id != follower).expect("another follower");
    nodes.remove(&dead).expect("running").stop().await;
    let (_, done) =
        complete(cluster.addrs[&follower], "k2", "again").await.expect("complete with a dead follower");
    assert_eq!(done.entry.map(|e| e.content).as_deref(), Some("echo: again"));

    // Everything stops; everything restarts from its data dir and still has both entries.
    for (_, node) in std::mem::take(&mut nodes) {
        node.stop().await;
    }
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    wait_for_leader(&cluster, &[1, 2, 3]).await;
    wait_for_entry(&cluster, &[1, 2, 3], "k1", "echo: hi").await;
    wait_for_entry(&cluster, &[1, 2, 3], "k2", "echo: again").await;
    let (_, done) =
        complete(cluster.addrs[&dead], "k3", "after restart").await.expect("complete after restart");
    assert_eq!(done.entry.map(|e| e.content).as_deref(), Some("echo: after restart"));
    for (_, node) in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_that_missed_purged_logs_catches_up_from_a_snapshot() {
    let tuning = RaftTuning { snapshot_logs: 4, logs_kept_after_snapshot: 0, ..RaftTuning::default() };
    let cluster = new_cluster(FakePod::default(), tuning).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    let lagging = (1..=3).find(|id| *id != leader).expect("a follower");
    nodes.remove(&lagging).expect("running").stop().await;

    // Enough writes for the leader to snapshot and purge everything the stopped follower lacks.
    for i in 0..12 {
        complete(cluster.addrs[&leader], &format!("s{i}"), &format!("n{i}")).await.expect("complete");
    }
    nodes.insert(lagging, cluster.start(lagging).await);
    wait_for_entry(&cluster, &[lagging], "s0", "echo: n0").await;
    wait_for_entry(&cluster, &[lagging], "s11", "echo: n11").await;
    let (_, metrics) = http_get(cluster.addrs[&lagging], "/metrics").await.expect("metrics");
    let installs = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mesh_core_rpc_requests_total{rpc=\"install_snapshot\"} "))
        .and_then(|v| v.parse::<f64>().ok());
    assert!(installs.is_some_and(|n| n >= 1.0), "the follower caught up without a snapshot: {installs:?}");
    for (_, node) in nodes {
        node.stop().await;
    }
}

fn store_client(cluster: &Cluster) -> core_client::CoreClient {
    let addrs = cluster.addrs.values().map(|a| a.to_string()).collect();
    core_client::CoreClient::new(addrs, credential()).expect("client").with_timeout(Duration::from_secs(10))
}

fn entry(key: &str, tenant: &str, model: &str, content: &str) -> shared::completion::CachedCompletion {
    shared::completion::CachedCompletion {
        key: key.into(),
        tenant: tenant.into(),
        model: model.into(),
        model_version: 1,
        content: content.into(),
        finish_reason: "stop".into(),
        prompt_tokens: 1,
        completion_tokens: 1,
        etag: String::new(),
        created_ms: 0,
        ttl_s: 0,
        question: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_generation_nobody_will_store_ends_when_its_caller_hangs_up() {
    let pod = FakePod::default();
    let cluster = new_cluster(pod.clone(), RaftTuning::default()).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    let mut request = complete_request("slow-key", "slow answer");
    request.no_store = true;
    let mut stream =
        client(cluster.addrs[&leader]).await.complete(credential().request(request)).await.expect("complete");
    let first = stream.get_mut().message().await.expect("a first event");
    assert!(matches!(first.and_then(|e| e.event), Some(complete_event::Event::Delta(_))));
    assert_eq!(pod.cancelled.load(Ordering::SeqCst), 0);
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(5);
    while pod.cancelled.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the pod kept generating for a caller that left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (_, node) in nodes {
        node.stop().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_far_behind_on_large_entries_catches_up() {
    let cluster = new_cluster(FakePod::default(), RaftTuning::default()).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    let client = store_client(&cluster);
    wait_for_seeding(&client).await;
    let lagging = (1..=3).find(|id| *id != leader).expect("a follower");
    nodes.remove(&lagging).expect("running").stop().await;

    // More than the largest gRPC message between nodes, in entries near the value limit: the backlog only
    // reaches the follower if AppendEntries is split by bytes.
    let value_bytes = super::apply::MAX_VALUE_BYTES as usize - 4096;
    let count = crate::node::raft::peers::MAX_RAFT_MESSAGE_BYTES / value_bytes + 6;
    for i in 0..count {
        let content = format!("{i:04}").repeat(value_bytes / 4);
        client
            .put(&format!("big-{i}"), entry(&format!("big{i}"), "dev", "fake", &content), "")
            .await
            .expect("put");
    }
    nodes.insert(lagging, cluster.start(lagging).await);
    let last = count - 1;
    wait_for_entry(
        &cluster,
        &[lagging],
        &format!("big{last}"),
        &format!("{last:04}").repeat(value_bytes / 4),
    )
    .await;
    wait_for_entry(&cluster, &[lagging], "big0", &"0000".repeat(value_bytes / 4)).await;
    for (_, node) in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_store_api_dedupes_retries_refuses_bad_input_and_reads_linearizably() {
    use core_client::Consistency;
    use proto::core::write_request::Command as Pb;
    let cluster = new_cluster(FakePod::default(), RaftTuning::default()).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    wait_for_leader(&cluster, &[1, 2, 3]).await;
    let client = store_client(&cluster);
    wait_for_seeding(&client).await;
    let first = client.put("put-1", entry("k1", "dev", "fake", "one"), "stable").await.expect("first put");
    assert!(!first.duplicate);
    assert!(matches!(first.outcome, Some(write_outcome::Outcome::Stored(_))));
    // A retry with the same id is not applied again, even with another value.
    let retry = client.put("put-1", entry("k1", "dev", "fake", "two"), "stable").await.expect("retry");
    assert!(retry.duplicate);
    for id in 1..=3u64 {
        let local =
            core_client::CoreClient::new(vec![cluster.addrs[&id].to_string()], credential()).expect("client");
        let read = local.read("dev", "k1", Consistency::Linearizable).await.expect("linearizable read");
        assert_eq!(read.map(|e| e.content).as_deref(), Some("one"), "node {id}");
    }
    assert_eq!(client.read("other", "k1", Consistency::Local).await.expect("read"), None);

    let code = |r: Result<core_client::WriteAck, core_client::ClientError>| match r {
        Err(core_client::ClientError::Rejected { code, .. }) => Some(code),
        Err(core_client::ClientError::InvalidArgument(_)) => Some(Code::InvalidArgument),
        _ => None,
    };
    assert_eq!(code(client.put("p2", entry("k2", "nobody", "fake", "x"), "").await), Some(Code::NotFound));
    assert_eq!(code(client.put("p3", entry("k3", "dev", "nope", "x"), "").await), Some(Code::NotFound));
    let big = "x".repeat(super::apply::MAX_VALUE_BYTES as usize + 1);
    assert_eq!(
        code(client.put("p4", entry("k4", "dev", "fake", &big), "").await),
        Some(Code::InvalidArgument)
    );
    let tight = Pb::SetTenantPolicy(proto::core::SetTenantPolicy {
        tenant: "dev".into(),
        policy: Some(proto::core::TenantPolicy { max_value_bytes: 4, ..Default::default() }),
    });
    client.write("policy", tight).await.expect("policy");
    assert_eq!(
        code(client.put("p5", entry("k5", "dev", "fake", "too long"), "").await),
        Some(Code::InvalidArgument)
    );
    // A frame that is not a protobuf message at all.
    let status = raw_write(cluster.addrs[&1], vec![0xff, 0xff, 0xff, 0x0f, 0x02]).await;
    assert!(matches!(status.code(), Code::Internal | Code::InvalidArgument), "{status:?}");
    let read = client.read("dev", "k1", Consistency::Linearizable).await.expect("read");
    assert_eq!(read.map(|e| e.content).as_deref(), Some("one"), "refusals harm nothing stored");
    // Bounded-staleness reads: every node heard from the leader within the last few heartbeats.
    for id in 1..=3u64 {
        let local =
            core_client::CoreClient::new(vec![cluster.addrs[&id].to_string()], credential()).expect("client");
        let read = local.read("dev", "k1", Consistency::BoundedStaleness(5_000)).await.expect("bounded read");
        assert_eq!(read.map(|e| e.content).as_deref(), Some("one"), "node {id}");
    }
    for (_, node) in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_version_bump_stales_old_entries_and_regenerates_the_hottest() {
    use proto::core::write_request::Command as Pb;
    use shared::normalize::{ChatRole, Message, NormalizedRequest, Sampling};
    let pod = FakePod::default();
    let cluster = new_cluster(pod.clone(), RaftTuning::default()).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    complete(cluster.addrs[&leader], "k1", "hi").await.expect("complete");
    complete(cluster.addrs[&leader], "k2", "there").await.expect("complete");
    assert_eq!(lookup(cluster.addrs[&leader], "k1").await.as_deref(), Some("echo: hi"));

    let ack = store_client(&cluster)
        .write(
            "bump",
            Pb::BumpModelVersion(proto::core::BumpModelVersion { model: "fake".into(), version: 0 }),
        )
        .await
        .expect("bump");
    assert!(matches!(&ack.outcome, Some(write_outcome::Outcome::ModelVersion(m)) if m.version == 2));
    assert_eq!(lookup(cluster.addrs[&leader], "k1").await, None, "old-version entries are stale at once");

    // The pod's fake request carries no sampling, so the prompt's sampling is all zeros.
    let sampling = Sampling {
        max_tokens: 0,
        temperature: 0.0,
        top_p: 0.0,
        seed: None,
        stop: vec![],
        penalties: Default::default(),
        n: 1,
        logprobs: None,
    };
    let new_key = |text: &str| {
        let request = NormalizedRequest {
            model: shared::models::ModelRef { name: "fake".into(), version: 2 },
            messages: vec![Message { role: ChatRole::User, content: text.into() }],
            sampling: sampling.clone(),
            delivery: shared::openai::Delivery::Whole,
        };
        shared::cache_key::CacheKey::derive("dev", &request).as_str().to_owned()
    };
    wait_for_entry(&cluster, &[1, 2, 3], &new_key("hi"), "echo: hi").await;
    wait_for_entry(&cluster, &[1, 2, 3], &new_key("there"), "echo: there").await;
    assert_eq!(pod.calls.load(Ordering::SeqCst), 4, "two generations, then two refreshes");
    for (_, node) in nodes {
        node.stop().await;
    }
}

/// Sends `bytes` as the body of a `CoreStore.Write` call, bypassing protobuf encoding; returns the error.
async fn raw_write(addr: SocketAddr, bytes: Vec<u8>) -> Status {
    use bytes::{Buf, BufMut};
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

    #[derive(Clone, Copy, Default)]
    struct Raw;
    impl Codec for Raw {
        type Encode = Vec<u8>;
        type Decode = Vec<u8>;
        type Encoder = Raw;
        type Decoder = Raw;
        fn encoder(&mut self) -> Raw {
            Raw
        }
        fn decoder(&mut self) -> Raw {
            Raw
        }
    }
    impl Encoder for Raw {
        type Item = Vec<u8>;
        type Error = Status;
        fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
            dst.put_slice(&item);
            Ok(())
        }
    }
    impl Decoder for Raw {
        type Item = Vec<u8>;
        type Error = Status;
        fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
            Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
        }
    }

    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{addr}")).expect("uri").connect_lazy();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/mesh.core.v1.CoreStore/Write");
    let request = credential().request(bytes);
    match grpc.unary(request, path, Raw).await {
        Ok(_) => panic!("a malformed write was accepted"),
        Err(status) => status,
    }
}

/// The change feed after `after` on the node at `addr`, as batches, until `want` changes arrived.
async fn watch_until(addr: SocketAddr, after: u64, want: usize) -> Vec<shared::changes::Changes> {
    let secret = credential();
    let request = secret.request(proto::cache::WatchRequest { after_revision: after });
    let mut stream = client(addr).await.watch(request).await.expect("watch").into_inner();
    let mut batches = Vec::new();
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen < want || batches.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = tokio::time::timeout(left, stream.message()).await.expect("in time").expect("event");
        let batch = shared::changes::Changes::try_from(event.expect("open")).expect("valid");
        seen += batch.changes.len();
        batches.push(batch);
    }
    batches
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_change_feed_streams_invalidations_and_resumes_on_another_node() {
    use proto::core::write_request::Command as Pb;
    use shared::changes::Change;
    let cluster = new_cluster(FakePod::default(), RaftTuning::default()).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    let leader = wait_for_leader(&cluster, &[1, 2, 3]).await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");

    // A new watcher starts from a resync: the models and the revision it stands at.
    let first = watch_until(cluster.addrs[&follower], 0, 0).await;
    let resync = first[0].resync.clone().expect("a watcher at 0 resyncs");
    assert_eq!(resync.models, vec![("fake".to_owned(), 1)]);

    let invalidate =
        |scope| Pb::Invalidate(proto::core::Invalidate { scope: Some(scope), key_tenant: "dev".into() });
    let store = store_client(&cluster);
    store
        .write("i1", invalidate(proto::core::invalidate::Scope::Key("k1".into())))
        .await
        .expect("invalidate");
    store
        .write("i2", invalidate(proto::core::invalidate::Scope::Tenant("dev".into())))
        .await
        .expect("invalidate");
    let bump = Pb::BumpModelVersion(proto::core::BumpModelVersion { model: "fake".into(), version: 0 });
    store.write("b1", bump).await.expect("bump");

    let batches = watch_until(cluster.addrs[&follower], resync.revision, 3).await;
    let changes: Vec<shared::changes::Revised> = batches.into_iter().flat_map(|b| b.changes).collect();
    let kinds: Vec<&Change> = changes.iter().map(|r| &r.change).collect();
    assert_eq!(
        kinds,
        vec![
            &Change::Key { tenant: "dev".into(), key: "k1".into() },
            &Change::Tenant { tenant: "dev".into() },
            &Change::ModelCurrent { model: "fake".into(), version: 2 },
        ]
    );
    assert!(changes.windows(2).all(|w| w[0].revision < w[1].revision && w[0].at_ms <= w[1].at_ms));

    // Another node has the same rows at the same revisions: a watcher resumes there from its revision.
    let other = (1..=3).find(|id| *id != follower).expect("another node");
    let resumed = watch_until(cluster.addrs[&other], changes[0].revision, 2).await;
    let rest: Vec<shared::changes::Revised> = resumed.into_iter().flat_map(|b| b.changes).collect();
    assert_eq!(rest, changes[1..].to_vec());

    // A completion asked not to be stored is answered and not kept.
    let mut request = complete_request("unstored", "hello");
    request.no_store = true;
    request.model_version = 2;
    let secret = credential();
    let mut stream = client(cluster.addrs[&leader])
        .await
        .complete(secret.request(request))
        .await
        .expect("complete")
        .into_inner();
    while stream.message().await.expect("stream").is_some() {}
    assert_eq!(lookup(cluster.addrs[&leader], "unstored").await, None);
    for (_, node) in nodes {
        node.stop().await;
    }
}
