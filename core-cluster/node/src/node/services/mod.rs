//! The gRPC services a core node serves (`CoreCache`, `CoreStore`, `CoreAdmin`) and its HTTP routes.
//!
//! # Layout
//! - [`admin_service`]: the `CoreAdmin` gRPC server (membership, status).
//! - [`auto_model`]: `model: "auto"`: the rule's rungs and the cascade that climbs them.
//! - [`cache_service`]: the `CoreCache` gRPC server (lookup, complete).
//! - [`fallback`]: starting a completion's generation on its model or its fallback model.
//! - [`store_service`]: the `CoreStore` gRPC server (write, linearizable or local read).
//! - [`http`]: `/healthz` and `/metrics`.
//! - [`change_feed`]: the `CoreCache.Watch` stream of the feed, resumable by revision.

pub mod admin_service;
pub mod auto_model;
pub mod cache_service;
pub mod change_feed;
pub mod fallback;
pub mod http;
pub mod store_service;
