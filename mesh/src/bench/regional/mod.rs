//! `mesh bench regional`: the regional tier's exact and semantic caches against Redis 7 and GPTCache.
//!
//! # Layout
//! - [`redis`]: Redis 7 and `redis-benchmark`, the exact tier's peer.
//! - [`gptcache`]: GPTCache with faiss and MiniLM, the semantic tier's peer (`mesh/peers/`).
//! - [`replica_load`]: loading a regional node's replicated state over its replication gRPC.
//! - [`suite`]: putting the above together.

pub mod gptcache;
pub mod redis;
pub mod replica_load;
pub mod suite;
