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
    no_transparent_huge_pages();
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

/// Turns transparent huge pages off for this process. mimalloc asks for them on its arenas; the kernel
/// then backs each touched 2 MiB of an arena with a huge page, mimalloc's purges of freed 64 KiB ranges
/// split them, and khugepaged (which fills up to 511 missing small pages of 512 by default) collapses them
/// again, so a long-lived node's resident memory crept up with nothing new held. Measured with `mesh soak`
/// (1,000 writes a second; the figures are in the README beside `mesh soak`). A kernel that refuses the flag
/// only costs that memory, so the error is printed and ignored.
fn no_transparent_huge_pages() {
    if let Err(error) = rustix::thread::disable_transparent_huge_pages(true) {
        eprintln!("core-node: could not turn transparent huge pages off ({error}); memory may creep up");
    }
}
