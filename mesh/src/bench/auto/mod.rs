//! `mesh bench auto`: `model: "auto"` against always the small model and always the large one, in
//! accuracy and cost per question ([`suite`]), on labelled questions written for it ([`questions`]).
//!
//! # Figures
//!
//! 2026-12-07, AMD EPYC (AVX2), 2 cores; SmolLM2 on the pod at $0.1/Mtok, Gemma 3 270M on llama.cpp
//! (1 thread) at $1.0/Mtok; bar learned on calibration: 0.5. Frozen test half (65 questions):
//!
//! | arm | accuracy | cost/question micro-$ | answered by Gemma |
//! |---|---|---|---|
//! | always-small | 0.385 | 6.958 | 0 of 65 |
//! | always-large | 0.446 | 70.185 | 65 of 65 |
//! | auto | 0.415 | 35.743 | 25 of 65 |
//!
//! Auto against always-large: -3.1 points at x0.509 of the cost (goal: at least -2 points at x0.5 or
//! less: not met). Neither model is good at these questions: Gemma 3 270M is a base model of 270M
//! parameters and SmolLM2 one of 135M; the learned bar is noisy at 65 calibration questions.

pub mod questions;
pub mod suite;
