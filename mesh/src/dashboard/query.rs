//! What a chart plots, computed from two consecutive scrapes of every daemon: counter rates, histogram
//! quantiles over the interval, gauges, and ratios of rates (the PromQL the Grafana dashboard under
//! `deploy/` uses, for the handful of shapes the mesh's panels need).

use std::collections::{BTreeMap, HashMap};

use super::exposition::Sample;

/// The label that tells apart the same series scraped from different daemons.
pub const TARGET_LABEL: &str = "__target";

/// How a gauge's samples across daemons combine.
#[derive(Clone, Copy, Debug)]
pub enum Aggregate {
    /// Added up.
    Sum,
    /// The largest.
    Max,
    /// The smallest.
    Min,
}

/// One plotted quantity.
#[derive(Clone, Debug)]
pub enum Query {
    /// Per-second increase of a counter family.
    Rate(Selector),
    /// Quantile `q` of a histogram family's observations during the interval.
    Quantile(f64, Selector),
    /// A gauge family's current value.
    Gauge(Aggregate, Selector),
    /// One rate over another (the denominator is summed whole, never split by label).
    Ratio(Selector, Selector),
    /// One gauge family's sum less another's.
    GaugeDifference(Selector, Selector),
}

/// A metric family and the label values its samples must carry.
#[derive(Clone, Debug)]
pub struct Selector {
    /// The family's name as PromQL writes it: a histogram's without `_bucket`, `_sum`, `_count`, a
    /// counter's with its `_total`.
    pub family: &'static str,
    /// Label values every selected sample carries.
    pub matching: &'static [(&'static str, &'static str)],
}

/// Shorthand for a [`Selector`].
pub const fn metric(family: &'static str, matching: &'static [(&'static str, &'static str)]) -> Selector {
    Selector { family, matching }
}

/// A scrape of every daemon at one instant.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Every sample, each labelled with [`TARGET_LABEL`].
    pub samples: Vec<Sample>,
}

impl Query {
    /// The value of each group (label `by`'s values, or one group `""` without it) over the interval
    /// from `before` to `now`. A group with nothing to say in the interval is `None`.
    pub fn evaluate(&self, before: &Scrape, now: &Scrape, by: Option<&str>) -> BTreeMap<String, Option<f64>> {
        let seconds = now.at_ms.saturating_sub(before.at_ms) as f64 / 1000.0;
        match self {
            Query::Rate(selector) => increases(selector, "", before, now, by)
                .into_iter()
                .map(|(group, (total, seen))| (group, seen.then(|| total / seconds.max(1e-3))))
                .collect(),
            Query::Quantile(q, selector) => {
                let mut buckets: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
                let bucket_samples = select(selector, "_bucket", now);
                let earlier = index(select(selector, "_bucket", before));
                for sample in bucket_samples {
                    let Ok(le) = parse_bound(sample.label("le")) else { continue };
                    let increase = increase(earlier.get(&key(sample)).copied(), sample.value);
                    let group = group_of(sample, by);
                    let list = buckets.entry(group).or_default();
                    match list.iter_mut().find(|(bound, _)| *bound == le) {
                        Some((_, count)) => *count += increase.unwrap_or(0.0),
                        None => list.push((le, increase.unwrap_or(0.0))),
                    }
                }
                buckets.into_iter().map(|(group, list)| (group, quantile(*q, list))).collect()
            }
            Query::Gauge(aggregate, selector) => {
                let mut groups: BTreeMap<String, Option<f64>> = BTreeMap::new();
                for sample in select(selector, "", now).filter(|s| s.value.is_finite()) {
                    let slot = groups.entry(group_of(sample, by)).or_default();
                    *slot = Some(match (*slot, aggregate) {
                        (None, _) => sample.value,
                        (Some(v), Aggregate::Sum) => v + sample.value,
                        (Some(v), Aggregate::Max) => v.max(sample.value),
                        (Some(v), Aggregate::Min) => v.min(sample.value),
                    });
                }
                groups
            }
            Query::GaugeDifference(minuend, subtrahend) => {
                let sum = |selector: &Selector| {
                    let values: Vec<f64> = select(selector, "", now).map(|s| s.value).collect();
                    (!values.is_empty()).then(|| values.iter().sum::<f64>())
                };
                let difference = sum(minuend).zip(sum(subtrahend)).map(|(a, b)| a - b);
                BTreeMap::from([(String::new(), difference)])
            }
            Query::Ratio(numerator, denominator) => {
                let whole: f64 = increases(denominator, "", before, now, None).values().map(|(v, _)| v).sum();
                increases(numerator, "", before, now, by)
                    .into_iter()
                    .map(|(group, (part, _))| (group, (whole > 0.0).then(|| part / whole)))
                    .collect()
            }
        }
    }
}

/// Per group: the summed increase of the selected counters, and whether any had an earlier sample.
fn increases(
    selector: &Selector,
    suffix: &str,
    before: &Scrape,
    now: &Scrape,
    by: Option<&str>,
) -> BTreeMap<String, (f64, bool)> {
    let earlier = index(select(selector, suffix, before));
    let mut groups: BTreeMap<String, (f64, bool)> = BTreeMap::new();
    for sample in select(selector, suffix, now) {
        let slot = groups.entry(group_of(sample, by)).or_default();
        if let Some(increase) = increase(earlier.get(&key(sample)).copied(), sample.value) {
            slot.0 += increase;
            slot.1 = true;
        }
    }
    groups
}

/// A counter's increase; a value below the earlier one means the daemon restarted from zero.
fn increase(earlier: Option<f64>, now: f64) -> Option<f64> {
    let earlier = earlier?;
    Some(if now >= earlier { now - earlier } else { now })
}

fn select<'a>(
    selector: &'a Selector,
    suffix: &'a str,
    scrape: &'a Scrape,
) -> impl Iterator<Item = &'a Sample> {
    scrape.samples.iter().filter(move |s| {
        s.name.strip_suffix(suffix).is_some_and(|n| n == selector.family)
            && selector.matching.iter().all(|(k, v)| s.label(k) == *v)
    })
}

type SeriesKey = (String, Vec<(String, String)>);

fn key(sample: &Sample) -> SeriesKey {
    (sample.name.clone(), sample.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn index<'a>(samples: impl Iterator<Item = &'a Sample>) -> HashMap<SeriesKey, f64> {
    samples.map(|s| (key(s), s.value)).collect()
}

fn group_of(sample: &Sample, by: Option<&str>) -> String {
    by.map(|label| sample.label(label).to_owned()).unwrap_or_default()
}

fn parse_bound(le: &str) -> Result<f64, std::num::ParseFloatError> {
    if le == "+Inf" {
        Ok(f64::INFINITY)
    } else {
        le.parse()
    }
}

/// `histogram_quantile` over cumulative bucket counts (`le` semantics): linear within the bucket that
/// holds the rank; the upper bound of the last finite bucket when the rank falls in `+Inf`.
fn quantile(q: f64, mut buckets: Vec<(f64, f64)>) -> Option<f64> {
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map_or(0.0, |(_, cumulative)| *cumulative);
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for (bound, cumulative) in buckets {
        if cumulative >= rank && cumulative > below {
            if bound.is_infinite() {
                return Some(lower);
            }
            return Some(lower + (bound - lower) * (rank - below) / (cumulative - below));
        }
        below = cumulative;
        if bound.is_finite() {
            lower = bound;
        }
    }
    Some(lower)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::exposition::parse;

    fn scrape(at_ms: u64, text: &str) -> Scrape {
        let mut samples = parse(text);
        for sample in &mut samples {
            sample.labels.insert(TARGET_LABEL.into(), "a".into());
        }
        Scrape { at_ms, samples }
    }

    #[test]
    fn rates_split_by_label_and_survive_a_restart() {
        let before = scrape(0, "hits{tier=\"x\"} 10\nhits{tier=\"y\"} 50\n");
        let now = scrape(2000, "hits{tier=\"x\"} 30\nhits{tier=\"y\"} 4\n");
        let rates = Query::Rate(metric("hits", &[])).evaluate(&before, &now, Some("tier"));
        assert_eq!(rates["x"], Some(10.0));
        assert_eq!(rates["y"], Some(2.0), "a counter that went down restarted from zero");
        let whole = Query::Rate(metric("hits", &[("tier", "x")])).evaluate(&before, &now, None);
        assert_eq!(whole[""], Some(10.0));
    }

    #[test]
    fn quantiles_come_from_the_interval_not_the_lifetime() {
        let before =
            scrape(0, "l_bucket{le=\"0.1\"} 100\nl_bucket{le=\"1\"} 100\nl_bucket{le=\"+Inf\"} 100\n");
        let now =
            scrape(1000, "l_bucket{le=\"0.1\"} 100\nl_bucket{le=\"1\"} 110\nl_bucket{le=\"+Inf\"} 110\n");
        let p50 = Query::Quantile(0.5, metric("l", &[])).evaluate(&before, &now, None)[""].expect("p50");
        assert!((p50 - 0.55).abs() < 1e-9, "{p50}");
        let idle = Query::Quantile(0.5, metric("l", &[])).evaluate(&now, &now, None);
        assert_eq!(idle[""], None, "no observations, no quantile");
    }

    #[test]
    fn ratios_and_gauges() {
        let before = scrape(0, "hit{tier=\"s\"} 0\nreq 0\nq{pod=\"1\"} 1\n");
        let now = scrape(1000, "hit{tier=\"s\"} 5\nreq 20\nq{pod=\"1\"} 3\n");
        let ratio =
            Query::Ratio(metric("hit", &[]), metric("req", &[])).evaluate(&before, &now, Some("tier"));
        assert_eq!(ratio["s"], Some(0.25));
        assert_eq!(
            Query::Gauge(Aggregate::Max, metric("q", &[])).evaluate(&before, &now, None)[""],
            Some(3.0)
        );
    }
}
