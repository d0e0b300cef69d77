//! [`MeshSpec`]: what a [`Mesh`](super::Mesh) starts (how many nodes of each tier, tenants, ports, TLS,
//! extra flags), and [`MeshSpec::local`], the full local mesh.

use std::path::PathBuf;

/// What to start.
#[derive(Clone, Debug)]
pub struct MeshSpec {
    /// Data directories (`core-<id>/`, `edge/`) and logs (`logs/`) live here.
    pub data_dir: PathBuf,
    /// Number of core nodes (Raft voters).
    pub core_nodes: usize,
    /// Number of regional nodes.
    pub regional_nodes: usize,
    /// Whether to run the edge worker under `wrangler dev`.
    pub edge: bool,
    /// Port of the edge; a free one when `None`.
    pub edge_port: Option<u16>,
    /// First of a fixed range of ports for the pod (`base`), core nodes (`base+1..`), regional nodes
    /// (`base+11..`), the edge inspector (`base+21`) and the regional nodes' replication
    /// (`base+31..`); free ports when `None`. A mesh that is started
    /// again on the same data directory needs the same core ports, since Raft membership records them.
    pub base_port: Option<u16>,
    /// The development tenant's name.
    pub tenant: String,
    /// The development tenant's API key.
    pub api_key: String,
    /// More tenants, `(name, API key)`, known to every tier like the development one.
    pub other_tenants: Vec<(String, String)>,
    /// Served models (`name@version`).
    pub models: String,
    /// Route replication between regional nodes through fault proxies owned by the harness, so a test
    /// can cut links ([`Mesh::partition_regional`](super::Mesh::partition_regional)); otherwise the
    /// nodes dial each other directly.
    pub peer_fault_proxies: bool,
    /// Route Raft traffic between core nodes through a fault proxy in front of each, with each node on
    /// its own loopback address (127.0.0.11 on), so a test can cut a core node off from the others while
    /// regional nodes still reach it directly ([`Mesh::partition_core`](super::Mesh::partition_core)).
    pub core_fault_proxies: bool,
    /// Milliseconds between anti-entropy rounds of the regional nodes (their default when `None`).
    pub anti_entropy_ms: Option<u64>,
    /// Extra flags for every regional node (TTLs, admission, breaker...).
    pub regional_args: Vec<String>,
    /// Extra `--var NAME:value` settings of the edge worker (`HOTSET_REFRESH_S`, ...).
    pub edge_vars: Vec<(String, String)>,
    /// Mutual TLS on every hop between daemons, with a development CA written to `<data_dir>/certs`
    /// (one certificate per node: `pod`, `core-<id>`, `regional-<n>`, `edge`, `admin`); the regional
    /// nodes also admit the local edge by the insecure secret, since `wrangler dev` cannot present a
    /// client certificate. Without it the mesh runs in insecure development mode.
    pub tls: bool,
    /// CPU threads of the pod's kernels (its default, 1, when `None`).
    pub pod_threads: Option<usize>,
    /// The core nodes reach the pod as an OpenAI-compatible server (`--openai-backends`, the pod's
    /// `/v1/chat/completions`) instead of over gRPC (`--pods`).
    pub pod_as_openai_backend: bool,
    /// The core nodes' model backends are these OpenAI-compatible servers (`--openai-backends` values)
    /// instead of the pod, when any is given (the pod still starts).
    pub openai_backends: Vec<String>,
    /// With `openai_backends`, the core nodes keep the inference pod (gRPC) as a backend too, so one
    /// model has backends of both kinds.
    pub pod_beside_openai_backends: bool,
    /// Extra flags for every core node.
    pub core_args: Vec<String>,
    /// Extra flags for the inference pod.
    pub pod_args: Vec<String>,
    /// Run every core and regional node under libfaketime, each on a wall clock of its own that a test
    /// can step while it runs ([`Mesh::set_clock_offset`](super::Mesh::set_clock_offset)).
    pub fake_clocks: bool,
}

impl MeshSpec {
    /// The full local mesh: 3 core nodes, 2 regional nodes, the edge; tenant `dev` with key `sk-dev`.
    pub fn local(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            core_nodes: 3,
            regional_nodes: 2,
            edge: true,
            edge_port: None,
            base_port: None,
            tenant: "dev".into(),
            api_key: "sk-dev".into(),
            other_tenants: Vec::new(),
            models: shared::models::DEFAULT_MODELS.into(),
            peer_fault_proxies: false,
            core_fault_proxies: false,
            anti_entropy_ms: None,
            regional_args: Vec::new(),
            edge_vars: Vec::new(),
            tls: false,
            pod_threads: None,
            pod_as_openai_backend: false,
            openai_backends: Vec::new(),
            pod_beside_openai_backends: false,
            core_args: Vec::new(),
            pod_args: Vec::new(),
            fake_clocks: false,
        }
    }
}
