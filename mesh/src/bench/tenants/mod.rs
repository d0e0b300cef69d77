//! `mesh bench tenants`: what a hostile tenant can do to another. One tenant (the victim) keeps asking
//! questions it has asked before (exact hits) and a few new ones (misses to the pod), alone and then
//! beside each attack of another tenant in turn: a flood of invalidations of random keys, a flood of
//! generations abandoned at once, a flood of punctuation-heavy questions, and a flood of connections
//! without a certificate to the core. The victim's hit ratio and latencies under each attack are set
//! against its run alone (the goal: within 10%).
//!
//! # Figures seen
//!
//! Context only. 2026-12-07, 2 cores, `--seconds 10` (victim: 3 clients re-asking, 1 asking new
//! one-token questions):
//!
//! | attack | hit ratio | hit p50 / p99 | miss p50 / p99 | attacker refused |
//! |---|---|---|---|---|
//! | none | 1.000 | 0.32 / 4.29 ms | 114 / 160 ms | - |
//! | random invalidations | 1.000 | 0.45 / 3.72 ms | 151 / 205 ms | 13,222 of 13,563 |
//! | abandoned generations | 1.000 | 0.32 / 4.12 ms | 329 / 432 ms | 0 of 181 |
//! | punctuation-heavy 1,536-token prompts | 1.000 | 0.34 / 4.13 ms | 4,949 / 5,002 ms | 0 of 2 |
//! | connections without a certificate | 1.000 | 0.33 / 4.18 ms | 119 / 165 ms | 498 of 2,497 |
//!
//! Before the pod shared a step's prefill budget among tenants, the victim's new questions waited
//! 13.4 s behind two 1,536-token prompts; they still wait about two steps of those prompts' prefill.

pub mod attacks;
pub mod suite;
