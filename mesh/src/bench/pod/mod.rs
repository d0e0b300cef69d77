//! `mesh bench pod`: the inference pod against llama.cpp on the same GGUF file and threads.
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
