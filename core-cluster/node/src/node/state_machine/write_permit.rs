//! Leave to write to the state machine's trees: one writer at a time, none once the node is stopping, and
//! a record of any write that failed part way, after which the trees are not whole.

use std::sync::Arc;

use tokio::sync::{Mutex, OwnedMutexGuard};

/// What the trees allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TreeState {
    /// Writes are allowed, and every one so far was made whole.
    Open,
    /// A write failed or panicked part way: the trees may hold part of a batch.
    Broken,
    /// The node is stopping: no more writes.
    Closed { whole: bool },
}

/// The trees' writer lock, shared by the state machine's clones.
#[derive(Clone, Debug)]
pub struct TreeLock(Arc<Mutex<TreeState>>);

impl Default for TreeLock {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(TreeState::Open)))
    }
}

impl TreeLock {
    /// Waits for the write in progress, if any; refused once closed.
    pub async fn permit(&self) -> std::io::Result<WritePermit> {
        let guard = self.0.clone().lock_owned().await;
        match *guard {
            TreeState::Closed { .. } => {
                Err(std::io::Error::other("the state machine is closed: the node is stopping"))
            }
            TreeState::Open | TreeState::Broken => Ok(WritePermit { guard, finished: false }),
        }
    }

    /// Waits for the write in progress, if any, and refuses every later one. Returns whether every write
    /// was made whole.
    pub async fn close(&self) -> bool {
        let mut state = self.0.lock().await;
        let whole = match *state {
            TreeState::Open => true,
            TreeState::Broken => false,
            TreeState::Closed { whole } => whole,
        };
        *state = TreeState::Closed { whole };
        whole
    }
}

/// Held while one write to the trees runs; dropped without [`WritePermit::finish`] seeing it succeed (an
/// error, a panic), it marks the trees as not whole.
#[derive(Debug)]
pub struct WritePermit {
    guard: OwnedMutexGuard<TreeState>,
    finished: bool,
}

impl WritePermit {
    /// Ends the write with its `result`.
    pub fn finish<T, E>(mut self, result: Result<T, E>) -> Result<T, E> {
        self.finished = result.is_ok();
        result
    }
}

impl Drop for WritePermit {
    fn drop(&mut self) {
        if !self.finished {
            *self.guard = TreeState::Broken;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_write_leaves_the_trees_not_whole_and_a_closed_lock_refuses_writes() {
        let lock = TreeLock::default();
        lock.permit().await.expect("open").finish(Ok::<(), ()>(())).expect("ok");
        let other = TreeLock::default();
        let _ = other.permit().await.expect("open").finish(Err::<(), ()>(()));
        drop(other.permit().await.expect("a broken lock still allows writes"));
        assert!(lock.close().await, "every write was whole");
        assert!(lock.permit().await.is_err(), "closed");
        assert!(!other.close().await, "a write failed part way");
    }
}
