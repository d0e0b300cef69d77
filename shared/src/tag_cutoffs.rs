//! One tenant's cache-tag invalidations as cutoff times: an answer of the tenant that carries a tag is
//! refused if it was created (in the core's log time) at or before that tag's cutoff.
//!
//! The core keeps them in the tenant's state and every tier in front of it in its [`crate::cutoffs`]
//! view, by the same rule, so both forget alike: at most [`MAX_TAG_CUTOFFS`] tags per tenant are
//! remembered, and past that the oldest is folded into the tenant's tagged floor (every tagged answer of
//! the tenant created at or before it is refused). The bound costs misses of old tagged answers, never a
//! stale hit, and only the tenant that invalidated so many tags pays it.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// Tag cutoffs one tenant keeps before its oldest is folded into its tagged floor.
pub const MAX_TAG_CUTOFFS: usize = 1_024;

/// One tenant's tag cutoffs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantTags {
    /// Per tag, its cutoff (Unix milliseconds, the core's log time).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    cutoffs: BTreeMap<String, i64>,
    /// The tags in `cutoffs`, in the order they were first cut, for the bound.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    order: VecDeque<String>,
    /// Every tagged answer created at or before this is refused.
    #[serde(default)]
    floor_ms: i64,
}

impl TenantTags {
    /// Whether nothing was ever cut.
    pub fn is_empty(&self) -> bool {
        self.cutoffs.is_empty() && self.floor_ms == 0
    }

    /// Refuses answers carrying `tag` created at or before `at_ms`.
    pub fn cut(&mut self, tag: &str, at_ms: i64) {
        match self.cutoffs.get_mut(tag) {
            Some(cutoff) => *cutoff = (*cutoff).max(at_ms),
            None => {
                self.cutoffs.insert(tag.to_owned(), at_ms);
                self.order.push_back(tag.to_owned());
            }
        }
        while self.order.len() > MAX_TAG_CUTOFFS {
            let Some(oldest) = self.order.pop_front() else { break };
            if let Some(cutoff) = self.cutoffs.remove(&oldest) {
                self.floor_ms = self.floor_ms.max(cutoff);
            }
        }
    }

    /// Refuses every tagged answer created at or before `at_ms`.
    pub fn raise_floor(&mut self, at_ms: i64) {
        self.floor_ms = self.floor_ms.max(at_ms);
    }

    /// Whether an answer carrying `tags` created at `created_ms` is refused.
    pub fn covers(&self, tags: &[String], created_ms: i64) -> bool {
        !tags.is_empty()
            && (created_ms <= self.floor_ms
                || tags.iter().any(|tag| self.cutoffs.get(tag).is_some_and(|&at| created_ms <= at)))
    }

    /// The cutoff of `tag`, if one is remembered.
    pub fn cutoff(&self, tag: &str) -> Option<i64> {
        self.cutoffs.get(tag).copied()
    }

    /// Every remembered tag and its cutoff, in tag order.
    pub fn cutoffs(&self) -> impl Iterator<Item = (&str, i64)> {
        self.cutoffs.iter().map(|(tag, at)| (tag.as_str(), *at))
    }

    /// The tagged floor.
    pub fn floor_ms(&self) -> i64 {
        self.floor_ms
    }

    /// The latest cutoff of any kind held.
    pub fn latest_ms(&self) -> i64 {
        self.cutoffs.values().copied().fold(self.floor_ms, i64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(|t| (*t).to_owned()).collect()
    }

    #[test]
    fn a_tag_cuts_only_answers_carrying_it_and_only_up_to_its_time() {
        let mut cut = TenantTags::default();
        cut.cut("stock:AAPL", 100);
        assert!(cut.covers(&tags(&["region:eu", "stock:AAPL"]), 100), "same millisecond: refused");
        assert!(!cut.covers(&tags(&["stock:AAPL"]), 101));
        assert!(!cut.covers(&tags(&["stock:MSFT"]), 50));
        assert!(!cut.covers(&[], 50), "an untagged answer");
        cut.cut("stock:AAPL", 50);
        assert_eq!(cut.cutoff("stock:AAPL"), Some(100), "a cutoff never moves back");
    }

    #[test]
    fn past_the_bound_the_oldest_tags_fold_into_the_tagged_floor() {
        let mut cut = TenantTags::default();
        for i in 0..=MAX_TAG_CUTOFFS as i64 {
            cut.cut(&format!("t{i}"), 10 + i);
        }
        assert_eq!(cut.cutoffs().count(), MAX_TAG_CUTOFFS);
        assert_eq!((cut.cutoff("t0"), cut.floor_ms()), (None, 10));
        assert!(cut.covers(&tags(&["t0"]), 10) && cut.covers(&tags(&["never-cut"]), 10));
        assert!(!cut.covers(&tags(&["t0"]), 11));
        assert!(!cut.covers(&[], 5), "untagged answers are not floored");
        let back: TenantTags =
            serde_json::from_str(&serde_json::to_string(&cut).expect("json")).expect("back");
        assert_eq!(back, cut);
    }
}
