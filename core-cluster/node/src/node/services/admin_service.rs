//! The `CoreAdmin` gRPC server: membership changes (on the leader) and a node's status with a digest of its
//! state machine.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use openraft::{BasicNode, ChangeMembers};
use proto::core::core_admin_server::CoreAdmin;
use proto::core::{
    AddLearnerRequest, ChangeMembershipRequest, MembershipReply, NodeAddr, StatusReply, StatusRequest,
};
use tonic::{Request, Response, Status};

use crate::node::context::NodeContext;
use crate::node::error::CoreError;
use crate::node::types::NodeId;
use crate::node::writes::validate;

/// Serves `CoreAdmin` on one core node. Callers have passed the tier-secret check.
#[derive(Clone)]
pub struct AdminService {
    /// The node's shared parts.
    node: Arc<NodeContext>,
}

impl AdminService {
    /// A service over `node`.
    pub fn new(node: Arc<NodeContext>) -> Self {
        Self { node }
    }

    /// Membership changes go to the leader; elsewhere the caller is told where the leader is.
    fn require_leader(&self) -> Result<(), CoreError> {
        match self.node.writer.leader() {
            Some((leader, _)) if leader == self.node.id => Ok(()),
            Some((leader, addr)) => {
                Err(CoreError::NoQuorum(format!("not the leader; the leader is node {leader} at {addr}")))
            }
            None => Err(CoreError::NoQuorum("no leader known".into())),
        }
    }

    /// The membership as the reply reports it.
    fn membership_reply(&self, log_index: u64) -> MembershipReply {
        let (voters, learners) = self.members();
        MembershipReply { log_index, voters, learners }
    }

    fn members(&self) -> (Vec<NodeId>, Vec<NodeId>) {
        let metrics = self.node.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let learners: Vec<NodeId> = membership.learner_ids().collect();
        (voters.into_iter().collect(), learners)
    }
}

fn raft_error(what: &str, e: impl std::fmt::Display) -> CoreError {
    let text = e.to_string();
    if text.contains("forward") || text.contains("leader") {
        CoreError::NoQuorum(format!("{what}: {text}"))
    } else {
        CoreError::Rejected { code: tonic::Code::FailedPrecondition, message: format!("{what}: {text}") }
    }
}

#[tonic::async_trait]
impl CoreAdmin for AdminService {
    #[tracing::instrument(name = "core.add_learner", skip_all, fields(id = request.get_ref().id))]
    async fn add_learner(
        &self,
        request: Request<AddLearnerRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let request = request.into_inner();
        if request.id == 0 {
            return Err(CoreError::InvalidArgument("node ids start at 1".into()).into());
        }
        validate::name("addr", &request.addr)?;
        if !request.addr.contains(':') {
            return Err(CoreError::InvalidArgument("addr must be host:port".into()).into());
        }
        self.require_leader()?;
        // Blocking: returns once the learner has caught up with the leader's log.
        let response = self
            .node
            .raft
            .add_learner(request.id, BasicNode { addr: request.addr.clone() }, true)
            .await
            .map_err(|e| raft_error("add learner", e))?;
        tracing::info!(id = request.id, addr = %request.addr, "learner added");
        Ok(Response::new(self.membership_reply(response.log_id.index)))
    }

    #[tracing::instrument(name = "core.change_membership", skip_all)]
    async fn change_membership(
        &self,
        request: Request<ChangeMembershipRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let request = request.into_inner();
        let voters: BTreeSet<NodeId> = request.voters.iter().copied().collect();
        if voters.is_empty() {
            return Err(CoreError::InvalidArgument("voters must not be empty".into()).into());
        }
        let remove: BTreeSet<NodeId> = request.remove.iter().copied().collect();
        if let Some(both) = voters.intersection(&remove).next() {
            return Err(CoreError::InvalidArgument(format!("node {both} is both a voter and removed")).into());
        }
        self.require_leader()?;
        // Voters dropped from the set stay learners (retain), then the named nodes leave altogether.
        let mut response = self
            .node
            .raft
            .change_membership(ChangeMembers::ReplaceAllVoters(voters.clone()), true)
            .await
            .map_err(|e| raft_error("change membership", e))?;
        if !remove.is_empty() {
            response = self
                .node
                .raft
                .change_membership(ChangeMembers::RemoveNodes(remove.clone()), false)
                .await
                .map_err(|e| raft_error("remove nodes", e))?;
        }
        tracing::info!(?voters, ?remove, "membership changed");
        Ok(Response::new(self.membership_reply(response.log_id.index)))
    }

    async fn status(&self, _request: Request<StatusRequest>) -> Result<Response<StatusReply>, Status> {
        let metrics = self.node.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let learners: Vec<NodeId> = membership.learner_ids().collect();
        let nodes: BTreeMap<NodeId, String> =
            membership.nodes().map(|(id, node)| (*id, node.addr.clone())).collect();
        let digest = self.node.state.digest()?;
        Ok(Response::new(StatusReply {
            id: self.node.id,
            leader_id: crate::node::context::known_leader(self.node.id, &metrics).unwrap_or(0),
            term: metrics.current_term,
            last_log_index: metrics.last_log_index.unwrap_or(0),
            applied_index: metrics.last_applied.map_or(0, |l| l.index),
            voters: voters.into_iter().collect(),
            learners,
            nodes: nodes.into_iter().map(|(id, addr)| NodeAddr { id, addr }).collect(),
            state_digest: digest.digest,
            entries: digest.entries,
            snapshot_index: metrics.snapshot.map_or(0, |l| l.index),
        }))
    }
}
