//! The store API: retries deduplicated, bad input refused, linearizable and bounded-staleness reads.

use proto::core::write_outcome;
use tonic::Code;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_store_api_dedupes_retries_refuses_bad_input_and_reads_linearizably() {
    use core_client::Consistency;
    use proto::core::write_request::Command as Pb;
    let cluster = new_cluster(FakePod::default(), RaftTuning::default()).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await);
    }
    wait_for_leader(&cluster, &[1, 2, 3]).await;
    let client = store_client(&cluster);
    wait_for_seeding(&client).await;
    let first = client.put("put-1", entry("k1", "dev", "fake", "one"), "stable").await.expect("first put");
    assert!(!first.duplicate);
    assert!(matches!(first.outcome, Some(write_outcome::Outcome::Stored(_))));
    // A retry with the same id is not applied again, even with another value.
    let retry = client.put("put-1", entry("k1", "dev", "fake", "two"), "stable").await.expect("retry");
    assert!(retry.duplicate);
    for id in 1..=3u64 {
        let local =
            core_client::CoreClient::new(vec![cluster.addrs[&id].to_string()], credential()).expect("client");
        let read = local.read("dev", "k1", Consistency::Linearizable).await.expect("linearizable read");
        assert_eq!(read.map(|e| e.content).as_deref(), Some("one"), "node {id}");
    }
    assert_eq!(client.read("other", "k1", Consistency::Local).await.expect("read"), None);

    let code = |r: Result<core_client::WriteAck, core_client::ClientError>| match r {
        Err(core_client::ClientError::Rejected { code, .. }) => Some(code),
        Err(core_client::ClientError::InvalidArgument(_)) => Some(Code::InvalidArgument),
        _ => None,
    };
    assert_eq!(code(client.put("p2", entry("k2", "nobody", "fake", "x"), "").await), Some(Code::NotFound));
    assert_eq!(code(client.put("p3", entry("k3", "dev", "nope", "x"), "").await), Some(Code::NotFound));
    let big = "x".repeat(crate::node::apply::MAX_VALUE_BYTES as usize + 1);
    assert_eq!(
        code(client.put("p4", entry("k4", "dev", "fake", &big), "").await),
        Some(Code::InvalidArgument)
    );
    let tight = Pb::SetTenantPolicy(proto::core::SetTenantPolicy {
        tenant: "dev".into(),
        policy: Some(proto::core::TenantPolicy { max_value_bytes: 4, ..Default::default() }),
    });
    client.write("policy", tight).await.expect("policy");
    assert_eq!(
        code(client.put("p5", entry("k5", "dev", "fake", "too long"), "").await),
        Some(Code::InvalidArgument)
    );
    // A frame that is not a protobuf message at all.
    let status = raw_write(cluster.addrs[&1], vec![0xff, 0xff, 0xff, 0x0f, 0x02]).await;
    assert!(matches!(status.code(), Code::Internal | Code::InvalidArgument), "{status:?}");
    let read = client.read("dev", "k1", Consistency::Linearizable).await.expect("read");
    assert_eq!(read.map(|e| e.content).as_deref(), Some("one"), "refusals harm nothing stored");
    // Bounded-staleness reads: every node heard from the leader within the last few heartbeats.
    for id in 1..=3u64 {
        let local =
            core_client::CoreClient::new(vec![cluster.addrs[&id].to_string()], credential()).expect("client");
        let read = local.read("dev", "k1", Consistency::BoundedStaleness(5_000)).await.expect("bounded read");
        assert_eq!(read.map(|e| e.content).as_deref(), Some("one"), "node {id}");
    }
    for (_, node) in nodes {
        node.stop().await;
    }
}
/// Sends `bytes` as the body of a `CoreStore.Write` call, bypassing protobuf encoding; returns the error.
async fn raw_write(addr: SocketAddr, bytes: Vec<u8>) -> Status {
    use bytes::{Buf, BufMut};
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

    #[derive(Clone, Copy, Default)]
    struct Raw;
    impl Codec for Raw {
        type Encode = Vec<u8>;
        type Decode = Vec<u8>;
        type Encoder = Raw;
        type Decoder = Raw;
        fn encoder(&mut self) -> Raw {
            Raw
        }
        fn decoder(&mut self) -> Raw {
            Raw
        }
    }
    impl Encoder for Raw {
        type Item = Vec<u8>;
        type Error = Status;
        fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
            dst.put_slice(&item);
            Ok(())
        }
    }
    impl Decoder for Raw {
        type Item = Vec<u8>;
        type Error = Status;
        fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
            Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
        }
    }

    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{addr}")).expect("uri").connect_lazy();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/mesh.core.v1.CoreStore/Write");
    let request = credential().request(bytes);
    match grpc.unary(request, path, Raw).await {
        Ok(_) => panic!("a malformed write was accepted"),
        Err(status) => status,
    }
}
