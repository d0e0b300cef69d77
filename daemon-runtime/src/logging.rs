//! The tracing subscriber every daemon installs: lines on standard error, human-readable or one JSON
//! object each (`--log-format json`, for log shippers), filtered by `RUST_LOG` when it is set and by the
//! daemon's own default otherwise; with `--otlp-endpoint`, the spans of every request exported as well
//! ([`crate::otlp`]).

use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

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

/// Where a daemon's spans go besides its log.
#[derive(Clone, Copy, Debug)]
pub struct TraceExport<'a> {
    /// The OTLP/HTTP collector, for example `http://127.0.0.1:4318`.
    pub endpoint: &'a str,
    /// The `service.name` the spans are exported under (`mesh-core`, `mesh-regional`, `mesh-pod`).
    pub service: &'a str,
}

/// The mesh's own crates, whose request spans (some at debug level) are exported whatever the log shows.
const MESH_TARGETS: [&str; 4] = ["regional_node", "core_cluster", "inference_pod", "daemon_runtime"];

/// Installs the global subscriber writing `format`. `default_filter` applies when `RUST_LOG` is unset or
/// unreadable (for example `"info"`, or `"info,openraft=warn"` to quiet a chatty dependency).
pub fn init(default_filter: &str, format: LogFormat, export: Option<TraceExport<'_>>) -> std::io::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let log = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer().with_filter(filter).boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_filter(filter)
            .boxed(),
    };
    let exported = match export {
        Some(export) => {
            let spans = Targets::new()
                .with_default(Level::INFO)
                .with_targets(MESH_TARGETS.map(|t| (t, Level::DEBUG)));
            Some(crate::otlp::layer(export.endpoint, export.service)?.with_filter(spans))
        }
        None => None,
    };
    tracing_subscriber::registry().with(log).with(exported).init();
    if let Some(export) = export {
        tracing::info!(
            endpoint = export.endpoint,
            service = export.service,
            "exporting request spans over OTLP"
        );
    }
    Ok(())
}
