//! Reading the text format the daemons export (OpenMetrics, which Prometheus' text format reads the same
//! way here): one [`Sample`] per line that is not a comment (`# HELP`, `# TYPE`, `# EOF`).

use std::collections::BTreeMap;

/// One sample: a metric name, its labels, and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The series name as written (`_bucket`, `_sum`, `_count` included).
    pub name: String,
    /// Label names and values, unescaped.
    pub labels: BTreeMap<String, String>,
    /// The value (`+Inf`, `-Inf` and `NaN` as floats).
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, or `""` when absent (as in PromQL).
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// Every sample of `text`. Lines that do not parse are skipped: a dashboard shows what it can read.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(inner)?;
        labels = parsed;
        rest = after;
    }
    // A timestamp may follow the value; it is ignored.
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some(Sample { name: name.to_owned(), labels, value })
}

/// Parses `a="x",b="y"}` and returns the labels and what follows the closing brace.
fn parse_labels(mut text: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        text = text.trim_start_matches([',', ' ']);
        if let Some(after) = text.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = text.find('=')?;
        let key = text[..eq].trim().to_owned();
        let mut chars = text[eq + 1..].trim_start().strip_prefix('"')?.char_indices();
        let mut value = String::new();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        let quoted = text[eq + 1..].trim_start();
        text = &quoted[1 + end + 1..];
        labels.insert(key, value);
    }
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        other => other.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_names_labels_values_and_skips_comments() {
        let text = "# HELP x Help.\n# TYPE x counter\nx 3\n\
                    lat_bucket{le=\"+Inf\",tier=\"a \\\"b\\\"\"} 7 1700000000\nbad line\ny{} NaN\n";
        let samples = parse(text);
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0], Sample { name: "x".into(), labels: BTreeMap::new(), value: 3.0 });
        assert_eq!(samples[1].label("le"), "+Inf");
        assert_eq!(samples[1].label("tier"), "a \"b\"");
        assert_eq!(samples[1].value, 7.0);
        assert!(samples[2].value.is_nan());
    }

    #[test]
    fn reads_the_daemons_openmetrics_text() {
        let text = "# HELP h Latency.\n# TYPE h histogram\nh_sum 0.5\nh_count 2\n\
                    h_bucket{le=\"1.0\",tier=\"miss\"} 2\nh_bucket{le=\"+Inf\",tier=\"miss\"} 2\n\
                    # HELP c Hits.\n# TYPE c counter\nc_total{tenant=\"a\\\\b\"} 4\n# EOF\n";
        let samples = parse(text);
        let names: Vec<&str> = samples.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["h_sum", "h_count", "h_bucket", "h_bucket", "c_total"]);
        assert_eq!((samples[2].label("le"), samples[2].label("tier")), ("1.0", "miss"));
        assert_eq!(samples[3].label("le"), "+Inf");
        assert_eq!((samples[4].label("tenant"), samples[4].value), ("a\\b", 4.0));
    }

    #[test]
    fn a_truncated_label_set_is_skipped() {
        assert!(parse("x{a=\"1\" 3\nz 1\n").iter().all(|s| s.name == "z"));
    }
}
