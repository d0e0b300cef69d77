//! The operator's tool, `mesh`: start a whole local mesh (`mesh up`), make its certificates (`mesh certs`),
//! watch it (`mesh dashboard`), and measure it against the peers a user would otherwise pick, side by
//! side (`mesh bench <suite>`). The offline semantic tools (`semantic-eval`, `distill-edge-table`) live
//! here too. Processes are started through the harness (`mesh-harness`, in `tests/`).
//!
//! # Layout
//! - [`bench`]: the benchmark suites, one folder each.
//! - [`dashboard`]: the live operator page: scrapes every daemon's `/metrics`, keeps recent frames,
//!   serves `deploy/dashboard/`.
//! - [`semantic`]: precision and recall of semantic-hit decisions on the labelled pairs, the
//!   ShareGPT neighbour study, and the distillation of the edge's small embedding table.
//! - [`sharegpt`]: parsing ShareGPT V3 conversations (the benchmarks' and the semantic tools' workload).
//!
//! The binaries in `src/bin/` parse their command lines and call into these modules.

pub mod bench;
pub mod dashboard;
pub mod semantic;
pub mod sharegpt;
