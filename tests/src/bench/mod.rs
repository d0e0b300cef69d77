//! Benchmarks of the mesh against the peers a user would otherwise pick, measured side by side in one run
//! on the same machine (`shared/design/BENCHMARKS.md`): each prints a table and can write the same figures
//! as JSON. `mesh bench <suite>` runs them.
//!
//! # Layout
//! - [`load`]: the closed-loop load generator every suite drives both systems with.
//! - [`kv_target`]: the key-value workload (puts per client count, linearizable reads) and its trait.
//! - [`floor`]: the write+fsync floor.
//! - [`etcd`]: a three-member etcd cluster and its client side.
//! - [`core`]: our core cluster's client side.
//! - [`core_suite`]: `mesh bench core`, putting the above together.
//! - [`report`]: the table and the JSON.
//! - [`scratch`]: the run's scratch directory.

pub mod core;
pub mod core_suite;
pub mod etcd;
pub mod floor;
pub mod kv_target;
pub mod load;
pub mod report;
pub mod scratch;

pub use core_suite::CoreBenchOptions;
pub use report::Report;
