//! The semantic tier's peer: GPTCache with faiss and all-MiniLM-L6-v2 (`mesh/peers/gptcache-peer.py`, in
//! the virtual environment `scripts/install-regional-peers.sh` makes), on the same labelled pairs.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _};
use serde::Deserialize;

use mesh_harness::paths;

/// One pair's decision.
#[derive(Clone, Debug, Deserialize)]
pub struct Decision {
    /// `hit` or `miss`: what the pair should get.
    pub label: String,
    /// Whether the cache answered.
    pub hit: bool,
}

/// What the peer script printed.
#[derive(Clone, Debug, Deserialize)]
pub struct PeerRun {
    /// Latency of every hit, ms.
    pub hit_ms: Vec<f64>,
    /// Every pair's decision, in input order.
    pub decisions: Vec<Decision>,
}

/// Where the installer put the peers, running it first when `install` is set.
pub fn locate(install: bool) -> anyhow::Result<PathBuf> {
    let script = paths::repo_root().join("scripts/install-regional-peers.sh");
    if !install {
        let dir = std::env::var_os("REGIONAL_PEERS_DIR").map(PathBuf::from).unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
            });
            cache.join("llm-cache-mesh/regional-peers")
        });
        if !dir.join(".installed").exists() {
            bail!("the regional peers are not installed in {} (run {})", dir.display(), script.display());
        }
        return Ok(dir);
    }
    let output = Command::new("bash").arg(&script).output().context("running the peers' installer")?;
    if !output.status.success() {
        bail!("{} failed: {}", script.display(), String::from_utf8_lossy(&output.stderr));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()))
}

/// Runs GPTCache over `pairs_file` (JSON lines `a`, `b`, `label`) at cosine threshold `cosine`.
pub fn run(
    peers_dir: &Path,
    pairs_file: &Path,
    cosine: f32,
    reps: usize,
    scratch: &Path,
) -> anyhow::Result<PeerRun> {
    let tokenizer = paths::minilm_dir().join("tokenizer.json");
    let output = Command::new(peers_dir.join("venv/bin/python"))
        .arg(paths::repo_root().join("mesh/peers/gptcache-peer.py"))
        .arg("--pairs")
        .arg(pairs_file)
        .arg("--onnx")
        .arg(peers_dir.join("onnx/model.onnx"))
        .arg("--tokenizer")
        .arg(tokenizer)
        .arg("--cosine")
        .arg(cosine.to_string())
        .arg("--reps")
        .arg(reps.to_string())
        .arg("--scratch")
        .arg(scratch)
        .output()
        .context("running mesh/peers/gptcache-peer.py")?;
    if !output.status.success() {
        bail!("gptcache-peer.py failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    serde_json::from_slice(&output.stdout).context("reading gptcache-peer.py's JSON")
}

/// Version of the installed GPTCache, e.g. `GPTCache 0.1.44 + faiss`.
pub fn version(peers_dir: &Path) -> String {
    Command::new(peers_dir.join("venv/bin/python"))
        .args(["-c", "import importlib.metadata as m; print(m.version('gptcache'))"])
        .output()
        .ok()
        .map(|o| format!("GPTCache {} + faiss", String::from_utf8_lossy(&o.stdout).trim()))
        .unwrap_or_else(|| "GPTCache + faiss".into())
}
