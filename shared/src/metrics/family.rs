//! Labelled families whose label values are known when the program is written: one metric per value,
//! kept in an array indexed by the label's enum (no lock and no map on the hot path, one atomic per
//! value), and rendered by [`MetricsText::family`] as one family with a sample per value.
//!
//! [`label_values!`](crate::label_values) declares such a label: an enum, the label's name and each
//! value's text.

use std::marker::PhantomData;

use super::{Counter, Histogram, MetricsText};

/// The values of one label, as an enum.
pub trait LabelValue: Copy + 'static {
    /// The label's name (`rpc`, `tier`, ...).
    const NAME: &'static str;
    /// Every value, in the order samples are rendered.
    const ALL: &'static [Self];
    /// This value's text.
    fn as_str(self) -> &'static str;
    /// This value's place in [`Self::ALL`].
    fn index(self) -> usize;
}

/// One metric per value of the label `L`.
#[derive(Debug)]
pub struct Family<L, M> {
    metrics: Vec<M>,
    label: PhantomData<L>,
}

impl<L: LabelValue, M> Family<L, M> {
    /// A family whose metrics `make` creates, one per label value.
    pub fn new(make: impl Fn() -> M) -> Self {
        Self { metrics: L::ALL.iter().map(|_| make()).collect(), label: PhantomData }
    }

    /// The metric of `value`.
    pub fn get(&self, value: L) -> &M {
        &self.metrics[value.index()]
    }

    /// Each label value with its metric, in [`LabelValue::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (L, &M)> {
        L::ALL.iter().copied().zip(&self.metrics)
    }
}

impl<L: LabelValue, M: Default> Default for Family<L, M> {
    fn default() -> Self {
        Self::new(M::default)
    }
}

/// A metric kind a [`Family`] can hold and [`MetricsText`] can render.
pub trait FamilyMember {
    /// Adds this metric's sample to `text` under `name` with `labels`.
    fn add_to(&self, text: MetricsText, name: &str, help: &str, labels: &[(&str, &str)]) -> MetricsText;
}

impl FamilyMember for Counter {
    fn add_to(&self, text: MetricsText, name: &str, help: &str, labels: &[(&str, &str)]) -> MetricsText {
        text.counter(name, help, labels, self)
    }
}

impl FamilyMember for Histogram {
    fn add_to(&self, text: MetricsText, name: &str, help: &str, labels: &[(&str, &str)]) -> MetricsText {
        text.histogram(name, help, labels, self)
    }
}

impl MetricsText {
    /// Adds every metric of `family` under `name`, each with the labels `common` and then the family's
    /// own label.
    pub fn family<L: LabelValue, M: FamilyMember>(
        self,
        name: &str,
        help: &str,
        common: &[(&str, &str)],
        family: &Family<L, M>,
    ) -> Self {
        family.iter().fold(self, |text, (value, metric)| {
            let mut labels = common.to_vec();
            labels.push((L::NAME, value.as_str()));
            metric.add_to(text, name, help, &labels)
        })
    }
}

/// Declares a label's values as an enum implementing [`LabelValue`]:
///
/// ```
/// shared::label_values! {
///     /// Which RPC was served.
///     pub enum Rpc("rpc") {
///         /// `Lookup`.
///         Lookup = "lookup",
///         /// `Complete`.
///         Complete = "complete",
///     }
/// }
/// use shared::metrics::LabelValue;
/// assert_eq!((Rpc::Complete.as_str(), Rpc::Complete.index(), Rpc::NAME), ("complete", 1, "rpc"));
/// ```
#[macro_export]
macro_rules! label_values {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($label:literal) {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $crate::metrics::LabelValue for $name {
            const NAME: &'static str = $label;
            const ALL: &'static [Self] = &[$(Self::$variant),+];
            fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }
            fn index(self) -> usize {
                self as usize
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::label_values! {
        /// Test tiers.
        enum Tier("tier") {
            /// First.
            Edge = "edge",
            /// Second.
            Core = "core",
        }
    }

    #[test]
    fn a_family_renders_one_sample_per_value_after_the_common_labels() {
        let hits: Family<Tier, Counter> = Family::default();
        hits.get(Tier::Core).add(2);
        let text = MetricsText::default().family("hits_total", "Hits.", &[("region", "eu")], &hits).finish();
        assert_eq!(text.matches("# TYPE hits counter").count(), 1, "{text}");
        assert!(text.contains("hits_total{region=\"eu\",tier=\"edge\"} 0\n"), "{text}");
        assert!(text.contains("hits_total{region=\"eu\",tier=\"core\"} 2\n"), "{text}");
    }
}
