//! Following the core's change feed (`CoreCache.Watch`) for as long as the node runs.
//!
//! From the revision of the node's [`CoreView`](crate::core_view::CoreView), on whichever core node
//! serves it; every batch goes to [`RequestPath::apply_changes`], which updates the view, drops what
//! the changes invalidate from every local tier and learns model versions. A stream that breaks (a core
//! node that may no longer serve ends its streams), or stays quiet for [`QUIET_LIMIT`] (the core sends
//! progress every second), is opened again on the next node from the revision reached, so nothing is
//! skipped and nothing is applied out of order.

use std::sync::Arc;
use std::time::Duration;

use shared::changes::Changes;
use tokio::task::JoinHandle;

use crate::request_path::RequestPath;

/// Longest silence on a feed stream before it is opened again elsewhere.
pub const QUIET_LIMIT: Duration = Duration::from_secs(3);
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
        let batch = Changes::try_from(event)?;
        if batch.resync.is_some() {
            tracing::info!(
                revision = batch.revision,
                "resynced with the core: every older local answer is refused"
            );
        }
        path.apply_changes(&batch);
    }
}
