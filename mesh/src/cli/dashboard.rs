//! `mesh dashboard`: the operator's page of a running mesh, served until Ctrl-C.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::dashboard::{Dashboard, DashboardOptions, Target};
use crate::stop;

/// What `mesh dashboard` serves and reads.
#[derive(Debug, clap::Args)]
pub struct DashboardArgs {
    /// Where the page is served.
    #[arg(long, default_value = "127.0.0.1:7190")]
    pub listen: String,
    /// The daemons whose `/metrics` it reads, as `name=url`, comma-separated (default: `mesh up`'s
    /// fixed ports from base 7100, over TLS).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "pod=https://127.0.0.1:7100,core-1=https://127.0.0.1:7101,core-2=https://127.0.0.1:7102,core-3=https://127.0.0.1:7103,regional-1=https://127.0.0.1:7111,regional-2=https://127.0.0.1:7112"
    )]
    pub targets: Vec<String>,
    /// The mesh's certificates (`ca.pem`, and `admin.pem`/`admin.key`, the identity presented).
    #[arg(long, default_value = ".cache/mesh/certs")]
    pub certs: PathBuf,
    /// Seconds between scrapes.
    #[arg(long, default_value_t = 2)]
    pub interval: u64,
}

/// Runs `mesh dashboard` until Ctrl-C.
pub fn run(args: &DashboardArgs) -> anyhow::Result<()> {
    stop::install_handlers()?;
    let targets = args
        .targets
        .iter()
        .map(|t| match t.split_once('=') {
            Some((name, url)) => Ok(Target { name: name.to_owned(), url: url.to_owned() }),
            None => anyhow::bail!("a target is name=url, not {t:?}"),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let client_identity = client_identity(&targets, &args.certs)?;
    let options = DashboardOptions {
        interval: Duration::from_secs(args.interval.max(1)),
        ..DashboardOptions::new(targets, &args.listen, client_identity)
    };
    let dashboard = Dashboard::start(options)?;
    println!("dashboard: {} (Ctrl-C stops it)", dashboard.url);
    while !stop::flag().load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// When any target is scraped over TLS: trusts the mesh's CA, and returns the admin certificate and key
/// (PEM) the scraper presents.
fn client_identity(targets: &[Target], certs: &Path) -> anyhow::Result<Option<(Vec<u8>, Vec<u8>)>> {
    if !targets.iter().any(|t| t.url.starts_with("https://")) {
        return Ok(None);
    }
    mesh_harness::client::trust_mesh_ca(&std::fs::read(certs.join("ca.pem"))?);
    Ok(Some((std::fs::read(certs.join("admin.pem"))?, std::fs::read(certs.join("admin.key"))?)))
}
