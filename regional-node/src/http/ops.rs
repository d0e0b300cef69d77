//! Operational routes: health, metrics, the model list, and the OpenAI-shaped 404/405.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use shared::metrics::MetricsText;
use shared::models::{ModelRef, ModelTable};
use shared::RequestError;

use crate::error::error_response;
use crate::server::AppState;

/// `GET /healthz`: the daemon is up and serving.
pub async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    let stats = state.path().cache().stats();
    let view = state.path().view();
    // Ready once the core's feed has delivered since the start: before that the node serves nothing
    // from its own caches (they may hold what was invalidated while it was away).
    let (status, text) = match view.caught_up() {
        true => (axum::http::StatusCode::OK, "ok"),
        false => (axum::http::StatusCode::SERVICE_UNAVAILABLE, "catching up with the core's feed"),
    };
    let body = Json(serde_json::json!({
        "status": text,
        "region": state.settings().config.region,
        "cache_entries": stats.entries,
        "cache_bytes": stats.bytes,
        "feed_revision": view.revision(),
        "feed_confirmed_age_ms": view.confirmed_age().map(|age| age.as_millis() as u64),
        "core_clock_offset_ms": crate::clock::core_offset_ms(),
    }));
    (status, body).into_response()
}

/// The node's readiness (`/readyz`, the probe port, systemd): caught up with the core's feed since the
/// start (before that it serves nothing from its own caches); `/healthz` says the same with its figures.
pub fn readiness(state: &Arc<AppState>) -> daemon_runtime::probes::Readiness {
    let state = Arc::clone(state);
    Arc::new(move || match state.path().view().caught_up() {
        true => Ok(()),
        false => Err("catching up with the core's feed".into()),
    })
}

/// The refusal of a caller of an operator's route that presents no mesh certificate on a TLS node
/// ([`crate::caller::require_mesh_certificate`]); `None` lets it through.
fn refusal_of_stranger(
    state: &AppState,
    peer: Option<axum::Extension<daemon_runtime::PeerRole>>,
) -> Option<Response> {
    let peer = peer.as_ref().map(|axum::Extension(p)| p);
    crate::caller::require_mesh_certificate(peer, &state.settings().identity)
        .err()
        .map(|e| error_response(&e))
}

/// `GET /v1/replication`: this node's replicated state (counts and root digest: equal roots, equal
/// states) and its peer links (none when the node does not replicate).
pub async fn replication(
    State(state): State<Arc<AppState>>,
    peer: Option<axum::Extension<daemon_runtime::PeerRole>>,
) -> Response {
    if let Some(refusal) = refusal_of_stranger(&state, peer) {
        return refusal;
    }
    let replication = state.path().replication();
    let stats = replication.store().stats();
    Json(serde_json::json!({
        "node_id": replication.settings().node_id,
        "records": stats.records,
        "live": stats.live,
        "tombstones": stats.tombstones,
        "collected": stats.collected,
        "root": format!("{:016x}", stats.root),
        "peers": replication.peer_views(),
    }))
    .into_response()
}

/// `GET /metrics`: every family of the daemon in one exposition (OpenMetrics text); on a TLS node, for
/// callers with a mesh certificate only (it names tenants).
pub async fn metrics(
    State(state): State<Arc<AppState>>,
    peer: Option<axum::Extension<daemon_runtime::PeerRole>>,
) -> Response {
    if let Some(refusal) = refusal_of_stranger(&state, peer) {
        return refusal;
    }
    let (path, region) = (state.path(), &state.settings().config.region);
    let text = path.metrics().render(MetricsText::default(), region, path.cache().stats());
    let text = overload_metrics(text, &state);
    let replication = path.replication();
    let mut text = replication.metrics.render(text, region, replication.store().stats());
    if let Some(tier) = path.semantic() {
        text = tier.audit().render(text, region);
        text = tier.experiments().exposition(text);
        text = text
            .gauge(
                "mesh_regional_semantic_questions",
                "Questions the semantic tier holds.",
                &[("region", region.as_str())],
                tier.len() as f64,
            )
            .gauge(
                "mesh_regional_semantic_bytes",
                "Bytes the semantic tier's questions cost, as --semantic-bytes counts them.",
                &[("region", region.as_str())],
                tier.bytes() as f64,
            );
    }
    ([(header::CONTENT_TYPE, shared::metrics::CONTENT_TYPE)], text.finish()).into_response()
}

/// Appends the circuit breaker's and the admission queue's state to `text`.
fn overload_metrics(text: MetricsText, state: &AppState) -> MetricsText {
    let r = [("region", state.settings().config.region.as_str())];
    let breaker = state.path().core().breaker();
    let admission = state.path().admission();
    let refused = admission.refused.load(std::sync::atomic::Ordering::Relaxed);
    let shed = admission.shed.load(std::sync::atomic::Ordering::Relaxed);
    text.gauge(
        "mesh_regional_core_breaker_state",
        "Circuit breaker toward the core: 0 closed, 1 half-open, 2 open.",
        &r,
        breaker.state().as_gauge(),
    )
    .count("mesh_regional_core_breaker_opened_total", "Times the breaker opened.", &r, breaker.times_opened())
    .count("mesh_regional_admission_refused_total", "Generations refused with 429.", &r, refused)
    .count(
        "mesh_regional_admission_shed_total",
        "Of those, generations whose predicted wait exceeded their time-to-first-token target.",
        &r,
        shed,
    )
    .gauge(
        "mesh_regional_admission_waiting",
        "Generations waiting for budget.",
        &r,
        admission.waiting() as f64,
    )
    .gauge(
        "mesh_regional_admission_in_flight_cost",
        "Cost units of generations in flight.",
        &r,
        admission.in_flight() as f64,
    )
}

/// `GET /v1/models`: the served models, in OpenAI's list shape.
pub async fn models(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let table = state.path().models().current();
    let data: Vec<_> = table.models().iter().map(|m| model_object(&table, m)).collect();
    Json(serde_json::json!({"object": "list", "data": data}))
}

/// `GET /v1/models/{id}`: one served model (the OpenAI SDKs' `models.retrieve`), or 404
/// `model_not_found`.
pub async fn model(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let table = state.path().models().current();
    match table.models().iter().find(|m| m.name == id) {
        Some(model) => Json(model_object(&table, model)).into_response(),
        None => error_response(&RequestError::model_not_found(&id)),
    }
}

/// A model in OpenAI's shape, with the version the mesh serves it at and the registry's metadata (the
/// APIs it answers, its context length, prices and backend pool).
fn model_object(table: &ModelTable, model: &ModelRef) -> serde_json::Value {
    let mut object = serde_json::json!({"id": model.name, "object": "model", "created": 0, "owned_by": "llm-cache-mesh", "version": model.version});
    let spec = table.spec(&model.name).cloned().unwrap_or_default();
    if let Some(fields) = object.as_object_mut() {
        fields.extend(spec.openai_fields());
    }
    object
}

/// Any unknown path.
pub async fn not_found(uri: Uri) -> Response {
    error_response(&RequestError::not_found(uri.path()))
}

/// A known path with the wrong method.
pub async fn method_not_allowed() -> Response {
    error_response(&RequestError::method_not_allowed())
}
