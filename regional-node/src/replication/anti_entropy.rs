//! Anti-entropy between two nodes, as pure steps the peer link runs over gRPC: compare the digests of
//! every key range, then the per-key summaries of only the ranges that differ, then send only the records
//! the peer lacks or holds differently. Each side runs it toward the other (every link dials), so each
//! difference travels once per direction that has something to add: pushing, not pulling, keeps the two
//! concurrent rounds of a healed link from both moving the same records.

use std::collections::HashMap;

/// The ranges whose digests differ (a side that sent the wrong number of ranges differs everywhere).
pub fn differing_ranges(mine: &[u64], theirs: &[u64]) -> Vec<u32> {
    if mine.len() != theirs.len() {
        return (0..mine.len().max(theirs.len()) as u32).collect();
    }
    mine.iter().zip(theirs).enumerate().filter(|(_, (a, b))| a != b).map(|(i, _)| i as u32).collect()
}

/// Keys of `mine` that `theirs` lacks or holds differently: what to send.
pub fn to_push(mine: &[(String, u64)], theirs: &[(String, u64)]) -> Vec<String> {
    let held: HashMap<&str, u64> = theirs.iter().map(|(k, d)| (k.as_str(), *d)).collect();
    mine.iter().filter(|(k, d)| held.get(k.as_str()) != Some(d)).map(|(k, _)| k.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(items: &[(&str, u64)]) -> Vec<(String, u64)> {
        items.iter().map(|(k, d)| ((*k).to_owned(), *d)).collect()
    }

    #[test]
    fn only_differing_ranges_and_keys_are_named() {
        assert_eq!(differing_ranges(&[1, 2, 3], &[1, 5, 3]), vec![1]);
        assert_eq!(differing_ranges(&[1], &[1, 2]), vec![0, 1]);
        let mine = summary(&[("a", 1), ("b", 2), ("c", 3)]);
        let theirs = summary(&[("b", 2), ("c", 4), ("d", 5)]);
        assert_eq!(to_push(&mine, &theirs), vec!["a".to_owned(), "c".to_owned()]);
    }
}
