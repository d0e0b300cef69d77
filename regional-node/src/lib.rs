//! The regional daemon: an OpenAI-compatible HTTP front that answers from the regional cache, falls back
//! to the core cluster's authoritative state, and on a miss has the core generate (and commit) the answer.
//!
//! # Layout
//! - [`config`]: the documented command-line / environment configuration.
//! - [`server`]: [`server::run`], which serves the HTTP routes on a given listener until shutdown.
//! - [`http`]: the route handlers (`/v1/chat/completions`, `/v1/cache/invalidate`, `/v1/hotset`,
//!   `/v1/models`, `/healthz`, `/metrics`): authentication, parsing and rendering only.
//! - [`request_path`]: how a validated request is answered (exact cache, coalesced flights to the core,
//!   semantic tier, stale answers), and invalidation; tested in process against a fake core.
//! - [`exact_cache`]: the in-memory exact-match cache, bounded by bytes, with W-TinyLFU admission.
//! - [`flight`]: request coalescing: identical concurrent misses share one flight to the core.
//! - [`exact_store`]: sled persistence of the exact cache, so a restart starts warm.
//! - [`core_cache_client`]: the gRPC client of the core cluster, failing over between core nodes, behind
//!   the [`breaker`] (circuit breaker).
//! - [`admission`]: admission of generations by predicted cost, with a bounded queue (429 past it).
//! - [`caller`]: who is calling (a tenant with an API key, or the edge tier with the shared secret).
//! - [`semantic`]: the semantic tier: embedders, usearch indexes per partition, the near-miss
//!   verifier as the second check of every hit, and the online audit of served hits.
//! - [`replication`]: vector-clock replication of the hot set and of invalidations between regional
//!   nodes over gRPC, with anti-entropy.
//! - [`model_catalog`]: the served models and their versions, learned from the core's registry and feed.
//! - [`core_view`]: the core's invalidations as cutoffs every answer is checked against, kept across
//!   restarts, and the recent changes the edge pulls (`/v1/changes`).
//! - [`clock`]: the wall clock in Unix milliseconds, as every cache record carries it.
//! - [`change_feed`]: follows the core's change feed (`CoreCache.Watch`) into the request path.
//! - [`tenant_rate`]: a token bucket per tenant for requests that cost the whole mesh (invalidations).
//! - [`metrics`]: the Prometheus metrics of this daemon.
//! - [`error`]: [`RegionalError`], and its conversion to OpenAI-shaped HTTP errors.

pub mod admission;
pub mod breaker;
pub mod caller;
pub mod change_feed;
pub mod clock;
pub mod config;
pub mod core_cache_client;
pub mod core_view;
pub mod error;
pub mod exact_cache;
pub mod exact_store;
pub mod flight;
pub mod http;
pub mod metrics;
pub mod model_catalog;
pub mod replication;
pub mod request_path;
pub mod semantic;
pub mod server;
pub mod tenant_rate;

pub use error::RegionalError;
