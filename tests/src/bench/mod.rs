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
//! - [`gen_target`]: what the pod suite asks of a text-generation server, and what one generation did.
//! - [`llama_cpp`]: the pod's peer: locating (or installing) llama.cpp, and `llama-bench`.
//! - [`llama_server`]: `llama-server` with parallel slots, driven over HTTP.
//! - [`pod`]: our inference pod and its gRPC client side.
//! - [`prompts`]: the pod suite's prompts (ShareGPT turns, sized prefill and prefix prompts, tasks).
//! - [`sharegpt`]: reading ShareGPT V3 first turns.
//! - [`throughput`]: output tokens/s of N concurrent requests inside a fixed window.
//! - [`gen_phases`]: the phases both systems of the pod suite go through.
//! - [`bandwidth`]: a STREAM-like memory copy, for the single-stream decode ceiling.
//! - [`gguf`]: the weight bytes a decode step of a GGUF file reads.
//! - [`pod_rows`]: the pod suite's figures and rows (goal ratios, ceilings).
//! - [`pod_suite`]: `mesh bench pod`, putting the above together.
//! - [`http_load`]: a closed loop of blocking HTTP clients on threads.
//! - [`redis`]: Redis 7 and `redis-benchmark`, the exact tier's peer.
//! - [`gptcache`]: GPTCache with faiss and MiniLM, the semantic tier's peer.
//! - [`replica_load`]: loading a regional node's replicated state over its replication gRPC.
//! - [`regional_suite`]: `mesh bench regional`, putting the above together.
//! - [`edge_suite`]: `mesh bench edge`: the edge worker against a pass-through worker, and the scan.
//! - [`tls_suite`]: `mesh bench tls`: exact hits and edge misses with mutual TLS against without.
//! - [`e2e_workload`]: the end-to-end suite's ShareGPT mixes (natural, Zipf-popular).
//! - [`e2e_driver`]: clients replaying conversations over the streaming API, and each step's figures.
//! - [`e2e_agreement`]: whether semantic hits served the answer a fresh generation gives.
//! - [`e2e_peer`]: GPTCache in front of llama-server, the stack a user would assemble instead.
//! - [`e2e_suite`]: `mesh bench e2e`: the mesh, the mesh with caching off, and that stack.
//! - [`propagation`]: `mesh bench propagation`: how long each tier takes to obey an invalidation.
//! - [`report`]: the table and the JSON.
//! - [`scratch`]: the run's scratch directory.

pub mod bandwidth;
pub mod core;
pub mod core_suite;
pub mod cpu_time;
pub mod e2e_agreement;
pub mod e2e_driver;
pub mod e2e_peer;
pub mod e2e_suite;
pub mod e2e_workload;
pub mod edge_suite;
pub mod etcd;
pub mod floor;
pub mod gen_phases;
pub mod gen_target;
pub mod gguf;
pub mod gptcache;
pub mod http_load;
pub mod kv_target;
pub mod llama_cpp;
pub mod llama_server;
pub mod load;
pub mod pod;
pub mod pod_rows;
pub mod pod_suite;
pub mod prompts;
pub mod propagation;
pub mod redis;
pub mod regional_suite;
pub mod replica_load;
pub mod report;
pub mod scratch;
pub mod sharegpt;
pub mod throughput;
pub mod tls_suite;

pub use core_suite::CoreBenchOptions;
pub use e2e_suite::E2eBenchOptions;
pub use edge_suite::EdgeBenchOptions;
pub use pod_suite::PodBenchOptions;
pub use regional_suite::RegionalBenchOptions;
pub use report::Report;
