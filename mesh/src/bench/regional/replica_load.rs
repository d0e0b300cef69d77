//! Loading a regional node's replicated state directly over its replication gRPC, as a peer would: the
//! regional benchmark fills one side of a partition this way, then times how anti-entropy repairs it.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use prost::Message as _;
use proto::replication::replication_client::ReplicationClient;
use proto::replication::{version, DeltaBatch, Dot, Record, Version};
use shared::completion::CachedCompletion;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Records per batch.
const BATCH: usize = 256;

/// What a push did.
#[derive(Clone, Copy, Debug)]
pub struct Pushed {
    /// From the first batch sent to the last acknowledgement.
    pub elapsed: Duration,
    /// Encoded bytes of every batch.
    pub bytes: u64,
}

/// Sends `entries` as records written by `actor` to the node at `url` (its `--peer-listen`), waiting until
/// the node has acknowledged them all (merged and flushed).
pub async fn push(
    url: &str,
    secret: &str,
    actor: &str,
    entries: Vec<CachedCompletion>,
) -> anyhow::Result<Pushed> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())?.connect().await?;
    let mut client = ReplicationClient::new(channel).max_encoding_message_size(64 << 20);
    let batches: Vec<DeltaBatch> = entries
        .chunks(BATCH)
        .enumerate()
        .map(|(index, chunk)| DeltaBatch {
            from: actor.to_owned(),
            seq: index as u64 + 1,
            records: chunk
                .iter()
                .enumerate()
                .map(|(offset, entry)| Record {
                    key: entry.key.clone(),
                    versions: vec![Version {
                        clock: vec![Dot {
                            actor: actor.to_owned(),
                            counter: (index * BATCH + offset) as u64 + 1,
                        }],
                        value: Some(version::Value::Live(entry.clone().into())),
                    }],
                })
                .collect(),
        })
        .collect();
    let last = batches.len() as u64;
    let bytes = batches.iter().map(|b| b.encoded_len() as u64).sum();
    let started = Instant::now();
    let (tx, rx) = mpsc::channel(batches.len().max(1));
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    request.metadata_mut().insert(daemon_runtime::TIER_SECRET_METADATA, secret.parse().context("secret")?);
    let mut acks = client.replicate(request).await?.into_inner();
    for batch in batches {
        tx.send(batch).await.map_err(|_| anyhow::anyhow!("the stream closed"))?;
    }
    while let Some(ack) = acks.message().await? {
        if ack.seq >= last {
            break;
        }
    }
    Ok(Pushed { elapsed: started.elapsed(), bytes })
}
