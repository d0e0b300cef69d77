//! What every suite uses.
//!
//! # Layout
//! - [`load`]: the closed-loop load generator every suite drives both systems with.
//! - [`http_load`]: a closed loop of blocking HTTP clients on threads.
//! - [`throughput`]: output tokens/s of N concurrent requests inside a fixed window.
//! - [`cpu_time`]: a process's CPU time, read from `/proc`.
//! - [`floor`]: the write+fsync floor.
//! - [`bandwidth`]: a STREAM-like memory copy, for the single-stream decode ceiling.
//! - [`sharegpt`]: ShareGPT V3 first turns and conversations, as workloads.
//! - [`report`]: the table and the JSON, and the machine they ran on.
//! - [`scratch`]: the run's scratch directory, kept when a run fails.
//! - [`signatures`]: what signing and checking an answer costs natively.

pub mod bandwidth;
pub mod cpu_time;
pub mod floor;
pub mod http_load;
pub mod load;
pub mod report;
pub mod scratch;
pub mod sharegpt;
pub mod signatures;
pub mod throughput;
