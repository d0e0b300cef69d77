//! The inference pod: SmolLM2-135M-Instruct (GGUF, 4-bit) on candle, served over gRPC to the core and
//! over an OpenAI-compatible HTTP API to anyone else.
//!
//! # Layout
//! - [`config`]: [`PodConfig`], what the daemon needs to start.
//! - [`tokenizer`]: the byte-level BPE tokenizer rebuilt from the GGUF metadata; a text completion's raw
//!   prompt, encoded as it is.
//! - [`chat_template`]: ChatML prompts, with the markers as token ids so content cannot forge them.
//! - [`compute_threads`]: the compute pool's real thread count, reported in `Health`.
//! - [`detokenizer`]: incremental decoding that only ever emits complete UTF-8.
//! - [`stop`]: stop strings, held back until they can no longer match.
//! - [`sampler`]: greedy argmax or seeded temperature / top-k / top-p sampling on plain logits.
//! - [`rng`]: the seeded generator sampling draws from.
//! - [`request`]: the domain types of a generation (validated parameters, outcome, timings).
//! - [`model`]: our Llama forward pass over a paged KV cache.
//! - [`engine`]: loads the model and its tokenizer.
//! - [`kv`]: the KV block manager: free list, reference counts, copy-on-write, prefix caching.
//! - [`scheduler`]: continuous batching: decodes first, chunked prefill, priorities, preemption.
//! - [`speculative`]: prompt-lookup drafts, their adaptive length, and exact verification.
//! - [`generation`]: one sequence's output side (detokenizing, stop strings, events, timings).
//! - [`step_loop`]: the loop that runs one batched forward step after another.
//! - [`worker`]: the handle to the step loop's thread (queueing).
//! - [`load`]: how busy the step loop is, published after every step.
//! - [`convert`]: protobuf <-> domain conversions (prost types stop there).
//! - [`service`]: the tonic `InferencePod` service, and [`service::InferenceService::submit`], the one
//!   way a generation is queued.
//! - [`openai_http`]: the OpenAI-compatible HTTP API (`/v1/chat/completions`, `/v1/completions`,
//!   `/v1/models`), as vLLM serves it, over the same way in as gRPC.
//! - [`metrics`]: Prometheus counters, histograms and gauges.
//! - [`server`]: [`run`], one listener for gRPC (h2c), the OpenAI API and HTTP `/healthz`, `/metrics`.
//!
//! Architecture Invariant: the model and its KV cache belong to exactly one OS thread (the step
//! loop), which batches every running sequence into each forward step; async tasks only validate,
//! tokenize, queue and stream.
//!
//! Architecture Invariant: generated text sent to a client never contains a ChatML marker, a request's
//! stop string, or a partial UTF-8 sequence (a text completion's `echo` sends its own prompt back as it
//! came).
//!
//! Architecture Invariant: a prompt is the chat template around the messages, or, for a text completion
//! (`raw_prompt`), its one user message as it is; either way the client's text is encoded as plain text,
//! so it never produces a special token.

pub mod chat_template;
pub mod compute_threads;
pub mod config;
pub mod convert;
pub mod detokenizer;
pub mod engine;
pub mod error;
pub mod generation;
pub mod kv;
pub mod load;
pub mod metrics;
pub mod model;
pub mod openai_http;
pub mod request;
pub mod rng;
pub mod sampler;
pub mod scheduler;
pub mod server;
pub mod service;
pub mod speculative;
pub mod step_loop;
pub mod stop;
pub mod tokenizer;
pub mod worker;

pub use config::PodConfig;
pub use engine::Engine;
pub use error::InferenceError;
pub use server::run;

#[cfg(test)]
pub(crate) mod test_support;
