//! The mesh in front of model servers teams already run: `mesh bench upstream` (what the adapter costs,
//! [`suite`]) and `mesh bench routing` (routing by predicted time against round robin, [`routing`]).

pub mod routing;
pub mod suite;
