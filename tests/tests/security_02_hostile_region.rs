//! A hostile region: a node holding a valid regional certificate replicates, to another regional node,
//! an answer it forged under a real question's key, a genuine answer of the core re-dated by 30 s (within
//! the clock skew allowed), one with a vector-clock counter at `u64::MAX`, one dated far in the future,
//! and the genuine answer re-filed under the other question for the semantic tier. Each is refused by
//! reason and nothing of it is served: the question's next ask gets the core's answer. The genuine
//! answer, relayed unchanged, is merged, so the refusals are the checks' doing and not a broken channel.
//! The edge, holding the core's public key, keeps and serves the genuine answers as before.

use std::time::Duration;

use daemon_runtime::TierRole;
use mesh_harness::{Mesh, MeshSpec};
use proto::cache::CachedCompletion as WireCompletion;
use proto::core::core_store_client::CoreStoreClient;
use proto::core::{Consistency, ReadRequest};
use proto::replication::replication_client::ReplicationClient;
use proto::replication::{version, DeltaBatch, Dot, Record, Version};
use serde_json::json;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

fn request(question: &str) -> serde_json::Value {
    json!({"model": "smollm2-135m-instruct", "temperature": 0, "max_tokens": 12,
           "messages": [{"role": "user", "content": question}]})
}

/// A channel to `url` presenting node `as_node`'s certificate.
async fn channel(mesh: &Mesh, url: &str, server: TierRole, as_node: &str) -> anyhow::Result<Channel> {
    let files = mesh.tls_files(as_node).ok_or_else(|| anyhow::anyhow!("no certificate for {as_node}"))?;
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(&files.ca)?))
        .identity(Identity::from_pem(std::fs::read(&files.cert)?, std::fs::read(&files.key)?))
        .domain_name(server.dns_name());
    Ok(Endpoint::from_shared(url.to_owned())?
        .tls_config(tls)?
        .timeout(Duration::from_secs(10))
        .connect()
        .await?)
}

/// A record of one live version with one dot of the hostile actor.
fn record(entry: WireCompletion, counter: u64) -> Record {
    Record {
        key: entry.key.clone(),
        versions: vec![Version {
            clock: vec![Dot { actor: "hostile-region".into(), counter }],
            value: Some(version::Value::Live(entry)),
        }],
    }
}

/// Sends `records` to regional node 1 as one batch from the hostile actor; waits for its
/// acknowledgement (the batch is merged or refused by then).
async fn replicate(mesh: &Mesh, records: Vec<Record>) -> anyhow::Result<()> {
    let channel = channel(mesh, &mesh.regional_peer_url(0), TierRole::Regional, "regional-2").await?;
    let batch = DeltaBatch { from: "hostile-region".into(), seq: 1, records };
    let mut acks =
        ReplicationClient::new(channel).replicate(tokio_stream::iter(vec![batch])).await?.into_inner();
    let ack = acks.message().await?.ok_or_else(|| anyhow::anyhow!("no acknowledgement"))?;
    anyhow::ensure!(ack.seq == 1, "acknowledged {}", ack.seq);
    Ok(())
}

/// `mesh_regional_replication_refused_total{reason}` at regional node 1.
fn refused(mesh: &Mesh, reason: &str) -> anyhow::Result<u64> {
    let text = mesh.get_text(&mesh.regional_url(0), "/metrics")?;
    let label = format!("reason=\"{reason}\"");
    Ok(text
        .lines()
        .filter(|l| l.starts_with("mesh_regional_replication_refused_total") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

#[test]
fn a_region_relays_answers_but_cannot_forge_redate_or_overflow_them() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("mesh-test-hostile-region-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mesh = Mesh::start(MeshSpec { tls: true, ..MeshSpec::local(&dir) })?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;

    // Two questions answered by the core through regional node 2: their keys and the core's answers.
    let target = request("Name the largest planet in the solar system.");
    let relayed = request("How many legs does a spider have?");
    let asked = mesh.regional_client(1).chat(&target)?;
    assert_eq!(asked.status, 200, "{}", asked.body);
    let (target_key, genuine) =
        (asked.header("x-cache-key").unwrap_or_default().to_owned(), asked.content().unwrap_or_default());
    let relayed_reply = mesh.regional_client(1).chat(&relayed)?;
    let relayed_key = relayed_reply.header("x-cache-key").unwrap_or_default().to_owned();
    assert!(!target_key.is_empty() && !relayed_key.is_empty(), "{:?}", asked.headers);

    // The core's signed answer to the second, as any regional node reads it.
    let signed = runtime.block_on(async {
        let channel = channel(&mesh, &mesh.core_url(0), TierRole::Core, "regional-2").await?;
        let read = ReadRequest {
            key: relayed_key.clone(),
            tenant: mesh.tenant().into(),
            consistency: Consistency::Linearizable as i32,
            max_staleness_ms: 0,
        };
        let reply = CoreStoreClient::new(channel).read(read).await?.into_inner();
        reply.entry.ok_or_else(|| anyhow::anyhow!("the core holds no answer for {relayed_key}"))
    })?;
    assert_eq!(signed.signature.len(), 128, "the core signs what it hands out");
    assert!(!signed.question_partition.is_empty(), "and names the question it answers");

    let now_ms = signed.created_ms;
    let forged = WireCompletion {
        key: target_key.clone(),
        content: "FORGED: the attacker's answer".into(),
        etag: shared::completion::CachedCompletion::etag_of("FORGED: the attacker's answer", "stop"),
        created_ms: now_ms,
        ..signed.clone()
    };
    let redated = WireCompletion { created_ms: signed.created_ms + 30_000, ..signed.clone() };
    let future =
        WireCompletion { created_ms: now_ms + 86_400_000, signature: String::new(), ..forged.clone() };
    // The genuine answer re-filed under another question, for peers' semantic tiers to serve it there.
    let refiled =
        WireCompletion { question: "Name the largest planet in the solar system.".into(), ..signed.clone() };
    runtime.block_on(replicate(
        &mesh,
        vec![
            record(forged, 10),
            record(redated, 11),
            record(signed.clone(), u64::MAX),
            record(future, 12),
            record(refiled, 14),
            record(signed.clone(), 13),
        ],
    ))?;
    let (unsigned, dot_range, ahead) =
        (refused(&mesh, "unsigned")?, refused(&mesh, "dot_range")?, refused(&mesh, "future")?);
    println!("hostile region: refused {unsigned} unsigned or altered, {dot_range} out-of-range dots, {ahead} future-dated");
    assert_eq!((unsigned, dot_range, ahead), (3, 1, 1), "each planted record refused by its reason");

    // Nothing planted is served: the target question gets the core's answer at regional node 1.
    let at_one = mesh.regional_client(0).chat(&target)?;
    assert_eq!(at_one.status, 200, "{}", at_one.body);
    assert_eq!(at_one.content().unwrap_or_default(), genuine, "{:?}", at_one.headers);
    // The genuine answer, relayed unchanged, was merged: regional node 1 serves it without the core.
    let relayed_at_one = mesh.regional_client(0).chat(&relayed)?;
    assert_eq!(relayed_at_one.header("x-cache"), Some("HIT-REGIONAL"), "{:?}", relayed_at_one.headers);
    assert_eq!(relayed_at_one.content(), relayed_reply.content());

    // The edge checks the core's signature on what it keeps: a repeated question is still an edge hit.
    let client = mesh.client();
    let first = client.chat(&relayed)?;
    assert_eq!(first.status, 200, "{}", first.body);
    let again = client.chat(&relayed)?;
    assert_eq!(again.header("x-cache"), Some("HIT-EDGE"), "{:?}", again.headers);
    drop(mesh);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
