//! `mesh bench upstream`: what the mesh costs in front of a model server teams already run.

pub mod suite;
