//! [`WaitingQueue`]: sequences waiting for admission, interactive ahead of batch, FIFO within a
//! class, with preempted sequences put back at the front of theirs.

use std::collections::VecDeque;

use super::sequence::{Priority, SeqId};

/// The waiting sequences, one FIFO per priority class.
#[derive(Debug, Default)]
pub(super) struct WaitingQueue {
    /// Interactive sequences, oldest (or most recently preempted) first.
    interactive: VecDeque<SeqId>,
    /// Batch sequences, oldest (or most recently preempted) first.
    batch: VecDeque<SeqId>,
}

impl WaitingQueue {
    /// The queue of one class.
    fn class(&mut self, priority: Priority) -> &mut VecDeque<SeqId> {
        match priority {
            Priority::Interactive => &mut self.interactive,
            Priority::Batch => &mut self.batch,
        }
    }

    /// Queues a new arrival at the back of its class.
    pub(super) fn push_back(&mut self, id: SeqId, priority: Priority) {
        self.class(priority).push_back(id);
    }

    /// Puts a preempted sequence back at the front of its class.
    pub(super) fn push_front(&mut self, id: SeqId, priority: Priority) {
        self.class(priority).push_front(id);
    }

    /// The next sequence to admit.
    pub(super) fn front(&self) -> Option<SeqId> {
        self.interactive.front().or(self.batch.front()).copied()
    }

    /// Removes the next sequence to admit.
    pub(super) fn pop_front(&mut self) -> Option<SeqId> {
        self.interactive.pop_front().or_else(|| self.batch.pop_front())
    }

    /// Removes `id` from its class (O(waiting), for cancellations).
    pub(super) fn remove(&mut self, id: SeqId, priority: Priority) -> bool {
        let q = self.class(priority);
        let before = q.len();
        q.retain(|&x| x != id);
        q.len() != before
    }

    /// Sequences waiting in `priority`'s class.
    pub(super) fn len_of(&self, priority: Priority) -> usize {
        match priority {
            Priority::Interactive => self.interactive.len(),
            Priority::Batch => self.batch.len(),
        }
    }

    /// Sequences waiting in all classes.
    pub(super) fn len(&self) -> usize {
        self.interactive.len() + self.batch.len()
    }

    /// Every waiting sequence with its class, in admission order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (SeqId, Priority)> + '_ {
        let i = self.interactive.iter().map(|&id| (id, Priority::Interactive));
        i.chain(self.batch.iter().map(|&id| (id, Priority::Batch)))
    }
}
