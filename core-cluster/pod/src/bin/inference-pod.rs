//! `inference-pod`: serves SmolLM2-135M-Instruct over gRPC to the core cluster and over an
//! OpenAI-compatible HTTP API.
//!
//! Only parses the command line, sets up tracing and calls [`inference_pod::run`].

use anyhow::Context as _;
use inference_pod::config::PodArgs;
use inference_pod::run;

fn main() -> anyhow::Result<()> {
    let parsed = daemon_runtime::config_file::parse::<PodArgs>()?;
    if let Some(printed) = parsed.print {
        print!("{printed}");
        return Ok(());
    }
    let args = parsed.settings;
    // candle sizes its pools from these variables (CANDLE_NUM_THREADS first); set both before any
    // thread exists, so an inherited CANDLE_NUM_THREADS cannot override --threads.
    std::env::set_var("RAYON_NUM_THREADS", args.threads.to_string());
    std::env::set_var("CANDLE_NUM_THREADS", args.threads.to_string());
    let export = args
        .otlp_endpoint
        .as_deref()
        .map(|endpoint| daemon_runtime::logging::TraceExport { endpoint, service: "mesh-pod" });
    daemon_runtime::logging::init("info", args.log_format, export)?;

    let credential = args.identity.load()?;
    credential.check_listen(args.listen)?;
    let config = args.pod_config(credential)?;

    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("inference-pod")
        .build()
        .context("starting the async runtime")?
        .block_on(async {
            let listener = tokio::net::TcpListener::bind(args.listen)
                .await
                .with_context(|| format!("binding {}", args.listen))?;
            run(config, listener, daemon_runtime::shutdown::signal()).await
        })
}
