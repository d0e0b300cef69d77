//! The binary form of votes and of every Raft RPC's reply (`mesh.raft.v1.VoteBody`, `RaftReply`), so that
//! nothing between core nodes' Raft instances travels as JSON but writes forwarded to the leader.
//!
//! A remote error keeps its meaning: a snapshot chunk that was not the expected one is openraft's
//! `SnapshotMismatch`; a node whose Raft stopped answers `Fatal`, `Panicked` when it panicked and `Stopped`
//! otherwise (a storage error's text is logged where it happened and sent along, but not rebuilt).

use openraft::error::{Fatal, Infallible, InstallSnapshotError, RaftError, SnapshotMismatch};
use openraft::raft::{AppendEntriesResponse, InstallSnapshotResponse, VoteRequest, VoteResponse};
use openraft::SnapshotSegmentId;
use prost::Message as _;
use proto::raft as pb;

use crate::node::error::CoreError;
use crate::node::raft::log_codec::{log_id_from_pb, log_id_to_pb, vote_from_pb, vote_to_pb};
use crate::node::types::NodeId;

/// What a node answers to one RPC: openraft's response or its error.
pub type RpcResult<T, E> = Result<T, RaftError<NodeId, E>>;

fn missing(what: &str) -> CoreError {
    CoreError::InvalidArgument(format!("raft reply: {what} is missing"))
}

/// Encodes a vote request.
pub fn encode_vote(request: &VoteRequest<NodeId>) -> Vec<u8> {
    pb::VoteBody {
        vote: Some(vote_to_pb(&request.vote)),
        last_log_id: request.last_log_id.as_ref().map(log_id_to_pb),
    }
    .encode_to_vec()
}

/// Decodes a vote request.
pub fn decode_vote(bytes: &[u8]) -> Result<VoteRequest<NodeId>, CoreError> {
    let body = pb::VoteBody::decode(bytes)
        .map_err(|e| CoreError::InvalidArgument(format!("vote does not decode: {e}")))?;
    Ok(VoteRequest {
        vote: vote_from_pb(body.vote.ok_or_else(|| missing("the vote"))?),
        last_log_id: body.last_log_id.map(log_id_from_pb),
    })
}

/// The API error an RPC may answer, in a `RaftFailure`.
pub trait ApiError: Sized {
    /// The error's message.
    fn to_pb(&self) -> pb::RaftFailure;

    /// The error in `failure`, if it is one.
    fn from_pb(failure: pb::raft_failure::Kind) -> Result<Self, CoreError>;
}

/// A response type of the Raft service, with its binary reply.
pub trait Reply: Sized {
    /// The API error its RPC may answer.
    type Error: ApiError;

    /// The reply's message.
    fn to_pb(&self) -> pb::raft_reply::Result;

    /// The response in `result`, if it is this RPC's.
    fn from_pb(result: pb::raft_reply::Result) -> Result<Self, CoreError>;

    /// Encodes what a node answered.
    fn encode(result: &RpcResult<Self, Self::Error>) -> Vec<u8> {
        let result = match result {
            Ok(response) => response.to_pb(),
            Err(RaftError::APIError(error)) => pb::raft_reply::Result::Failure(error.to_pb()),
            Err(RaftError::Fatal(fatal)) => pb::raft_reply::Result::Failure(pb::RaftFailure {
                kind: Some(pb::raft_failure::Kind::Fatal(fatal.to_string())),
            }),
        };
        pb::RaftReply { result: Some(result) }.encode_to_vec()
    }

    /// Decodes what a node answered.
    fn decode(bytes: &[u8]) -> Result<RpcResult<Self, Self::Error>, CoreError> {
        let reply = pb::RaftReply::decode(bytes)
            .map_err(|e| CoreError::InvalidArgument(format!("raft reply does not decode: {e}")))?;
        match reply.result.ok_or_else(|| missing("the result"))? {
            pb::raft_reply::Result::Failure(failure) => {
                match failure.kind.ok_or_else(|| missing("the failure"))? {
                    pb::raft_failure::Kind::Fatal(text) => Ok(Err(RaftError::Fatal(fatal_from(&text)))),
                    kind => Ok(Err(RaftError::APIError(Self::Error::from_pb(kind)?))),
                }
            }
            result => Self::from_pb(result).map(Ok),
        }
    }
}

/// The fatal error a text names (see the module's notes).
fn fatal_from(text: &str) -> Fatal<NodeId> {
    if text == Fatal::<NodeId>::Panicked.to_string() {
        Fatal::Panicked
    } else {
        Fatal::Stopped
    }
}

fn not_an_api_error(kind: pb::raft_failure::Kind) -> CoreError {
    CoreError::InvalidArgument(format!("raft reply: an error this call cannot answer: {kind:?}"))
}

fn wrong_reply(result: pb::raft_reply::Result) -> CoreError {
    CoreError::InvalidArgument(format!("raft reply: another call's answer: {result:?}"))
}

impl Reply for AppendEntriesResponse<NodeId> {
    type Error = Infallible;

    fn to_pb(&self) -> pb::raft_reply::Result {
        use pb::append_entries_reply::Result as R;
        let result = match self {
            Self::Success => R::Success(pb::Blank {}),
            Self::PartialSuccess(matching) => {
                R::Partial(pb::PartialSuccess { matching: matching.as_ref().map(log_id_to_pb) })
            }
            Self::Conflict => R::Conflict(pb::Blank {}),
            Self::HigherVote(vote) => R::HigherVote(vote_to_pb(vote)),
        };
        pb::raft_reply::Result::Append(pb::AppendEntriesReply { result: Some(result) })
    }

    fn from_pb(result: pb::raft_reply::Result) -> Result<Self, CoreError> {
        use pb::append_entries_reply::Result as R;
        let pb::raft_reply::Result::Append(reply) = result else { return Err(wrong_reply(result)) };
        Ok(match reply.result.ok_or_else(|| missing("the append result"))? {
            R::Success(_) => Self::Success,
            R::Partial(p) => Self::PartialSuccess(p.matching.map(log_id_from_pb)),
            R::Conflict(_) => Self::Conflict,
            R::HigherVote(vote) => Self::HigherVote(vote_from_pb(vote)),
        })
    }
}

impl Reply for VoteResponse<NodeId> {
    type Error = Infallible;

    fn to_pb(&self) -> pb::raft_reply::Result {
        pb::raft_reply::Result::Vote(pb::VoteReply {
            vote: Some(vote_to_pb(&self.vote)),
            granted: self.vote_granted,
            last_log_id: self.last_log_id.as_ref().map(log_id_to_pb),
        })
    }

    fn from_pb(result: pb::raft_reply::Result) -> Result<Self, CoreError> {
        let pb::raft_reply::Result::Vote(reply) = result else { return Err(wrong_reply(result)) };
        Ok(Self {
            vote: vote_from_pb(reply.vote.ok_or_else(|| missing("the vote"))?),
            vote_granted: reply.granted,
            last_log_id: reply.last_log_id.map(log_id_from_pb),
        })
    }
}

impl Reply for InstallSnapshotResponse<NodeId> {
    type Error = InstallSnapshotError;

    fn to_pb(&self) -> pb::raft_reply::Result {
        pb::raft_reply::Result::Install(pb::InstallSnapshotReply { vote: Some(vote_to_pb(&self.vote)) })
    }

    fn from_pb(result: pb::raft_reply::Result) -> Result<Self, CoreError> {
        let pb::raft_reply::Result::Install(reply) = result else { return Err(wrong_reply(result)) };
        Ok(Self { vote: vote_from_pb(reply.vote.ok_or_else(|| missing("the vote"))?) })
    }
}

/// AppendEntries and Vote answer no API error.
impl ApiError for Infallible {
    fn to_pb(&self) -> pb::RaftFailure {
        match *self {}
    }

    fn from_pb(kind: pb::raft_failure::Kind) -> Result<Self, CoreError> {
        Err(not_an_api_error(kind))
    }
}

impl ApiError for InstallSnapshotError {
    fn to_pb(&self) -> pb::RaftFailure {
        let InstallSnapshotError::SnapshotMismatch(SnapshotMismatch { expect, got }) = self;
        pb::RaftFailure {
            kind: Some(pb::raft_failure::Kind::SnapshotMismatch(pb::SnapshotMismatch {
                expect_id: expect.id.clone(),
                expect_offset: expect.offset,
                got_id: got.id.clone(),
                got_offset: got.offset,
            })),
        }
    }

    fn from_pb(kind: pb::raft_failure::Kind) -> Result<Self, CoreError> {
        let pb::raft_failure::Kind::SnapshotMismatch(m) = kind else { return Err(not_an_api_error(kind)) };
        Ok(InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
            expect: SnapshotSegmentId { id: m.expect_id, offset: m.expect_offset },
            got: SnapshotSegmentId { id: m.got_id, offset: m.got_offset },
        }))
    }
}

#[cfg(test)]
mod tests {
    use openraft::{LeaderId, LogId, Vote};

    use super::*;

    fn round_trip<T: Reply + PartialEq + std::fmt::Debug>(result: RpcResult<T, T::Error>)
    where
        T::Error: PartialEq + std::fmt::Debug,
    {
        let decoded = T::decode(&T::encode(&result)).expect("decodes");
        assert_eq!(format!("{decoded:?}"), format!("{result:?}"));
    }

    #[test]
    fn votes_and_replies_survive_the_wire() {
        let log_id = LogId::new(LeaderId::new(3, 2), 17);
        let request = VoteRequest { vote: Vote::new(4, 1), last_log_id: Some(log_id) };
        assert_eq!(decode_vote(&encode_vote(&request)).expect("vote"), request);
        for response in [
            AppendEntriesResponse::Success,
            AppendEntriesResponse::PartialSuccess(Some(log_id)),
            AppendEntriesResponse::PartialSuccess(None),
            AppendEntriesResponse::Conflict,
            AppendEntriesResponse::HigherVote(Vote::new_committed(5, 3)),
        ] {
            round_trip(Ok(response));
        }
        round_trip::<AppendEntriesResponse<NodeId>>(Err(RaftError::Fatal(Fatal::Panicked)));
        round_trip(Ok(VoteResponse { vote: Vote::new(4, 1), vote_granted: true, last_log_id: None }));
        round_trip::<VoteResponse<NodeId>>(Err(RaftError::Fatal(Fatal::Stopped)));
        round_trip(Ok(InstallSnapshotResponse { vote: Vote::new_committed(2, 2) }));
        let mismatch = SnapshotMismatch {
            expect: SnapshotSegmentId { id: "1-9-3".into(), offset: 0 },
            got: SnapshotSegmentId { id: "1-9-3".into(), offset: 4096 },
        };
        round_trip::<InstallSnapshotResponse<NodeId>>(Err(RaftError::APIError(mismatch.into())));
        // Another call's answer, or garbage, is refused rather than misread.
        let vote_reply = VoteResponse::encode(&Ok(VoteResponse {
            vote: Vote::new(1, 1),
            vote_granted: false,
            last_log_id: None,
        }));
        assert!(AppendEntriesResponse::<NodeId>::decode(&vote_reply).is_err());
        assert!(VoteResponse::<NodeId>::decode(b"\xff\xff").is_err());
    }
}
