//! Top-k and top-p truncation without sorting the vocabulary.
//!
//! Candidates are ranked by a `u64` sort key (ascending = better: higher value, then lower token id),
//! so selections compare integers. Top-k keeps a heap of the `k` best while scanning once. Top-p
//! (alone) drops every token too light to be in the nucleus whatever the others weigh, then finds the
//! nucleus boundary by a selection guided by the mass on either side of each pivot: linear time,
//! however large the nucleus.

use std::collections::BinaryHeap;

/// Below this many candidates, the nucleus search sorts instead of selecting.
const SORT_BELOW: usize = 64;

/// The `k` best `(token, logit)` pairs, best first (higher logit, then lower token id; NaN counts as
/// `-inf`), by one pass with a heap of size `k`.
pub(super) fn top_k(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    // A max-heap of sort keys: the worst kept candidate is on top.
    let mut heap: BinaryHeap<u64> = BinaryHeap::with_capacity(k);
    // The worst kept logit once the heap is full: nothing at or below it can enter (a tie loses to the
    // earlier token), and this one comparison is all most tokens cost.
    let mut floor = f32::NEG_INFINITY;
    for (token, &logit) in logits.iter().enumerate() {
        if heap.len() == k && logit <= floor {
            continue;
        }
        let key = sort_key(logit, token as u32);
        if heap.len() < k {
            heap.push(key);
        } else if let Some(mut worst) = heap.peek_mut() {
            if key < *worst {
                *worst = key;
            }
        }
        if heap.len() == k {
            floor = heap.peek().map_or(f32::NEG_INFINITY, |&worst| value_of(worst));
        }
    }
    let mut keys = heap.into_vec();
    keys.sort_unstable();
    keys.into_iter().map(|key| (token_of(key), value_of(key))).collect()
}

/// How many of `sorted` (best first) make the smallest prefix holding at least `top_p` of its weight.
pub(super) fn nucleus_of_sorted(sorted: &[(u32, f32)], top_p: f32) -> usize {
    let total: f64 = sorted.iter().map(|&(_, w)| f64::from(w)).sum();
    let target = f64::from(top_p) * total;
    let mut cumulative = 0.0;
    for (i, &(_, w)) in sorted.iter().enumerate() {
        cumulative += f64::from(w);
        if cumulative >= target {
            return i + 1;
        }
    }
    sorted.len()
}

/// The top-p nucleus of dense `weights` (indexed by token) whose sum is `total`: the fewest best tokens
/// holding at least `top_p` of the weight, as `(token, weight)` in token order.
pub(super) fn top_p(weights: &[f32], total: f64, top_p: f32) -> Vec<(u32, f32)> {
    let target = f64::from(top_p) * total;
    // The tokens below `floor` weigh less than `total - target` together, so those at or above it reach
    // the target on their own, and the nucleus is among them.
    let floor = ((total - target) / weights.len() as f64) as f32;
    let mut keys: Vec<u64> = weights
        .iter()
        .enumerate()
        .filter(|&(_, &w)| w > 0.0 && w >= floor)
        .map(|(token, &w)| sort_key(w, token as u32))
        .collect();
    let Some(boundary) = nucleus_boundary(&mut keys, target) else {
        return Vec::new();
    };
    let (last_weight, last_token) = (value_of(boundary), token_of(boundary));
    weights
        .iter()
        .enumerate()
        .filter(|&(token, &w)| w > last_weight || (w == last_weight && token as u32 <= last_token))
        .map(|(token, &w)| (token as u32, w))
        .collect()
}

/// The sort key of the last (worst) member of the smallest best-first prefix of `keys` whose weight
/// reaches `target` (the worst key if none does); `None` if there are none. Reorders `keys`.
///
/// Quickselect on the mass: split at the median, keep the better half if it reaches what is still
/// missing, else count its mass and continue in the worse half.
fn nucleus_boundary(keys: &mut [u64], target: f64) -> Option<u64> {
    let (mut lo, mut hi, mut before) = (0, keys.len(), 0.0);
    while hi - lo > SORT_BELOW {
        let mid = lo + (hi - lo) / 2;
        keys[lo..hi].select_nth_unstable(mid - lo);
        let better: f64 = keys[lo..=mid].iter().map(|&key| f64::from(value_of(key))).sum();
        if before + better >= target {
            hi = mid + 1;
        } else {
            before += better;
            lo = mid + 1;
        }
    }
    let rest = &mut keys[lo..hi];
    rest.sort_unstable();
    for &key in rest.iter() {
        before += f64::from(value_of(key));
        if before >= target {
            return Some(key);
        }
    }
    rest.last().copied()
}

/// A key that sorts `(value, token)` best first: higher value, then lower token id. NaN counts as
/// `-inf`, and `-0.0` as `0.0`.
fn sort_key(value: f32, token: u32) -> u64 {
    let value = if value.is_nan() { f32::NEG_INFINITY } else { value + 0.0 };
    let bits = value.to_bits();
    // Floats as unsigned integers in the same order: negatives flip all bits, the rest the sign bit.
    let ordered = if bits >> 31 == 1 { !bits } else { bits | 0x8000_0000 };
    (u64::from(!ordered) << 32) | u64::from(token)
}

/// The value a [`sort_key`] was made from (after its NaN and `-0.0` adjustments).
fn value_of(key: u64) -> f32 {
    let ordered = !((key >> 32) as u32);
    f32::from_bits(if ordered >> 31 == 1 { ordered & 0x7FFF_FFFF } else { !ordered })
}

/// The token a [`sort_key`] was made from.
fn token_of(key: u64) -> u32 {
    key as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_keys_order_by_value_then_token_and_round_trip() {
        // Best first; 0.0 ties -0.0 and NaN ties -inf.
        let values = [f32::INFINITY, 3.5, 1.0, 0.0, -0.0, -1e-30, -2.0, f32::NEG_INFINITY, f32::NAN];
        let rank = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v + 0.0 };
        for (i, &a) in values.iter().enumerate() {
            assert_eq!(value_of(sort_key(a, 7)).to_bits(), rank(a).to_bits(), "{a}");
            assert_eq!(token_of(sort_key(a, 7)), 7);
            for &b in &values[i + 1..] {
                assert!(sort_key(a, 1) < sort_key(b, 2), "{a} vs {b}");
                assert_eq!(sort_key(a, 2) < sort_key(b, 1), rank(a) > rank(b), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn top_k_breaks_ties_by_token_and_ignores_nan() {
        assert_eq!(top_k(&[1.0, 2.0, 1.0, 1.0], 2), [(1, 2.0), (0, 1.0)]);
        assert_eq!(top_k(&[f32::NAN, 0.5, f32::NAN, 0.4], 2), [(1, 0.5), (3, 0.4)]);
        assert_eq!(top_k(&[3.0, f32::NAN], 2), [(0, 3.0), (1, f32::NEG_INFINITY)]);
    }

    #[test]
    fn the_nucleus_of_equal_weights_is_the_lowest_ids() {
        // 1000 equal weights: none can be dropped early, 90% are needed, ties go to the lowest ids.
        let weights = vec![0.5; 1000];
        let kept = top_p(&weights, 500.0, 0.9);
        assert_eq!(kept.len(), 900);
        assert!(kept.iter().enumerate().all(|(i, &(t, _))| t as usize == i));
    }

    #[test]
    fn the_nucleus_matches_a_full_sort() {
        let weights: Vec<f32> =
            (0..5000u32).map(|i| ((i.wrapping_mul(2_654_435_761) >> 20) % 997) as f32).collect();
        let total: f64 = weights.iter().map(|&w| f64::from(w)).sum();
        let mut sorted: Vec<(u32, f32)> = weights.iter().enumerate().map(|(t, &w)| (t as u32, w)).collect();
        sorted.sort_by_key(|&(t, w)| sort_key(w, t));
        for p in [0.001f32, 0.3, 0.5, 0.9, 0.999] {
            let keep = nucleus_of_sorted(&sorted, p);
            let mut want: Vec<(u32, f32)> = sorted[..keep].to_vec();
            want.sort_by_key(|&(t, _)| t);
            assert_eq!(top_p(&weights, total, p), want, "top_p {p}");
        }
    }
}
