//! The tracing subscriber every daemon installs: lines on standard error, human-readable or one JSON
//! object each (`--log-format json`, for log shippers), filtered by `RUST_LOG` when it is set and by the
//! daemon's own default otherwise.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `fields` (the message among them) and the
    /// spans it happened in (with their fields, such as `trace_id`).
    Json,
}

/// Installs the global subscriber writing `format`. `default_filter` applies when `RUST_LOG` is unset or
/// unreadable (for example `"info"`, or `"info,openraft=warn"` to quiet a chatty dependency).
pub fn init(default_filter: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(true).init(),
    }
}
