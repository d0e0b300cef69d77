//! The receiving end of replication: peers' delta streams and anti-entropy calls.

use std::sync::Arc;

use prost::Message as _;
use proto::replication::replication_server::Replication as ReplicationRpc;
use proto::replication::{
    Ack, DeltaBatch, DigestReply, DigestRequest, KeySummary, SummariesReply, SummariesRequest,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::store::RANGES;
use super::{Applier, Replication};

/// The gRPC service peers call.
pub struct ReplicationService {
    replication: Arc<Replication>,
    applier: Arc<dyn Applier>,
    streaming: Arc<StreamingActors>,
}

impl ReplicationService {
    /// Serves `replication`, applying merged records through `applier`.
    pub fn new(replication: Arc<Replication>, applier: Arc<dyn Applier>) -> Self {
        Self { replication, applier, streaming: Arc::default() }
    }

    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        // The replication row of the authorization table: regional peers only.
        self.replication.settings.identity.check(request, &[daemon_runtime::TierRole::Regional]).map(|_| ())
    }
}

/// The actors with a delta stream open to this node, and the address each streams from. Two nodes with
/// one actor id (a cloned data directory, a restored backup) would write dots that collide; a second
/// stream under an id already streaming from another address is refused, so the clash is loud.
#[derive(Debug, Default)]
struct StreamingActors {
    open: std::sync::Mutex<std::collections::HashMap<String, (std::net::IpAddr, usize)>>,
}

impl StreamingActors {
    /// A claim on `actor` streaming from `ip`; refused while it streams from another address.
    fn claim(self: &Arc<Self>, actor: &str, ip: std::net::IpAddr) -> Result<ActorClaim, Status> {
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = open.entry(actor.to_owned()).or_insert((ip, 0));
        if entry.0 != ip && entry.1 > 0 {
            tracing::error!(actor, streaming_from = %entry.0, refused = %ip, "two peers share one replication id: give each node its own --node-id (and data directory)");
            return Err(Status::failed_precondition(format!(
                "replication id {actor:?} already streams from {}: each regional node needs its own --node-id",
                entry.0
            )));
        }
        *entry = (ip, entry.1 + 1);
        Ok(ActorClaim { streaming: Arc::clone(self), actor: actor.to_owned() })
    }
}

/// One open stream's claim on its actor id; released when dropped.
struct ActorClaim {
    streaming: Arc<StreamingActors>,
    actor: String,
}

impl Drop for ActorClaim {
    fn drop(&mut self) {
        let mut open = self.streaming.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(entry) = open.get_mut(&self.actor) {
            entry.1 = entry.1.saturating_sub(1);
            if entry.1 == 0 {
                open.remove(&self.actor);
            }
        }
    }
}

/// Refuses a peer that presents this node's own replication id: its records would pass for this
/// node's own.
fn refuse_own_id(replication: &Replication, from: &str) -> Result<(), Status> {
    if from == replication.settings().node_id {
        tracing::error!(node = %from, "a peer has this node's replication id: give each node its own --node-id");
        return Err(Status::failed_precondition(format!(
            "replication id {from:?} is this node's own: each regional node needs its own --node-id"
        )));
    }
    Ok(())
}

#[tonic::async_trait]
impl ReplicationRpc for ReplicationService {
    type ReplicateStream = UnboundedReceiverStream<Result<Ack, Status>>;

    async fn replicate(
        &self,
        request: Request<Streaming<DeltaBatch>>,
    ) -> Result<Response<Self::ReplicateStream>, Status> {
        self.authorize(&request)?;
        let from_ip = request.extensions().get::<daemon_runtime::http_serving::PeerAddr>().map(|a| a.0.ip());
        let streaming = Arc::clone(&self.streaming);
        let mut inbound = request.into_inner();
        // Acknowledgements are tiny and cumulative; an unbounded queue keeps the reader from ever waiting
        // on a peer that is slow to read them.
        let (tx, rx) = mpsc::unbounded_channel();
        let replication = Arc::clone(&self.replication);
        let applier = Arc::clone(&self.applier);
        tokio::spawn(async move {
            let mut claim = None;
            while let Ok(Some(batch)) = inbound.message().await {
                if let Err(refused) = refuse_own_id(&replication, &batch.from) {
                    let _ = tx.send(Err(refused));
                    break;
                }
                if let (None, Some(ip)) = (&claim, from_ip) {
                    match streaming.claim(&batch.from, ip) {
                        Ok(held) => claim = Some(held),
                        Err(refused) => {
                            let _ = tx.send(Err(refused));
                            break;
                        }
                    }
                }
                replication.metrics.bytes_received.add(batch.encoded_len() as u64);
                for record in batch.records {
                    let key = record.key.clone();
                    if let Err(refused) = replication.merge_remote(record, applier.as_ref()) {
                        tracing::warn!(from = %batch.from, %key, %refused, "refused a record from a peer");
                    }
                }
                // Acknowledge only what is on disk: a tombstone is collected once every peer has it.
                replication.store().flush().await;
                if tx.send(Ok(Ack { seq: batch.seq })).is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }

    async fn digest(&self, request: Request<DigestRequest>) -> Result<Response<DigestReply>, Status> {
        self.authorize(&request)?;
        let store = self.replication.store();
        // Every session starts with a digest: a peer that is this node's actor is refused before any
        // record of its could be mistaken for this node's own.
        refuse_own_id(&self.replication, &request.get_ref().from)?;
        // The caller counts a tombstone in a range with equal digests as acknowledged: have it on disk.
        store.flush().await;
        let reply = DigestReply { ranges: store.range_digests(), records: store.len() as u64 };
        self.replication.metrics.bytes_sent.add(reply.encoded_len() as u64);
        Ok(Response::new(reply))
    }

    async fn summaries(
        &self,
        request: Request<SummariesRequest>,
    ) -> Result<Response<SummariesReply>, Status> {
        self.authorize(&request)?;
        let ranges = request.into_inner().ranges;
        if let Some(bad) = ranges.iter().find(|&&r| r as usize >= RANGES) {
            return Err(Status::invalid_argument(format!("range {bad} is not below {RANGES}")));
        }
        let keys = self
            .replication
            .store()
            .summaries(&ranges)
            .into_iter()
            .map(|(key, hash)| KeySummary { key, hash })
            .collect();
        let reply = SummariesReply { keys };
        self.replication.metrics.bytes_sent.add(reply.encoded_len() as u64);
        Ok(Response::new(reply))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use daemon_runtime::TierIdentity;

    use super::*;
    use crate::replication::record::Record;
    use crate::replication::ReplicationSettings;

    struct Ignore;

    impl Applier for Ignore {
        fn apply(&self, _: &str, _: &Record) {}
    }

    fn service(node_id: &str) -> (ReplicationService, TierIdentity) {
        let credential =
            TierIdentity::insecure_secret("a-development-secret-of-32-bytes!").expect("credential");
        let settings = ReplicationSettings {
            node_id: node_id.into(),
            peers: vec![],
            min_lookups: 2,
            anti_entropy_interval: Duration::from_secs(5),
            identity: credential.clone(),
            tenant_bytes: usize::MAX,
            answer_verifier: None,
        };
        let replication = Arc::new(Replication::new(settings, None).expect("replication"));
        (ReplicationService::new(replication, Arc::new(Ignore)), credential)
    }

    #[test]
    fn one_actor_id_streaming_from_two_addresses_is_refused() {
        let streaming = Arc::new(StreamingActors::default());
        let (a, b): (std::net::IpAddr, std::net::IpAddr) =
            ("10.0.0.1".parse().expect("ip"), "10.0.0.2".parse().expect("ip"));
        let first = streaming.claim("region-1-x", a).expect("first");
        let reconnect = streaming.claim("region-1-x", a).expect("the same node reconnecting");
        let clone = streaming.claim("region-1-x", b).map(|_| ()).expect_err("a clone elsewhere");
        assert_eq!(clone.code(), tonic::Code::FailedPrecondition);
        assert!(streaming.claim("region-2-y", b).is_ok(), "another actor");
        drop((first, reconnect));
        assert!(streaming.claim("region-1-x", b).is_ok(), "once the first has gone, the id may move");
    }

    #[tokio::test]
    async fn a_peer_with_this_nodes_id_is_refused() {
        let (service, credential) = service("region-1-a");
        let own = service.digest(credential.request(DigestRequest { from: "region-1-a".into() })).await;
        assert_eq!(own.map(|_| ()).expect_err("refused").code(), tonic::Code::FailedPrecondition);
        let peer = service.digest(credential.request(DigestRequest { from: "region-1-b".into() })).await;
        assert!(peer.is_ok());
    }
}
