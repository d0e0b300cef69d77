//! Offline measurements of the semantic tier's decisions (`semantic-eval`, `distill-edge-table`).
//!
//! # Layout
//! - [`eval`]: precision and recall of a similarity threshold alone and with the near-miss verifier,
//!   on the labelled pair sets (`near-miss/data/`).
//! - [`neighbours`]: each ShareGPT question looked up among its nearest others, as a node would.
//! - [`edge_table`]: distilling MiniLM's token embeddings into the edge's small int8 table, and how it
//!   agrees with the full model.

pub mod edge_table;
pub mod eval;
pub mod neighbours;
