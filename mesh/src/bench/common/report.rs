//! A benchmark's result in the shape `BENCHMARKS.md` sets: a table a person reads (workload, peer, ours,
//! peer figure, ratio with the better direction, limit, machine) and the same rows as JSON.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use serde::Serialize;
use serde_json::Value;

/// The machine a benchmark ran on.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Machine {
    /// CPUs this process may use.
    pub cores: usize,
    /// Total memory, GiB (rounded).
    pub mem_gib: u64,
}

impl Machine {
    /// This machine: cores from the scheduler's affinity, memory from `/proc/meminfo`.
    pub fn current() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let mem_kib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| parse_mem_total_kib(&text))
            .unwrap_or(0);
        Self { cores, mem_gib: (mem_kib as f64 / (1024.0 * 1024.0)).round() as u64 }
    }
}

/// The `MemTotal` line of `/proc/meminfo`, in KiB.
fn parse_mem_total_kib(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Whether a larger or a smaller figure is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Throughput-like figures.
    Higher,
    /// Latency-like figures.
    Lower,
}

impl Better {
    fn as_str(self) -> &'static str {
        match self {
            Better::Higher => "higher",
            Better::Lower => "lower",
        }
    }

    /// How a goal ratio bounds the ratio: from below when higher is better, from above otherwise.
    fn goal_sign(self) -> &'static str {
        match self {
            Better::Higher => ">=",
            Better::Lower => "<=",
        }
    }
}

/// One compared figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Machine-readable name, e.g. `puts_per_s_c64`.
    pub metric: String,
    /// Unit of `ours`, `peer_value` and `limit`.
    pub unit: String,
    /// Which direction is better.
    pub better: Better,
    /// Our figure.
    pub ours: f64,
    /// The peer's name and version.
    pub peer: String,
    /// The peer's figure, measured in the same run.
    pub peer_value: f64,
    /// The ratio ours/peer the issue sets as the goal, where it sets one.
    pub goal_ratio: Option<f64>,
    /// The physical ceiling or floor, where one applies.
    pub limit: Option<f64>,
}

impl Row {
    /// A figure of ours beside the peer's, with no goal ratio and no limit.
    pub fn compared(
        metric: String,
        unit: &str,
        better: Better,
        ours: f64,
        peer: &str,
        peer_value: f64,
    ) -> Self {
        Self {
            metric,
            unit: unit.into(),
            better,
            ours,
            peer: peer.into(),
            peer_value,
            goal_ratio: None,
            limit: None,
        }
    }

    /// ours / peer_value (0 when the peer figure is 0).
    pub fn ratio(&self) -> f64 {
        if self.peer_value == 0.0 {
            0.0
        } else {
            self.ours / self.peer_value
        }
    }
}

/// A suite's rows and the machine they were measured on.
#[derive(Clone, Debug)]
pub struct Report {
    /// Suite name (`core`, `pod`...).
    pub suite: String,
    /// Where it ran.
    pub machine: Machine,
    /// The figures.
    pub rows: Vec<Row>,
}

impl Report {
    /// The JSON document of `BENCHMARKS.md` (figures rounded to 3 decimals).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.document()).unwrap_or(Value::Null)
    }

    /// The JSON text of [`Report::to_json`], with the fields in the order `BENCHMARKS.md` shows.
    pub fn to_json_text(&self) -> anyhow::Result<String> {
        Ok(serde_json::to_string_pretty(&self.document())? + "\n")
    }

    fn document(&self) -> JsonReport<'_> {
        let rows = self
            .rows
            .iter()
            .map(|r| JsonRow {
                metric: &r.metric,
                unit: &r.unit,
                better: r.better,
                ours: round3(r.ours),
                peer: &r.peer,
                peer_value: round3(r.peer_value),
                ratio: round3(r.ratio()),
                goal_ratio: r.goal_ratio,
                limit: r.limit.map(round3),
            })
            .collect();
        JsonReport { suite: &self.suite, machine: self.machine, rows }
    }

    /// Writes [`Report::to_json`] to `path`.
    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, self.to_json_text()?).with_context(|| format!("writing {}", path.display()))
    }

    /// The table a person reads.
    pub fn table(&self) -> String {
        let machine = format!("{} cores, {} GiB", self.machine.cores, self.machine.mem_gib);
        let header =
            ["workload", "peer", "ours", "peer figure", "ratio ours/peer", "goal", "limit", "machine"];
        let mut cells: Vec<[String; 8]> = vec![header.map(String::from)];
        for r in &self.rows {
            cells.push([
                r.metric.clone(),
                r.peer.clone(),
                format!("{} {}", figure(r.ours), r.unit),
                format!("{} {}", figure(r.peer_value), r.unit),
                format!("{:.2} ({} is better)", r.ratio(), r.better.as_str()),
                r.goal_ratio.map_or_else(|| "-".into(), |g| format!("{} {g:.2}", r.better.goal_sign())),
                r.limit.map_or_else(|| "-".into(), |l| format!("{} {}", figure(l), r.unit)),
                machine.clone(),
            ]);
        }
        let widths: Vec<usize> =
            (0..header.len()).map(|c| cells.iter().map(|row| row[c].len()).max().unwrap_or(0)).collect();
        let mut out = String::new();
        for (i, row) in cells.iter().enumerate() {
            let line: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
            let _ = writeln!(out, "| {} |", line.join(" | "));
            if i == 0 {
                let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
                let _ = writeln!(out, "|-{}-|", rule.join("-|-"));
            }
        }
        out
    }
}

/// The JSON document, in the field order `BENCHMARKS.md` shows.
#[derive(Serialize)]
struct JsonReport<'a> {
    suite: &'a str,
    machine: Machine,
    rows: Vec<JsonRow<'a>>,
}

/// One row of [`JsonReport`].
#[derive(Serialize)]
struct JsonRow<'a> {
    metric: &'a str,
    unit: &'a str,
    better: Better,
    ours: f64,
    peer: &'a str,
    peer_value: f64,
    ratio: f64,
    goal_ratio: Option<f64>,
    limit: Option<f64>,
}

/// A figure with as many decimals as its size deserves.
fn figure(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// The CPU's model name and the vector extensions it offers.
pub fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned());
    let flags = info.lines().find_map(|l| l.strip_prefix("flags")).unwrap_or_default();
    let simd: Vec<&str> = ["avx2", "avx512f", "amx_tile"]
        .into_iter()
        .filter(|f| flags.split_whitespace().any(|x| x == *f))
        .collect();
    format!("{} ({})", model.unwrap_or_else(|| "unknown".into()), simd.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(goal: Option<f64>) -> Row {
        Row {
            metric: "puts_per_s_c64".into(),
            unit: "puts/s".into(),
            better: Better::Higher,
            ours: 1500.0,
            peer: "etcd 3.4.23".into(),
            peer_value: 1000.0,
            goal_ratio: goal,
            limit: Some(3500.0),
        }
    }

    #[test]
    fn json_has_the_documented_shape() {
        let report = Report {
            suite: "core".into(),
            machine: Machine { cores: 2, mem_gib: 23 },
            rows: vec![row(Some(1.0))],
        };
        let json = report.to_json();
        assert_eq!(json["suite"], "core");
        assert_eq!(json["machine"]["cores"], 2);
        let r = &json["rows"][0];
        assert_eq!(r["better"], "higher");
        assert_eq!(r["ratio"], 1.5);
        assert_eq!(r["goal_ratio"], 1.0);
        assert_eq!(r["limit"], 3500.0);
        let none = Report { rows: vec![row(None)], ..report };
        assert!(none.to_json()["rows"][0]["goal_ratio"].is_null());
        let text = none.to_json_text().unwrap_or_default();
        assert!(text.find("\"suite\"") < text.find("\"machine\""), "{text}");
        assert!(text.find("\"metric\"") < text.find("\"limit\""), "{text}");
    }

    #[test]
    fn table_lists_every_row_and_the_machine() {
        let report = Report {
            suite: "core".into(),
            machine: Machine { cores: 2, mem_gib: 23 },
            rows: vec![row(None)],
        };
        let table = report.table();
        assert!(table.contains("puts_per_s_c64"));
        assert!(table.contains("1.50 (higher is better)"));
        assert!(table.contains("2 cores, 23 GiB"));
        let lower = Row { better: Better::Lower, goal_ratio: Some(0.2), ..row(None) };
        let table = Report { rows: vec![lower], ..report }.table();
        assert!(table.contains("<= 0.20"), "{table}");
    }

    #[test]
    fn mem_total_is_read_from_meminfo() {
        assert_eq!(parse_mem_total_kib("MemTotal:       24558452 kB\nMemFree: 1 kB\n"), Some(24558452));
        assert_eq!(parse_mem_total_kib("nothing"), None);
    }
}
