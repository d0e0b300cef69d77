//! `mesh bench semantic-index`: the semantic tier's index (usearch HNSW, as every partition holds it)
//! against an exact scan of the same vectors, at growing numbers of questions in one partition: lookup
//! p50/p99, recall@1 of the nearest question, and memory per question. The semantic step of issue 49's
//! scale benchmark.
//!
//! # Figures seen
//!
//! Context only; the figures of your own run are what count. 2026-12-07, AMD EPYC with 2 cores (AVX2),
//! the small embedding (64 dimensions), 1,000 held-out lookups (goals of issue 49: p99 under 5 ms and
//! recall@1 of at least 0.99 at 100,000):
//!
//! | questions | lookup p50 / p99 | exact scan p50 / p99 | recall@1 | bytes a question (usearch) |
//! |---|---|---|---|---|
//! | 1,000 | 0.04 / 0.16 ms | 0.07 / 0.10 ms | 1.000 | 16,786 (a 16 MB floor) |
//! | 10,000 | 0.24 / 0.48 ms | 0.81 / 0.99 ms | 0.996 | 1,686 |
//! | 100,000 | 1.79 / 2.92 ms | 16.7 / 23.9 ms | 0.992 | 1,182 |
//!
//! With usearch's defaults (connectivity 16, expansions 128 and 64) the same 100,000 gave 0.902 (0.957
//! with the tier's connectivity and add expansion but a search expansion of 64) at 1.0 ms p99. Across
//! partitions, resident bytes a question: 9,042 for 1,000 partitions of 10 questions, 1,510 for 200 of
//! 100, 738 for 50 of 1,000 (the tier's byte bound counts 10,726, 1,879 and 994).

pub mod suite;
