//! The regional daemon: an OpenAI-compatible HTTP front that answers from the regional cache, falls back
//! to the core cluster's authoritative state, and on a miss has the core generate (and commit) the answer.
//!
//! # Layout
//! - [`config`]: the documented command-line / environment configuration.
//! - [`server`]: [`server::run`], which serves the HTTP routes on a given listener until shutdown.
//! - [`http`]: the route handlers (`/v1/chat/completions`, `/v1/models`, `/healthz`, `/metrics`).
//! - [`exact_cache`]: the in-memory exact-match cache, bounded by bytes, with W-TinyLFU admission.
//! - [`core_client`]: the gRPC client of the core cluster, failing over between core nodes.
//! - [`caller`]: who is calling (a tenant with an API key, or the edge tier with the shared secret).
//! - [`embedding`]: the all-MiniLM-L6-v2 sentence embedder the semantic tier builds on.
//! - [`semantic_eval`]: precision and recall of semantic-hit decisions on the labelled pair set.
//! - [`metrics`]: the Prometheus metrics of this daemon.
//! - [`error`]: [`RegionalError`], and its conversion to OpenAI-shaped HTTP errors.

pub mod caller;
pub mod config;
pub mod core_client;
pub mod embedding;
pub mod error;
pub mod exact_cache;
pub mod http;
pub mod metrics;
pub mod semantic_eval;
pub mod server;

pub use error::RegionalError;
