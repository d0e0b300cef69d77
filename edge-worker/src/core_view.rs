//! This isolate's view of the core's decisions, pulled from the regional tier (`GET /v1/changes`), and
//! the one check every edge layer makes before it serves an answer: [`admits`].
//!
//! How each layer obeys, on the real platform as under `wrangler dev`:
//! - Every layer (isolate memory, recent fills, the Cache API, entries loaded from the KV snapshot) is
//!   read through [`admits`]: an answer created (at the core) at or before an invalidation that covers
//!   it, or of a model version older than the current one, is never served. The Cache API and KV are
//!   shared by many isolates and cannot be purged from one; the check makes their stale entries
//!   unreachable instead.
//! - A model-version bump changes the version in every new cache key ([`models`]), so old entries are
//!   not even looked up.
//! - Key invalidations also drop the key from this isolate's memory at once.
//!
//! The staleness bound: a cached answer is served only while the view was confirmed by the core within
//! `CHANGES_BOUND_MS` ([`ensure_fresh`] pulls first when it is older; if that fails, the request goes to
//! the regional tier). The regional node says with every answer how long ago the core confirmed its
//! view (it refuses with 503 when that is past its own bound, or when it is behind this isolate), and
//! the isolate counts its view as confirmed that long before the answer arrived: the bound is measured
//! against the core, not against whichever regional node answered. Background pulls every
//! `CHANGES_REFRESH_MS` keep busy isolates from ever pulling inline. So an invalidation is obeyed at
//! the edge at most `CHANGES_BOUND_MS` after the core acknowledged it.

use std::cell::RefCell;

use shared::changes::{Change, Changes};
use shared::completion::CachedCompletion;
use shared::cutoffs::Cutoffs;
use shared::models::{ModelRef, ModelTable};
use worker::Context;

use crate::clock::Clock;
use crate::config::Config;
use crate::regional;

/// Largest changes response read.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

#[derive(Default)]
struct ViewState {
    cutoffs: Cutoffs,
    /// When the core last confirmed the view, as far as the regional tier said (0: never).
    confirmed_ms: i64,
    /// When this isolate last asked for the changes (0: never): pulls are paced by it.
    pulled_ms: i64,
    pulling: bool,
}

thread_local! {
    static VIEW: RefCell<ViewState> = RefCell::new(ViewState::default());
}

/// Whether `entry` may be served: no invalidation the view knows of covers it.
pub fn admits(entry: &CachedCompletion) -> bool {
    VIEW.with(|view| view.borrow().cutoffs.admits(entry))
}

/// `model`'s version on trial, as far as this isolate's view says.
pub fn canary(model: &str) -> Option<shared::canary::Canary> {
    VIEW.with(|view| view.borrow().cutoffs.canary(model))
}

/// The served models: `MODELS`, with the versions (and the registry's descriptions: APIs, context
/// length) the core's feed announced since.
pub fn models(config: &Config) -> ModelTable {
    VIEW.with(|view| {
        let view = view.borrow();
        let announced = view
            .cutoffs
            .current_versions()
            .iter()
            .map(|(name, version)| ModelRef { name: name.clone(), version: *version });
        let table = match ModelTable::from_models(announced) {
            Some(newer) => config.models.updated(&newer),
            None => config.models.clone(),
        };
        let described = view.cutoffs.specs().iter();
        described.fold(table, |table, (name, spec)| table.with_spec(name, spec.clone()))
    })
}

/// Whether the view was confirmed within the bound, pulling it first when it was not; false when it
/// could not be brought up to date (then nothing cached may be served).
pub async fn ensure_fresh(config: &Config) -> bool {
    let within = |now: i64| VIEW.with(|v| now - v.borrow().confirmed_ms <= config.changes_bound_ms as i64);
    if within(Clock::now_ms()) {
        return true;
    }
    pull(config).await;
    within(Clock::now_ms())
}

/// How old the view may be when a request names a model (or an API of one) it does not know, before
/// the isolate pulls it again: a model the registry has just added or described reaches this isolate
/// at once, and requests for models nobody serves cost at most one pull per interval.
const UNKNOWN_MODEL_PULL_MS: i64 = 250;

/// Pulls the view when it is older than [`UNKNOWN_MODEL_PULL_MS`]; true when it pulled (so the
/// caller may look again).
pub async fn pull_for_unknown_model(config: &Config) -> bool {
    let stale = VIEW.with(|v| Clock::now_ms() - v.borrow().pulled_ms > UNKNOWN_MODEL_PULL_MS);
    if stale {
        pull(config).await;
    }
    stale
}

/// Starts a pull after the response (`ctx.wait_until`) when one is due.
pub fn refresh_if_due(config: &Config, ctx: &Context) {
    let now = Clock::now_ms();
    let due = VIEW.with(|view| {
        let mut view = view.borrow_mut();
        let due = !view.pulling && now - view.pulled_ms >= config.changes_refresh_ms as i64;
        view.pulling |= due;
        due
    });
    if due {
        let config = config.clone();
        ctx.wait_until(async move {
            pull(&config).await;
            VIEW.with(|view| view.borrow_mut().pulling = false);
        });
    }
}

/// Pulls the changes since the view's revision and applies them.
async fn pull(config: &Config) {
    let since = VIEW.with(|view| {
        let mut view = view.borrow_mut();
        view.pulled_ms = Clock::now_ms();
        view.cutoffs.revision()
    });
    match fetch(config, since).await {
        Ok(batch) => apply(&batch),
        Err(e) => worker::console_warn!("core changes: pull failed: {e}"),
    }
}

async fn fetch(config: &Config, since: u64) -> Result<Changes, String> {
    let mut response =
        regional::get(config, &format!("/v1/changes?since={since}")).await.map_err(|e| e.to_string())?;
    if response.status_code() != 200 {
        return Err(format!("status {}", response.status_code()));
    }
    let bytes = response.bytes().await.map_err(|e| e.to_string())?;
    if bytes.len() > MAX_RESPONSE_BYTES {
        return Err(format!("{} bytes is over the {MAX_RESPONSE_BYTES}-byte limit", bytes.len()));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("unreadable changes: {e}"))
}

fn apply(batch: &Changes) {
    let now = Clock::now_ms();
    if let Some(core_ms) = batch.core_time_ms {
        Clock::observe_core_time(core_ms);
    }
    // A batch that does not say how old its view is confirms nothing.
    let confirmed = batch.confirmed_age_ms.map(|age| now - i64::try_from(age).unwrap_or(i64::MAX / 2));
    VIEW.with(|view| {
        let mut view = view.borrow_mut();
        view.cutoffs.apply_batch(batch);
        if let Some(confirmed) = confirmed {
            view.confirmed_ms = view.confirmed_ms.max(confirmed);
        }
    });
    for revised in &batch.changes {
        if let Change::Key { key, tenant } = &revised.change {
            crate::hot_set_sync::forget(key, tenant);
        }
    }
    if batch.resync.is_some() || !batch.changes.is_empty() {
        worker::console_log!(
            "core changes: revision {}, {} changes{}",
            batch.revision,
            batch.changes.len(),
            if batch.resync.is_some() { ", resynced" } else { "" }
        );
    }
}
