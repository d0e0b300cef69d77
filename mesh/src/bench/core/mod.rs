//! `mesh bench core`: the core cluster against a three-member etcd cluster, on the same key-value
//! workload.
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
