//! Benchmarks of the mesh against the peers a user would otherwise pick, measured side by side in one run
//! on the same machine (`shared/design/BENCHMARKS.md`): each prints a table and can write the same figures
//! as JSON. `mesh bench <suite>` runs them; each suite is one folder.
//!
//! # Layout
//! - [`auto`]: `mesh bench auto`: `model: "auto"` against always-small and always-large, accuracy and
//!   cost on labelled questions.
//! - [`common`]: what every suite uses: load generators, the report, the scratch directory, machine
//!   figures, ShareGPT turns.
//! - [`core`]: `mesh bench core`: the core cluster against etcd.
//! - [`pod`]: `mesh bench pod`: the inference pod against llama.cpp (`llama-bench`, `llama-server`).
//! - [`regional`]: `mesh bench regional`: the regional tier against Redis and GPTCache.
//! - [`scale`]: `mesh bench scale`: what the tiers cost as the data grows (so far the core against etcd at
//!   growing entry counts).
//! - [`semantic_index`]: `mesh bench semantic-index`: the semantic tier's index against an exact scan
//!   at 1k, 10k and 100k questions.
//! - [`edge`]: `mesh bench edge`: the edge worker against a pass-through worker, and the scan.
//! - [`tls`]: `mesh bench tls`: exact hits and edge misses with mutual TLS against without.
//! - [`tenants`]: `mesh bench tenants`: a victim tenant alone and beside each attack of another.
//! - [`e2e`]: `mesh bench e2e`: the mesh, the mesh with caching off, and GPTCache before llama-server.
//! - [`propagation`]: `mesh bench propagation`: how long each tier takes to obey an invalidation.
//! - [`upstream`]: `mesh bench upstream`: the mesh in front of `llama-server` against it alone; `mesh
//!   bench routing`: routing by predicted time against round robin over the pod and `llama-server`.

pub mod auto;
pub mod common;
pub mod core;
pub mod e2e;
pub mod edge;
pub mod pod;
pub mod propagation;
pub mod regional;
pub mod scale;
pub mod semantic_index;
pub mod tenants;
pub mod tls;
pub mod upstream;

pub use common::report::Report;
pub use core::suite::CoreBenchOptions;
pub use e2e::suite::E2eBenchOptions;
pub use edge::suite::EdgeBenchOptions;
pub use pod::suite::PodBenchOptions;
pub use regional::suite::RegionalBenchOptions;
