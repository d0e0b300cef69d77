//! The process harness: starts the real binaries of the mesh as child processes on free loopback ports,
//! waits until each is ready, and kills them (whole process groups) when dropped. The cross-process tests
//! in `tests/tests/` and the operator's tool (`mesh up`, the benchmarks; the `mesh/` crate) both use it.
//!
//! # Layout
//! - [`paths`]: where the repository, the built binaries, the models and the edge worker are.
//! - [`certs`]: a development CA and one certificate per node (`mesh certs`, TLS meshes).
//! - [`daemon_config`]: the TOML configuration file each started daemon reads (`--config`).
//! - [`process`]: one managed child process in its own process group, with its log file.
//! - [`ports`]: free loopback ports.
//! - [`client`]: a small blocking HTTP client for the OpenAI endpoint (plain and streamed).
//! - [`wrangler`]: the `wrangler dev` command the edge and the benchmark's pass-through worker run under.
//! - [`mesh`]: a whole local mesh: core nodes, the inference pod, regional nodes and the edge (a folder:
//!   the spec, ports, identities, start-up of each tier, the core's waits, peer links, accessors).
//! - [`flag_table`]: README's flag tables, each daemon's `--print-flags`.
//! - [`linearizability`]: a linearizability checker for histories of the core store's registers.
//! - [`fault_proxy`]: a TCP proxy that refuses and cuts connections by source IP, for partitions.
//! - [`fake_clock`]: wall clocks a test can step, for daemons run under libfaketime.
//! - [`scripted_backend`]: an OpenAI-compatible server that fails on cue (statuses, stalls, malformed
//!   and cut streams), for the core's backend fault tests.
//! - [`otlp_receiver`]: a small OpenTelemetry collector (OTLP/HTTP, JSON) that keeps the spans it is
//!   sent, for the trace export test.
//! - [`core_cluster`]: a core cluster alone (no pods), each node behind a fault proxy, for store tests.
//! - [`propagation`]: how long after an acknowledged invalidation each tier stops serving the answer.
//! - [`poll`]: [`poll::poll_until`] and its variants, the one deadline loop the harness and the tests wait
//!   with.
//! - [`seeded`]: a seeded random number generator, so a test's or a soak's choices replay exactly.
//! - [`soak`]: a whole mesh driven at a fixed write rate for a given time, faults injected at random,
//!   with each process's resources and the core's collected state sampled as it runs (`mesh soak`).

pub mod certs;
pub mod client;
pub mod core_cluster;
pub mod daemon_config;
pub mod fake_clock;
pub mod fault_proxy;
pub mod flag_table;
pub mod linearizability;
pub mod mesh;
pub mod otlp_receiver;
pub mod paths;
pub mod poll;
pub mod ports;
pub mod process;
pub mod propagation;
pub mod scripted_backend;
pub mod seeded;
pub mod soak;
pub mod wrangler;

pub use mesh::{Mesh, MeshSpec};
