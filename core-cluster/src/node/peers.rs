//! gRPC channels to the other core nodes, shared by Raft replication and write forwarding.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::raft::raft_client::RaftClient;
use tonic::transport::{Channel, Endpoint};

use super::error::CoreError;

/// Largest gRPC message between core nodes: snapshot chunks and entry batches travel as JSON.
pub const MAX_RAFT_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// One lazily connected channel per peer address, reused for every call to that peer.
#[derive(Clone, Debug, Default)]
pub struct PeerChannels {
    /// Channels by `host:port`.
    channels: Arc<Mutex<HashMap<String, Channel>>>,
}

impl PeerChannels {
    /// The channel to `addr` (`host:port`); it connects on first use and reconnects after failures.
    pub fn channel(&self, addr: &str) -> Result<Channel, CoreError> {
        let mut channels = self.channels.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(channel) = channels.get(addr) {
            return Ok(channel.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| CoreError::Config(format!("peer address {addr:?}: {e}")))?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5));
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
