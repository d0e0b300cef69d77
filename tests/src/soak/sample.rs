//! One row per process per sampling period: its resources and, for core and regional nodes, the sizes of
//! what they collect (from their `/metrics`); and the table those rows print as.

use std::fmt::Write as _;
use std::time::Duration;

use super::resources::{self, Resources};
use crate::Mesh;

/// The core's gauges a soak follows, as `/metrics` names them, and their column headers.
const CORE_GAUGES: [(&str, &str); 5] = [
    ("mesh_core_entries", "entries"),
    ("mesh_core_dead_entries", "dead"),
    ("mesh_core_request_ids", "req_ids"),
    ("mesh_core_feed_rows", "feed_rows"),
    ("mesh_core_snapshot_bytes", "snap_MiB"),
];
/// The regional node's, in the same columns: cached entries, replicated records, tombstones.
const REGIONAL_GAUGES: [&str; 3] =
    ["mesh_regional_cache_entries", "mesh_regional_replica_records", "mesh_regional_replica_tombstones"];

/// One process at one moment.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Time since the soak began.
    pub at: Duration,
    /// The process's name (`core-1`, `regional-2`, ...).
    pub process: String,
    /// Its resources.
    pub resources: Resources,
    /// The gauges of [`CORE_GAUGES`] (core nodes) or [`REGIONAL_GAUGES`] (regional nodes), in order;
    /// `None` where the process has none or did not answer.
    pub gauges: Vec<Option<f64>>,
}

impl Sample {
    /// The core gauge `name` (one of [`CORE_GAUGES`]), if this is a core node that reported it.
    pub fn core_gauge(&self, name: &str) -> Option<f64> {
        let column = CORE_GAUGES.iter().position(|(gauge, _)| *gauge == name)?;
        if !self.process.starts_with("core-") {
            return None;
        }
        self.gauges.get(column).copied().flatten()
    }
}

/// Every running process of `mesh`, `at` into the soak.
pub fn sample(mesh: &Mesh, at: Duration) -> Vec<Sample> {
    let mut samples = Vec::new();
    for (process, pid, data_dir) in mesh.processes() {
        let resources = resources::of_group(pid, &data_dir);
        let gauges = gauges_of(mesh, &process);
        samples.push(Sample { at, process, resources, gauges });
    }
    samples
}

/// The gauges of the node named `process`, read from its `/metrics`.
fn gauges_of(mesh: &Mesh, process: &str) -> Vec<Option<f64>> {
    let node = |prefix: &str| process.strip_prefix(prefix)?.parse::<usize>().ok()?.checked_sub(1);
    let (url, names): (String, Vec<&str>) = if let Some(index) = node("core-") {
        (mesh.core_url(index), CORE_GAUGES.iter().map(|(name, _)| *name).collect())
    } else if let Some(index) = node("regional-") {
        (mesh.regional_url(index), REGIONAL_GAUGES.to_vec())
    } else {
        return Vec::new();
    };
    let text = mesh.get_text(&url, "/metrics").unwrap_or_default();
    names.iter().map(|name| metric_value(&text, name)).collect()
}

/// The value of the series `name` in an OpenMetrics text: the unlabelled one, or the first labelled one
/// (a regional node labels its gauges with its region).
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let value = match rest.strip_prefix('{') {
            Some(labelled) => labelled.split_once("} ")?.1,
            None => rest.strip_prefix(' ')?,
        };
        value.trim().parse().ok()
    })
}

/// The header of the table [`row`] prints.
pub fn header() -> String {
    let mut line =
        format!("{:>7} {:<14} {:>8} {:>6} {:>9}", "minute", "process", "rss_MiB", "files", "data_MiB");
    for (_, column) in CORE_GAUGES {
        let _ = write!(line, " {column:>9}");
    }
    line.push_str("   (regional nodes: cached, records, tombstones in the first three)");
    line
}

/// `sample` as one line of the table.
pub fn row(sample: &Sample) -> String {
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    let r = &sample.resources;
    let mut line = format!(
        "{:>7.1} {:<14} {:>8.1} {:>6} {:>9.1}",
        sample.at.as_secs_f64() / 60.0,
        sample.process,
        mib(r.rss_bytes),
        r.open_files,
        mib(r.data_bytes)
    );
    for (column, value) in sample.gauges.iter().enumerate() {
        let is_bytes = sample.process.starts_with("core-") && CORE_GAUGES[column].0.ends_with("_bytes");
        match value {
            Some(v) if is_bytes => {
                let _ = write!(line, " {:>9.1}", v / f64::from(1 << 20));
            }
            Some(v) => {
                let _ = write!(line, " {v:>9.0}");
            }
            None => {
                let _ = write!(line, " {:>9}", "-");
            }
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unlabelled_series_is_read_and_a_longer_name_is_not_mistaken_for_it() {
        let text = "# TYPE mesh_core_entries gauge\nmesh_core_entries_total 9\nmesh_core_entries 42\n";
        assert_eq!(metric_value(text, "mesh_core_entries"), Some(42.0));
        assert_eq!(metric_value(text, "mesh_core_dead_entries"), None);
        let labelled = "mesh_regional_cached{region=\"eu\"} 17\n";
        assert_eq!(metric_value(labelled, "mesh_regional_cached"), Some(17.0));
    }

    #[test]
    fn a_core_row_shows_bytes_in_mebibytes_and_missing_gauges_as_dashes() {
        let sample = Sample {
            at: Duration::from_secs(90),
            process: "core-1".into(),
            resources: Resources { rss_bytes: 3 << 20, open_files: 12, data_bytes: 5 << 20 },
            gauges: vec![Some(10.0), Some(2.0), None, Some(7.0), Some(f64::from(2 << 20))],
        };
        let line = row(&sample);
        assert!(line.starts_with("    1.5 core-1"), "{line}");
        assert!(line.ends_with("       10         2         -         7       2.0"), "{line}");
        assert_eq!(sample.core_gauge("mesh_core_feed_rows"), Some(7.0));
        assert_eq!(sample.core_gauge("mesh_core_request_ids"), None);
    }
}
