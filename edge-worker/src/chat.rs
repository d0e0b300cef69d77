//! `POST /v1/chat/completions` and `POST /v1/completions`: authenticate, validate, answer from the edge
//! (L1 by key, then the hot set by key, then a verified paraphrase in the hot set; text completions by
//! key only), or relay the regional answer and fill L1 from it (not from a text completion that echoes
//! its prompt: what the client got is not the answer alone).
//!
//! Order matters: authentication first (401), then size (413), then parsing and normalization (400, 404),
//! so that bad input never reaches the regional tier. An edge hit whose ETag the client names in
//! `If-None-Match` is a 304. The client's `Cache-Control` is honoured: `no-store` neither reads nor
//! fills the edge, `no-cache` skips reading it, `max-age=N` serves only entries at most N seconds old.
//! Nothing cached is served unless the isolate's view of the core's changes is within its bound and
//! admits it ([`crate::core_view`]).

use std::rc::Rc;

use shared::cache_key::{CacheKey, SemanticQuery};
use shared::cache_tags::CACHE_TAGS_HEADER;
use shared::completion::CachedCompletion;
use shared::content_class::classify;
use shared::model_spec::ModelApi;
use shared::models::ModelTable;
use shared::normalize::{normalize, Limits, NormalizedRequest};
use shared::openai::parse_chat_request;
use shared::text_completion::{normalize_completion, parse_completion_request};
use shared::trace::TraceParent;
use shared::{
    RequestError, CACHE_CREATED_HEADER, CACHE_ENTRY_TTL_HEADER, CACHE_KEY_HEADER, CACHE_MATCHED_KEY_HEADER,
    CACHE_QUESTION_PARTITION_HEADER, CACHE_QUESTION_TEXT_HEADER, CACHE_SIGNATURE_HEADER, MAX_REQUEST_BYTES,
    X_CACHE,
};
use worker::{Context, KvStore, Request, Response, ResponseBuilder};

use crate::cache_control::RequestCaching;
use crate::hot_set::SemanticMatch;
use crate::respond::EdgeMatch;

use crate::clock::Clock;
use crate::config::Config;
use crate::error::EdgeError;
use crate::fill::{self, Fill, FillTarget, RegionalAnswer, Skip};
use crate::l1::L1;
use crate::observed_stream::ObservedStream;
use crate::sse::StreamedAnswer;
use crate::{regional, respond};

/// One validated request, with what the edge needs after the response has gone out.
struct Job {
    config: Config,
    tenant: String,
    key: CacheKey,
    model_version: u64,
    /// Whether it asked for `auto` (its answer carries the producing model's version).
    auto: bool,
    /// The API it came through (the regional path it goes on to).
    api: ModelApi,
    body: Vec<u8>,
    caching: RequestCaching,
    /// The request's cache tags (`X-Cache-Tags`), part of its key.
    tags: Vec<String>,
}

impl Job {
    fn target(&self, now_ms: i64) -> FillTarget<'_> {
        FillTarget {
            key: &self.key,
            tenant: &self.tenant,
            model_version: self.model_version,
            auto: self.auto,
            default_ttl_s: self.config.cache_ttl_s,
            now_ms,
            verifier: self.config.answer_verifier.as_ref(),
            tags: &self.tags,
        }
    }
}

/// The request's body, refused with a 413 as soon as it passes `limit` bytes: a chunked body declares no
/// length, and reading it whole first would let one client fill the memory of an isolate other tenants
/// share.
async fn read_body(req: &mut Request, limit: usize) -> Result<Vec<u8>, EdgeError> {
    use futures::StreamExt as _;
    // A request without a body has no stream.
    let Ok(mut stream) = req.stream() else { return Ok(Vec::new()) };
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > limit {
            return Err(RequestError::too_large(limit).into());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Handles one chat or text completion request (`api`).
pub async fn handle(
    mut req: Request,
    config: Config,
    ctx: &Context,
    kv: Option<KvStore>,
    mut clock: Clock,
    api: ModelApi,
    request_id: &str,
) -> Result<Response, EdgeError> {
    let tenant = config.keys.authenticate(req.headers().get("authorization")?.as_deref())?.to_owned();
    let declared_len = req.headers().get("content-length")?.and_then(|v| v.trim().parse::<usize>().ok());
    if declared_len.is_some_and(|len| len > MAX_REQUEST_BYTES) {
        return Err(RequestError::too_large(MAX_REQUEST_BYTES).into());
    }
    shared::openai::check_json_content_type(req.headers().get("content-type")?.as_deref())?;
    let traceparent = req.headers().get(shared::trace::TRACEPARENT)?;
    let if_none_match = req.headers().get("if-none-match")?;
    let cache_control = req.headers().get("cache-control")?;
    let caching = RequestCaching::parse(cache_control.as_deref());
    let tags = shared::cache_tags::parse(req.headers().get(CACHE_TAGS_HEADER)?.as_deref())?;
    let body = read_body(&mut req, MAX_REQUEST_BYTES).await?;
    let mut normalized = match normalized(&body, api, &crate::core_view::models(&config)) {
        // A model (or an API of one) this isolate does not know may be one the registry has just added:
        // look again with the view pulled now.
        Err(e) if is_about_the_model(&e) && crate::core_view::pull_for_unknown_model(&config).await => {
            normalized(&body, api, &crate::core_view::models(&config))?
        }
        other => other?,
    };
    normalized.tags = tags;
    let canary = crate::core_view::canary(&normalized.model.name);
    shared::canary::route(&tenant, &mut normalized, canary);
    let key = CacheKey::derive(&tenant, &normalized);
    let delivery = normalized.delivery;
    // The edge keeps plain answers of one choice (copies carry their usage times `n`; log-probabilities
    // are not kept anywhere).
    let fillable = normalized.sampling.n == 1 && normalized.sampling.cache_can_hold() && !normalized.echo;
    let tags = normalized.tags.clone();
    let auto = normalized.model.name == shared::auto_model::AUTO_MODEL;
    let model_version = normalized.model.version;
    let job = Job { model_version, auto, config, tenant, key, api, body, caching, tags };
    crate::hot_set_sync::refresh_if_due(&job.config, ctx, kv);
    crate::core_view::refresh_if_due(&job.config, ctx);
    crate::hit_report::report_if_due(&job.config, ctx);

    let l1 = L1::open();
    if let Some(hit) = edge_answer(&job, &normalized, &l1, if_none_match.as_deref(), &clock).await? {
        return Ok(hit);
    }

    // The client's own directives go on: `only-if-cached` is for the regional tier to honour too. So
    // does the trace, with this edge's span as the parent (a new trace when the client sent none).
    let trace = match traceparent.as_deref().and_then(TraceParent::parse) {
        Some(parent) => parent.child(random_bytes()),
        None => TraceParent::start(random_bytes()),
    };
    worker::console_log!("to the regional tier: trace_id={} key={}", trace.trace_id(), job.key.as_str());
    let trace_header = trace.header();
    let mut forwarded: Vec<(&str, &str)> =
        cache_control.as_deref().map(|v| ("cache-control", v)).into_iter().collect();
    forwarded.push((shared::trace::TRACEPARENT, &trace_header));
    // The same request id at the regional tier, in its answer and its log.
    forwarded.push((shared::trace::REQUEST_ID, request_id));
    let tags_header = shared::cache_tags::header_value(&job.tags);
    if !job.tags.is_empty() {
        forwarded.push((CACHE_TAGS_HEADER, &tags_header));
    }
    let mut upstream = clock
        .upstream(regional::post_completion(&job.config, api, &job.tenant, &job.body, &forwarded))
        .await?;
    let status = upstream.status_code();
    let headers = upstream.headers().clone();
    let x_cache = headers.get(X_CACHE)?;
    let their_key = headers.get(CACHE_KEY_HEADER)?;

    if delivery.is_stream() {
        let observe = status == 200
            && fillable
            && job.config.cache_ttl_s != 0
            && job.caching.may_store()
            && fill::is_cacheable_source(x_cache.as_deref())
            && keys_agree(&job.key, their_key.as_deref());
        let out_headers = respond::relayed_headers(&headers, &job.key, clock.edge_ms())?;
        if !observe {
            let (_, body) = upstream.into_parts();
            return Ok(ResponseBuilder::new().with_status(status).with_headers(out_headers).body(body));
        }
        let (observed, ended) = ObservedStream::new(upstream.stream()?);
        ctx.wait_until(fill_after_stream(job, ended));
        return Ok(ResponseBuilder::new()
            .with_status(status)
            .with_headers(out_headers)
            .from_stream(observed)?);
    }

    let bytes = clock.upstream(upstream.bytes()).await?;
    let (etag, cache_control) = (headers.get("etag")?, headers.get("cache-control")?);
    let created = headers.get(CACHE_CREATED_HEADER)?;
    let answered_version = headers.get(shared::MODEL_VERSION_HEADER)?;
    let matched_key = headers.get(CACHE_MATCHED_KEY_HEADER)?;
    let (entry_ttl, signature) = (headers.get(CACHE_ENTRY_TTL_HEADER)?, headers.get(CACHE_SIGNATURE_HEADER)?);
    let question = (headers.get(CACHE_QUESTION_PARTITION_HEADER)?, headers.get(CACHE_QUESTION_TEXT_HEADER)?);
    let answer = RegionalAnswer {
        status,
        x_cache: x_cache.as_deref(),
        etag: etag.as_deref(),
        cache_key: their_key.as_deref(),
        matched_key: matched_key.as_deref(),
        cache_control: cache_control.as_deref(),
        created_ms: created.as_deref().and_then(|v| v.trim().parse().ok()),
        ttl_s: entry_ttl.as_deref().and_then(|v| v.trim().parse().ok()),
        signature: signature.as_deref(),
        question: question.0.as_deref().zip(question.1.as_deref()),
        model_version: answered_version.as_deref().and_then(|v| v.trim().parse().ok()),
        body: &bytes,
    };
    // Kept in the isolate's memory before answering, so that once a client has its answer the next
    // identical request here is an edge hit; the Cache API store (other isolates) runs after the response.
    if job.caching.may_store() && fillable {
        let fill = fill::entry_from_answer(&job.target(Clock::core_ms()), &answer);
        if let Ok(fill) = &fill {
            if crate::core_view::admits(&fill.entry) {
                crate::hot_set_sync::remember_fill(fill.clone());
            }
        }
        ctx.wait_until(async move { store(&l1, fill).await });
    }
    let out_headers = respond::relayed_headers(&headers, &job.key, clock.edge_ms())?;
    Ok(ResponseBuilder::new().with_status(status).with_headers(out_headers).fixed(bytes))
}

/// The request a body asks for through `api`.
fn normalized(body: &[u8], api: ModelApi, models: &ModelTable) -> Result<NormalizedRequest, RequestError> {
    let limits = Limits::default();
    match api {
        ModelApi::Chat => normalize(&parse_chat_request(body, MAX_REQUEST_BYTES)?, models, &limits),
        ModelApi::Completions => {
            normalize_completion(&parse_completion_request(body, MAX_REQUEST_BYTES)?, models, &limits)
        }
    }
}

/// Whether a refusal is about the model asked for: unknown, or not serving the API.
fn is_about_the_model(error: &RequestError) -> bool {
    error.code == Some("model_not_found") || error.param.as_deref() == Some("model")
}

/// The edge's own answer, if it holds one the client accepts and the core's view admits: the isolate's
/// memory first (microseconds), then the data center's Cache API, then a verified paraphrase in the hot
/// set. A 304 where the client's `If-None-Match` names its ETag.
async fn edge_answer(
    job: &Job,
    request: &NormalizedRequest,
    l1: &L1,
    if_none_match: Option<&str>,
    clock: &Clock,
) -> Result<Option<Response>, EdgeError> {
    let caching = job.caching;
    if job.config.cache_ttl_s == 0
        || !caching.may_read()
        || !crate::core_view::ensure_fresh(&job.config).await
    {
        return Ok(None);
    }
    // Answers' ages and TTLs run on the core's clock.
    let now = Clock::core_ms();
    let not_modified = |etag: &str| if_none_match.is_some_and(|v| respond::etag_matches(v, etag));
    let accepts =
        |e: &CachedCompletion| caching.accepts_age(e.created_ms, now) && crate::core_view::admits(e);
    // An entry kept under the request's key may be a paraphrase's that the regional tier matched.
    let matched = |entry: &CachedCompletion| match entry.key == job.key.as_str() {
        true => EdgeMatch::Exact,
        false => EdgeMatch::Semantic { request_key: job.key.as_str(), similarity: None },
    };
    let by_key = match crate::hot_set_sync::exact(&job.config, job.key.as_str(), &job.tenant, now)
        .filter(|e| accepts(e))
    {
        Some(entry) => Some(entry),
        None => l1.get(&job.key, &job.tenant, now).await.filter(|e| accepts(e)).map(Rc::new),
    };
    let (entry, matched) = match by_key {
        Some(entry) => {
            let matched = matched(&entry);
            (entry, matched)
        }
        None => match semantic_hit(job, request, now) {
            Some(hit) => {
                let similarity = Some(hit.similarity);
                (hit.entry, EdgeMatch::Semantic { request_key: job.key.as_str(), similarity })
            }
            None => return Ok(None),
        },
    };
    crate::hit_report::record(&entry.key, &entry.tenant);
    let fresh = not_modified(&entry.etag);
    Ok(Some(respond::edge_hit(&entry, matched, request.rendering(), fresh, clock.edge_ms())?))
}

/// The hot set's nearest paraphrase of the request's last user turn, in its partition, that passes the
/// class's threshold and the near-miss verifier.
fn semantic_hit(job: &Job, request: &NormalizedRequest, now_ms: i64) -> Option<SemanticMatch> {
    use crate::hot_set_sync::{embedder, with_hot_set};
    let threshold = job.config.semantic?.of(classify(request))?;
    let query = SemanticQuery::derive(&job.tenant, request)?;
    let vector = embedder()?.embed_i8(query.question)?;
    let found = with_hot_set(|set| set.nearest(&query.partition, &vector, query.question, threshold, now_ms))
        .flatten()?;
    let admitted =
        job.caching.accepts_age(found.entry.created_ms, now_ms) && crate::core_view::admits(&found.entry);
    (admitted && crate::hot_set_sync::signed_or_forget(&job.config, &found.entry)).then_some(found)
}

/// Whether the regional key (absent: trust ours) is the one the edge derived; logs when it is not.
fn keys_agree(ours: &CacheKey, theirs: Option<&str>) -> bool {
    match theirs.map(str::trim) {
        Some(theirs) if theirs != ours.as_str() => {
            worker::console_warn!(
                "not caching: regional key {theirs} differs from edge key {ours} (MODELS or limits differ?)"
            );
            false
        }
        _ => true,
    }
}

/// Stores a fill result, logging refusals that point at a misconfiguration.
async fn store(l1: &L1, fill: Result<Fill, Skip>) {
    match fill {
        Ok(fill) => {
            if let Err(e) = l1.put(&fill.under, &fill.entry, Clock::core_ms()).await {
                worker::console_warn!("edge cache store failed for {}: {e}", fill.under);
            }
        }
        Err(skip @ (Skip::KeyMismatch { .. } | Skip::Body(_))) => {
            worker::console_warn!("not caching at the edge: {skip}")
        }
        Err(_) => {}
    }
}

/// After a streamed answer has reached the client in full, fills L1 from the regional tier.
///
/// The regional node stores an answer before it sends `[DONE]`, so the same request sent again without
/// `stream` is a regional hit that carries what the stream lacks (usage, ETag, lifetime). It is sent with
/// `Cache-Control: only-if-cached`, and the entry is stored only if that answer is a cache hit whose text
/// and finish reason are exactly what the client was streamed: nothing is ever generated twice or cached
/// differently from what was served.
async fn fill_after_stream(job: Job, ended: futures::channel::oneshot::Receiver<Option<StreamedAnswer>>) {
    // `Err`: the client went away before the end; `None`: the stream failed or was incomplete.
    let Ok(Some(streamed)) = ended.await else { return };
    let Some(body) = non_streamed(&job.body) else { return };
    let mut response = match regional::post_completion(
        &job.config,
        job.api,
        &job.tenant,
        &body,
        &[("cache-control", "only-if-cached")],
    )
    .await
    {
        Ok(response) => response,
        Err(e) => {
            worker::console_warn!("edge fill after stream: regional tier unavailable: {e}");
            return;
        }
    };
    let headers = response.headers().clone();
    let (Ok(x_cache), Ok(etag), Ok(their_key), Ok(cache_control), Ok(created), Ok(matched_key)) = (
        headers.get(X_CACHE),
        headers.get("etag"),
        headers.get(CACHE_KEY_HEADER),
        headers.get("cache-control"),
        headers.get(CACHE_CREATED_HEADER),
        headers.get(CACHE_MATCHED_KEY_HEADER),
    ) else {
        return;
    };
    let (Ok(entry_ttl), Ok(signature), Ok(partition), Ok(text)) = (
        headers.get(CACHE_ENTRY_TTL_HEADER),
        headers.get(CACHE_SIGNATURE_HEADER),
        headers.get(CACHE_QUESTION_PARTITION_HEADER),
        headers.get(CACHE_QUESTION_TEXT_HEADER),
    ) else {
        return;
    };
    if !x_cache.as_deref().is_some_and(|v| v.trim().to_ascii_uppercase().starts_with("HIT-")) {
        if response.status_code() == 200 {
            worker::console_warn!(
                "edge fill after stream: regional answer was {x_cache:?}, not a hit; not caching"
            );
        }
        return;
    }
    let Ok(bytes) = response.bytes().await else { return };
    let answer = RegionalAnswer {
        status: response.status_code(),
        x_cache: x_cache.as_deref(),
        etag: etag.as_deref(),
        cache_key: their_key.as_deref(),
        matched_key: matched_key.as_deref(),
        cache_control: cache_control.as_deref(),
        created_ms: created.as_deref().and_then(|v| v.trim().parse().ok()),
        ttl_s: entry_ttl.as_deref().and_then(|v| v.trim().parse().ok()),
        signature: signature.as_deref(),
        question: partition.as_deref().zip(text.as_deref()),
        model_version: headers
            .get(shared::MODEL_VERSION_HEADER)
            .ok()
            .flatten()
            .and_then(|v| v.trim().parse().ok()),
        body: &bytes,
    };
    let fill = fill::entry_from_answer(&job.target(Clock::core_ms()), &answer);
    match fill {
        Ok(Fill { entry, .. })
            if entry.content != streamed.content || entry.finish_reason != streamed.finish_reason =>
        {
            worker::console_warn!(
                "edge fill after stream: regional entry {} differs from what was streamed; not caching",
                entry.key
            );
        }
        Ok(Fill { entry, .. }) if !crate::core_view::admits(&entry) => {}
        other => {
            if let Ok(fill) = &other {
                crate::hot_set_sync::remember_fill(fill.clone());
            }
            store(&L1::open(), other).await
        }
    }
}

/// The request body with `stream` turned off (the key ignores `stream`, so it is the same entry).
fn non_streamed(body: &[u8]) -> Option<Vec<u8>> {
    let mut json: serde_json::Value = serde_json::from_slice(body).ok()?;
    let object = json.as_object_mut()?;
    object.insert("stream".into(), serde_json::Value::Bool(false));
    object.remove("stream_options");
    serde_json::to_vec(&json).ok()
}

/// `N` random bytes for trace and span ids (not for secrets), from the runtime's `Math.random`.
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    for chunk in out.chunks_mut(4) {
        let word = (worker::js_sys::Math::random() * f64::from(u32::MAX)) as u32;
        chunk.copy_from_slice(&word.to_le_bytes()[..chunk.len()]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_follow_up_request_turns_streaming_off_and_keeps_the_rest() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"temperature":0}"#;
        let json: serde_json::Value =
            serde_json::from_slice(&non_streamed(body).expect("json object")).expect("json");
        assert_eq!(json["stream"], false);
        assert!(json.get("stream_options").is_none());
        assert_eq!((json["model"].as_str(), json["temperature"].as_i64()), (Some("m"), Some(0)));
        assert_eq!(json["messages"][0]["content"], "hi");
        assert_eq!(non_streamed(b"[1]"), None);
    }
}
