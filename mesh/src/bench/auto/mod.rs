//! `mesh bench auto`: `model: "auto"` against always the small model and always the large one, in
//! accuracy and cost per question ([`suite`]), on labelled questions written for it ([`questions`]).

pub mod questions;
pub mod suite;
