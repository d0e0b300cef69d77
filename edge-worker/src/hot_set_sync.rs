//! Each isolate's copy of the hot set, its recent fills and the small-embedding table, and keeping the
//! hot set fresh.
//!
//! - The table is bundled with the worker (`build/edge-table.bin`, which `entry.mjs` puts on
//!   `globalThis.MESH_EDGE_TABLE`) and parsed once per isolate, on the first request that needs it.
//! - The hot set is pulled from the regional tier's `/v1/hotset?since=<version>` at most every
//!   `HOTSET_REFRESH_S`, after a response has been sent (`ctx.wait_until`), so no request waits for it.
//! - A cold isolate first loads the last snapshot another isolate left in KV (binding `HOTSET`, if
//!   configured), then asks the regional tier only for what changed since. An isolate writes its
//!   snapshot (at most [`KV_SNAPSHOT_ENTRIES`] entries) back at most every [`KV_WRITE_INTERVAL_MS`].
//! - With `ANSWER_PUBLIC_KEY`, a hot entry's signature is checked when it is first about to be served
//!   ([`signed_or_forget`]), not when it arrives: a check costs about 120 us in wasm, so checking a cold
//!   isolate's whole 20,000-entry set up front would take seconds of CPU for entries mostly never asked
//!   for. An entry that fails is dropped.

use std::cell::RefCell;
use std::rc::Rc;

use shared::completion::CachedCompletion;
use shared::hot_set::HotSet as WireHotSet;
use shared::small_embedding::SmallEmbedder;
use worker::js_sys::{self, Date, Reflect, Uint8Array};
use worker::wasm_bindgen::JsValue;
use worker::{Context, KvStore};

use crate::config::Config;
use crate::hot_set::IsolateHotSet;
use crate::recent::RecentFills;
use crate::regional;
use crate::signature_checks::SignatureChecks;

/// KV key of the shared snapshot.
const KV_KEY: &str = "hotset-snapshot-v1";
/// Entries in the KV snapshot (the most recently changed).
pub const KV_SNAPSHOT_ENTRIES: usize = 2_000;
/// Least time between two KV writes by one isolate.
pub const KV_WRITE_INTERVAL_MS: i64 = 60_000;
/// Largest hot-set response read (a bigger one is refused and retried as a snapshot later).
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

thread_local! {
    /// Hot entries this isolate has found signed by the core.
    static CHECKED: RefCell<SignatureChecks> = RefCell::new(SignatureChecks::default());
    /// `None` until the first attempt to parse the bundled table, then its result.
    static EMBEDDER: RefCell<Option<Option<Rc<SmallEmbedder>>>> = const { RefCell::new(None) };
    static STATE: RefCell<IsolateState> = RefCell::new(IsolateState::default());
    static RECENT: RefCell<RecentFills> = RefCell::new(RecentFills::default());
}

/// Drops `key` from the isolate's hot set and recent fills (the core invalidated it).
pub fn forget(key: &str, tenant: &str) {
    STATE.with(|state| {
        if let Some(set) = state.borrow_mut().set.as_mut() {
            if set.get_any(key).is_some_and(|held| held.tenant == tenant) {
                set.remove(key);
            }
        }
    });
    RECENT.with(|recent| recent.borrow_mut().remove(key, tenant));
}

/// Keeps an answer this isolate is storing in L1 in memory too ([`RecentFills`]).
pub fn remember_fill(fill: crate::fill::Fill) {
    RECENT.with(|recent| recent.borrow_mut().put_under(fill.under, fill.entry));
}

/// The isolate's own copy of `key` (the hot set's, its signature checked, else a recent fill's, checked
/// when it was filled) for `tenant`, if live.
pub fn exact(config: &Config, key: &str, tenant: &str, now_ms: i64) -> Option<Rc<CachedCompletion>> {
    with_hot_set(|set| set.get(key, tenant, now_ms))
        .flatten()
        .filter(|entry| signed_or_forget(config, entry))
        .or_else(|| RECENT.with(|recent| recent.borrow().get(key, tenant, now_ms)))
}

/// Whether the hot entry `entry` may be served under `config`'s answer key: its signature is checked
/// the first time (and remembered); one that is not the core's is dropped from the hot set.
pub fn signed_or_forget(config: &Config, entry: &CachedCompletion) -> bool {
    let Some(verifier) = &config.answer_verifier else { return true };
    match CHECKED.with(|checked| checked.borrow_mut().check(verifier, entry)) {
        Ok(()) => true,
        Err(error) => {
            worker::console_warn!("hot set: dropped {}: {error}", entry.key);
            STATE.with(|state| {
                if let Some(set) = state.borrow_mut().set.as_mut() {
                    set.remove(&entry.key);
                }
            });
            false
        }
    }
}

#[derive(Default)]
struct IsolateState {
    set: Option<IsolateHotSet>,
    last_pull_ms: i64,
    pulling: bool,
    kv_loaded: bool,
    kv_written_ms: i64,
}

/// The bundled small-embedding table, if it is there and parses.
pub fn embedder() -> Option<Rc<SmallEmbedder>> {
    if let Some(loaded) = EMBEDDER.with(|cell| cell.borrow().clone()) {
        return loaded;
    }
    let loaded = load_table();
    EMBEDDER.with(|cell| *cell.borrow_mut() = Some(loaded.clone()));
    loaded
}

fn load_table() -> Option<Rc<SmallEmbedder>> {
    let value = Reflect::get(&js_sys::global(), &JsValue::from_str("MESH_EDGE_TABLE")).ok()?;
    if value.is_undefined() || value.is_null() {
        worker::console_warn!("no small-embedding table in the bundle: semantic hits are off");
        return None;
    }
    match SmallEmbedder::from_bytes(&Uint8Array::new(&value).to_vec()) {
        Ok(table) => Some(Rc::new(table)),
        Err(e) => {
            worker::console_error!("the bundled small-embedding table is unusable: {e}");
            None
        }
    }
}

/// Runs `f` on this isolate's hot set, if it has one yet.
pub fn with_hot_set<R>(f: impl FnOnce(&IsolateHotSet) -> R) -> Option<R> {
    STATE.with(|state| state.borrow().set.as_ref().map(f))
}

/// Starts a pull after the response (`ctx.wait_until`) when one is due.
pub fn refresh_if_due(config: &Config, ctx: &Context, kv: Option<KvStore>) {
    if claim_refresh(config, Date::now() as i64) {
        ctx.wait_until(refresh(config.clone(), kv));
    }
}

/// Whether this request should start a pull (none running and the last one older than the refresh
/// interval); if so, the pull is marked as running.
fn claim_refresh(config: &Config, now_ms: i64) -> bool {
    if config.hotset_refresh_s == 0 || config.cache_ttl_s == 0 {
        return false;
    }
    STATE.with(|state| {
        let mut state = state.borrow_mut();
        let due = now_ms - state.last_pull_ms >= (config.hotset_refresh_s * 1000) as i64;
        if state.pulling || !due {
            return false;
        }
        state.pulling = true;
        true
    })
}

/// Brings the isolate's hot set up to date; run after [`claim_refresh`] said so.
async fn refresh(config: Config, kv: Option<KvStore>) {
    let embedder = embedder();
    let dims = embedder.as_ref().map_or(0, |e| e.dims());
    if let Some(kv) = &kv {
        if !STATE.with(|s| s.borrow().kv_loaded) {
            STATE.with(|s| s.borrow_mut().kv_loaded = true);
            match kv.get(KV_KEY).json::<WireHotSet>().await {
                Ok(Some(saved)) => apply(&config, saved, embedder.as_deref(), dims),
                Ok(None) => {}
                Err(e) => worker::console_warn!("hot set: KV snapshot unreadable: {e}"),
            }
        }
    }
    let since = STATE.with(|s| s.borrow().set.as_ref().and_then(|set| set.version().map(str::to_owned)));
    let path = match &since {
        Some(version) => format!("/v1/hotset?since={version}"),
        None => "/v1/hotset".to_owned(),
    };
    match pull(&config, &path).await {
        Ok(set) => apply(&config, set, embedder.as_deref(), dims),
        Err(e) => worker::console_warn!("hot set: pull failed: {e}"),
    }
    let now = Date::now() as i64;
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.pulling = false;
        s.last_pull_ms = now;
    });
    if let Some(kv) = kv {
        save(&kv, embedder.as_deref(), now).await;
    }
}

async fn pull(config: &Config, path: &str) -> Result<WireHotSet, String> {
    let mut response = regional::get(config, path).await.map_err(|e| e.to_string())?;
    if response.status_code() != 200 {
        return Err(format!("status {}", response.status_code()));
    }
    let bytes = response.bytes().await.map_err(|e| e.to_string())?;
    if bytes.len() > MAX_RESPONSE_BYTES {
        return Err(format!("{} bytes is over the {MAX_RESPONSE_BYTES}-byte limit", bytes.len()));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("unreadable hot set: {e}"))
}

fn apply(config: &Config, set: WireHotSet, embedder: Option<&SmallEmbedder>, dims: usize) {
    STATE.with(|state| {
        let mut state = state.borrow_mut();
        let held = state.set.get_or_insert_with(|| IsolateHotSet::new(config.hotset_limits, dims));
        let applied = held.apply(set, embedder);
        if applied.upserted + applied.removed > 0 {
            worker::console_log!(
                "hot set: {} upserted, {} removed, {} held, version {}",
                applied.upserted,
                applied.removed,
                held.len(),
                held.version().unwrap_or("-")
            );
        }
    });
}

async fn save(kv: &KvStore, embedder: Option<&SmallEmbedder>, now_ms: i64) {
    let snapshot = STATE.with(|state| {
        let mut state = state.borrow_mut();
        if now_ms - state.kv_written_ms < KV_WRITE_INTERVAL_MS {
            return None;
        }
        let set = state.set.as_ref().filter(|s| !s.is_empty())?;
        let snapshot = set.snapshot(KV_SNAPSHOT_ENTRIES, embedder.map(SmallEmbedder::id));
        state.kv_written_ms = now_ms;
        Some(snapshot)
    });
    let Some(snapshot) = snapshot else { return };
    let written = match kv.put(KV_KEY, &snapshot) {
        Ok(put) => put.execute().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = written {
        worker::console_warn!("hot set: KV snapshot not written: {e}");
    }
}
