//! `mesh bench core`: the core cluster against a three-member etcd cluster, on the same key-value
//! workload.
//!
//! # Figures seen
//!
//! Context only, from past runs, dated (the machine was not recorded); the ratio measured side by side
//! in your own run is what counts. They explain choices in `core-cluster/node/`.
//! - 2026-11-29: under write load glibc's allocator took about a quarter of a core node's CPU;
//!   mimalloc as `core-node`'s global allocator raised puts/s at 64 clients by about half.
//! - 2026-12-03: the machine's speed drifted by about a third from one minute to the next, hence
//!   `--rounds` and medians over rounds.
//! - 2026-12-04, sled bytes written per put on each follower: a redo record of each batch cost about
//!   2 KB a put (10.0 KB with it, 7.9 KB without, at 64 clients); writing the model row on every
//!   proposal cost about 5 KB a proposal (17.0 KB a put with it, 9.5 KB without, at one client);
//!   cache-entry rows in sled, whose small leaves are split by copying whole nodes, cost 7.5 KB a put
//!   at 64 clients, 4.2 KB with the rows in the content log.
//! - 2026-12-04: with entry heads in memory, a follower's CPU per put fell from about 66 to
//!   46-59 µs. Applying, on one thread, a proposal of 64 puts of 1 KiB took 37-40 µs a put with JSON
//!   rows and 22-27 µs with prost rows; a proposal of one put, 94-130 µs and 81-86 µs.
//! - 2026-12-04: with a snapshot every 5,000 entries, a run rewrote a 108 MB state inside a measured
//!   phase; snapshots now follow the bytes of log appended (`--snapshot-log-bytes`).
//!
//! # Layout
//! - [`kv_target`]: the key-value workload (puts per client count, linearizable reads) and its trait.
//! - [`etcd`]: a three-member etcd cluster and its client side.
//! - [`ours`]: our core cluster's client side.
//! - [`suite`]: putting the above together.

pub mod etcd;
pub mod kv_target;
pub mod ours;
pub mod suite;
