//! The link from this node to one peer: it dials, opens the delta stream, runs anti-entropy, then sends
//! every local write as it happens and an anti-entropy round every interval, reconnecting with backoff
//! whenever the peer goes away.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use daemon_runtime::identity::PeerEndpoint;
use prost::Message as _;
use proto::replication::replication_client::ReplicationClient;
use proto::replication::{Ack, DeltaBatch, DigestRequest, SummariesRequest};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::Status;

use super::anti_entropy::{differing_ranges, to_push};
use super::{wire, Replication};
use crate::RegionalError;

/// Largest encoded batch of records sent at once.
const BATCH_BYTES: usize = 1 << 20;
/// Most records in one batch.
const BATCH_RECORDS: usize = 512;
/// Largest message accepted from a peer.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// Longest wait between two reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How long one anti-entropy call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// One peer's link.
pub struct Link {
    replication: Arc<Replication>,
    index: usize,
    url: String,
    endpoint: PeerEndpoint,
}

/// The sending half of a delta stream, with the batches the peer has not acknowledged yet.
struct Sender {
    tx: mpsc::Sender<DeltaBatch>,
    seq: u64,
    /// Per unacknowledged batch: its sequence number and the (key, digest) of every tombstone in it.
    unacked: VecDeque<(u64, Vec<(String, u64)>)>,
}

type LinkClient = ReplicationClient<Channel>;

impl Link {
    /// A link to the peer at `url`, the `index`th configured.
    pub fn new(replication: Arc<Replication>, index: usize, url: &str) -> Result<Self, RegionalError> {
        let endpoint = replication
            .settings
            .identity
            .endpoint(url, daemon_runtime::TierRole::Regional)
            .map_err(|e| RegionalError::Config(format!("peer URL {url:?}: {e}")))?
            .configure(|endpoint| {
                endpoint
                    .connect_timeout(Duration::from_millis(500))
                    .http2_keep_alive_interval(Duration::from_secs(2))
                    .keep_alive_timeout(Duration::from_secs(4))
                    .tcp_nodelay(true)
            });
        Ok(Self { replication, index, url: url.to_owned(), endpoint })
    }

    /// Runs forever: connect, sync, stream; on failure wait and start over.
    pub async fn run(self) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let error = match self.session().await {
                Ok(()) => return,
                Err(status) => status,
            };
            tracing::debug!(peer = %self.url, error = %error.message(), "replication link down");
            self.replication.update_peer(self.index, |view| {
                view.connected = false;
                view.last_error = Some(error.message().to_owned());
            });
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        self.replication.settings.identity.request(message)
    }

    /// One connection's life; returns only on failure (or when the change feed closes).
    async fn session(&self) -> Result<(), Status> {
        let channel = self.endpoint.connect().await.map_err(|e| Status::unavailable(e.to_string()))?;
        let mut client = ReplicationClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        // Subscribe before the first round, so no write between the round and the stream is missed.
        let mut changes = self.replication.changes.subscribe();
        let (tx, rx) = mpsc::channel(16);
        let mut acks = client.replicate(self.request(ReceiverStream::new(rx))).await?.into_inner();
        let mut sender = Sender { tx, seq: 0, unacked: VecDeque::new() };
        tracing::info!(peer = %self.url, "replication link up");
        self.replication.update_peer(self.index, |view| {
            view.connected = true;
            view.last_error = None;
            view.acked_seq = 0;
        });
        self.anti_entropy(&mut client, &mut sender).await?;
        let mut tick = tokio::time::interval(self.replication.settings.anti_entropy_interval);
        tick.reset();
        loop {
            tokio::select! {
                changed = changes.recv() => match changed {
                    Ok(key) => {
                        let mut keys = vec![key];
                        while keys.len() < BATCH_RECORDS {
                            match changes.try_recv() {
                                Ok(key) => keys.push(key),
                                Err(_) => break,
                            }
                        }
                        self.send(&mut sender, keys).await?;
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => self.anti_entropy(&mut client, &mut sender).await?,
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
                ack = acks.message() => match ack? {
                    Some(ack) => self.acknowledged(&mut sender, ack),
                    None => return Err(Status::unavailable("the peer closed the delta stream")),
                },
                _ = tick.tick() => self.anti_entropy(&mut client, &mut sender).await?,
            }
        }
    }

    /// Sends the current records under `keys` (those still held), in batches.
    async fn send(&self, sender: &mut Sender, keys: Vec<String>) -> Result<(), Status> {
        let mut seen = HashSet::new();
        let keys: Vec<String> = keys.into_iter().filter(|k| seen.insert(k.clone())).collect();
        let store = self.replication.store();
        let mut batch = DeltaBatch { from: store.node_id().to_owned(), seq: 0, records: Vec::new() };
        let mut tombstones = Vec::new();
        let mut bytes = 0;
        for (key, record) in store.records(&keys) {
            if record.is_tombstone() {
                tombstones.push((key.clone(), record.digest(&key)));
            }
            let wire = wire::to_wire(&key, &record);
            bytes += wire.encoded_len();
            batch.records.push(wire);
            if bytes >= BATCH_BYTES || batch.records.len() >= BATCH_RECORDS {
                self.send_batch(sender, &mut batch, &mut tombstones).await?;
                bytes = 0;
            }
        }
        if !batch.records.is_empty() {
            self.send_batch(sender, &mut batch, &mut tombstones).await?;
        }
        Ok(())
    }

    async fn send_batch(
        &self,
        sender: &mut Sender,
        batch: &mut DeltaBatch,
        tombstones: &mut Vec<(String, u64)>,
    ) -> Result<(), Status> {
        sender.seq += 1;
        batch.seq = sender.seq;
        let message = DeltaBatch {
            from: batch.from.clone(),
            seq: batch.seq,
            records: std::mem::take(&mut batch.records),
        };
        self.replication.metrics.records_sent.add(message.records.len() as u64);
        self.replication.metrics.bytes_sent.add(message.encoded_len() as u64);
        sender.unacked.push_back((sender.seq, std::mem::take(tombstones)));
        sender.tx.send(message).await.map_err(|_| Status::unavailable("the delta stream closed"))
    }

    fn acknowledged(&self, sender: &mut Sender, ack: Ack) {
        let store = self.replication.store();
        while sender.unacked.front().is_some_and(|(seq, _)| *seq <= ack.seq) {
            if let Some((_, tombstones)) = sender.unacked.pop_front() {
                for (key, digest) in tombstones {
                    store.acknowledged(&key, digest, self.index);
                }
            }
        }
        self.replication.update_peer(self.index, |view| view.acked_seq = ack.seq);
    }

    /// One anti-entropy round against the peer: push what it lacks or holds differently; see
    /// [`super::anti_entropy`].
    async fn anti_entropy(&self, client: &mut LinkClient, sender: &mut Sender) -> Result<(), Status> {
        let metrics = &self.replication.metrics;
        let store = self.replication.store();
        let digest_request = DigestRequest { from: store.node_id().to_owned() };
        metrics.bytes_sent.add(digest_request.encoded_len() as u64);
        let theirs = client.digest(self.timed(digest_request)).await?.into_inner();
        metrics.bytes_received.add(theirs.encoded_len() as u64);
        store.acknowledged_by_digests(self.index, &theirs.ranges, &HashMap::new());
        let ranges = differing_ranges(&store.range_digests(), &theirs.ranges);
        metrics.anti_entropy_rounds.inc();
        metrics.ranges_repaired.add(ranges.len() as u64);
        self.replication.update_peer(self.index, |view| {
            view.anti_entropy_rounds += 1;
            view.last_differing_ranges = ranges.len();
        });
        if ranges.is_empty() {
            return Ok(());
        }
        let summaries_request = SummariesRequest { ranges: ranges.clone() };
        metrics.bytes_sent.add(summaries_request.encoded_len() as u64);
        let reply = client.summaries(self.timed(summaries_request)).await?.into_inner();
        metrics.bytes_received.add(reply.encoded_len() as u64);
        let theirs: Vec<(String, u64)> = reply.keys.into_iter().map(|s| (s.key, s.hash)).collect();
        store.acknowledged_by_digests(self.index, &[], &theirs.iter().cloned().collect());
        self.send(sender, to_push(&store.summaries(&ranges), &theirs)).await
    }

    fn timed<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = self.request(message);
        request.set_timeout(CALL_TIMEOUT);
        request
    }
}
