//! Our own Llama forward pass over a paged KV cache.
//!
//! The linear layers are candle's quantized matmuls (Q8_0 or the file's Q4_1); everything between
//! them (RMS norm, rotary embedding, the KV cache and attention) is ours, written for the CPU over
//! plain `f32` slices so that a step allocates nothing per token and never concatenates a cache.
//!
//! # Layout
//! - [`shape`]: the model's dimensions, read from the GGUF metadata.
//! - [`rope`]: the rotary-embedding table (Llama's interleaved pairs).
//! - [`kv_pool`]: the physical KV blocks of every layer, and how slots map into them.
//! - [`paged_attention`]: causal GQA attention that reads keys and values through block tables.
//! - [`layers`]: the weights, loaded from GGUF with Q/K/V and gate/up fused into one matmul each.
//! - [`batch`]: what one forward step computes: rows of tokens from several sequences.
//! - [`forward`]: [`LlamaModel`], the step itself.
//!
//! Architecture Invariant: a step writes the KV of every row before any row attends, so a row sees
//! exactly the positions `0..=its own` of its sequence, whether they were written in an earlier step
//! (decode, a later prefill chunk, a cached prefix) or in this one.

pub mod batch;
pub mod forward;
pub mod kv_pool;
pub mod layers;
pub mod paged_attention;
pub mod quant;
pub mod rope;
pub mod shape;

pub use batch::{Batch, BatchSequence};
pub use forward::LlamaModel;
pub use kv_pool::{KvPool, KvPrecision};
pub use shape::ModelShape;

#[cfg(test)]
mod reference_tests;
