//! The last few minutes of every chart's values, one frame per scrape, and their JSON for the page.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{json, Value};

use super::panels::Panel;

/// Whether a daemon answered the latest scrape.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TargetStatus {
    /// The daemon's name.
    pub name: String,
    /// Its base URL.
    pub url: String,
    /// Whether the latest scrape succeeded.
    pub up: bool,
    /// Why it did not.
    pub error: Option<String>,
}

/// Every chart's values at one scrape.
#[derive(Clone, Debug)]
pub struct Frame {
    /// When the scrape ended, Unix milliseconds.
    pub at_ms: u64,
    /// One map per panel (in panel order): line name to value.
    pub values: Vec<BTreeMap<String, Option<f64>>>,
}

/// A bounded run of frames.
#[derive(Debug)]
pub struct History {
    frames: VecDeque<Frame>,
    capacity: usize,
    targets: Vec<TargetStatus>,
}

impl History {
    /// Keeps at most `capacity` frames.
    pub fn new(capacity: usize) -> Self {
        Self { frames: VecDeque::new(), capacity: capacity.max(1), targets: Vec::new() }
    }

    /// Adds a frame, dropping the oldest beyond capacity, and the targets' state at that scrape.
    pub fn push(&mut self, frame: Frame, targets: Vec<TargetStatus>) {
        if self.frames.len() == self.capacity {
            self.frames.pop_front();
        }
        self.frames.push_back(frame);
        self.targets = targets;
    }

    /// The page's `/api/series` document: each panel's lines over the frames held, with `null` where a
    /// line had no value (or did not exist yet).
    pub fn to_json(&self, panels: &[Panel], interval_ms: u64) -> Value {
        let panels: Vec<Value> = panels
            .iter()
            .enumerate()
            .map(|(i, panel)| {
                let names: BTreeSet<&String> =
                    self.frames.iter().filter_map(|f| f.values.get(i)).flat_map(|v| v.keys()).collect();
                let series: Vec<Value> = names
                    .into_iter()
                    .map(|name| {
                        let points: Vec<Value> = self
                            .frames
                            .iter()
                            .map(|f| {
                                let value = f.values.get(i).and_then(|v| v.get(name)).copied().flatten();
                                json!([f.at_ms, value.filter(|v| v.is_finite())])
                            })
                            .collect();
                        json!({"name": name, "points": points})
                    })
                    .collect();
                json!({"id": panel.id, "group": panel.group, "title": panel.title, "unit": panel.unit,
                       "stacked": panel.stacked, "series": series})
            })
            .collect();
        json!({
            "updated_unix_ms": self.frames.back().map(|f| f.at_ms),
            "interval_ms": interval_ms,
            "targets": self.targets,
            "panels": panels,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_that_appears_later_is_null_before_and_old_frames_go() {
        let panels = super::super::panels::all();
        let mut history = History::new(2);
        let frame = |at_ms, line: Option<f64>| {
            let mut values = vec![BTreeMap::new(); panels.len()];
            if let Some(v) = line {
                values[0].insert("decode".to_owned(), Some(v));
            }
            Frame { at_ms, values }
        };
        history.push(frame(1, Some(9.0)), vec![]);
        history.push(frame(2, None), vec![]);
        history.push(frame(3, Some(0.25)), vec![]);
        let doc = history.to_json(&panels, 1000);
        assert_eq!(doc["updated_unix_ms"], 3);
        let series = &doc["panels"][0]["series"][0];
        assert_eq!(series["name"], "decode");
        assert_eq!(series["points"], json!([[2, null], [3, 0.25]]));
    }
}
