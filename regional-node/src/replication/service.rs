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
}

impl ReplicationService {
    /// Serves `replication`, applying merged records through `applier`.
    pub fn new(replication: Arc<Replication>, applier: Arc<dyn Applier>) -> Self {
        Self { replication, applier }
    }

    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        self.replication.settings.secret.check(request.metadata())
    }
}

#[tonic::async_trait]
impl ReplicationRpc for ReplicationService {
    type ReplicateStream = UnboundedReceiverStream<Result<Ack, Status>>;

    async fn replicate(
        &self,
        request: Request<Streaming<DeltaBatch>>,
    ) -> Result<Response<Self::ReplicateStream>, Status> {
        self.authorize(&request)?;
        let mut inbound = request.into_inner();
        // Acknowledgements are tiny and cumulative; an unbounded queue keeps the reader from ever waiting
        // on a peer that is slow to read them.
        let (tx, rx) = mpsc::unbounded_channel();
        let replication = Arc::clone(&self.replication);
        let applier = Arc::clone(&self.applier);
        tokio::spawn(async move {
            while let Ok(Some(batch)) = inbound.message().await {
                replication.metrics.bytes_received.add(batch.encoded_len() as u64);
                for record in batch.records {
                    if !replication.merge_remote(record, applier.as_ref()) {
                        tracing::warn!(from = %batch.from, "dropped a malformed record from a peer");
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
