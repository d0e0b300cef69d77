//! `mesh bench scale`: what each tier costs as the data grows, side by side with the peer a user would
//! pick instead, at growing entry counts (issue "Cost that stays flat").
//!
//! Built so far: the core step ([`core_step`]), our three-node core cluster against a three-member etcd
//! 3.4 cluster filled to each count in turn. Not built yet: the regional, edge and 1,000-tenant steps
//! (the semantic index has its own suite, `mesh bench semantic-index`).
//!
//! # Figures seen
//!
//! Context only, dated; the ratios measured side by side in your own run are what count.
//! - 2026-12-07, AMD EPYC (AVX2), 2 cores, 64 clients, 1 KiB values, three members each: at 100k entries
//!   the core filled at 4,487 puts/s (etcd 3,082), put p99 37.0 ms (66.3), linearizable-read p99
//!   11.6 ms (54.0), 2,763 B of memory an entry over the three members (6,448), but 12,842 B of disk an
//!   entry (9,849). By directory, a second run's 14,272 B were wal 6,595, contents 3,747, snapshots
//!   2,556 and sled-state 1,374: the Raft log is a floor of about 220 MB a member (64 MiB segments:
//!   the one written, the one created ahead, and those a snapshot has not let go yet), not a cost that
//!   grows with the entries; the rest is about 2.6 KB an entry a member. A
//!   follower caught up 1.7 s after a clean restart, 2.4 s after SIGKILL; a new follower 5.2 s after it
//!   joined. A run that filled the machine's disk failed its puts with "no quorum" timeouts, the
//!   nodes' logs saying `No space left on device`.
//!
//! # Layout
//! - [`core_step`]: fill both clusters to each count; put and linearizable-read latency, resident memory
//!   and disk bytes per entry, and a follower's restart time at that count; for the core also a new
//!   follower's catch-up.

pub mod core_step;
