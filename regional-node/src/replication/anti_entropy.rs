//! Anti-entropy between two nodes, as pure steps the peer link runs over gRPC: compare the digests of
//! every key range, then the per-key summaries of only the ranges that differ, then move only the records
//! that differ. The side that runs it pulls what the other has newer (merging it) and pushes back what it
//! still has different, so one round leaves both with the same records in those ranges.

use std::collections::HashMap;

/// The ranges whose digests differ (a side that sent the wrong number of ranges differs everywhere).
pub fn differing_ranges(mine: &[u64], theirs: &[u64]) -> Vec<u32> {
    if mine.len() != theirs.len() {
        return (0..mine.len().max(theirs.len()) as u32).collect();
    }
    mine.iter().zip(theirs).enumerate().filter(|(_, (a, b))| a != b).map(|(i, _)| i as u32).collect()
}

/// Keys of `theirs` that `mine` lacks or holds differently: what to fetch.
pub fn to_pull(mine: &[(String, u64)], theirs: &[(String, u64)]) -> Vec<String> {
    let held: HashMap<&str, u64> = mine.iter().map(|(k, d)| (k.as_str(), *d)).collect();
    theirs.iter().filter(|(k, d)| held.get(k.as_str()) != Some(d)).map(|(k, _)| k.clone()).collect()
}

/// Keys of `mine` that `theirs` lacks or holds differently: what to send.
pub fn to_push(mine: &[(String, u64)], theirs: &[(String, u64)]) -> Vec<String> {
    to_pull(theirs, mine)
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
        assert_eq!(to_pull(&mine, &theirs), vec!["c".to_owned(), "d".to_owned()]);
        assert_eq!(to_push(&mine, &theirs), vec!["a".to_owned(), "c".to_owned()]);
    }
}
