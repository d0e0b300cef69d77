//! The fixed binary layout of what the log keeps beside its entries: log ids, the vote and the
//! [`Meta`] record that opens every segment. All integers are little-endian.

use std::io;

use openraft::{LeaderId, LogId, Vote};

use crate::node::NodeId;

/// The vote, the committed log id and the last purged log id: the log's state apart from its entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// The last vote saved.
    pub vote: Option<Vote<NodeId>>,
    /// The last committed log id saved.
    pub committed: Option<LogId<NodeId>>,
    /// Entries up to here are purged.
    pub last_purged: Option<LogId<NodeId>>,
}

/// Reads fixed-size fields off the front of a record's payload.
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `payload`.
    pub fn new(payload: &'a [u8]) -> Self {
        Self { rest: payload }
    }

    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(invalid("a write-ahead-log record is shorter than its fields"));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    /// The next `u64`.
    pub fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("eight bytes")))
    }

    fn flag(&mut self) -> io::Result<bool> {
        match self.take(1)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(invalid(format!("a write-ahead-log flag reads {other}"))),
        }
    }

    /// The next log id.
    pub fn log_id(&mut self) -> io::Result<LogId<NodeId>> {
        let term = self.u64()?;
        let node = self.u64()?;
        Ok(LogId::new(LeaderId::new(term, node), self.u64()?))
    }

    /// The next optional log id.
    pub fn optional_log_id(&mut self) -> io::Result<Option<LogId<NodeId>>> {
        if self.flag()? {
            self.log_id().map(Some)
        } else {
            Ok(None)
        }
    }

    /// The next vote.
    pub fn vote(&mut self) -> io::Result<Vote<NodeId>> {
        let term = self.u64()?;
        let node = self.u64()?;
        let committed = self.flag()?;
        Ok(if committed { Vote::new_committed(term, node) } else { Vote::new(term, node) })
    }

    /// The next [`Meta`].
    pub fn meta(&mut self) -> io::Result<Meta> {
        let vote = if self.flag()? { Some(self.vote()?) } else { None };
        Ok(Meta { vote, committed: self.optional_log_id()?, last_purged: self.optional_log_id()? })
    }

    /// What is left.
    pub fn rest(self) -> &'a [u8] {
        self.rest
    }
}

/// Appends `log_id`.
pub fn put_log_id(out: &mut Vec<u8>, log_id: &LogId<NodeId>) {
    out.extend_from_slice(&log_id.leader_id.term.to_le_bytes());
    out.extend_from_slice(&log_id.leader_id.node_id.to_le_bytes());
    out.extend_from_slice(&log_id.index.to_le_bytes());
}

/// Appends an optional log id.
pub fn put_optional_log_id(out: &mut Vec<u8>, log_id: Option<&LogId<NodeId>>) {
    out.push(u8::from(log_id.is_some()));
    if let Some(log_id) = log_id {
        put_log_id(out, log_id);
    }
}

/// Appends `vote`.
pub fn put_vote(out: &mut Vec<u8>, vote: &Vote<NodeId>) {
    out.extend_from_slice(&vote.leader_id.term.to_le_bytes());
    out.extend_from_slice(&vote.leader_id.node_id.to_le_bytes());
    out.push(u8::from(vote.committed));
}

/// Appends `meta`.
pub fn put_meta(out: &mut Vec<u8>, meta: &Meta) {
    out.push(u8::from(meta.vote.is_some()));
    if let Some(vote) = &meta.vote {
        put_vote(out, vote);
    }
    put_optional_log_id(out, meta.committed.as_ref());
    put_optional_log_id(out, meta.last_purged.as_ref());
}

/// An error for bytes that do not mean what the log wrote.
pub fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips() {
        let meta = Meta {
            vote: Some(Vote::new_committed(7, 2)),
            committed: None,
            last_purged: Some(LogId::new(LeaderId::new(3, 1), 99)),
        };
        let mut bytes = Vec::new();
        put_meta(&mut bytes, &meta);
        let mut reader = Reader::new(&bytes);
        assert_eq!(reader.meta().expect("test step"), meta);
        assert!(reader.rest().is_empty());
        assert!(Reader::new(&bytes[..5]).meta().is_err());
    }
}
