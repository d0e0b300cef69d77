//! `regional-node`: the regional cache daemon. See `regional-node --help`.

use regional_node::config::RegionalConfig;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let parsed = daemon_runtime::config_file::parse::<RegionalConfig>()?;
    if let Some(printed) = parsed.print {
        print!("{printed}");
        return Ok(());
    }
    let export = parsed
        .settings
        .otlp_endpoint
        .as_deref()
        .map(|endpoint| daemon_runtime::logging::TraceExport { endpoint, service: "mesh-regional" });
    daemon_runtime::logging::init("info", parsed.settings.log_format, export)?;
    let settings = parsed.settings.resolve()?;
    settings.identity.check_listen(settings.config.listen)?;
    if let Some(peer_listen) = settings.config.peer_listen {
        settings.identity.check_listen(peer_listen)?;
    }
    let listener = tokio::net::TcpListener::bind(settings.config.listen).await?;
    regional_node::server::run(settings, listener, daemon_runtime::shutdown::signal()).await?;
    Ok(())
}
