//! `mesh bench tls`: exact hits and edge misses with mutual TLS between the tiers against without.

pub mod suite;
