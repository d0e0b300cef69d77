//! The `Server-Timing` header: each tier appends the time it spent, so a client sees where time went.
//!
//! Entries look like `regional;dur=1.234;desc="HIT-REGIONAL"` (durations in milliseconds).

use std::fmt::Write as _;

/// Builds or extends a `Server-Timing` header value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerTiming {
    value: String,
}

impl ServerTiming {
    /// Starts from an existing header value (the next tier's), or empty.
    pub fn from_header(existing: Option<&str>) -> Self {
        Self { value: existing.unwrap_or_default().trim().to_owned() }
    }

    /// Appends `name;dur=<ms>`. Names must be tokens (letters, digits, `-`, `_`).
    pub fn push_micros(&mut self, name: &str, micros: u64) -> &mut Self {
        self.push_ms(name, micros as f64 / 1000.0)
    }

    /// Appends `name;dur=<ms>`.
    pub fn push_ms(&mut self, name: &str, ms: f64) -> &mut Self {
        if !self.value.is_empty() {
            self.value.push_str(", ");
        }
        let _ = write!(self.value, "{name};dur={ms:.3}");
        self
    }

    /// Puts `name;dur=<ms>` first, for a tier that wraps the ones behind it.
    pub fn prepend_ms(&mut self, name: &str, ms: f64) -> &mut Self {
        let mut head = Self::default();
        head.push_ms(name, ms);
        if !self.value.is_empty() {
            head.value.push_str(", ");
            head.value.push_str(&self.value);
        }
        *self = head;
        self
    }

    /// The header value.
    pub fn as_str(&self) -> &str {
        &self.value
    }

    /// The duration recorded for `name`, if any (the first one).
    pub fn duration_ms(&self, name: &str) -> Option<f64> {
        self.value.split(',').map(str::trim).find_map(|entry| {
            let mut parts = entry.split(';');
            (parts.next()? == name).then_some(())?;
            parts.find_map(|p| p.trim().strip_prefix("dur=")?.parse().ok())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_and_prepends_entries() {
        let mut timing = ServerTiming::from_header(Some("core;dur=5.000"));
        timing.push_micros("pod-decode", 1500);
        timing.prepend_ms("regional", 7.25);
        assert_eq!(timing.as_str(), "regional;dur=7.250, core;dur=5.000, pod-decode;dur=1.500");
        assert_eq!(timing.duration_ms("core"), Some(5.0));
        assert_eq!(timing.duration_ms("pod-decode"), Some(1.5));
        assert_eq!(timing.duration_ms("edge"), None);
        assert_eq!(ServerTiming::from_header(None).push_ms("edge", 0.5).as_str(), "edge;dur=0.500");
    }
}
