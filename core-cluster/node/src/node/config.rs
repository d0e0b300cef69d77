//! The core node's command line and its validated configuration.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use shared::answer_signature::AnswerSigner;
use shared::models::{ModelRef, ModelTable};

use super::backends::settings::parse_fallback;
use super::backends::{FallbackPolicy, OpenAiBackendSpec, OpenAiTimeouts, Routing};
use super::background::canary_judge::CanaryRule;
use super::error::CoreError;
use super::services::auto_model::AutoPolicy;
use super::types::NodeId;
use crate::node::writes::validate;
use daemon_runtime::{IdentityArgs, TierIdentity};

/// The `core-node` command line. Every flag can also come from its environment variable.
#[derive(Debug, Parser)]
#[command(
    name = "core-node",
    version,
    about = "A core node: the authoritative LLM cache on Raft, driving inference pods and OpenAI-compatible model servers."
)]
pub struct NodeArgs {
    /// This node's Raft id; it must appear in `--peers`.
    #[arg(long, env = "MESH_CORE_ID")]
    pub id: NodeId,
    /// Address to listen on, for gRPC (Raft, CoreCache) and HTTP (/healthz, /metrics) alike.
    #[arg(long, env = "MESH_CORE_LISTEN")]
    pub listen: SocketAddr,
    /// Also serve `/livez` and `/readyz` alone, in plain HTTP, on this address: for probers that cannot
    /// present a mesh certificate (kubelet, a load balancer's health check). Unset: only on `--listen`.
    #[arg(long, env = "MESH_CORE_PROBE_LISTEN")]
    pub probe_listen: Option<SocketAddr>,
    /// Directory of this node's data: `wal/` (the Raft log and vote, a write-ahead log synced per group
    /// of appends), `sled-state/` (the state machine, in sled; trusted only after a clean stop, and started
    /// empty after any other), `contents/` (the entries' rows) and `snapshots/` (the current snapshot file).
    #[arg(long, env = "MESH_CORE_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Every core node as `id=host:port`, comma-separated; the same list on every node.
    #[arg(long, env = "MESH_CORE_PEERS", value_delimiter = ',', value_parser = parse_peer, required = true)]
    pub peers: Vec<(NodeId, String)>,
    /// Inference pods as `http://host:port`, comma-separated, in order of preference. Without pods the node
    /// serves the store API and lookups only (completions that miss fail as unavailable).
    #[arg(long, env = "MESH_CORE_PODS", value_delimiter = ',')]
    pub pods: Vec<String>,
    /// OpenAI-compatible model servers (vLLM, SGLang, TGI, llama.cpp's server, a hosted API) serving a
    /// model beside or instead of pods, comma-separated, each
    /// `MODEL=URL[;key_file=PATH][;ca=PATH][;upstream_model=NAME]`: `URL` is the API base
    /// (`http://127.0.0.1:8080/v1`), `key_file` holds the API key sent as a bearer token, `ca` a PEM CA
    /// trusted for `https://` instead of the system's roots, `upstream_model` the server's name for the
    /// model (default `MODEL`).
    #[arg(long, env = "MESH_CORE_OPENAI_BACKENDS", value_delimiter = ',')]
    pub openai_backends: Vec<OpenAiBackendSpec>,
    /// How long connecting to an OpenAI-compatible backend may take, in milliseconds.
    #[arg(long, env = "MESH_CORE_BACKEND_CONNECT_TIMEOUT_MS", default_value_t = 2_000)]
    pub backend_connect_timeout_ms: u64,
    /// How long an OpenAI-compatible backend may take to send a generation's first token, in
    /// milliseconds; past it the try has failed.
    #[arg(long, env = "MESH_CORE_BACKEND_FIRST_TOKEN_TIMEOUT_MS", default_value_t = 30_000)]
    pub backend_first_token_timeout_ms: u64,
    /// Tries after the first at one OpenAI-compatible backend, made only before its first token and
    /// after a jittered backoff (100 ms, doubling); then the next backend of the model is tried.
    #[arg(long, env = "MESH_CORE_BACKEND_RETRIES", default_value_t = 2)]
    pub backend_retries: u32,
    /// How a generation picks among its model's backends: `predicted-time` (where the work queued and its
    /// own, at the backend's measured prefill and decode rates, finish first) or `round-robin`.
    #[arg(long, env = "MESH_CORE_BACKEND_ROUTING", value_enum, default_value_t = Routing::PredictedTime)]
    pub backend_routing: Routing,
    /// Lighter models that answer for a model that cannot, as `PRIMARY=FALLBACK`, comma-separated: when
    /// every backend of PRIMARY fails or none is up (or, with `--fallback-ttft-ms`, none is predicted to
    /// start in time), FALLBACK answers; the answer says so (its `model` and `X-Model-Fallback`) and is
    /// cached under FALLBACK's key only. FALLBACK must be a registered model with backends of its own.
    #[arg(long, env = "MESH_CORE_FALLBACK_MODELS", value_delimiter = ',', value_parser = parse_fallback)]
    pub fallback_models: Vec<(String, String)>,
    /// Send a generation to its model's fallback at once when every backend's predicted time to first
    /// token (the work queued there and the prompt, at its measured rates) is longer than this many
    /// milliseconds; 0 falls back only on failure.
    #[arg(long, env = "MESH_CORE_FALLBACK_TTFT_MS", default_value_t = 0)]
    pub fallback_ttft_ms: u64,
    /// Models registered when `--bootstrap` forms the cluster, as `name@version`, comma-separated.
    #[arg(long, env = "MESH_CORE_MODELS", default_value = shared::models::DEFAULT_MODELS)]
    pub models: String,
    /// A TOML file describing models (`[models.NAME]` with `version`, `apis`, `context_length`,
    /// `input_cost_per_mtok`, `output_cost_per_mtok`, `backends`): the leader registers those the
    /// registry lacks and describes again those it describes otherwise, re-reading the file every 5 s.
    #[arg(long, env = "MESH_CORE_MODEL_REGISTRY")]
    pub model_registry: Option<PathBuf>,
    /// Tenants created (with the default policy) when `--bootstrap` forms the cluster, comma-separated.
    #[arg(long, env = "MESH_CORE_TENANTS", value_delimiter = ',')]
    pub tenants: Vec<String>,
    /// Form the cluster from `--peers` if this node has no Raft state yet (give it to one node only).
    #[arg(long, env = "MESH_CORE_BOOTSTRAP")]
    pub bootstrap: bool,
    /// This node's identity: mutual TLS files, or the insecure development secret.
    #[command(flatten)]
    pub identity: IdentityArgs,
    /// The cluster's answer-signing key (64 hex digits of Ed25519 seed, owner-only; `mesh certs` writes
    /// `answer-signing.key`): every answer this node hands out carries its signature, which regional
    /// nodes and the edge check against `answer-signing.pub`. Every core node needs the same key.
    #[arg(long, env = "MESH_ANSWER_SIGNING_KEY")]
    pub answer_signing_key: Option<PathBuf>,
    /// Raft heartbeat interval in milliseconds.
    #[arg(long, env = "MESH_CORE_HEARTBEAT_MS", default_value_t = RaftTuning::default().heartbeat_ms)]
    pub heartbeat_ms: u64,
    /// Lower bound of the randomized election timeout in milliseconds.
    #[arg(long, env = "MESH_CORE_ELECTION_MIN_MS", default_value_t = RaftTuning::default().election_timeout_min_ms)]
    pub election_timeout_min_ms: u64,
    /// Upper bound of the randomized election timeout in milliseconds.
    #[arg(long, env = "MESH_CORE_ELECTION_MAX_MS", default_value_t = RaftTuning::default().election_timeout_max_ms)]
    pub election_timeout_max_ms: u64,
    /// Build a snapshot (and later purge the log) after this many log entries since the last one, whatever
    /// their size (a backstop to `--snapshot-log-bytes`).
    #[arg(long, env = "MESH_CORE_SNAPSHOT_LOGS", default_value_t = RaftTuning::default().snapshot_logs)]
    pub snapshot_logs: u64,
    /// Build a snapshot once the log appended since the last one reaches this many bytes, or the last
    /// snapshot's size if that is larger (so a large state is not rewritten more often than it changes).
    #[arg(long, env = "MESH_CORE_SNAPSHOT_LOG_BYTES", default_value_t = RaftTuning::default().snapshot_log_bytes)]
    pub snapshot_log_bytes: u64,
    /// Log entries kept behind a snapshot for lagging followers.
    #[arg(long, env = "MESH_CORE_LOGS_KEPT_AFTER_SNAPSHOT", default_value_t = RaftTuning::default().logs_kept_after_snapshot)]
    pub logs_kept_after_snapshot: u64,
    /// How long a write may wait for a leader and a quorum before the caller gets `unavailable`, in ms.
    #[arg(long, env = "MESH_CORE_COMMIT_TIMEOUT_MS", default_value_t = 10_000)]
    pub commit_timeout_ms: u64,
    /// Threads of the node's async runtime. One by default: a node's work is many small tasks (Raft
    /// messages, gRPC calls) that wake each other, and on one thread those wakeups stay cheap, while the
    /// disk work runs on the write-ahead log's and sled's own threads. On 2 cores with three nodes,
    /// `mesh bench core` gave 586 puts/s at one client and 6,895 at 64 with one thread, 488 and 6,083 with
    /// two. A node with cores of its own may serve more linearizable reads with more.
    #[arg(long, env = "MESH_CORE_WORKER_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub worker_threads: u16,
    /// A model's version on trial is rolled back by itself when its error rate on this node exceeds the
    /// current version's by more than this (0.05: five points).
    #[arg(long, env = "MESH_CORE_CANARY_MAX_ERROR_RATE_INCREASE", default_value_t = 0.05)]
    pub canary_max_error_rate_increase: f64,
    /// ... or when its end-to-end p99 on this node is more than this multiple of the current version's.
    #[arg(long, env = "MESH_CORE_CANARY_MAX_P99_RATIO", default_value_t = 1.5)]
    pub canary_max_p99_ratio: f64,
    /// Generations each version needs on this node (of the latest 256) before the rule is applied, and
    /// audits the trial needs before its agreement is judged.
    #[arg(long, env = "MESH_CORE_CANARY_MIN_SAMPLES", default_value_t = 50)]
    pub canary_min_samples: usize,
    /// Percent of the trial's greedy generations this node generates again on the current version, in
    /// the background, to compare the answers (0: none).
    #[arg(long, env = "MESH_CORE_CANARY_AUDIT_PERCENT", default_value_t = 10, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub canary_audit_percent: u8,
    /// ... and the trial is rolled back when fewer than this share of its audited answers agree with the
    /// current version's (0: agreement is shown, not judged).
    #[arg(long, env = "MESH_CORE_CANARY_MIN_AGREEMENT", default_value_t = 0.0)]
    pub canary_min_agreement: f64,
    /// `model: "auto"` chooses among these models, cheapest first, comma-separated; empty: every
    /// registered model that serves the request's API, ordered by the registry's output price.
    #[arg(long, env = "MESH_CORE_AUTO_MODELS", value_delimiter = ',')]
    pub auto_models: Vec<String>,
    /// An auto rung's answer is taken when its confidence (the geometric mean of its tokens'
    /// probabilities, 0 to 1) is at least this; below, the next rung answers. `mesh bench auto` learns
    /// it from labelled questions.
    #[arg(long, env = "MESH_CORE_AUTO_MIN_CONFIDENCE", default_value_t = 0.5)]
    pub auto_min_confidence: f32,
    /// Tenants with a confidence bar of their own, `TENANT=CONFIDENCE`, comma-separated.
    #[arg(long, env = "MESH_CORE_AUTO_TENANT_MIN_CONFIDENCE", value_delimiter = ',')]
    pub auto_tenant_min_confidence: Vec<String>,
    /// The most one auto request of a tenant may cost, `TENANT=MICRO_USD` (its prompt and `max_tokens`
    /// at the registry's prices), comma-separated; auto never sends a request to a model over it.
    #[arg(long, env = "MESH_CORE_AUTO_BUDGETS", value_delimiter = ',')]
    pub auto_budgets: Vec<String>,
    /// How log lines are written to standard error: `text` (human-readable) or `json` (one object a line,
    /// with the spans' fields such as `trace_id`, for log shippers).
    #[arg(long, env = "MESH_CORE_LOG_FORMAT", value_enum, default_value_t = daemon_runtime::logging::LogFormat::Text)]
    pub log_format: daemon_runtime::logging::LogFormat,
    /// Export the spans of every request to this OpenTelemetry collector over OTLP/HTTP (JSON encoding),
    /// for example `http://127.0.0.1:4318`, as service `mesh-core`; unset, nothing is exported.
    #[arg(long, env = "MESH_CORE_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// TOML file with any of these settings, one key per flag (`--cache-bytes` is `cache_bytes`); the
    /// command line and the environment variables override it.
    #[arg(long, env = "MESH_CORE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print the settings in effect as such a file, with each one's help, and exit.
    #[arg(long)]
    pub print_config: bool,
}

impl NodeArgs {
    /// Validates the arguments and reads the tier secret (from the file, else from `MESH_TIER_SECRET`).
    pub fn into_config(self) -> Result<NodeConfig, CoreError> {
        let models =
            ModelTable::parse(&self.models).map_err(|e| CoreError::Config(format!("--models: {e}")))?;
        let source_ip = Some(self.listen.ip()).filter(|ip| !ip.is_unspecified());
        let config = NodeConfig {
            id: self.id,
            probe_listen: self.probe_listen,
            source_ip,
            models: models.models().to_vec(),
            tenants: self.tenants,
            model_registry: self.model_registry,
            data_dir: self.data_dir,
            peers: self.peers.into_iter().collect(),
            pods: self.pods,
            openai_backends: self.openai_backends,
            backend_timeouts: OpenAiTimeouts {
                connect: Duration::from_millis(self.backend_connect_timeout_ms.max(1)),
                first_token: Duration::from_millis(self.backend_first_token_timeout_ms.max(1)),
                retries: self.backend_retries,
            },
            backend_routing: self.backend_routing,
            fallbacks: FallbackPolicy::new(&self.fallback_models, self.fallback_ttft_ms)
                .map_err(|e| CoreError::Config(format!("--fallback-models: {e}")))?,
            bootstrap: self.bootstrap,
            identity: self.identity.load()?,
            answer_signer: self
                .answer_signing_key
                .as_deref()
                .map(daemon_runtime::identity::load_answer_signer)
                .transpose()?,
            raft: RaftTuning {
                heartbeat_ms: self.heartbeat_ms,
                election_timeout_min_ms: self.election_timeout_min_ms,
                election_timeout_max_ms: self.election_timeout_max_ms,
                snapshot_logs: self.snapshot_logs,
                snapshot_log_bytes: self.snapshot_log_bytes,
                logs_kept_after_snapshot: self.logs_kept_after_snapshot,
            },
            commit_timeout: Duration::from_millis(self.commit_timeout_ms),
            canary_rule: CanaryRule {
                max_error_rate_increase: self.canary_max_error_rate_increase,
                max_p99_ratio: self.canary_max_p99_ratio,
                min_samples: self.canary_min_samples.max(1),
                audit_percent: self.canary_audit_percent,
                min_agreement: self.canary_min_agreement,
            },
            auto: AutoPolicy {
                models: self.auto_models.iter().map(|m| m.trim().to_ascii_lowercase()).collect(),
                min_confidence: self.auto_min_confidence,
                tenant_min_confidence: AutoPolicy::parse_confidences(&self.auto_tenant_min_confidence)
                    .map_err(|e| CoreError::Config(format!("--auto-tenant-min-confidence: {e}")))?,
                budgets: AutoPolicy::parse_budgets(&self.auto_budgets)
                    .map_err(|e| CoreError::Config(format!("--auto-budgets: {e}")))?,
            },
        };
        config.validate()?;
        Ok(config)
    }
}

/// Parses one `id=host:port` item of `--peers`.
fn parse_peer(item: &str) -> Result<(NodeId, String), String> {
    let (id, addr) =
        item.trim().split_once('=').ok_or_else(|| format!("peer {item:?} is not id=host:port"))?;
    let id = id.trim().parse::<NodeId>().map_err(|e| format!("peer id {id:?}: {e}"))?;
    let addr = addr.trim();
    if addr.is_empty() || addr.contains('/') || !addr.contains(':') {
        return Err(format!("peer address {addr:?} is not host:port"));
    }
    Ok((id, addr.to_owned()))
}

/// Everything a core node needs to run, validated.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's Raft id (a key of `peers`).
    pub id: NodeId,
    /// Where `/livez` and `/readyz` are also served in plain HTTP, if anywhere.
    pub probe_listen: Option<std::net::SocketAddr>,
    /// Source address of connections to other nodes (the listen IP, unless that is unspecified).
    pub source_ip: Option<IpAddr>,
    /// Models to register when this node forms the cluster.
    pub models: Vec<ModelRef>,
    /// Tenants to create when this node forms the cluster.
    pub tenants: Vec<String>,
    /// The model registry file, checked at start and followed while this node leads.
    pub model_registry: Option<PathBuf>,
    /// Directory of the node's sled database.
    pub data_dir: PathBuf,
    /// Every core node's id and `host:port`, this one included; the initial Raft membership.
    pub peers: BTreeMap<NodeId, String>,
    /// Inference pod URLs in order of preference.
    pub pods: Vec<String>,
    /// OpenAI-compatible model servers.
    pub openai_backends: Vec<OpenAiBackendSpec>,
    /// Their timeouts and retries.
    pub backend_timeouts: OpenAiTimeouts,
    /// How a generation picks among its model's backends.
    pub backend_routing: Routing,
    /// Which model answers for one that cannot.
    pub fallbacks: FallbackPolicy,
    /// Whether to form the cluster from `peers` when this node has no Raft state.
    pub bootstrap: bool,
    /// The secret every gRPC call between tiers carries.
    pub identity: TierIdentity,
    /// Signs every answer this node hands out; `None` signs nothing.
    pub answer_signer: Option<AnswerSigner>,
    /// Raft timing and snapshot policy.
    pub raft: RaftTuning,
    /// How long a write may wait for a leader and a quorum.
    pub commit_timeout: Duration,
    /// When a model's version on trial is rolled back by itself.
    pub canary_rule: CanaryRule,
    /// How `model: "auto"` chooses.
    pub auto: AutoPolicy,
}

impl NodeConfig {
    /// Checks the invariants the rest of the node relies on.
    pub fn validate(&self) -> Result<(), CoreError> {
        if !self.peers.contains_key(&self.id) {
            return Err(CoreError::Config(format!("node id {} is not in --peers", self.id)));
        }
        for tenant in &self.tenants {
            validate::name("tenant", tenant).map_err(|e| CoreError::Config(format!("--tenants: {e}")))?;
        }
        // Seeding may forward these to the leader, which refuses what the store API refuses; such a model
        // is refused here instead, or seeding would retry it forever.
        for model in &self.models {
            validate::name("model", &model.name).map_err(|e| CoreError::Config(format!("--models: {e}")))?;
            if model.name == shared::auto_model::AUTO_MODEL {
                return Err(CoreError::Config("--models: `auto` is the mesh's choice, not a model".into()));
            }
            if model.version == 0 {
                return Err(CoreError::Config(format!(
                    "--models: {} must have a version of at least 1",
                    model.name
                )));
            }
        }
        if let Some(path) = &self.model_registry {
            crate::node::background::registry_file::read(path)?;
        }
        for pod in &self.pods {
            if !(pod.starts_with("http://") || pod.starts_with("https://")) {
                return Err(CoreError::Config(format!("pod {pod:?} must be an http:// URL")));
            }
        }
        if !(0.0..=1.0).contains(&self.auto.min_confidence) {
            return Err(CoreError::Config("--auto-min-confidence must be between 0 and 1".into()));
        }
        let r = &self.raft;
        if r.heartbeat_ms == 0
            || r.election_timeout_min_ms <= r.heartbeat_ms
            || r.election_timeout_max_ms <= r.election_timeout_min_ms
        {
            return Err(CoreError::Config(
                "need 0 < heartbeat < election timeout min < election timeout max".into(),
            ));
        }
        Ok(())
    }

    /// This node's own advertised address (from `peers`).
    pub fn advertised_addr(&self) -> Option<&str> {
        self.peers.get(&self.id).map(String::as_str)
    }
}

/// Raft timing, tuned for a loaded two-core machine: heartbeats are frequent enough that a follower notices
/// a dead leader within about a second, and elections are slow enough that a busy (not dead) leader keeps
/// its term.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftTuning {
    /// Heartbeat interval in milliseconds.
    pub heartbeat_ms: u64,
    /// Lower bound of the election timeout in milliseconds.
    pub election_timeout_min_ms: u64,
    /// Upper bound of the election timeout in milliseconds.
    pub election_timeout_max_ms: u64,
    /// Log entries since the last snapshot that trigger a new one, whatever their size.
    pub snapshot_logs: u64,
    /// Bytes of log since the last snapshot that trigger a new one, or the last snapshot's size if larger
    /// ([`crate::node::raft::snapshot_trigger`]).
    pub snapshot_log_bytes: u64,
    /// Log entries kept behind a snapshot, so that a briefly lagging follower catches up from the log
    /// instead of receiving the whole snapshot.
    pub logs_kept_after_snapshot: u64,
}

impl Default for RaftTuning {
    fn default() -> Self {
        Self {
            heartbeat_ms: 200,
            election_timeout_min_ms: 1000,
            election_timeout_max_ms: 2000,
            snapshot_logs: 100_000,
            snapshot_log_bytes: 64 * 1024 * 1024,
            logs_kept_after_snapshot: 1000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> NodeArgs {
        let mut argv = vec![
            "core-node",
            "--id",
            "2",
            "--listen",
            "127.0.0.1:7002",
            "--data-dir",
            "/tmp/x",
            "--peers",
            "1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003",
            "--pods",
            "http://127.0.0.1:7100",
        ];
        argv.extend_from_slice(extra);
        NodeArgs::try_parse_from(argv).expect("valid command line")
    }

    #[test]
    fn parses_peers_and_pods() {
        let a = args(&["--bootstrap"]);
        assert_eq!(
            a.peers,
            vec![(1, "127.0.0.1:7001".into()), (2, "127.0.0.1:7002".into()), (3, "127.0.0.1:7003".into())]
        );
        assert_eq!(a.pods, vec!["http://127.0.0.1:7100".to_owned()]);
        assert!(a.bootstrap);
        assert_eq!(a.heartbeat_ms, 200);
    }

    #[test]
    fn rejects_bad_peers() {
        assert!(parse_peer("1127.0.0.1:7001").is_err());
        assert!(parse_peer("x=127.0.0.1:7001").is_err());
        assert!(parse_peer("1=").is_err());
        assert_eq!(parse_peer(" 7=h:1 "), Ok((7, "h:1".to_owned())));
    }

    #[test]
    fn reads_the_secret_from_a_file_and_validates() {
        let path = std::env::temp_dir().join(format!("core-node-secret-{}", std::process::id()));
        std::fs::write(&path, "short\n").expect("write temp file");
        let mut a = args(&[]);
        a.identity.insecure_tier_secret_file = Some(path.clone());
        assert!(a.into_config().is_err(), "a secret under 32 bytes is refused");
        std::fs::write(&path, "a-development-secret-of-32-bytes!\n").expect("write temp file");
        let mut a = args(&[]);
        a.identity.insecure_tier_secret_file = Some(path.clone());
        let config = a.into_config().expect("valid config");
        let call = config.identity.request(());
        assert!(config.identity.check(&call, &[daemon_runtime::TierRole::Core]).is_ok());
        assert_eq!(config.advertised_addr(), Some("127.0.0.1:7002"));
        let _ = std::fs::remove_file(&path);

        let mut bad = config.clone();
        bad.id = 9;
        assert!(bad.validate().is_err());
        let mut bad = config.clone();
        bad.pods = vec!["127.0.0.1:7100".into()];
        assert!(bad.validate().is_err());
        let mut bad = config.clone();
        bad.tenants = vec![String::new()];
        assert!(bad.validate().is_err());
        let mut bad = config.clone();
        bad.models = vec![ModelRef { name: "m".into(), version: 0 }];
        assert!(bad.validate().is_err(), "the leader would refuse to register it");
        let mut bad = config;
        bad.models = vec![ModelRef { name: "m".repeat(validate::MAX_NAME_BYTES + 1), version: 1 }];
        assert!(bad.validate().is_err());
    }
}
