//! A minimal HTTP/1.1 server for the page: its two files, the charting library from `node_modules`,
//! and `/api/series`. One thread per connection, `Connection: close`; it serves an operator's browser on
//! loopback, nothing more.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::history::History;
use super::panels::Panel;

/// What the server reads from.
pub struct Site {
    /// `deploy/dashboard`: `index.html`, `app.js`, and `node_modules/chart.js`.
    pub assets: PathBuf,
    /// The charts.
    pub panels: Vec<Panel>,
    /// Their values.
    pub history: Arc<Mutex<History>>,
    /// The scrape interval, for the page.
    pub interval_ms: u64,
}

/// Serves `listener` until `stop` is set (and one more connection arrives to wake it).
pub fn serve(listener: TcpListener, site: Arc<Site>, stop: &AtomicBool) {
    for stream in listener.incoming().flatten() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let site = Arc::clone(&site);
        std::thread::spawn(move || {
            if let Err(error) = answer(stream, &site) {
                eprintln!("dashboard: {error}");
            }
        });
    }
}

fn answer(stream: TcpStream, site: &Site) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Headers are read and ignored (GET only, no body).
    let mut line = String::new();
    while reader.read_line(&mut line)? > 2 {
        line.clear();
    }
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, content_type, body) = if method != "GET" {
        ("405 Method Not Allowed", "text/plain", b"GET only\n".to_vec())
    } else {
        match path {
            "/" | "/index.html" => file(&site.assets.join("index.html"), "text/html; charset=utf-8"),
            "/app.js" => file(&site.assets.join("app.js"), "text/javascript; charset=utf-8"),
            "/chart.umd.js" => file(
                &site.assets.join("node_modules/chart.js/dist/chart.umd.js"),
                "text/javascript; charset=utf-8",
            ),
            "/api/series" => {
                let history = site.history.lock().unwrap_or_else(|p| p.into_inner());
                let doc = history.to_json(&site.panels, site.interval_ms);
                ("200 OK", "application/json", doc.to_string().into_bytes())
            }
            _ => ("404 Not Found", "text/plain", b"not found\n".to_vec()),
        }
    };
    let mut stream = reader.into_inner();
    write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
         cache-control: no-store\r\nconnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(&body)?;
    stream.flush()
}

fn file(path: &Path, content_type: &'static str) -> (&'static str, &'static str, Vec<u8>) {
    match std::fs::read(path) {
        Ok(bytes) => ("200 OK", content_type, bytes),
        Err(error) => (
            "500 Internal Server Error",
            "text/plain",
            format!("{}: {error} (run .ci/setup.sh npm)\n", path.display()).into_bytes(),
        ),
    }
}
