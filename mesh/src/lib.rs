//! The operator's tool, `mesh`: start a whole local mesh (`mesh up`), make its certificates (`mesh certs`),
//! watch it (`mesh dashboard`), and measure it against the peers a user would otherwise pick, side by
//! side (`mesh bench <suite>`). The offline semantic tools (`semantic-eval`, `distill-edge-table`) live
//! here too. Processes are started through the harness (`mesh-harness`, in `tests/`).
//!
//! # Layout
//! - [`cli`]: `mesh`'s command line and its commands (`up`, `dashboard`, `certs`, `bench`).
//! - [`bench`]: the benchmark suites, one folder each; each suite's options are its command line.
//! - [`dashboard`]: the live operator page: scrapes every daemon's `/metrics`, keeps recent frames,
//!   serves `deploy/dashboard/`.
//! - [`gemma`]: the second model, Gemma 3 270M, served by llama.cpp's `llama-server` behind the core
//!   (`mesh up --upstream`): its file, its install, the server, its place in a mesh.
//! - [`semantic`]: precision and recall of semantic-hit decisions on the labelled pairs, the
//!   ShareGPT neighbour study, and the distillation of the edge's small embedding table.
//! - [`sharegpt`]: parsing ShareGPT V3 conversations (the benchmarks' and the semantic tools' workload).
//! - [`stop`]: the process's stop flag, set by SIGINT or SIGTERM.
//!
//! The binaries in `src/bin/` parse their command lines and call into these modules (`mesh` into
//! [`cli`]).

pub mod bench;
pub mod cli;
pub mod dashboard;
pub mod gemma;
pub mod semantic;
pub mod sharegpt;
pub mod stop;
