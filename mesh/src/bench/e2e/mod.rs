//! `mesh bench e2e`: the whole mesh, the mesh with caching off, and the stack a user would assemble
//! instead (GPTCache in front of llama-server), on ShareGPT conversations.
//!
//! # Figures seen
//!
//! 2026-12-02, on 2 cores (the machine was not recorded further): a run with `--concurrency 1,8,32`
//! took about 25 minutes.
//!
//! # Layout
//! - [`workload`]: the ShareGPT mixes (natural, Zipf-popular).
//! - [`driver`]: clients replaying conversations over the streaming API, and each step's figures.
//! - [`agreement`]: whether semantic hits served the answer a fresh generation gives.
//! - [`peer`]: GPTCache in front of llama-server.
//! - [`suite`]: putting the above together.

pub mod agreement;
pub mod driver;
pub mod peer;
pub mod suite;
pub mod workload;
