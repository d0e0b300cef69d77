//! `mesh bench propagation`: how long each tier takes to obey an invalidation.

pub mod suite;
