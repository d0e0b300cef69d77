//! What every daemon of the mesh runs on, apart from what it does: who it is and who may call it, how
//! it reads its configuration, how it serves HTTP, how it reaches the core cluster, how it logs, and
//! how it stops. The core node, the regional node and the inference pod each start the same way.
//!
//! # Layout
//! - [`config_file`]: each daemon's TOML configuration file, applied under its flags and `MESH_*`
//!   environment variables; `--print-config`.
//! - [`flag_table`]: `--print-flags`, the settings as the Markdown table README shows.
//! - [`identity`]: who a tier is and who may call it: mutual TLS with one certificate per role (read
//!   again when its files change, so certificates rotate without a restart), the authorization
//!   interceptor, the flags every daemon reads its identity from.
//! - [`credential`]: the insecure development secret (no TLS), at least 32 bytes.
//! - [`http_serving`]: the HTTP listener's limits (connections, header and idle timeouts) with or
//!   without TLS.
//! - [`probes`]: `/livez` and `/readyz` on a plain-HTTP port of their own, for probers without a
//!   certificate.
//! - [`request_body`]: reading a request body within a size limit and a deadline (413, 408).
//! - [`grpc_health`]: the standard gRPC health service, answering from the daemon's readiness.
//! - [`failover`]: the failover channel both clients of the core cluster call through.
//! - [`systemd_notify`]: `READY=1` and `STOPPING=1` for systemd's `Type=notify` units.
//! - [`shutdown`]: the SIGINT/SIGTERM future every daemon stops on.
//! - [`trace_context`]: the W3C trace context each tier continues, logs and passes on.
//! - [`logging`]: the tracing subscriber every binary installs (`RUST_LOG`, with a per-daemon default).
//! - [`otlp`]: request spans exported to an OpenTelemetry collector (OTLP/HTTP, JSON encoding).
//! - [`private_dir`]: data directories created readable by their owner only.
//!
//! Layers: `shared` <- `daemon-runtime` <- the daemons, beside `shared` <- `proto` <- the daemons.
//! Nothing here knows a protobuf message of the mesh; its wire types stay in `proto` (the standard gRPC
//! health service brings its own, from `tonic-health`).

pub mod config_file;
pub mod credential;
pub mod failover;
pub mod flag_table;
pub mod grpc_health;
pub mod http_serving;
pub mod identity;
pub mod logging;
pub mod otlp;
pub mod private_dir;
pub mod probes;
pub mod request_body;
pub mod shutdown;
pub mod systemd_notify;
pub mod trace_context;

pub use credential::{TierCredential, TIER_SECRET_METADATA};
pub use identity::{Caller, IdentityArgs, PeerRole, TierIdentity, TierRole};
