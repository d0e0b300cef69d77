//! One long-lived AppendEntries stream to a peer.
//!
//! openraft keeps at most one AppendEntries in flight per replication target, so the requests to a
//! follower can share one gRPC stream and be answered in order. A unary call per message costs a call's
//! headers both ways, a new HTTP/2 stream and its trailers; on loopback at one client that overhead was most
//! of a write's time. A stream that fails or times out is dropped and the next request opens another.

use daemon_runtime::TierIdentity;
use proto::raft::raft_client::RaftClient;
use proto::raft::RaftPayload;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

/// An open AppendEntries stream: requests go into `requests`, answers come back from `answers`.
#[derive(Debug)]
pub struct AppendStream {
    /// The stream's request side.
    requests: mpsc::Sender<RaftPayload>,
    /// The stream's answers, one per request.
    answers: Streaming<RaftPayload>,
}

impl AppendStream {
    /// Opens a stream whose first request is `first`, and returns that request's answer with the stream.
    pub async fn open(
        client: &mut RaftClient<Channel>,
        identity: &TierIdentity,
        first: RaftPayload,
    ) -> Result<(RaftPayload, Self), Status> {
        let (requests, outgoing) = mpsc::channel(1);
        requests
            .try_send(first)
            .map_err(|_| Status::internal("a new stream's queue refused its first request"))?;
        let mut answers =
            client.append_stream(identity.request(ReceiverStream::new(outgoing))).await?.into_inner();
        let answer = next_answer(&mut answers).await?;
        Ok((answer, Self { requests, answers }))
    }

    /// Sends `request` and waits for its answer.
    pub async fn exchange(&mut self, request: RaftPayload) -> Result<RaftPayload, Status> {
        self.requests
            .send(request)
            .await
            .map_err(|_| Status::unavailable("the AppendEntries stream closed"))?;
        next_answer(&mut self.answers).await
    }
}

/// The stream's next answer; the peer ending the stream is an error like any other.
async fn next_answer(answers: &mut Streaming<RaftPayload>) -> Result<RaftPayload, Status> {
    answers.message().await?.ok_or_else(|| Status::unavailable("the peer ended the AppendEntries stream"))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use proto::raft::raft_server::{Raft, RaftServer};
    use tokio::net::TcpListener;
    use tonic::{Request, Response};

    use super::*;

    /// A peer whose stream answers each request with its body and the stream's count so far, and refuses a
    /// body of `bad`, which ends the stream. It counts the streams opened.
    #[derive(Default)]
    struct EchoPeer {
        opened: Arc<AtomicUsize>,
    }

    fn unimplemented() -> Result<Response<RaftPayload>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    #[tonic::async_trait]
    impl Raft for EchoPeer {
        async fn append_entries(&self, _: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
            unimplemented()
        }

        type AppendStreamStream = ReceiverStream<Result<RaftPayload, Status>>;

        async fn append_stream(
            &self,
            request: Request<Streaming<RaftPayload>>,
        ) -> Result<Response<Self::AppendStreamStream>, Status> {
            self.opened.fetch_add(1, Ordering::SeqCst);
            let (answers, outgoing) = mpsc::channel(1);
            let mut requests = request.into_inner();
            tokio::spawn(async move {
                let mut count = 0;
                while let Ok(Some(request)) = requests.message().await {
                    count += 1;
                    if request.body == b"bad" {
                        let _ = answers.send(Err(Status::invalid_argument("bad request"))).await;
                        break;
                    }
                    let body = [request.body, format!(" #{count}").into_bytes()].concat();
                    let _ = answers.send(Ok(RaftPayload { body })).await;
                }
            });
            Ok(Response::new(ReceiverStream::new(outgoing)))
        }

        async fn vote(&self, _: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
            unimplemented()
        }

        async fn install_snapshot(&self, _: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
            unimplemented()
        }

        async fn client_write(&self, _: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
            unimplemented()
        }
    }

    async fn start(peer: EchoPeer) -> RaftClient<Channel> {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = tonic::service::Routes::new(RaftServer::new(peer)).into_axum_router();
        tokio::spawn(async move { axum::serve(listener, app).await });
        RaftClient::connect(format!("http://{addr}")).await.expect("connect")
    }

    fn identity() -> TierIdentity {
        TierIdentity::insecure_secret("a-test-secret-of-enough-length-0123456789").expect("identity")
    }

    fn payload(body: &str) -> RaftPayload {
        RaftPayload { body: body.as_bytes().to_vec() }
    }

    fn text(payload: &RaftPayload) -> &str {
        std::str::from_utf8(&payload.body).expect("utf-8")
    }

    #[tokio::test]
    async fn requests_share_one_stream_and_are_answered_in_order() {
        let peer = EchoPeer::default();
        let opened = Arc::clone(&peer.opened);
        let mut client = start(peer).await;
        let identity = identity();
        let (first, mut stream) =
            AppendStream::open(&mut client, &identity, payload("a")).await.expect("opens");
        assert_eq!(text(&first), "a #1");
        for (i, body) in ["b", "c", "d"].iter().enumerate() {
            let answer = stream.exchange(payload(body)).await.expect("answered");
            assert_eq!(text(&answer), format!("{body} #{}", i + 2));
        }
        assert_eq!(opened.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_refused_request_ends_the_stream_and_another_opens() {
        let peer = EchoPeer::default();
        let opened = Arc::clone(&peer.opened);
        let mut client = start(peer).await;
        let identity = identity();
        let (_, mut stream) = AppendStream::open(&mut client, &identity, payload("a")).await.expect("opens");
        let refused = stream.exchange(payload("bad")).await.expect_err("refused");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        stream.exchange(payload("b")).await.expect_err("the stream has ended");
        let (answer, _) = AppendStream::open(&mut client, &identity, payload("b")).await.expect("reopens");
        assert_eq!(text(&answer), "b #1");
        assert_eq!(opened.load(Ordering::SeqCst), 2);
    }
}
