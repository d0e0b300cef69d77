//! `mesh dashboard`: the operator's live view of a mesh. A scraper reads every daemon's `/metrics` at a
//! fixed interval, turns each pair of consecutive scrapes into chart values ([`panels`]), and keeps the
//! last minutes of them; a small web server ([`server`]) hands them to a page (`deploy/dashboard/`) that
//! draws them with Chart.js.
//!
//! - [`exposition`]: reading the daemons' OpenMetrics text.
//! - [`query`]: rates, interval quantiles, gauges and ratios over two scrapes.
//! - [`panels`]: the charts and the metric families behind them.
//! - [`history`]: the frames held and the page's JSON.

pub mod exposition;
pub mod history;
pub mod panels;
pub mod query;
pub mod server;

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use history::{Frame, History, TargetStatus};
use query::{Scrape, TARGET_LABEL};

/// A daemon to scrape.
#[derive(Clone, Debug)]
pub struct Target {
    /// Shown on the page and used to tell its series apart (`core-1`, `pod`).
    pub name: String,
    /// Base URL; `/metrics` is appended.
    pub url: String,
}

/// What `mesh dashboard` needs.
#[derive(Clone, Debug)]
pub struct DashboardOptions {
    /// The daemons scraped.
    pub targets: Vec<Target>,
    /// Where the page is served, e.g. `127.0.0.1:7190`.
    pub listen: String,
    /// Time between scrapes.
    pub interval: Duration,
    /// Frames kept (the charts' width in scrapes).
    pub keep: usize,
    /// A client certificate and key (PEM) presented to TLS daemons (the admin identity).
    pub client_identity: Option<(Vec<u8>, Vec<u8>)>,
    /// `deploy/dashboard`.
    pub assets: PathBuf,
}

impl DashboardOptions {
    /// Scrapes `targets` every 2 s, keeps 10 minutes of frames, serves `deploy/dashboard` on `listen`.
    pub fn new(targets: Vec<Target>, listen: &str, client_identity: Option<(Vec<u8>, Vec<u8>)>) -> Self {
        Self {
            targets,
            listen: listen.to_owned(),
            interval: Duration::from_secs(2),
            keep: 300,
            client_identity,
            assets: mesh_harness::paths::repo_root().join("deploy/dashboard"),
        }
    }

    /// What `mesh dashboard` needs to watch `mesh`: every daemon's metrics, read with the read-only
    /// `metrics` identity when the mesh runs TLS, the page served on `listen`.
    pub fn for_mesh(mesh: &mesh_harness::Mesh, listen: &str) -> anyhow::Result<Self> {
        let mut targets = vec![Target { name: "pod".into(), url: mesh.pod_url() }];
        targets.extend(
            (0..mesh.core_nodes()).map(|i| Target { name: format!("core-{}", i + 1), url: mesh.core_url(i) }),
        );
        targets.extend(
            (0..mesh.regional_nodes())
                .map(|i| Target { name: format!("regional-{}", i + 1), url: mesh.regional_url(i) }),
        );
        let client_identity = match mesh.tls_files("prometheus") {
            Some(files) => Some((std::fs::read(&files.cert)?, std::fs::read(&files.key)?)),
            None => None,
        };
        Ok(Self::new(targets, listen, client_identity))
    }
}

/// A dashboard being served; dropping it stops its scraper and server threads.
pub struct Dashboard {
    /// `http://127.0.0.1:port`.
    pub url: String,
    address: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the server's accept so that it sees the flag.
        let _ = std::net::TcpStream::connect_timeout(&self.address, Duration::from_millis(200));
    }
}

impl Dashboard {
    /// Binds, starts scraping and serving, and returns at once.
    pub fn start(options: DashboardOptions) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(&options.listen)?;
        let address = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let history = Arc::new(Mutex::new(History::new(options.keep)));
        let site = Arc::new(server::Site {
            assets: options.assets.clone(),
            panels: panels::all(),
            history: Arc::clone(&history),
            interval_ms: options.interval.as_millis() as u64,
        });
        let serving = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("dashboard-http".into())
            .spawn(move || server::serve(listener, site, &serving))?;
        let scraping = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("dashboard-scrape".into())
            .spawn(move || scrape_until(&options, &history, &scraping))?;
        Ok(Self { url: format!("http://{address}"), address, stop })
    }
}

fn scrape_until(options: &DashboardOptions, history: &Mutex<History>, stop: &AtomicBool) {
    let identity = options.client_identity.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice()));
    let agent = mesh_harness::client::agent_with_certificate(Duration::from_secs(3), identity);
    let panels = panels::all();
    let mut before: Option<Scrape> = None;
    while !stop.load(Ordering::Relaxed) {
        let started = std::time::Instant::now();
        let (now, targets) = scrape_once(&agent, &options.targets);
        if let Some(before) = &before {
            let values = panels.iter().map(|panel| panel.evaluate(before, &now)).collect();
            let frame = Frame { at_ms: now.at_ms, values };
            history.lock().unwrap_or_else(|p| p.into_inner()).push(frame, targets);
        }
        before = Some(now);
        std::thread::sleep(options.interval.saturating_sub(started.elapsed()));
    }
}

fn scrape_once(agent: &ureq::Agent, targets: &[Target]) -> (Scrape, Vec<TargetStatus>) {
    let at_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let mut scrape = Scrape { at_ms, samples: Vec::new() };
    let mut statuses = Vec::new();
    for target in targets {
        let text = agent.get(format!("{}/metrics", target.url)).call().map_err(|e| e.to_string()).and_then(
            |reply| match reply.status().as_u16() {
                200 => reply.into_body().read_to_string().map_err(|e| e.to_string()),
                status => Err(format!("HTTP {status}")),
            },
        );
        let error = text.as_ref().err().cloned();
        for mut sample in text.as_deref().map(exposition::parse).unwrap_or_default() {
            sample.labels.insert(TARGET_LABEL.to_owned(), target.name.clone());
            scrape.samples.push(sample);
        }
        statuses.push(TargetStatus {
            name: target.name.clone(),
            url: target.url.clone(),
            up: error.is_none(),
            error,
        });
    }
    (scrape, statuses)
}
