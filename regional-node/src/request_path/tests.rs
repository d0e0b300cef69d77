//! The request path in process, against a fake core cluster served over real gRPC on loopback: cache
//! hits, core hits, coalescing, realtime answers, `only-if-cached`, stale answers, invalidation, the
//! core's change feed and the caching policy of sampled requests.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Parser as _;
use daemon_runtime::TierIdentity;
use proto::cache::core_cache_server::{CoreCache, CoreCacheServer};
use proto::cache::{
    complete_event, CompleteDone, CompleteEvent, CompleteRequest, LookupReply, LookupRequest, ModelsReply,
    ModelsRequest, ServedModel, WatchEvent, WatchRequest,
};
use proto::core::core_store_server::{CoreStore, CoreStoreServer};
use proto::core::{
    invalidate, write_outcome, write_request, Invalidated, ReadReply, ReadRequest, WriteOutcome, WriteReply,
    WriteRequest,
};
use proto::inference::{GenerateDone, TokenDelta};
use shared::completion::CachedCompletion;
use shared::content_class::TtlPolicy;
use shared::models::ModelRef;
use shared::normalize::{ChatRole, Message, NormalizedRequest, Sampling};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status};

use super::*;
use crate::config::RegionalConfig;
use crate::flight::FlightItem;

const SECRET: &str = "a-development-secret-of-32-bytes!";

/// What the fake core holds and how often it was asked.
#[derive(Default)]
struct CoreState {
    /// Committed entries by key (wire form), as a real core's state machine would hold them.
    entries: Mutex<HashMap<String, proto::cache::CachedCompletion>>,
    completes: AtomicUsize,
    lookups: AtomicUsize,
    /// The served model's current version (0 reads as 1).
    version: std::sync::atomic::AtomicU64,
    invalidations: AtomicUsize,
    /// The change feed: every change, in revision order (revision = position + 1).
    feed: Mutex<Vec<shared::changes::Revised>>,
}

impl CoreState {
    /// Appends `change` to the feed at the next revision, made now.
    fn announce(&self, change: shared::changes::Change) -> i64 {
        let mut feed = self.feed.lock().unwrap_or_else(PoisonError::into_inner);
        let at_ms = now_ms();
        let revision = feed.len() as u64 + 1;
        feed.push(shared::changes::Revised { revision, at_ms, change });
        at_ms
    }
}

/// A core cluster of one node: lookups read its entries; a completion streams `answer: <question>` in
/// two deltas after `delay`, then commits the entry and sends it.
#[derive(Clone)]
struct FakeCore {
    state: Arc<CoreState>,
    delay: Duration,
}

impl FakeCore {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, proto::cache::CachedCompletion>> {
        self.state.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl CoreState {
    fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst).max(1)
    }
}

#[tonic::async_trait]
impl CoreCache for FakeCore {
    type CompleteStream = ReceiverStream<Result<CompleteEvent, Status>>;
    type WatchStream = ReceiverStream<Result<WatchEvent, Status>>;

    /// A resync at the current revision for a watcher at 0, then every change after the watcher's
    /// revision as it is announced (polled every 10 ms), with progress in between.
    async fn watch(&self, request: Request<WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let mut cursor = request.into_inner().after_revision;
        let (tx, rx) = mpsc::channel(8);
        let state = Arc::clone(&self.state);
        tokio::spawn(async move {
            if cursor == 0 {
                cursor = state.feed.lock().unwrap_or_else(PoisonError::into_inner).len() as u64;
                let resync = shared::changes::Resync { revision: cursor, ..Default::default() };
                let batch = shared::changes::Changes {
                    revision: cursor,
                    resync: Some(resync),
                    confirmed_age_ms: Some(0),
                    at_head: true,
                    ..Default::default()
                };
                if tx.send(Ok(WatchEvent::from(&batch))).await.is_err() {
                    return;
                }
            }
            loop {
                let changes: Vec<_> = state.feed.lock().unwrap_or_else(PoisonError::into_inner)
                    [usize::try_from(cursor).unwrap_or(usize::MAX)..]
                    .to_vec();
                cursor += changes.len() as u64;
                let batch = shared::changes::Changes {
                    revision: cursor,
                    changes,
                    confirmed_age_ms: Some(0),
                    at_head: true,
                    ..Default::default()
                };
                if tx.send(Ok(WatchEvent::from(&batch))).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn models(&self, _: Request<ModelsRequest>) -> Result<Response<ModelsReply>, Status> {
        let model =
            ServedModel { name: "smollm2-135m-instruct".into(), version: self.state.version(), spec: None };
        Ok(Response::new(ModelsReply { models: vec![model] }))
    }

    async fn lookup(&self, request: Request<LookupRequest>) -> Result<Response<LookupReply>, Status> {
        self.state.lookups.fetch_add(1, Ordering::SeqCst);
        let key = request.into_inner().key;
        Ok(Response::new(LookupReply { entry: self.entries().get(&key).cloned() }))
    }

    async fn complete(
        &self,
        request: Request<CompleteRequest>,
    ) -> Result<Response<Self::CompleteStream>, Status> {
        let request = request.into_inner();
        if request.model_version != self.state.version() {
            return Err(Status::failed_precondition(format!(
                "model is at version {}, not {}",
                self.state.version(),
                request.model_version
            )));
        }
        self.state.completes.fetch_add(1, Ordering::SeqCst);
        let generate = request.generate.clone().ok_or_else(|| Status::invalid_argument("no generate"))?;
        let question = generate.messages.last().map(|m| m.content.clone()).unwrap_or_default();
        let done = GenerateDone {
            finish_reason: "stop".into(),
            prompt_tokens: 3,
            completion_tokens: 2,
            ..Default::default()
        };
        let entry = proto::convert::GeneratedEntry {
            key: request.key.clone(),
            tenant: generate.tenant.clone(),
            model: ModelRef { name: generate.model.clone(), version: request.model_version },
            ttl_s: request.ttl_s,
            created_ms: now_ms(),
            tags: generate.tags.clone(),
        }
        .entry(format!("answer: {question}"), &done);
        let (tx, rx) = mpsc::channel(8);
        let (core, delay) = (self.clone(), self.delay);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            for text in ["answer: ".to_owned(), question] {
                let delta = complete_event::Event::Delta(TokenDelta { text, ..Default::default() });
                let _ = tx.send(Ok(CompleteEvent { event: Some(delta) })).await;
            }
            let wire = proto::cache::CachedCompletion::from(entry);
            core.entries().insert(wire.key.clone(), wire.clone());
            let done = CompleteDone { entry: Some(wire), timings: None, commit_us: 10 };
            let _ = tx.send(Ok(CompleteEvent { event: Some(complete_event::Event::Done(done)) })).await;
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

#[tonic::async_trait]
impl CoreStore for FakeCore {
    async fn write(&self, request: Request<WriteRequest>) -> Result<Response<WriteReply>, Status> {
        let Some(write_request::Command::Invalidate(command)) = request.into_inner().command else {
            return Err(Status::unimplemented("the fake core only invalidates"));
        };
        let Some(invalidate::Scope::Key(key)) = command.scope else {
            return Err(Status::unimplemented("the fake core invalidates keys only"));
        };
        self.state.invalidations.fetch_add(1, Ordering::SeqCst);
        // As the real core: another tenant's key is answered as one nobody holds, and nothing moves.
        let owner = self.entries().get(&key).map(|entry| entry.tenant.clone());
        if owner.as_ref().is_some_and(|owner| *owner != command.key_tenant) {
            let outcome = write_outcome::Outcome::Invalidated(Invalidated {
                removed: 0,
                at_ms: 0,
                ..Default::default()
            });
            return Ok(Response::new(WriteReply {
                log_index: 1,
                outcome: Some(WriteOutcome { outcome: Some(outcome) }),
                ..Default::default()
            }));
        }
        let removed = u64::from(self.entries().remove(&key).is_some());
        let at_ms = self.state.announce(shared::changes::Change::Key { tenant: command.key_tenant, key });
        let outcome =
            write_outcome::Outcome::Invalidated(Invalidated { removed, at_ms, ..Default::default() });
        Ok(Response::new(WriteReply {
            log_index: 1,
            outcome: Some(WriteOutcome { outcome: Some(outcome) }),
            ..Default::default()
        }))
    }

    async fn read(&self, _: Request<ReadRequest>) -> Result<Response<ReadReply>, Status> {
        Err(Status::unimplemented("the path never reads through the store API"))
    }
}

/// Serves `core` on a loopback port, behind the tier credential check.
async fn serve(core: FakeCore) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let credential = TierIdentity::insecure_secret(SECRET).expect("credential");
    let cache = InterceptedService::new(
        CoreCacheServer::new(core.clone()),
        credential.interceptor(&[daemon_runtime::TierRole::Regional]),
    );
    let store = InterceptedService::new(
        CoreStoreServer::new(core),
        credential.interceptor(&[daemon_runtime::TierRole::Regional]),
    );
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(cache)
            .add_service(store)
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    addr
}

/// A request path whose core is at `core_addr`, configured the way the daemon is (flags, then
/// [`crate::server::path_parts`]), following the core's feed, once the feed delivered its first batch.
async fn path_to(core_addr: SocketAddr, extra: &[&str]) -> Arc<RequestPath> {
    let path = path_without_feed(core_addr, extra);
    // Follows the fake core's feed, as the daemon does, and waits for its first batch.
    crate::change_feed::spawn(Arc::clone(&path));
    wait_until(Duration::from_secs(10), "the feed never delivered", || path.view().caught_up()).await;
    path
}

/// Polls `done` every 5 ms, yielding to the runtime in between, until it holds; fails the test with
/// `failure` once `limit` has passed.
async fn wait_until(limit: Duration, failure: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{failure}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A request path whose core is at `core_addr`, not following any feed.
fn path_without_feed(core_addr: SocketAddr, extra: &[&str]) -> Arc<RequestPath> {
    // A file per call: tests run in parallel, and rewriting one shared file let another test read it empty.
    static FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let secret_file = std::env::temp_dir().join(format!("path-test-secret-{}-{n}", std::process::id()));
    std::fs::write(&secret_file, SECRET).expect("write the secret");
    let mut args = vec![
        "regional-node".to_owned(),
        "--core".to_owned(),
        format!("http://{core_addr}"),
        "--insecure-tier-secret-file".to_owned(),
        secret_file.display().to_string(),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let settings = RegionalConfig::try_parse_from(args).expect("flags").resolve().expect("settings");
    Arc::new(RequestPath::new(crate::server::path_parts(&settings).expect("parts")))
}

fn admitted(question: &str, only_if_cached: bool) -> Admitted {
    let request = NormalizedRequest {
        model: ModelRef { name: "smollm2-135m-instruct".into(), version: 1 },
        messages: vec![Message { role: ChatRole::User, content: question.into() }],
        sampling: Sampling::greedy(16),
        delivery: shared::openai::Delivery::Whole,
        api: shared::model_spec::ModelApi::Chat,
        echo: false,
        tags: Vec::new(),
    };
    let directives = Directives { only_if_cached, ..Directives::default() };
    Admitted::new("acme".into(), request, &TtlPolicy::default(), false, directives, Instant::now())
}

/// The outcome of an answer, waiting for its flight to land; and whether it was coalesced.
async fn outcome(answered: Answered) -> (Outcome, bool) {
    match answered {
        Answered::Ready(outcome) => (outcome, false),
        Answered::Flight { mut subscription, coalesced } => {
            (subscription.landed().await.expect("the flight lands an answer"), coalesced)
        }
    }
}

async fn fake_core(delay: Duration) -> (FakeCore, SocketAddr) {
    let core = FakeCore { state: Arc::default(), delay };
    let addr = serve(core.clone()).await;
    (core, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_is_generated_once_then_served_from_the_exact_cache() {
    let (core, addr) = fake_core(Duration::ZERO).await;
    let path = path_to(addr, &[]).await;
    let (first, _) = outcome(path.answer(admitted("What is a monad?", false)).await.expect("answer")).await;
    assert_eq!(first.x_cache, X_CACHE_MISS);
    assert_eq!(first.entry.content, "answer: What is a monad?");
    assert_eq!(
        first.entry.question.as_ref().map(|q| q.text.as_str()),
        Some("What is a monad?"),
        "the entry knows the question it answers"
    );
    let Answered::Ready(second) = path.answer(admitted("What is a monad?", false)).await.expect("answer")
    else {
        panic!("a cached answer is ready at once");
    };
    assert_eq!(second.x_cache, X_CACHE_REGIONAL);
    assert_eq!(second.entry.content, first.entry.content);
    assert_eq!(core.state.completes.load(Ordering::SeqCst), 1);
    assert_eq!(path.metrics().hits.get(crate::metrics::HitTier::Regional).get(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_concurrent_misses_share_one_generation() {
    let (core, addr) = fake_core(Duration::from_millis(300)).await;
    let path = path_to(addr, &[]).await;
    let answers = (0..5).map(|_| {
        let path = Arc::clone(&path);
        tokio::spawn(async move {
            let answered = path.answer(admitted("Explain TCP.", false)).await?;
            Ok::<_, RegionalError>(outcome(answered).await)
        })
    });
    let mut coalesced = 0;
    for answer in answers.collect::<Vec<_>>() {
        let (outcome, joined) = answer.await.expect("task").expect("answer");
        assert_eq!(outcome.entry.content, "answer: Explain TCP.");
        coalesced += usize::from(joined);
    }
    assert_eq!(core.state.completes.load(Ordering::SeqCst), 1, "one generation for five requests");
    assert_eq!(coalesced, 4);
    assert_eq!(path.flights_in_the_air(), 0, "the landed flight left the air");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cores_entry_and_only_if_cached() {
    let (core, addr) = fake_core(Duration::ZERO).await;
    let path = path_to(addr, &[]).await;
    let missing = path.answer(admitted("Who wrote Hamlet?", true)).await.map(|_| ()).expect_err("not cached");
    assert_eq!(missing.to_request_error().status, 504);
    assert_eq!(core.state.completes.load(Ordering::SeqCst), 0, "only-if-cached never generates");

    // Another region had it generated: the core holds it, so this node answers from there.
    let elsewhere = path_to(addr, &[]).await;
    outcome(elsewhere.answer(admitted("Who wrote Hamlet?", false)).await.expect("answer")).await;
    let (found, _) = outcome(path.answer(admitted("Who wrote Hamlet?", true)).await.expect("cached")).await;
    assert_eq!(found.x_cache, X_CACHE_CORE);
    assert_eq!(core.state.completes.load(Ordering::SeqCst), 1);
    // It is now in this node's exact cache too.
    let (again, _) = outcome(path.answer(admitted("Who wrote Hamlet?", false)).await.expect("answer")).await;
    assert_eq!(again.x_cache, X_CACHE_REGIONAL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_questions_are_generated_every_time() {
    let (core, addr) = fake_core(Duration::ZERO).await;
    let path = path_to(addr, &[]).await;
    for _ in 0..2 {
        let answered = path.answer(admitted("What's the weather right now?", false)).await.expect("answer");
        let (outcome, coalesced) = outcome(answered).await;
        assert_eq!((outcome.x_cache, coalesced), (X_CACHE_MISS, false));
        assert!(outcome.entry.ttl_s <= flight_task::UNCACHED_CORE_TTL_S);
    }
    assert_eq!(core.state.completes.load(Ordering::SeqCst), 2);
    assert_eq!(core.state.lookups.load(Ordering::SeqCst), 0, "nothing cached is looked up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_answer_is_served_while_the_core_is_out_of_reach() {
    // A port nothing listens on: every core call fails as unreachable.
    let unreachable = TcpListener::bind("127.0.0.1:0").await.expect("bind").local_addr().expect("addr");
    let path = path_without_feed(unreachable, &["--stale-grace-s", "600"]);
    let question = admitted("What is the speed of light?", false);
    let mut entry = CachedCompletion {
        tenant: "acme".into(),
        model: "smollm2-135m-instruct".into(),
        prompt_tokens: 5,
        completion_tokens: 4,
        etag: String::new(),
        created_ms: now_ms() - 120_000,
        ttl_s: 60,
        ..CachedCompletion::example(question.key.as_str(), "about 300,000 km/s")
    };
    entry.etag = CachedCompletion::etag_of(&entry.content, &entry.finish_reason);
    path.remember(entry);
    // Restarted during the outage: the view has not caught up, so it vouches for nothing on disk
    // (invalidations made while the node was away may cover it).
    let error = outcome_error(path.answer(admitted("What is the speed of light?", false)).await).await;
    assert_eq!(error.status, 503, "nothing stale before the feed caught up");
    // Caught up once, then the core went out of reach: the answer is served stale.
    let caught_up = shared::changes::Changes {
        revision: 1,
        confirmed_age_ms: Some(0),
        at_head: true,
        ..Default::default()
    };
    path.apply_changes(&caught_up, std::time::Instant::now());
    let (stale, _) = outcome(path.answer(question).await.expect("answer")).await;
    assert_eq!(stale.x_cache, X_CACHE_STALE);
    assert_eq!(stale.entry.content, "about 300,000 km/s");

    let error = outcome_error(path.answer(admitted("Never asked before?", false)).await).await;
    assert_eq!(error.status, 503, "nothing stale to serve: the core's absence shows");
}

#[tokio::test]
async fn another_tenants_entry_under_the_key_is_never_served() {
    let (_core, addr) = fake_core(Duration::ZERO).await;
    let path = path_to(addr, &[]).await;
    let question = admitted("Whose answer is this?", true);
    let mut entry = CachedCompletion {
        tenant: "intruder".into(),
        model: "smollm2-135m-instruct".into(),
        etag: String::new(),
        created_ms: now_ms(),
        ..CachedCompletion::example(question.key.as_str(), "planted")
    };
    entry.etag = CachedCompletion::etag_of(&entry.content, &entry.finish_reason);
    path.remember(entry);
    let answered = path.answer(question).await;
    let served = match answered {
        Ok(answered) => Some(outcome(answered).await.0.entry.content.clone()),
        Err(_) => None,
    };
    assert_ne!(served.as_deref(), Some("planted"), "acme never gets the intruder's entry");
}

async fn outcome_error(answered: Result<Answered, RegionalError>) -> shared::RequestError {
    match answered {
        Err(error) => error.to_request_error(),
        Ok(Answered::Ready(_)) => panic!("an answer from nowhere"),
        Ok(Answered::Flight { mut subscription, .. }) => loop {
            match subscription.next().await {
                Some(FlightItem::Landed(landed)) => break landed.map(|_| ()).expect_err("no answer"),
                Some(FlightItem::Delta(_) | FlightItem::ChoiceEnd { .. }) => {}
                None => panic!("the flight ended without landing"),
            }
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidation_reaches_the_core_and_this_node() {
    let (core, addr) = fake_core(Duration::ZERO).await;
    let path = path_to(addr, &[]).await;
    let asked = admitted("What is Rust?", false);
    let key = asked.key.as_str().to_owned();
    outcome(path.answer(asked).await.expect("answer")).await;

    // Another tenant is answered as for a key nobody holds, and nothing of acme's moves.
    let probe = path.invalidate("someone-else", &key).await.expect("answered like any key");
    assert_eq!(probe.removed, 0);
    assert!(path.cache().peek(&key).is_some(), "acme's answer stays");

    assert_eq!(path.invalidate("acme", &key).await.expect("invalidated").removed, 1);
    assert!(path.cache().peek(&key).is_none(), "gone from the exact cache");
    let (regenerated, _) =
        outcome(path.answer(admitted("What is Rust?", false)).await.expect("answer")).await;
    assert_eq!(regenerated.x_cache, X_CACHE_MISS, "generated again, not served from any cache");
    assert_eq!(core.state.completes.load(Ordering::SeqCst), 2);
}

#[test]
fn invalidation_ids_never_repeat_and_fit_the_core() {
    let ids = InvalidationIds::new("region-1");
    let (a, b) = (ids.next(), ids.next());
    assert_ne!(a, b, "two invalidations of one node in the same millisecond");
    let other = InvalidationIds::new("region-1");
    assert_ne!(ids.tag, other.tag, "a restarted node, or another one left at the same node id");
    assert!(a.len() <= 128, "{a}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_bump_at_the_core_is_learned_and_the_question_generated_under_it() {
    let (core, addr) = fake_core(Duration::ZERO).await;
    // The node starts at version 0 (its flag), the core at 1: the catalog shows when the refresh at start
    // has seen the core's version.
    let path = path_to(addr, &["--models", "smollm2-135m-instruct@0"]).await;
    // Refreshes once at start, then only when asked (the interval is an hour).
    let refresher = path.models().spawn(path.core().clone(), Duration::from_secs(3600));
    let version = || path.models().current().resolve("smollm2-135m-instruct").map(|m| m.version).ok();
    // Wait for the refresh at start to see version 1, then bump: only the refusal can make the node ask
    // again.
    wait_until(Duration::from_secs(10), "the refresh at start never learned version 1", || {
        version() == Some(1)
    })
    .await;
    core.state.version.store(2, Ordering::SeqCst);
    let asked = admitted("What is Go?", false);
    let old_key = asked.key.clone();
    let (answer, _) = outcome(path.answer(asked).await.expect("answer")).await;
    assert_eq!((answer.x_cache, answer.entry.model_version), (X_CACHE_MISS, 2), "generated under version 2");
    assert_ne!(answer.entry.key, old_key.as_str(), "keyed under the new version");
    assert_eq!(version(), Some(2), "the refusal made the node learn the core's version");
    assert_eq!(core.state.completes.load(Ordering::SeqCst), 1, "one generation: the refusal came first");
    refresher.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_made_elsewhere_reaches_this_node_through_the_feed() {
    let (core, addr) = fake_core(Duration::ZERO).await;
    let path = path_to(addr, &[]).await;
    let (first, _) = outcome(path.answer(admitted("What is a monad?", false)).await.expect("answer")).await;
    assert!(matches!(path.answer(admitted("What is a monad?", false)).await, Ok(Answered::Ready(_))));
    // Another regional node invalidates the key at the core; the core's feed carries it here.
    core.entries().remove(first.entry.key.as_str());
    let change = shared::changes::Change::Key { tenant: "acme".into(), key: first.entry.key.to_string() };
    core.state.announce(change);
    wait_until(Duration::from_secs(5), "the feed's invalidation never reached the exact cache", || {
        path.cache().peek(first.entry.key.as_str()).is_none()
    })
    .await;
    let (again, _) = outcome(path.answer(admitted("What is a monad?", false)).await.expect("answer")).await;
    assert_eq!(again.x_cache, X_CACHE_MISS, "generated again, not served from any cache");
    assert_eq!(core.state.completes.load(Ordering::SeqCst), 2);
}

/// `question` asked by acme with the cache tags `tags`.
fn tagged(question: &str, tags: &[&str]) -> Admitted {
    let asked = admitted(question, false);
    let mut request = asked.request.clone();
    request.tags = tags.iter().map(|t| (*t).to_owned()).collect();
    Admitted::new("acme".into(), request, &TtlPolicy::default(), false, Directives::default(), Instant::now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_invalidation_through_the_feed_refuses_only_the_answers_carrying_it() {
    let (core, addr) = fake_core(Duration::ZERO).await;
    let path = path_to(addr, &[]).await;
    let ask = |admitted: Admitted| {
        let path = Arc::clone(&path);
        async move { outcome(path.answer(admitted).await.expect("answer")).await.0 }
    };
    let first = ask(tagged("Price of AAPL?", &["stock:AAPL"])).await;
    assert_eq!(first.entry.tags, ["stock:AAPL"], "the answer carries its request's tags");
    assert_ne!(first.entry.key, admitted("Price of AAPL?", false).key.as_str(), "tags are part of the key");
    ask(tagged("Price of MSFT?", &["stock:MSFT"])).await;
    ask(admitted("Price of gold?", false)).await;
    let change = shared::changes::Change::Tag { tenant: "acme".into(), tag: "stock:AAPL".into() };
    core.state.announce(change);
    wait_until(Duration::from_secs(5), "the feed's tag invalidation never reached this node", || {
        path.cache().get(first.entry.key.as_str(), now_ms()).is_none_or(|e| !path.view().admits(&e))
    })
    .await;
    assert_eq!(ask(tagged("Price of AAPL?", &["stock:AAPL"])).await.x_cache, X_CACHE_MISS, "generated again");
    assert_ne!(ask(tagged("Price of MSFT?", &["stock:MSFT"])).await.x_cache, X_CACHE_MISS, "another tag's");
    assert_ne!(ask(admitted("Price of gold?", false)).await.x_cache, X_CACHE_MISS, "an untagged answer");
    assert_eq!(core.state.completes.load(Ordering::SeqCst), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampled_request_is_generated_every_time_and_no_cache_skips_the_caches() {
    let (core, addr) = fake_core(Duration::ZERO).await;
    let path = path_to(addr, &[]).await;
    let sampled = || {
        let mut request = admitted("Tell me a story", false).request;
        request.sampling.temperature = 0.8;
        Admitted::new(
            "acme".into(),
            request,
            &TtlPolicy::default(),
            false,
            Directives::default(),
            Instant::now(),
        )
    };
    for _ in 0..2 {
        let (answer, _) = outcome(path.answer(sampled()).await.expect("answer")).await;
        assert_eq!(answer.x_cache, X_CACHE_MISS);
    }
    assert_eq!(core.state.completes.load(Ordering::SeqCst), 2, "one random sample is never pinned for all");
    assert_eq!(path.cache().stats().entries, 0, "nothing kept");
    outcome(path.answer(admitted("What is a monad?", false)).await.expect("answer")).await;
    let mut fresh = admitted("What is a monad?", false);
    fresh.caching.lookup = false;
    let (answer, _) = outcome(path.answer(fresh).await.expect("answer")).await;
    assert_eq!(answer.x_cache, X_CACHE_MISS, "no-cache: a fresh answer even though one is cached");
    assert_eq!(core.state.completes.load(Ordering::SeqCst), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_served_at_the_edge_make_a_key_hot_here() {
    let (_core, addr) = fake_core(Duration::ZERO).await;
    let path = path_to(addr, &[]).await;
    let (first, _) = outcome(path.answer(admitted("What is a monad?", false)).await.expect("answer")).await;
    let key = first.entry.key.to_string();
    assert!(path.replication().store().get(&key).is_none(), "asked once here: not hot yet");
    path.count_edge_hits(&key, "acme", 3);
    assert!(path.replication().store().get(&key).is_some(), "the edge's hits made it hot: replicated");
}

/// `question` asked by `tenant`.
fn asked_by(tenant: &str, question: &str) -> Admitted {
    let asked = admitted(question, false);
    Admitted::new(
        tenant.into(),
        asked.request,
        &TtlPolicy::default(),
        false,
        Directives::default(),
        Instant::now(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_rate_of_core_lookups_is_refused_and_the_others_and_its_hits_are_not() {
    let (core, addr) = fake_core(Duration::ZERO).await;
    let path = path_to(addr, &["--core-lookups-per-s", "0.001", "--core-lookup-burst", "2"]).await;
    for question in ["First new question?", "Second new question?"] {
        let (answer, _) = outcome(path.answer(asked_by("flood", question)).await.expect("answer")).await;
        assert_eq!(answer.x_cache, X_CACHE_MISS);
    }
    let refused = outcome_error(path.answer(asked_by("flood", "Third new question?")).await).await;
    assert_eq!(refused.status, 429, "past its burst of lookups: {refused:?}");
    assert!(refused.retry_after_s.is_some_and(|s| s >= 1), "with a Retry-After: {refused:?}");
    assert_eq!(core.state.completes.load(Ordering::SeqCst), 2, "nothing generated for the refused one");
    assert_eq!(path.metrics().lookups_refused.get(), 1);
    let Answered::Ready(hit) = path.answer(asked_by("flood", "First new question?")).await.expect("a hit")
    else {
        panic!("its own cached answer is ready at once: a hit needs no core lookup");
    };
    assert_eq!(hit.x_cache, X_CACHE_REGIONAL);
    let (other, _) =
        outcome(path.answer(asked_by("quiet", "Third new question?")).await.expect("answer")).await;
    assert_eq!(other.x_cache, X_CACHE_MISS, "another tenant has a rate of its own");
}
