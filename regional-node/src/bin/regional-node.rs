//! `regional-node`: the regional cache daemon. See `regional-node --help`.

use regional_node::config::RegionalConfig;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .init();
    let parsed = proto::config_file::parse::<RegionalConfig>()?;
    if let Some(printed) = parsed.print {
        print!("{printed}");
        return Ok(());
    }
    let settings = parsed.settings.resolve()?;
    let listener = tokio::net::TcpListener::bind(settings.config.listen).await?;
    regional_node::server::run(settings, listener, proto::shutdown::signal()).await?;
    Ok(())
}
