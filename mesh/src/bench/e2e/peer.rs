//! The stack a user would assemble instead of the mesh: GPTCache (`mesh/peers/gptcache-server.py`: MiniLM
//! embeddings, faiss, its default similarity evaluation and threshold) in front of `llama-server` on
//! the same GGUF and threads. Both processes stop when it is dropped.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::bench::pod::llama_cpp::LlamaCpp;
use crate::bench::pod::llama_server::{LlamaServer, ServerSpec};
use mesh_harness::paths;
use mesh_harness::ports::free_port;
use mesh_harness::process::ManagedProcess;

/// Context of each llama-server slot: two user turns, one answer and the template fit.
const CTX_PER_SLOT: usize = 2048;
/// Loading MiniLM and faiss.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// GPTCache in front of llama-server.
pub struct GptCacheStack {
    /// The cache's OpenAI endpoint (what clients call).
    pub url: String,
    /// `GPTCache <version> + llama-server`, as the report names it.
    pub label: String,
    server: LlamaServer,
    cache: ManagedProcess,
}

impl GptCacheStack {
    /// Starts llama-server with `slots` parallel slots on `threads` threads, and GPTCache before it.
    pub fn start(
        llama: &LlamaCpp,
        peers_dir: &Path,
        threads: usize,
        slots: usize,
        scratch: &Path,
    ) -> anyhow::Result<Self> {
        let spec = ServerSpec {
            model: paths::smollm2_gguf(),
            threads,
            slots,
            ctx_per_slot: CTX_PER_SLOT,
            extra_args: Vec::new(),
        };
        let log_dir = scratch.join("logs");
        let server = LlamaServer::start(llama, &spec, "llama-server-e2e", &log_dir)?;
        let port = free_port()?;
        let data_dir = scratch.join("gptcache");
        std::fs::create_dir_all(&data_dir)?;
        let mut command = Command::new(peers_dir.join("venv/bin/python"));
        command
            .arg(paths::repo_root().join("mesh/peers/gptcache-server.py"))
            .args(["--listen", &format!("127.0.0.1:{port}"), "--upstream", server.url()])
            .arg("--onnx-dir")
            .arg(peers_dir.join("onnx"))
            .arg("--tokenizer")
            .arg(paths::minilm_dir().join("tokenizer.json"))
            .arg("--data-dir")
            .arg(&data_dir);
        let mut cache = ManagedProcess::spawn("gptcache-server", command, &log_dir)?;
        let url = format!("http://127.0.0.1:{port}");
        cache.wait_ready(&format!("{url}/healthz"), READY_TIMEOUT)?;
        let version = crate::bench::regional::gptcache::version(peers_dir);
        let label = format!("{} + llama-server ({})", version.trim_end_matches(" + faiss"), llama.label());
        Ok(Self { url, label, server, cache })
    }

    /// llama-server itself, for fresh answers that bypass the cache.
    pub fn server_url(&self) -> &str {
        self.server.url()
    }
}

impl Drop for GptCacheStack {
    fn drop(&mut self) {
        self.cache.stop(Duration::from_secs(5));
    }
}
