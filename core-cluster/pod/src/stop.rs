//! Stop strings: generation ends before the first occurrence of any of them.
//!
//! Text that could still turn out to be the start of a stop string is held back, so the client never
//! receives any part of a stop string, even when it spans several tokens.

/// Scans generated text for the request's stop strings.
#[derive(Debug, Default)]
pub struct StopMatcher {
    /// The stop strings (non-empty).
    stops: Vec<String>,
    /// Text received but not yet released, because it may begin a stop string.
    held: String,
}

/// What [`StopMatcher::push`] decided.
#[derive(Debug, PartialEq, Eq)]
pub struct StopScan {
    /// Text safe to send now.
    pub emit: String,
    /// Whether a stop string was found (everything from it on is dropped).
    pub stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops`; empty strings are ignored.
    pub fn new(stops: &[String]) -> Self {
        Self { stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(), held: String::new() }
    }

    /// Adds newly decoded text.
    pub fn push(&mut self, text: &str) -> StopScan {
        if self.stops.is_empty() {
            return StopScan { emit: text.to_owned(), stopped: false };
        }
        self.held.push_str(text);
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            self.held.truncate(at);
            return StopScan { emit: std::mem::take(&mut self.held), stopped: true };
        }
        // Hold back the longest tail that is a proper prefix of some stop string.
        let keep_from = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.held[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.held.len());
        let kept = self.held.split_off(keep_from);
        StopScan { emit: std::mem::replace(&mut self.held, kept), stopped: false }
    }

    /// Releases what was held back, at the end of generation without a stop string.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(stops: &[&str]) -> StopMatcher {
        StopMatcher::new(&stops.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn passes_text_through_without_stops() {
        let mut m = matcher(&[]);
        assert_eq!(m.push("abc"), StopScan { emit: "abc".into(), stopped: false });
    }

    #[test]
    fn stops_across_pieces_and_drops_the_stop_string() {
        let mut m = matcher(&["\n\n", "END"]);
        assert_eq!(m.push("one E").emit, "one ");
        assert_eq!(m.push("N").emit, "");
        assert_eq!(m.push("Dless"), StopScan { emit: String::new(), stopped: true });
    }

    #[test]
    fn releases_a_false_start() {
        let mut m = matcher(&["END"]);
        assert_eq!(m.push("EN").emit, "");
        assert_eq!(m.push("Ough").emit, "ENOugh");
        assert_eq!(m.push("E").emit, "");
        assert_eq!(m.finish(), "E");
    }

    #[test]
    fn earliest_stop_wins_and_handles_unicode() {
        let mut m = matcher(&["東京", "b"]);
        assert_eq!(m.push("a東京b"), StopScan { emit: "a".into(), stopped: true });
    }
}
