//! `core-node`: one node of the core cluster. Parses the command line, sets up logging and runs the node
//! until SIGINT or SIGTERM. `core-node admin ...` manages a running cluster instead.

use anyhow::Context;
use clap::Parser;
use core_cluster::admin_cli::{self, AdminArgs};
use core_cluster::node::{self, NodeArgs};
use tokio::net::TcpListener;

/// mimalloc instead of glibc's allocator: the Raft path allocates and frees many short-lived buffers
/// (sled node copies, JSON payloads), where glibc spent about a quarter of the node's CPU time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("admin") {
        let args = AdminArgs::parse_from(std::env::args().skip(1));
        let runtime = tokio::runtime::Runtime::new()?;
        runtime.block_on(admin_cli::run(args))?;
        return Ok(());
    }
    let parsed = daemon_runtime::config_file::parse::<NodeArgs>()?;
    if let Some(printed) = parsed.print {
        print!("{printed}");
        return Ok(());
    }
    let export = parsed
        .settings
        .otlp_endpoint
        .as_deref()
        .map(|endpoint| daemon_runtime::logging::TraceExport { endpoint, service: "mesh-core" });
    daemon_runtime::logging::init("info,openraft=warn,sled=warn", parsed.settings.log_format, export)?;
    let args = parsed.settings;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(args.worker_threads))
        .enable_all()
        .build()?;
    runtime.block_on(serve(args))
}

async fn serve(args: NodeArgs) -> anyhow::Result<()> {
    let listen = args.listen;
    let config = args.into_config()?;
    config.identity.check_listen(listen)?;
    let listener = TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    node::run(config, listener, daemon_runtime::shutdown::signal()).await?;
    Ok(())
}
