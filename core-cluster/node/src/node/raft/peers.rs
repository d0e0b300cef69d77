//! gRPC channels to the other core nodes, shared by Raft replication and write forwarding.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use daemon_runtime::{TierIdentity, TierRole};
use proto::core::core_store_client::CoreStoreClient;
use proto::raft::raft_client::RaftClient;
use tonic::transport::Channel;

use crate::node::error::CoreError;

/// Largest gRPC message between core nodes: snapshot chunks and entry batches travel as JSON.
pub const MAX_RAFT_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// One lazily connected channel per peer address, reused for every call to that peer.
#[derive(Clone, Debug)]
pub struct PeerChannels {
    /// Channels by `host:port`.
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    /// The source address of outgoing connections (the node's listen IP), when it is a specific one.
    source_ip: Option<IpAddr>,
    /// What this node presents to its peers.
    identity: TierIdentity,
}

impl PeerChannels {
    /// Channels whose connections leave from `source_ip` (none: the system picks).
    ///
    /// Binding the node's own listen IP makes a node's traffic recognisable by address, which is what
    /// firewall rules (and the test harness's fault proxy) key on.
    pub fn new(source_ip: Option<IpAddr>, identity: TierIdentity) -> Self {
        Self { channels: Arc::default(), source_ip, identity }
    }

    /// The channel to `addr` (`host:port`); it connects on first use and reconnects after failures.
    pub fn channel(&self, addr: &str) -> Result<Channel, CoreError> {
        let mut channels = self.channels.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(channel) = channels.get(addr) {
            return Ok(channel.clone());
        }
        let endpoint = self
            .identity
            .endpoint(&format!("{}://{addr}", self.identity.scheme()), TierRole::Core)
            .map_err(|e| CoreError::Config(format!("peer address {addr:?}: {e}")))?
            .configure(|endpoint| {
                endpoint
                    .connect_timeout(Duration::from_secs(1))
                    .tcp_nodelay(true)
                    .http2_keep_alive_interval(Duration::from_secs(5))
                    .keep_alive_timeout(Duration::from_secs(5))
            })
            .local_address(self.source_ip);
        let channel = endpoint.connect_lazy();
        channels.insert(addr.to_owned(), channel.clone());
        Ok(channel)
    }

    /// A `Raft` service client for `addr`, with message limits large enough for snapshot chunks.
    pub fn raft_client(&self, addr: &str) -> Result<RaftClient<Channel>, CoreError> {
        Ok(RaftClient::new(self.channel(addr)?)
            .max_decoding_message_size(MAX_RAFT_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_RAFT_MESSAGE_BYTES))
    }
}

impl PeerChannels {
    /// A `CoreStore` client for `addr`, for reads forwarded to the leader.
    pub fn store_client(&self, addr: &str) -> Result<CoreStoreClient<Channel>, CoreError> {
        Ok(CoreStoreClient::new(self.channel(addr)?))
    }
}
