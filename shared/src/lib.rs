//! Types and pure logic that every tier uses, so that the edge, the regional nodes and the core decide the
//! same way: cache-key derivation, request normalization, OpenAI wire types, cached entries, timing headers.
//!
//! # Layout
//! - [`openai`]: the OpenAI chat-completions wire types (requests, responses, stream chunks, errors).
//! - [`text_completion`]: the text-completion API (`/v1/completions`), normalized into the same form.
//! - [`normalize`]: turns a request into the canonical form that is both generated and keyed.
//! - [`cache_key`]: the versioned cache key over (tenant, model, model version, normalized request).
//! - [`auto_model`]: `model: "auto"`: the rule that picks a model per request, and its cascade.
//! - [`canary`]: a model's version on trial, and which requests it answers (the same at every tier).
//! - [`cache_tags`]: the tags a request names its answer's data by, which one invalidation refuses.
//! - [`content_class`]: content classes (realtime, volatile, default, stable), their classifier and the
//!   TTL policy that decides how long each class is cached.
//! - [`models`]: the served-model table (name and current version).
//! - [`model_spec`]: a model's registry metadata (context length, price, APIs, backend pool).
//! - [`completion`]: a cached completion and how it renders (chat or text, whole or as an SSE stream).
//! - [`wordpiece`]: BERT's uncased WordPiece tokenizer (all-MiniLM-L6-v2's vocabulary) for wasm.
//! - [`small_embedding`]: the edge's distilled int8 token table, its file format and int8 cosine.
//! - [`hot_set`]: the hot set a regional node serves to the edge (versioned snapshots and deltas).
//! - [`changes`]: the core's change feed (invalidations, model versions, tenant settings) by revision.
//! - [`cutoffs`]: that feed as cutoff times every cache layer checks before it serves or keeps an entry.
//! - [`tag_cutoffs`]: one tenant's cache-tag invalidations, bounded alike at the core and every tier.
//! - [`core_clock`]: the core's log time as another tier reckons it, by which TTLs expire everywhere.
//! - [`answer_signature`]: the core's Ed25519 signature over an answer, and its check at every tier.
//! - [`auth`]: API-key hashing, the tenant key table, constant-time comparison of secrets.
//! - [`server_timing`]: the `Server-Timing` header each tier adds to.
//! - [`trace`]: the W3C `traceparent` that follows a request from the edge to the pod.
//! - `metrics` (feature `metrics`, the daemons'): counters, histograms and the `/metrics` exposition
//!   (OpenMetrics text, through `prometheus-client`).
//! - [`hex`]: lowercase hex encoding of digests.
//! - [`error`]: [`RequestError`], a client-facing error with its HTTP status and OpenAI error body.
//!
//! Architecture invariant: this crate does no I/O and depends on no async runtime; it builds for
//! `wasm32-unknown-unknown`.

pub mod answer_signature;
pub mod auth;
pub mod auto_model;
pub mod cache_key;
pub mod cache_tags;
pub mod canary;
pub mod changes;
pub mod completion;
pub mod content_class;
pub mod core_clock;
pub mod cutoffs;
pub mod error;
pub mod hex;
pub mod hot_set;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod model_spec;
pub mod models;
pub mod normalize;
pub mod openai;
pub mod server_timing;
pub mod small_embedding;
pub mod tag_cutoffs;
pub mod text_completion;
pub mod trace;
pub mod wordpiece;

pub use error::RequestError;

/// Header that names the tier which answered: `MISS`, `HIT-EDGE`, `HIT-REGIONAL`,
/// `HIT-REGIONAL-SEMANTIC` (a paraphrase's entry) or `HIT-CORE`.
pub const X_CACHE: &str = "x-cache";
/// HTTP header that carries the shared secret between tiers.
pub const TIER_SECRET_HEADER: &str = "x-mesh-secret";
/// HTTP header with which a trusted tier (the edge) tells the regional node which tenant a request is for.
pub const TENANT_HEADER: &str = "x-mesh-tenant";
/// Header with the request's cache key, for debugging and for clients that want to invalidate.
pub const CACHE_KEY_HEADER: &str = "x-cache-key";
/// Header with the content class of a chat answer (`realtime`, `volatile`, `default` or `stable`).
pub const CACHE_CLASS_HEADER: &str = "x-cache-class";
/// Header with the TTL, in seconds, that the content class of a chat answer gets (0 for realtime: not
/// cached).
pub const CACHE_TTL_HEADER: &str = "x-cache-ttl";
/// Header with the cosine similarity of a semantic hit's question to the cached one.
pub const CACHE_SIMILARITY_HEADER: &str = "x-cache-similarity";
/// Header with the key of the cached entry a semantic hit served.
pub const CACHE_MATCHED_KEY_HEADER: &str = "x-cache-matched-key";
/// Header set (`true`) on an answer shared with an identical request that was already in flight.
pub const CACHE_COALESCED_HEADER: &str = "x-cache-coalesced";
/// The model that answered instead of the one asked for (the core fell back to it): its name. The
/// response's `model` field names it too, and no edge keeps the answer under the asked model's key.
pub const MODEL_FALLBACK_HEADER: &str = "x-model-fallback";
/// Header with the version of the model that answered (the current one, or a version on trial for a
/// share of requests: [`canary`]).
pub const MODEL_VERSION_HEADER: &str = "x-model-version";
/// Header with a cached answer's creation time at the core (Unix milliseconds, the core's log time), which
/// the edge compares with the core's invalidations.
pub const CACHE_CREATED_HEADER: &str = "x-cache-created-ms";
/// Header with a cached answer's time to live as the core committed it (seconds; 0: none), one of the
/// fields its signature covers.
pub const CACHE_ENTRY_TTL_HEADER: &str = "x-cache-entry-ttl-s";
/// Header with the core's signature over a cached answer ([`answer_signature`]), so the edge can keep
/// only answers the core made.
pub const CACHE_SIGNATURE_HEADER: &str = "x-cache-signature";
/// Header with the semantic partition of the question a signed answer names (its signature covers it).
pub const CACHE_QUESTION_PARTITION_HEADER: &str = "x-cache-question-partition";
/// Header with the text of that question, as hex of its UTF-8 (any text fits a header so).
pub const CACHE_QUESTION_TEXT_HEADER: &str = "x-cache-question-text";
/// Largest request body any tier accepts.
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;
