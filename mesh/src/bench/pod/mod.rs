//! `mesh bench pod`: the inference pod against llama.cpp on the same GGUF file and threads.
//!
//! # Figures seen
//!
//! Context only, from past runs, dated (the machine was not recorded beyond its 2 cores); the ratio
//! measured side by side in your own run is what counts.
//! - 2026-11-30: candle's `QMatMul` was about three quarters of a step (no SIMD Q4_1, one dot product
//!   per row and column), which is why the pod runs its own quantized matmul (`model/quant/`).
//! - 2026-11-30: prompt-lookup speculation gave 1.6-1.9x single-stream decode on the copy-this-code
//!   task; it stays off by default until it is measured under concurrent load.
//! - 2026-11-30: a run with the defaults took about 10 minutes on 2 cores; building llama.cpp
//!   (`scripts/install-llama-cpp.sh`) about 12 minutes.
//!
//! # Layout
//! - [`gen_target`]: what the suite asks of a text-generation server, and what one generation did.
//! - [`llama_cpp`]: the peer: locating (or installing) llama.cpp, and `llama-bench`.
//! - [`llama_server`]: `llama-server` with parallel slots, driven over HTTP.
//! - [`ours`]: our inference pod and its gRPC client side.
//! - [`prompts`]: the suite's prompts (ShareGPT turns, sized prefill and prefix prompts, tasks).
//! - [`gen_phases`]: the phases both systems go through.
//! - [`gguf`]: the weight bytes a decode step of a GGUF file reads.
//! - [`rows`]: the suite's figures and rows (goal ratios, ceilings).
//! - [`suite`]: putting the above together.

pub mod gen_phases;
pub mod gen_target;
pub mod gguf;
pub mod llama_cpp;
pub mod llama_server;
pub mod ours;
pub mod prompts;
pub mod rows;
pub mod suite;
