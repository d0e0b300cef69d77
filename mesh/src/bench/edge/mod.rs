//! `mesh bench edge`: the edge worker against a pass-through worker (`mesh/peers/passthrough-worker/`)
//! in front of the same regional node, and the wasm scan of the hot set.

pub mod suite;
