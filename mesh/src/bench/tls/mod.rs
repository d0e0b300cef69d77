//! `mesh bench tls`: exact hits and edge misses with mutual TLS between the tiers against without.
//!
//! # Figures seen
//!
//! Context only; the ratio measured side by side in your own run is what counts. 2026-12-01, AMD
//! EPYC with 2 cores, `--seconds 12 --misses 20` (the goal: TLS costs under 10% of the hit rate):
//!
//! | measure | with TLS | without TLS |
//! |---|---|---|
//! | exact hits | 5,414/s | 5,642/s (0.96x) |
//! | hit p50 / p99 | 2.32 / 12.6 ms | 2.19 / 11.5 ms |
//! | edge miss p50 / p99 | 188 / 397 ms | 197 / 379 ms |

pub mod suite;
