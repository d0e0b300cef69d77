//! [`run`]: opens the node's storage, starts Raft, forms the cluster when asked to, and serves gRPC and
//! HTTP on one listener until shutdown.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use daemon_runtime::http_serving::HttpLimits;
use daemon_runtime::identity::ClientAuth;
use daemon_runtime::probes::Readiness;
use daemon_runtime::{TierIdentity, TierRole};
use openraft::error::{InitializeError, RaftError};
use openraft::{BasicNode, SnapshotPolicy};
use proto::cache::core_cache_server::CoreCacheServer;
use proto::core::core_admin_server::CoreAdminServer;
use proto::core::core_store_server::CoreStoreServer;
use proto::raft::raft_server::RaftServer;
use tokio::net::TcpListener;
use tonic::server::NamedService;
use tonic::service::interceptor::InterceptedService;
use tonic::service::Routes;

use super::backends::Backends;
use super::clean_stop;
use super::config::NodeConfig;
use super::context::NodeContext;
use super::error::CoreError;
use super::metrics::Metrics;
use super::state_db;
use super::state_machine::StateMachineStore;
use super::types::{Command, Raft, Request, TenantPolicy};
use crate::node::background::canary_judge;
use crate::node::background::hit_reporter::{self, HitCounter};
use crate::node::background::refresher::Refresher;
use crate::node::background::registry_file;
use crate::node::background::ticker;
use crate::node::raft::durable_log::DurableLog;
use crate::node::raft::leader_contact::LeaderContact;
use crate::node::raft::log_store::LogStore;
use crate::node::raft::network::Network;
use crate::node::raft::peers::{PeerChannels, MAX_RAFT_MESSAGE_BYTES};
use crate::node::raft::raft_service::RaftService;
use crate::node::raft::read_barrier::ReadBarrier;
use crate::node::raft::snapshot_trigger;
use crate::node::services::admin_service::AdminService;
use crate::node::services::cache_service::CacheService;
use crate::node::services::http;
use crate::node::services::store_service::StoreService;
use crate::node::writes::group_commit::GroupCommit;
use crate::node::writes::writer::Writer;

/// How often the model backends are probed.
const BACKEND_PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// How long open connections may take to finish after shutdown is signalled.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Snapshot chunk size: JSON inflates bytes about fourfold, which must stay under the message limit.
const SNAPSHOT_CHUNK_BYTES: u64 = 1024 * 1024;

/// Runs a core node on `listener` until `shutdown` completes, then stops Raft and flushes storage.
///
/// The listener serves gRPC (`Raft`, `CoreCache`; every call must carry the tier secret) and HTTP
/// (`/healthz`, `/metrics`). With `config.bootstrap`, a node without Raft state forms the cluster from
/// `config.peers`; a node with state just rejoins.
pub async fn run(
    config: NodeConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), CoreError> {
    config.validate()?;
    let local_addr = listener.local_addr()?;
    crate::wal::fs::create_dir_synced(&config.data_dir)?;
    // The log lives in its write-ahead log (fdatasync per group of appends), the state machine in sled,
    // trusted only after a clean stop: after a crash it starts again from its snapshot, and openraft
    // applies the durable log after it again.
    let wal_dir = config.data_dir.join("wal");
    let log_store = tokio::task::spawn_blocking(move || LogStore::open(&wal_dir, state_db::LOCK_WAIT))
        .await
        .map_err(std::io::Error::other)??;
    let previous = clean_stop::take(&config.data_dir)?;
    let state_dir = state_db::dir(&config.data_dir);
    let state_db = state_db::open(state_dir.clone(), previous).await?;
    let durable_log = log_store.durable_log();
    // What the log held at start: a linearizable read waits until it is applied (`ReadBarrier`).
    let start_last_log = durable_log.last().map_or(0, |id| id.index);
    let state =
        StateMachineStore::open(&state_db, &config.data_dir, previous)?.applying_durable(durable_log.clone());
    let log_store = log_store.purge_behind(state.durable_snapshot()).syncing_followed_entries(config.id);
    let appended = log_store.appended_bytes();
    let backlog = log_store.entry_bytes_after(*state.durable_snapshot().borrow());

    let channels = PeerChannels::new(config.source_ip, config.identity.clone());
    let network = Network::new(config.id, channels.clone(), config.identity.clone())
        .committing_durable(durable_log.clone());
    let own_metrics = network.own_metrics();
    let raft =
        Raft::new(config.id, Arc::new(raft_config(&config)?), network, log_store.clone(), state.clone())
            .await
            .map_err(|e| CoreError::Raft(e.to_string()))?;
    let _ = own_metrics.set(raft.metrics());
    let formed = config.bootstrap && bootstrap(&raft, &config).await?;

    let metrics = Arc::new(Metrics::default());
    let backends = Arc::new(
        Backends::new(
            &config.pods,
            &config.openai_backends,
            config.backend_timeouts,
            config.backend_routing,
            config.identity.clone(),
        )?
        .with_fallbacks(config.fallbacks.clone()),
    );
    let registry = state.clone();
    let prober = tokio::spawn(backends.clone().watch(BACKEND_PROBE_INTERVAL, move || registry.model_specs()));
    let group = GroupCommit::start(config.id, raft.clone(), state.clone(), metrics.clone());
    let writer = Writer::new(
        config.id,
        raft.clone(),
        group.clone(),
        channels.clone(),
        config.identity.clone(),
        config.commit_timeout,
        metrics.clone(),
    );
    let hits = Arc::new(HitCounter::default());
    let arms = Arc::new(canary_judge::ArmStats::default());
    let contact = Arc::new(LeaderContact::default());
    let node = Arc::new(NodeContext {
        id: config.id,
        raft: raft.clone(),
        state: state.clone(),
        log: log_store,
        writer: writer.clone(),
        backends: backends.clone(),
        channels,
        identity: config.identity.clone(),
        refresher: Refresher::new(backends, writer.clone(), metrics.clone()),
        hits: hits.clone(),
        read_barrier: ReadBarrier::from_start(start_last_log),
        contact: contact.clone(),
        metrics: metrics.clone(),
        answer_signer: config.answer_signer.clone(),
        arms: arms.clone(),
        auto: config.auto.clone(),
        canary_rule: config.canary_rule,
    });
    let snapshots = snapshot_trigger::run(
        config.id,
        raft.clone(),
        appended,
        backlog,
        state.durable_snapshot(),
        config.data_dir.join("snapshots"),
        config.raft.snapshot_log_bytes,
    );
    let ticker = ticker::run(config.id, raft.clone(), state.clone(), writer.clone());
    let mut background = vec![
        prober,
        tokio::spawn(hit_reporter::report(hits, writer.clone())),
        tokio::spawn(ticker),
        tokio::spawn(snapshots),
        tokio::spawn(release_held_back_commits(raft.clone(), durable_log)),
        tokio::spawn(canary_judge::run(config.canary_rule, arms, state.clone(), writer.clone())),
    ];
    if let Some(path) = &config.model_registry {
        let follow = registry_file::run(config.id, path.clone(), raft.clone(), state.clone(), writer.clone());
        background.push(tokio::spawn(follow));
    }
    if formed {
        background.push(tokio::spawn(seed(writer, config.clone())));
    }

    let identity = &config.identity;
    background.extend(identity.spawn_tls_reloader());
    // Set once at shutdown: the server drains, and open AppendEntries streams end.
    let (stopping, stopping_rx) = tokio::sync::watch::channel(false);
    let raft_rpc = RaftService::new(raft.clone(), group, contact, metrics, stopping_rx.clone());
    // Ready when the node may answer from its state: `/readyz`, the probe port, gRPC health, systemd.
    let serving = node.clone();
    let readiness: Readiness = Arc::new(move || serving.check_serving().map_err(|reason| reason.to_string()));
    if let Some(addr) = config.probe_listen {
        background.push(daemon_runtime::probes::spawn(TcpListener::bind(addr).await?, readiness.clone()));
    }
    let app = routes(identity, raft_rpc, node, readiness.clone());

    // gRPC and HTTP/1.1 share the listener: the server detects HTTP/2 (h2c) per connection. Every
    // client presents a mesh certificate; `/healthz` and `/metrics` take any role (the `metrics` one is
    // for scrapers).
    let tls = identity.acceptor(ClientAuth::Required)?;
    let mut stop = stopping_rx;
    let serve = daemon_runtime::http_serving::serve(listener, app, HttpLimits::default(), tls, async move {
        let _ = stop.wait_for(|stopping| *stopping).await;
    });
    let mut server = tokio::spawn(serve);
    background.extend(daemon_runtime::systemd_notify::notify_when_ready(readiness));
    tracing::info!(id = config.id, addr = %local_addr, peers = config.peers.len(), pods = config.pods.len(), openai_backends = config.openai_backends.len(), "core node serving");

    let result = serve_until_shutdown(shutdown, &mut server, &stopping).await;
    for task in background {
        task.abort();
    }
    if let Err(e) = raft.shutdown().await {
        tracing::warn!(error = %e, "raft did not stop cleanly");
    }
    close_state(&state, &config.data_dir, state_dir).await?;
    tracing::info!("core node stopped");
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(CoreError::Io(e)),
        Err(e) => Err(CoreError::Io(std::io::Error::other(e))),
    }
}

/// Every service on one router, behind the core's rows of the authorization table: only core nodes
/// speak Raft; regional nodes look up, complete, watch and write; operators administer (and may write
/// entries); every role may ask the standard gRPC health service.
fn routes(
    identity: &TierIdentity,
    raft_rpc: RaftService,
    node: Arc<NodeContext>,
    readiness: Readiness,
) -> axum::Router {
    let raft_rpc = RaftServer::new(raft_rpc)
        .max_decoding_message_size(MAX_RAFT_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_RAFT_MESSAGE_BYTES);
    let cache_rpc = CoreCacheServer::new(CacheService::new(node.clone()));
    let store_rpc = CoreStoreServer::new(StoreService::new(node.clone()));
    let admin_rpc = CoreAdminServer::new(AdminService::new(node.clone()));
    let services = [
        <RaftServer<RaftService> as NamedService>::NAME,
        <CoreCacheServer<CacheService> as NamedService>::NAME,
        <CoreStoreServer<StoreService> as NamedService>::NAME,
        <CoreAdminServer<AdminService> as NamedService>::NAME,
    ];
    let health_rpc = daemon_runtime::grpc_health::server(&services, readiness.clone());
    Routes::new(InterceptedService::new(raft_rpc, identity.interceptor(&[TierRole::Core])))
        .add_service(InterceptedService::new(cache_rpc, identity.interceptor(&[TierRole::Regional])))
        // Core nodes too: a follower forwards a linearizable read to the leader. Writes are checked per
        // command (`store_service::roles_for`), and no command is a core node's.
        .add_service(InterceptedService::new(
            store_rpc,
            identity.interceptor(&[TierRole::Regional, TierRole::Admin, TierRole::Core]),
        ))
        .add_service(InterceptedService::new(admin_rpc, identity.interceptor(&[TierRole::Admin])))
        // Any mesh certificate may ask whether the node may take traffic (as any may read `/readyz`).
        .add_service(InterceptedService::new(health_rpc, identity.interceptor(&TierRole::ALL)))
        .into_axum_router()
        .merge(http::router(node))
        .merge(daemon_runtime::probes::router(readiness))
}

/// Serves until `shutdown` (or until the server stops by itself); then tells the server to drain, and
/// closes what is still open after [`DRAIN_TIMEOUT`].
async fn serve_until_shutdown(
    shutdown: impl Future<Output = ()>,
    server: &mut tokio::task::JoinHandle<std::io::Result<()>>,
    stopping: &tokio::sync::watch::Sender<bool>,
) -> Result<std::io::Result<()>, tokio::task::JoinError> {
    let served = tokio::select! {
        () = shutdown => None,
        result = &mut *server => Some(result),
    };
    match served {
        Some(result) => result,
        None => {
            tracing::info!("shutting down");
            let _ = stopping.send(true);
            match tokio::time::timeout(DRAIN_TIMEOUT, &mut *server).await {
                Ok(result) => result,
                Err(_) => {
                    tracing::info!("connections still open after the drain timeout; closing them");
                    server.abort();
                    Ok(Ok(()))
                }
            }
        }
    }
}

/// Closes the state machine and, when every write reached it, leaves the clean-stop marker that lets the
/// next start trust its trees.
async fn close_state(
    state: &StateMachineStore,
    data_dir: &std::path::Path,
    state_dir: std::path::PathBuf,
) -> Result<(), CoreError> {
    if state.close().await? {
        let data_dir = data_dir.to_owned();
        tokio::task::spawn_blocking(move || clean_stop::leave(&data_dir, &state_dir))
            .await
            .map_err(std::io::Error::other)??;
    } else {
        tracing::warn!("a write to the state machine failed part way; the next start rebuilds it");
    }
    Ok(())
}

/// Sends a heartbeat whenever a sync of the leader's log makes a commit index that AppendEntries held back
/// sendable ([`crate::node::raft::durable_log`]), so followers apply it now rather than at the next heartbeat.
async fn release_held_back_commits(raft: Raft, durable_log: DurableLog) {
    loop {
        durable_log.held_back_commits().await;
        if raft.trigger().heartbeat().await.is_err() {
            return;
        }
    }
}

/// openraft's configuration from the node's tuning.
fn raft_config(config: &NodeConfig) -> Result<openraft::Config, CoreError> {
    let tuning = &config.raft;
    openraft::Config {
        cluster_name: "mesh-core".into(),
        heartbeat_interval: tuning.heartbeat_ms,
        election_timeout_min: tuning.election_timeout_min_ms,
        election_timeout_max: tuning.election_timeout_max_ms,
        // A snapshot chunk on a loaded machine needs more than openraft's 200 ms default.
        install_snapshot_timeout: tuning.election_timeout_min_ms * 5,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(tuning.snapshot_logs),
        max_in_snapshot_log_to_keep: tuning.logs_kept_after_snapshot,
        snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
        ..Default::default()
    }
    .validate()
    .map_err(|e| CoreError::Config(format!("raft: {e}")))
}

/// Forms the cluster from `config.peers` unless this node already has Raft state (then it just rejoins).
/// Returns whether this call formed it.
async fn bootstrap(raft: &Raft, config: &NodeConfig) -> Result<bool, CoreError> {
    if raft.is_initialized().await.map_err(|e| CoreError::Raft(e.to_string()))? {
        tracing::info!("raft state found; rejoining the cluster");
        return Ok(false);
    }
    let members: BTreeMap<_, _> =
        config.peers.iter().map(|(id, addr)| (*id, BasicNode { addr: addr.clone() })).collect();
    match raft.initialize(members).await {
        Ok(()) => {
            tracing::info!(members = config.peers.len(), "cluster initialized");
            Ok(true)
        }
        Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
            tracing::info!("cluster already initialized; rejoining");
            Ok(false)
        }
        Err(e) => Err(CoreError::Raft(format!("initialize: {e}"))),
    }
}

/// Registers `--models` and creates `--tenants` in a cluster this node just formed, retrying until a
/// leader commits them (request ids make the retries safe).
async fn seed(writer: Writer, config: NodeConfig) {
    let mut requests: Vec<Request> = config
        .models
        .iter()
        .map(|m| Request {
            id: format!("seed-model-{}", m.name),
            command: Command::RegisterModel { model: m.name.clone(), version: m.version, spec: None },
        })
        .collect();
    requests.extend(config.tenants.iter().map(|t| Request {
        id: format!("seed-tenant-{t}"),
        command: Command::SetTenantPolicy { tenant: t.clone(), policy: TenantPolicy::default() },
    }));
    for request in requests {
        loop {
            match writer.write(request.clone()).await {
                Ok(committed) => {
                    tracing::info!(outcome = ?committed.applied.outcome, "seeded");
                    break;
                }
                Err(e) => {
                    tracing::info!(error = %e, "seeding waits for a leader");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}
