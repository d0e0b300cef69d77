//! A linearizability checker for a history of registers (the core's store: one value per key), in the
//! manner of Wing and Gong's search with the state cache that porcupine adds: each key is checked on its
//! own (registers compose), by looking for an order of the operations that respects real time (an
//! operation that returned before another was called comes first) and in which every read returns the
//! value of the last write before it.
//!
//! A write whose outcome is unknown (the call failed or timed out: it may still have taken effect) has
//! no return time; it may be placed anywhere after its call, or left out.

use std::collections::{BTreeMap, HashSet};

/// What an operation did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Stored this value.
    Write(String),
    /// Read this value (`None`: the key held nothing).
    Read(Option<String>),
}

/// One operation of the history, with its call and return times (any monotonic unit, such as
/// nanoseconds since the test began).
#[derive(Clone, Debug)]
pub struct Operation {
    /// The register.
    pub key: String,
    /// When it was called.
    pub call: u128,
    /// When it returned; `None` for a write whose outcome is unknown.
    pub returned: Option<u128>,
    /// What it did.
    pub action: Action,
}

/// The verdict on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyVerdict {
    /// The key.
    pub key: String,
    /// Operations of the key.
    pub operations: usize,
    /// Whether some order explains every read.
    pub linearizable: bool,
}

/// Checks every key of `history`; one verdict per key, in key order.
pub fn check(history: &[Operation]) -> Vec<KeyVerdict> {
    let mut by_key: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
    for operation in history {
        by_key.entry(&operation.key).or_default().push(operation);
    }
    by_key
        .into_iter()
        .map(|(key, operations)| KeyVerdict {
            key: key.to_owned(),
            operations: operations.len(),
            linearizable: Search::new(operations).run(),
        })
        .collect()
}

/// The search over one key's operations.
struct Search<'a> {
    /// Sorted by call time.
    operations: Vec<&'a Operation>,
    /// Which are placed so far (a bit per operation).
    placed: Vec<u64>,
    /// Completed operations not yet placed.
    open: usize,
    /// States already explored and found to lead nowhere: what was placed, and the register's value.
    dead_ends: HashSet<(Vec<u64>, Option<String>)>,
}

impl<'a> Search<'a> {
    fn new(mut operations: Vec<&'a Operation>) -> Self {
        operations.sort_by_key(|o| o.call);
        let open = operations.iter().filter(|o| o.returned.is_some()).count();
        let placed = vec![0; operations.len().div_ceil(64)];
        Self { operations, placed, open, dead_ends: HashSet::new() }
    }

    fn is_placed(&self, i: usize) -> bool {
        self.placed[i / 64] & (1 << (i % 64)) != 0
    }

    fn flip(&mut self, i: usize) {
        self.placed[i / 64] ^= 1 << (i % 64);
    }

    fn run(&mut self) -> bool {
        self.place_from(None)
    }

    /// Whether the operations not yet placed can follow, the register holding `value`.
    fn place_from(&mut self, value: Option<String>) -> bool {
        if self.open == 0 {
            return true;
        }
        // No operation may go before one that returned before it was called.
        let first_return = (0..self.operations.len())
            .filter(|&i| !self.is_placed(i))
            .filter_map(|i| self.operations[i].returned)
            .min()
            .unwrap_or(u128::MAX);
        for i in 0..self.operations.len() {
            if self.is_placed(i) {
                continue;
            }
            let operation = self.operations[i];
            if operation.call > first_return {
                break;
            }
            let next = match &operation.action {
                Action::Write(written) => Some(written.clone()),
                Action::Read(read) if *read == value => value.clone(),
                Action::Read(_) => continue,
            };
            self.flip(i);
            let completed = operation.returned.is_some();
            if completed {
                self.open -= 1;
            }
            let state = (self.placed.clone(), next.clone());
            let found = !self.dead_ends.contains(&state) && {
                let found = self.place_from(next);
                if !found {
                    self.dead_ends.insert(state);
                }
                found
            };
            if completed {
                self.open += 1;
            }
            self.flip(i);
            if found {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(call: u128, returned: Option<u128>, value: &str) -> Operation {
        Operation { key: "k".into(), call, returned, action: Action::Write(value.into()) }
    }

    fn read(call: u128, returned: u128, value: Option<&str>) -> Operation {
        Operation {
            key: "k".into(),
            call,
            returned: Some(returned),
            action: Action::Read(value.map(Into::into)),
        }
    }

    fn linearizable(history: &[Operation]) -> bool {
        check(history).iter().all(|v| v.linearizable)
    }

    #[test]
    fn reads_that_follow_the_writes_in_real_time_are_linearizable() {
        assert!(linearizable(&[read(0, 1, None), write(2, Some(3), "a"), read(4, 5, Some("a"))]));
        // Concurrent with the write: either value.
        assert!(linearizable(&[write(0, Some(10), "a"), read(1, 2, None), read(3, 4, Some("a"))]));
    }

    #[test]
    fn a_stale_read_after_an_acknowledged_write_is_caught() {
        let history = [write(0, Some(1), "a"), write(2, Some(3), "b"), read(4, 5, Some("a"))];
        assert!(!linearizable(&history));
        // Reads that go back in time, each concurrent with the write but not with each other.
        let flicker = [write(0, Some(10), "a"), read(1, 2, Some("a")), read(3, 4, None)];
        assert!(!linearizable(&flicker));
    }

    #[test]
    fn a_write_of_unknown_outcome_may_have_happened_or_not() {
        assert!(linearizable(&[write(0, None, "a"), read(5, 6, Some("a"))]));
        assert!(linearizable(&[write(0, None, "a"), read(5, 6, None)]));
        assert!(!linearizable(&[write(0, None, "a"), read(5, 6, Some("a")), read(7, 8, None)]));
    }

    #[test]
    fn keys_are_checked_apart() {
        let mut other = write(0, Some(1), "x");
        other.key = "j".into();
        let verdicts = check(&[other, write(0, Some(1), "a"), read(2, 3, Some("b"))]);
        assert_eq!(
            verdicts.iter().map(|v| (v.key.as_str(), v.linearizable)).collect::<Vec<_>>(),
            [("j", true), ("k", false)]
        );
    }
}
