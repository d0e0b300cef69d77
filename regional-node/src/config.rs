//! Configuration of the regional daemon: command-line flags, each with an environment variable.

use shared::answer_signature::AnswerVerifier;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use daemon_runtime::{IdentityArgs, TierIdentity};
use shared::auth::TenantKeys;
use shared::content_class::{self, TtlPolicy};
use shared::models::ModelTable;

use crate::semantic::audit::AuditSettings;
use crate::semantic::experiment::Experiments;
use crate::semantic::tier::SemanticThresholds;
use crate::RegionalError;

/// `regional-node` flags. Every flag can also be set through the environment variable shown.
#[derive(Clone, Debug, Parser)]
#[command(name = "regional-node", about = "Regional cache daemon of the LLM cache mesh")]
pub struct RegionalConfig {
    /// Address to serve HTTP on.
    #[arg(long, env = "MESH_REGIONAL_LISTEN", default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,
    /// Also serve `/livez` and `/readyz` alone, in plain HTTP, on this address: for probers that cannot
    /// present a mesh certificate (kubelet, a load balancer's health check). Unset: only on `--listen`.
    #[arg(long, env = "MESH_REGIONAL_PROBE_LISTEN")]
    pub probe_listen: Option<SocketAddr>,
    /// Name of this region, reported in metrics and health.
    #[arg(long, env = "MESH_REGION", default_value = "local")]
    pub region: String,
    /// Core node gRPC URLs, comma-separated; tried in order, failing over on errors.
    #[arg(long, env = "MESH_CORE_URLS", value_delimiter = ',', required = true)]
    pub core: Vec<String>,
    /// Tenant API-key table: `tenant:sha256hex,...` (digests of the keys, never the keys).
    #[arg(long, env = "MESH_API_KEYS", default_value = "")]
    pub api_keys: String,
    /// Served models and their current versions: `name@version,...`.
    #[arg(long, env = "MESH_MODELS", default_value = shared::models::DEFAULT_MODELS)]
    pub models: String,
    /// Milliseconds between asking the core for its models' current versions (a version bump reaches
    /// this node within this long, or at once when the core refuses a generation for an old version).
    #[arg(long, env = "MESH_MODEL_REFRESH_MS", default_value_t = 2_000)]
    pub model_refresh_ms: u64,
    /// Bytes of memory the exact cache may hold.
    #[arg(long, env = "MESH_REGIONAL_CACHE_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub cache_bytes: usize,
    /// Share (0..=1] of the exact cache's bytes past which a tenant's new entries may not push other
    /// tenants' entries out (a full cache only: alone, a tenant uses every byte).
    #[arg(long, env = "MESH_TENANT_CACHE_SHARE", default_value_t = 0.5)]
    pub tenant_cache_share: f64,
    /// Time to live of new `volatile` answers (prices, schedules, "this week"), in seconds. For this and
    /// the other class TTLs, 0 leaves the TTL to the tenant's policy at the core (no expiry if it has
    /// none). `realtime` answers are never cached and have no TTL to set.
    #[arg(long, env = "MESH_CACHE_TTL_VOLATILE_S", default_value_t = content_class::DEFAULT_VOLATILE_TTL_S)]
    pub ttl_volatile_s: u64,
    /// Time to live of new `default` answers (nothing says how fast they change), in seconds.
    #[arg(long, env = "MESH_CACHE_TTL_DEFAULT_S", default_value_t = content_class::DEFAULT_DEFAULT_TTL_S)]
    pub ttl_default_s: u64,
    /// Time to live of new `stable` answers (definitions, math, code, history), in seconds.
    #[arg(long, env = "MESH_CACHE_TTL_STABLE_S", default_value_t = content_class::DEFAULT_STABLE_TTL_S)]
    pub ttl_stable_s: u64,
    /// This node's identity: mutual TLS files, or the insecure development secret.
    #[command(flatten)]
    pub identity: IdentityArgs,
    /// The core's answer-signing public key (64 hex digits; `mesh certs` writes `answer-signing.pub`):
    /// answers replicated from peers are merged only when the core signed them, so a peer can relay an
    /// answer but never plant, alter or re-date one. Without it peers' answers are taken unchecked.
    #[arg(long, env = "MESH_ANSWER_PUBLIC_KEY")]
    pub answer_public_key: Option<PathBuf>,
    /// Directory of the sled store that keeps the exact cache across restarts; without it the cache
    /// starts empty.
    #[arg(long, env = "MESH_REGIONAL_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Directory of all-MiniLM-L6-v2 (`model.safetensors`, `config.json`, `tokenizer.json`) for the
    /// semantic tier; without it the node answers exact hits only.
    #[arg(long, env = "MESH_SEMANTIC_MODEL_DIR")]
    pub semantic_model_dir: Option<PathBuf>,
    /// Cosine similarity a cached question needs to answer a `volatile` one (before the verifier).
    #[arg(long, env = "MESH_SEMANTIC_THRESHOLD_VOLATILE", default_value_t = 0.88)]
    pub semantic_threshold_volatile: f32,
    /// Cosine similarity a cached question needs to answer a `default` one.
    #[arg(long, env = "MESH_SEMANTIC_THRESHOLD_DEFAULT", default_value_t = 0.84)]
    pub semantic_threshold_default: f32,
    /// Cosine similarity a cached question needs to answer a `stable` one.
    #[arg(long, env = "MESH_SEMANTIC_THRESHOLD_STABLE", default_value_t = 0.80)]
    pub semantic_threshold_stable: f32,
    /// Longest question, in words, the semantic tier embeds and matches; a longer one is answered by the
    /// exact tiers only (its misses then skip the MiniLM forward).
    #[arg(long, env = "MESH_SEMANTIC_MAX_WORDS", default_value_t = 48)]
    pub semantic_max_words: usize,
    /// Also embed every looked-up question with MiniLM and search that space when the small embedding
    /// (`--edge-table`) finds nothing: a little more recall for a MiniLM forward on every miss. Without
    /// it (and with the table) the tier matches by the small embedding alone; without the table MiniLM is
    /// the only embedding and always runs.
    #[arg(long, env = "MESH_SEMANTIC_MINILM_LOOKUPS")]
    pub semantic_minilm_lookups: bool,
    /// Share of semantic hits audited online (0..=1): the question as asked is generated again, fresh
    /// and stored nowhere, and compared with the answer served; 0 turns the audit off.
    #[arg(long, env = "MESH_SEMANTIC_AUDIT_FRACTION", default_value_t = 0.05)]
    pub semantic_audit_fraction: f64,
    /// Share of wrong semantic hits a tenant accepts; when the audits show more (95% confidence), the
    /// tier raises that tenant's threshold of the class.
    #[arg(long, env = "MESH_SEMANTIC_ERROR_BUDGET", default_value_t = 0.01)]
    pub semantic_error_budget: f64,
    /// A tenant's own error budget, `tenant=fraction` (repeatable, or comma-separated).
    #[arg(long, env = "MESH_SEMANTIC_TENANT_BUDGETS", value_delimiter = ',')]
    pub semantic_tenant_budget: Vec<String>,
    /// A tenant's similarity thresholds tried two ways side by side, `TENANT=PERCENT:DELTA`
    /// (comma-separated): PERCENT of its questions (by key, each always in the same arm) use thresholds
    /// moved by DELTA, the rest the thresholds as they are; each arm's lookups, hits and audits are in
    /// `/metrics` (`mesh_regional_semantic_arm_*`).
    #[arg(long, env = "MESH_SEMANTIC_EXPERIMENTS", value_delimiter = ',')]
    pub semantic_experiment: Vec<String>,
    /// Invalidations a tenant may send a second (each is a write at the core); past them, 429 with
    /// `Retry-After`. 0: no limit.
    #[arg(long, env = "MESH_INVALIDATIONS_PER_S", default_value_t = 20.0)]
    pub invalidations_per_s: f64,
    /// Invalidations a tenant may send at once before the rate applies.
    #[arg(long, env = "MESH_INVALIDATION_BURST", default_value_t = 100)]
    pub invalidation_burst: u32,
    /// Cache lookups at the core a tenant may make a second (each request this node cannot answer from
    /// its own caches is one, before admission and before any generation); past them, 429 with
    /// `Retry-After`. 0: no limit.
    #[arg(long, env = "MESH_CORE_LOOKUPS_PER_S", default_value_t = 500.0)]
    pub core_lookups_per_s: f64,
    /// Core lookups a tenant may make at once before the rate applies.
    #[arg(long, env = "MESH_CORE_LOOKUP_BURST", default_value_t = 1000)]
    pub core_lookup_burst: u32,
    /// Milliseconds a client may take to send a request's headers (slow clients are disconnected).
    #[arg(long, env = "MESH_HTTP_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub http_header_timeout_ms: u64,
    /// Milliseconds a client may take to send a request's body once its headers arrived (408 after).
    #[arg(long, env = "MESH_HTTP_BODY_TIMEOUT_MS", default_value_t = 30_000)]
    pub http_body_timeout_ms: u64,
    /// Seconds a connection may go with no request in flight (HTTP/2 keep-alive PINGs do not count), or
    /// with nothing read or written, before it is closed.
    #[arg(long, env = "MESH_HTTP_IDLE_TIMEOUT_S", default_value_t = 120)]
    pub http_idle_timeout_s: u64,
    /// Seconds a response may wait for its client to take data it has ready (an HTTP/2 stream whose
    /// window stays shut, a socket nobody reads) before its connection is dropped.
    #[arg(long, env = "MESH_HTTP_WRITE_TIMEOUT_S", default_value_t = 60)]
    pub http_write_timeout_s: u64,
    /// Connections served at once; more wait in the listen queue.
    #[arg(long, env = "MESH_HTTP_MAX_CONNECTIONS", default_value_t = 4096)]
    pub http_max_connections: usize,
    /// Connections served at once from one address; more are closed at once.
    #[arg(long, env = "MESH_HTTP_MAX_CONNECTIONS_PER_IP", default_value_t = 1024)]
    pub http_max_connections_per_ip: usize,
    /// This node's id in replication clocks; unique in the mesh. Without it: the region and a random
    /// suffix, kept in `--data-dir` (`node-id`) so that a restart keeps it. A peer with this node's id is
    /// refused.
    #[arg(long, env = "MESH_REGIONAL_NODE_ID")]
    pub node_id: Option<String>,
    /// Address to serve replication gRPC on; without it the node neither replicates nor accepts peers.
    #[arg(long, env = "MESH_REGIONAL_PEER_LISTEN")]
    pub peer_listen: Option<SocketAddr>,
    /// gRPC URLs of the other regional nodes (`http://host:port` of their `--peer-listen`),
    /// comma-separated.
    #[arg(long, env = "MESH_REGIONAL_PEERS", value_delimiter = ',')]
    pub peers: Vec<String>,
    /// Lookups of a key (in the recent window of a frequency sketch with aging) that make its answer hot
    /// enough to replicate to the peers at once; colder answers are fetched from the core on demand.
    #[arg(long, env = "MESH_REPLICATE_MIN_LOOKUPS", default_value_t = 2)]
    pub replicate_min_lookups: u8,
    /// Milliseconds between anti-entropy rounds with each peer.
    #[arg(long, env = "MESH_ANTI_ENTROPY_INTERVAL_MS", default_value_t = 5_000)]
    pub anti_entropy_interval_ms: u64,
    /// Cost units (decoded tokens, plus prompt tokens / 8) of generations this node may have in flight;
    /// more wait in the admission queue.
    #[arg(long, env = "MESH_ADMISSION_BUDGET", default_value_t = 16_384)]
    pub admission_budget: u64,
    /// Generations that may wait for budget; past them a request gets 429 with `Retry-After`.
    #[arg(long, env = "MESH_ADMISSION_QUEUE", default_value_t = 256)]
    pub admission_queue: usize,
    /// Longest wait in the admission queue, in milliseconds, before a 429.
    #[arg(long, env = "MESH_ADMISSION_WAIT_MS", default_value_t = 30_000)]
    pub admission_wait_ms: u64,
    /// Share (0..=1] of the admission budget, and of the queue, that one tenant may hold; past it the
    /// tenant's generations wait behind its own while other tenants' are admitted.
    #[arg(long, env = "MESH_ADMISSION_TENANT_SHARE", default_value_t = 0.5)]
    pub admission_tenant_share: f64,
    /// Time-to-first-token target of generations, in milliseconds: a request whose predicted wait for
    /// budget is longer gets 429 with `Retry-After` at once instead of waiting. 0: no target.
    #[arg(long, env = "MESH_ADMISSION_TTFT_TARGET_MS", default_value_t = 10_000)]
    pub admission_ttft_target_ms: u64,
    /// A tenant's own time-to-first-token target, `tenant=ms` (repeatable, or comma-separated).
    #[arg(long, env = "MESH_ADMISSION_TENANT_TTFT_TARGETS", value_delimiter = ',')]
    pub admission_tenant_ttft_target: Vec<String>,
    /// Consecutive calls that reach no core node before the circuit breaker opens.
    #[arg(long, env = "MESH_BREAKER_FAILURES", default_value_t = 5)]
    pub breaker_failures: u32,
    /// Milliseconds the breaker stays open before it lets one probe through.
    #[arg(long, env = "MESH_BREAKER_OPEN_MS", default_value_t = 5_000)]
    pub breaker_open_ms: u64,
    /// Seconds past its TTL an answer may still be served, marked `X-Cache: STALE`, while the core is out
    /// of reach (0: never).
    #[arg(long, env = "MESH_STALE_GRACE_S", default_value_t = 600)]
    pub stale_grace_s: u64,
    /// Questions kept per semantic partition (tenant, model, version, sampling, context).
    #[arg(long, env = "MESH_SEMANTIC_PER_PARTITION", default_value_t = 4096)]
    pub semantic_per_partition: usize,
    /// Semantic partitions kept (the least recently used go first).
    #[arg(long, env = "MESH_SEMANTIC_PARTITIONS", default_value_t = 10_000)]
    pub semantic_partitions: usize,
    /// Bytes the semantic tier's questions, embeddings and index links may take, counted per question
    /// (an estimate of the allocations, 1 to 3.5 KB a question) and per partition (96 KiB for each
    /// index, measured by `mesh bench semantic-index`); a tenant holds at most `--tenant-cache-share` of
    /// them. 0: bounded by the counts alone.
    #[arg(long, env = "MESH_SEMANTIC_BYTES", default_value_t = 512 * 1024 * 1024)]
    pub semantic_bytes: u64,
    /// The edge's small-embedding table (built by `distill-edge-table`); with it, `/v1/hotset` carries
    /// each entry's small embedding, else the edge embeds the questions itself.
    #[arg(long, env = "MESH_EDGE_TABLE")]
    pub edge_table: Option<PathBuf>,
    /// Most entries of one tenant in a `/v1/hotset` snapshot (the most recently changed).
    #[arg(long, env = "MESH_HOTSET_PER_TENANT", default_value_t = 1_000)]
    pub hotset_per_tenant: usize,
    /// How log lines are written to standard error: `text` (human-readable) or `json` (one object a line,
    /// with the spans' fields such as `trace_id`, for log shippers).
    #[arg(long, env = "MESH_REGIONAL_LOG_FORMAT", value_enum, default_value_t = daemon_runtime::logging::LogFormat::Text)]
    pub log_format: daemon_runtime::logging::LogFormat,
    /// Export the spans of every request to this OpenTelemetry collector over OTLP/HTTP (JSON encoding),
    /// for example `http://127.0.0.1:4318`, as service `mesh-regional`; unset, nothing is exported.
    #[arg(long, env = "MESH_REGIONAL_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// TOML file with any of these settings, one key per flag (`--cache-bytes` is `cache_bytes`); the
    /// command line and the environment variables override it.
    #[arg(long, env = "MESH_REGIONAL_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print the settings in effect as such a file, with each one's help, and exit.
    #[arg(long)]
    pub print_config: bool,
}

/// Configuration resolved and validated for [`crate::server::run`].
#[derive(Clone, Debug)]
pub struct Settings {
    /// The raw flags.
    pub config: RegionalConfig,
    /// Parsed API-key table.
    pub tenants: TenantKeys,
    /// Parsed model table.
    pub models: ModelTable,
    /// This node's identity: its TLS material and how it recognises the edge and its peers.
    pub identity: TierIdentity,
    /// How long answers of each content class are cached.
    pub ttl: TtlPolicy,
    /// Checks the core's signature on peers' answers (`--answer-public-key`).
    pub answer_verifier: Option<AnswerVerifier>,
}

impl RegionalConfig {
    /// Validates the flags and reads the secret.
    pub fn resolve(self) -> Result<Settings, RegionalError> {
        let tenants = TenantKeys::parse(&self.api_keys).map_err(RegionalError::Config)?;
        let models = ModelTable::parse(&self.models).map_err(RegionalError::Config)?;
        let identity = self.identity.load().map_err(|e| RegionalError::Config(e.to_string()))?;
        if self.core.is_empty() {
            return Err(RegionalError::Config("at least one --core URL is needed".into()));
        }
        let thresholds = self.semantic_thresholds();
        for value in [thresholds.volatile, thresholds.default, thresholds.stable] {
            if !(0.0..=1.0).contains(&value) {
                return Err(RegionalError::Config(format!(
                    "a semantic threshold must be in 0..=1, not {value}"
                )));
            }
        }
        self.audit_settings().map_err(RegionalError::Config)?;
        Experiments::parse(&self.semantic_experiment)
            .map_err(|e| RegionalError::Config(format!("--semantic-experiment: {e}")))?;
        if !self.peers.is_empty() && self.peer_listen.is_none() {
            return Err(RegionalError::Config(
                "--peers needs --peer-listen (peers dial this node too)".into(),
            ));
        }
        if !(self.tenant_cache_share > 0.0 && self.tenant_cache_share <= 1.0) {
            return Err(RegionalError::Config(format!(
                "--tenant-cache-share must be in (0, 1], not {}",
                self.tenant_cache_share
            )));
        }
        if !(self.admission_tenant_share > 0.0 && self.admission_tenant_share <= 1.0) {
            return Err(RegionalError::Config(format!(
                "--admission-tenant-share must be in (0, 1], not {}",
                self.admission_tenant_share
            )));
        }
        if self.anti_entropy_interval_ms == 0 {
            return Err(RegionalError::Config("--anti-entropy-interval-ms must be positive".into()));
        }
        let ttl = self.ttl_policy();
        let answer_verifier = self
            .answer_public_key
            .as_deref()
            .map(daemon_runtime::identity::load_answer_verifier)
            .transpose()
            .map_err(|e| RegionalError::Config(format!("--answer-public-key: {e}")))?;
        Ok(Settings { config: self, tenants, models, identity, ttl, answer_verifier })
    }

    /// The similarity threshold of each content class, from the `--semantic-threshold-*` flags.
    pub fn semantic_thresholds(&self) -> SemanticThresholds {
        SemanticThresholds {
            volatile: self.semantic_threshold_volatile,
            default: self.semantic_threshold_default,
            stable: self.semantic_threshold_stable,
        }
    }

    /// What the semantic audit samples and promises, from the `--semantic-audit-*` and budget flags.
    pub fn audit_settings(&self) -> Result<AuditSettings, String> {
        if !(0.0..=1.0).contains(&self.semantic_audit_fraction) {
            return Err(format!(
                "--semantic-audit-fraction is in 0..=1, not {}",
                self.semantic_audit_fraction
            ));
        }
        if !(0.0..1.0).contains(&self.semantic_error_budget) {
            return Err(format!("--semantic-error-budget is in 0..1, not {}", self.semantic_error_budget));
        }
        Ok(AuditSettings {
            fraction: self.semantic_audit_fraction,
            error_budget: self.semantic_error_budget,
            tenant_budgets: AuditSettings::parse_tenant_budgets(&self.semantic_tenant_budget)?,
        })
    }

    /// How long a request's body may take to arrive.
    pub fn http_body_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.http_body_timeout_ms.max(1))
    }

    /// The bounds of the HTTP listener, from the `--http-*` flags.
    pub fn http_limits(&self) -> daemon_runtime::http_serving::HttpLimits {
        daemon_runtime::http_serving::HttpLimits {
            header_read_timeout: std::time::Duration::from_millis(self.http_header_timeout_ms.max(1)),
            idle_timeout: std::time::Duration::from_secs(self.http_idle_timeout_s.max(1)),
            write_timeout: std::time::Duration::from_secs(self.http_write_timeout_s.max(1)),
            max_connections: self.http_max_connections.max(1),
            max_connections_per_ip: self.http_max_connections_per_ip.max(1),
        }
    }

    /// The TTL of each content class, from the `--ttl-*-s` flags.
    pub fn ttl_policy(&self) -> TtlPolicy {
        TtlPolicy {
            volatile_s: self.ttl_volatile_s,
            default_s: self.ttl_default_s,
            stable_s: self.ttl_stable_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_ttls_default_to_the_shared_policy() {
        let config = RegionalConfig::try_parse_from(["regional-node", "--core", "http://127.0.0.1:1"]);
        let config = config.expect("flags parse");
        assert_eq!(config.ttl_policy(), TtlPolicy::default());
    }

    #[test]
    fn class_ttls_come_from_their_flags() {
        let config = RegionalConfig::try_parse_from([
            "regional-node",
            "--core",
            "http://127.0.0.1:1",
            "--ttl-volatile-s",
            "60",
            "--ttl-default-s",
            "600",
            "--ttl-stable-s",
            "604800",
        ])
        .expect("flags parse");
        assert_eq!(config.ttl_policy(), TtlPolicy { volatile_s: 60, default_s: 600, stable_s: 604_800 });
    }
}
