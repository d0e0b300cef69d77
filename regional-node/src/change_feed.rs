//! Following the core's change feed (`CoreCache.Watch`) for as long as the node runs.
//!
//! From the revision of the node's [`CoreView`](crate::core_view::CoreView), on whichever core node
//! serves it; every batch goes to [`RequestPath::apply_changes`], which updates the view, drops what
//! the changes invalidate from every local tier and learns model versions. A stream that breaks (a core
//! node that may no longer serve ends its streams), stays quiet for [`QUIET_LIMIT`] (the core sends
//! progress four times a second), or whose events say the node's state was confirmed longer ago than
//! the view's [`FEED_BOUND`], is opened again on the next node from the revision reached, so nothing is
//! skipped and nothing is applied out of order.

use std::sync::Arc;
use std::time::Duration;

use shared::changes::Changes;
use tokio::task::JoinHandle;

use crate::core_view::FEED_BOUND;
use crate::request_path::RequestPath;

/// Longest silence on a feed stream before it is opened again elsewhere: four of the core's progress
/// intervals, and well within [`FEED_BOUND`], so a stalled node is left before the view goes stale.
pub const QUIET_LIMIT: Duration = Duration::from_secs(1);
/// Pause before opening the feed again after a failure.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Follows the feed on a task of its own.
pub fn spawn(path: Arc<RequestPath>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(reason) = follow(&path).await {
                tracing::debug!(%reason, revision = path.view().revision(), "core feed interrupted");
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    })
}

/// Follows one stream until it breaks or goes quiet.
async fn follow(path: &RequestPath) -> Result<(), String> {
    let after = path.view().revision();
    let (node, mut stream) = path.core().watch(after).await.map_err(|e| e.to_string())?;
    tracing::info!(after, node, "following the core's feed");
    loop {
        let event = match tokio::time::timeout(QUIET_LIMIT, stream.message()).await {
            Ok(Ok(Some(event))) => event,
            Ok(Ok(None)) => return Err("the core ended the feed".into()),
            Ok(Err(status)) => {
                // A node that may no longer serve ends its streams: follow the feed elsewhere.
                path.core().move_past(node);
                return Err(format!("feed failed: {}", status.message()));
            }
            Err(_) => {
                path.core().move_past(node);
                return Err(format!("the feed was quiet for {QUIET_LIMIT:?}"));
            }
        };
        let received_at = std::time::Instant::now();
        let batch = Changes::try_from(event)?;
        if batch.resync.is_some() {
            tracing::info!(
                revision = batch.revision,
                "resynced with the core: every older local answer is refused"
            );
        }
        path.apply_changes(&batch, received_at);
        // A node whose state no leader confirmed recently is not worth following (the view would not
        // be fresh): follow the feed on another node. A batch that does not say confirms nothing.
        let confirmed = batch.confirmed_age_ms.is_some_and(|age| u128::from(age) <= FEED_BOUND.as_millis());
        if batch.at_head && !confirmed {
            path.core().move_past(node);
            return Err(format!("the core node's state was confirmed {:?} ms ago", batch.confirmed_age_ms));
        }
    }
}
