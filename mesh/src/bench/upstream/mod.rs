//! The mesh in front of model servers teams already run: `mesh bench upstream` (what the adapter costs,
//! [`suite`]) and `mesh bench routing` (routing by predicted time against round robin, [`routing`]).

pub mod routing;
pub mod suite;

use std::path::Path;

use mesh_harness::paths;

use crate::bench::pod::llama_cpp::LlamaCpp;
use crate::bench::pod::llama_server::{LlamaServer, ServerSpec};

/// llama-server on the SmolLM2 GGUF with one slot and `threads` threads, its files under `dir`: the
/// model server both suites put the mesh in front of.
fn start_llama_server(bin_dir: Option<&Path>, threads: usize, dir: &Path) -> anyhow::Result<LlamaServer> {
    let llama = LlamaCpp::locate(bin_dir, false, dir, crate::stop::flag())?;
    let spec = ServerSpec {
        model: paths::smollm2_gguf(),
        threads,
        slots: 1,
        ctx_per_slot: 2048,
        extra_args: Vec::new(),
    };
    LlamaServer::start(&llama, &spec, "llama-server", dir)
}
