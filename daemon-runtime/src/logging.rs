//! The tracing subscriber every daemon installs: human-readable lines on standard error, filtered by
//! `RUST_LOG` when it is set and by the daemon's own default otherwise.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `default_filter` applies when `RUST_LOG` is unset or unreadable
/// (for example `"info"`, or `"info,openraft=warn"` to quiet a chatty dependency).
pub fn init(default_filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    tracing_subscriber::fmt().with_env_filter(filter).init();
}
