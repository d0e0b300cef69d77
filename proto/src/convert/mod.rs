//! Conversions between the protobuf messages and the domain types of `shared`. Every tier converts here,
//! so that prost types stop at the boundary of each daemon and the two sides of a hop cannot drift.
//!
//! - `completion`: a cached answer, on the wire and in `shared`.
//! - `changes`: the core's change feed (`CoreCache.Watch`) as [`shared::changes`].
//! - `generate`: a normalized request as the pod's request (and back, for the core's refresh prompts),
//!   the core's completion request, and a finished generation as the entry it is stored as.
//! - `model_spec`: a model's registry metadata (context length, prices, APIs, backend pool).

mod changes;
mod completion;
mod generate;
mod model_spec;

pub use generate::GeneratedEntry;
