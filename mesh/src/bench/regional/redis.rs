//! The exact tier's peer: Redis 7 on loopback (no persistence), driven by its own `redis-benchmark` GET of
//! a value of the same size as the regional node's hit response, at the same concurrency.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context as _};

use mesh_harness::ports::free_port;
use mesh_harness::process::ManagedProcess;

/// What `redis-benchmark` reported for GET.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RedisFigures {
    /// Requests per second.
    pub rps: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
}

/// `redis-server --version`'s version, e.g. `Redis 7.0.15`.
pub fn version() -> anyhow::Result<String> {
    let output = Command::new("redis-server")
        .arg("--version")
        .output()
        .context("running redis-server --version (scripts/install-regional-peers.sh installs it)")?;
    let text = String::from_utf8_lossy(&output.stdout);
    let version = text.split_whitespace().find_map(|w| w.strip_prefix("v=")).unwrap_or("unknown");
    Ok(format!("Redis {version}"))
}

/// Starts Redis, stores one `value_bytes` value, and runs `requests` GETs from `clients` connections.
pub fn benchmark(
    value_bytes: usize,
    clients: usize,
    requests: u64,
    log_dir: &Path,
) -> anyhow::Result<RedisFigures> {
    let port = free_port()?;
    let mut command = Command::new("redis-server");
    command.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
    let mut server = ManagedProcess::spawn("redis", command, log_dir)?;
    wait_for_port(port)?;
    let value = "v".repeat(value_bytes);
    let status = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "set", "key:__rand_int__", &value])
        .stdout(Stdio::null())
        .status()
        .context("running redis-cli")?;
    if !status.success() {
        bail!("redis-cli set failed");
    }
    let output = Command::new("redis-benchmark")
        .args(["-p", &port.to_string(), "-t", "get", "-d", &value_bytes.to_string()])
        .args(["-c", &clients.to_string(), "-n", &requests.to_string(), "--csv"])
        .output()
        .context("running redis-benchmark")?;
    server.stop(Duration::from_secs(5));
    parse_csv(&String::from_utf8_lossy(&output.stdout))
}

fn wait_for_port(port: u16) -> anyhow::Result<()> {
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("redis did not start on port {port}")
}

/// The GET line of `redis-benchmark --csv`.
fn parse_csv(text: &str) -> anyhow::Result<RedisFigures> {
    let header: Vec<String> = text
        .lines()
        .find(|l| l.starts_with("\"test\""))
        .context("no CSV header from redis-benchmark")?
        .split(',')
        .map(|f| f.trim_matches('"').to_owned())
        .collect();
    let row: Vec<String> = text
        .lines()
        .find(|l| l.starts_with("\"GET\""))
        .with_context(|| format!("no GET line from redis-benchmark: {text}"))?
        .split(',')
        .map(|f| f.trim_matches('"').to_owned())
        .collect();
    let field = |name: &str| -> anyhow::Result<f64> {
        let at = header.iter().position(|h| h == name).with_context(|| format!("no {name} column"))?;
        Ok(row.get(at).context("short row")?.parse()?)
    };
    Ok(RedisFigures {
        rps: field("rps")?,
        p50_ms: field("p50_latency_ms")?,
        p99_ms: field("p99_latency_ms")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_get_line() {
        let text = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\"GET\",\"81234.56\",\"0.2\",\"0.1\",\"0.191\",\"0.3\",\"0.415\",\"1.2\"\n";
        let figures = parse_csv(text).expect("parses");
        assert_eq!(figures, RedisFigures { rps: 81234.56, p50_ms: 0.191, p99_ms: 0.415 });
    }
}
