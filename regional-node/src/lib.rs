//! The regional daemon (placeholder while the crate is written).

pub mod embedding;
