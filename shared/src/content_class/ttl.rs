//! How long answers of each content class live.

use super::ContentClass;

/// How long answers of each class live, in seconds.
///
/// [`ContentClass::Realtime`] has no TTL to set: it is never cached ([`TtlPolicy::cacheable`]) and its
/// TTL is always [`REALTIME_TTL_S`]. For the other classes 0 means "no TTL of this tier's own": an entry
/// stored with TTL 0 takes the tenant's default TTL at the core, and never expires if that is 0 too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TtlPolicy {
    /// TTL of [`ContentClass::Volatile`] answers.
    pub volatile_s: u64,
    /// TTL of [`ContentClass::Default`] answers.
    pub default_s: u64,
    /// TTL of [`ContentClass::Stable`] answers.
    pub stable_s: u64,
}

/// TTL of [`ContentClass::Realtime`] answers: 0, they are not cached.
pub const REALTIME_TTL_S: u64 = 0;
/// Default TTL of [`ContentClass::Volatile`] answers: five minutes.
pub const DEFAULT_VOLATILE_TTL_S: u64 = 300;
/// Default TTL of [`ContentClass::Default`] answers: an hour.
pub const DEFAULT_DEFAULT_TTL_S: u64 = 3_600;
/// Default TTL of [`ContentClass::Stable`] answers: a day.
pub const DEFAULT_STABLE_TTL_S: u64 = 86_400;

impl Default for TtlPolicy {
    fn default() -> Self {
        Self {
            volatile_s: DEFAULT_VOLATILE_TTL_S,
            default_s: DEFAULT_DEFAULT_TTL_S,
            stable_s: DEFAULT_STABLE_TTL_S,
        }
    }
}

impl TtlPolicy {
    /// The TTL, in seconds, of answers of `class`.
    pub fn ttl_s(&self, class: ContentClass) -> u64 {
        match class {
            ContentClass::Realtime => REALTIME_TTL_S,
            ContentClass::Volatile => self.volatile_s,
            ContentClass::Default => self.default_s,
            ContentClass::Stable => self.stable_s,
        }
    }

    /// Whether answers of `class` may be cached at all (every class but [`ContentClass::Realtime`]).
    pub fn cacheable(class: ContentClass) -> bool {
        class != ContentClass::Realtime
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_policy_defaults_and_cacheability() {
        let policy = TtlPolicy::default();
        assert_eq!(policy.ttl_s(ContentClass::Realtime), 0);
        assert_eq!(policy.ttl_s(ContentClass::Volatile), 300);
        assert_eq!(policy.ttl_s(ContentClass::Default), 3_600);
        assert_eq!(policy.ttl_s(ContentClass::Stable), 86_400);
        assert!(!TtlPolicy::cacheable(ContentClass::Realtime));
        for class in [ContentClass::Volatile, ContentClass::Default, ContentClass::Stable] {
            assert!(TtlPolicy::cacheable(class));
        }
        let custom = TtlPolicy { volatile_s: 60, default_s: 0, stable_s: 7 * 86_400 };
        assert_eq!(custom.ttl_s(ContentClass::Volatile), 60);
        assert_eq!(custom.ttl_s(ContentClass::Default), 0);
        assert_eq!(custom.ttl_s(ContentClass::Stable), 604_800);
        assert_eq!(custom.ttl_s(ContentClass::Realtime), 0);
    }

    #[test]
    fn ttls_shrink_as_classes_get_more_time_sensitive() {
        let policy = TtlPolicy::default();
        let ttls: Vec<u64> = ContentClass::ALL.into_iter().map(|c| policy.ttl_s(c)).collect();
        assert!(ttls.windows(2).all(|w| w[0] < w[1]), "{ttls:?}");
    }
}
