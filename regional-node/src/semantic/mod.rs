//! The semantic tier: a question close enough to one already answered gets that answer, if the
//! near-miss verifier agrees that it asks the same thing.
//!
//! # Layout
//! - [`embedding`]: the all-MiniLM-L6-v2 sentence embedder (and the distilled small embedding beside it).
//! - [`cache`]: usearch indexes of embedded questions per partition (tenant, model, version), with the
//!   near-miss verifier as the second check of every hit.
//! - [`index`]: a partition's HNSW index: its parameters, and what a question and a partition cost.
//! - [`tier`]: the semantic tier as the request path uses it: embedders, indexes, class thresholds.
//! - [`audit`]: the online audit of served semantic hits (a sample regenerated and compared).
//! - [`experiment`]: a tenant's thresholds tried two ways side by side (cache-policy arms).
//!
//! The offline tools that measure these decisions (`semantic-eval`, `distill-edge-table`) are the `mesh`
//! tool crate's.

pub mod audit;
pub mod cache;
pub mod embedding;
pub mod experiment;
pub mod index;
pub mod tier;
