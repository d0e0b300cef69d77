//! [`WaitingQueue`]: sequences waiting for admission, interactive ahead of batch; within a class the
//! tenants take turns (one admission each, round robin), FIFO within a tenant, and a preempted sequence
//! goes back at the front of its tenant's queue with its tenant's turn next. So a tenant that floods the
//! pod queues behind itself: another tenant's request waits for at most one admission per busy tenant,
//! not for the whole flood.

use std::collections::{HashMap, VecDeque};

use super::sequence::{Priority, SeqId};

/// A tenant, as its prefix-cache salt (a keyed hash of its name).
pub(super) type Tenant = u64;

/// One priority class: a FIFO per tenant, served in turn.
#[derive(Debug, Default)]
struct FairClass {
    /// Each waiting tenant's sequences, oldest (or most recently preempted) first; never empty.
    by_tenant: HashMap<Tenant, VecDeque<SeqId>>,
    /// The tenants with waiting sequences, the next to be served first.
    turns: VecDeque<Tenant>,
    /// Sequences waiting in all.
    len: usize,
}

impl FairClass {
    fn push_back(&mut self, id: SeqId, tenant: Tenant) {
        let queue = self.by_tenant.entry(tenant).or_default();
        if queue.is_empty() {
            self.turns.push_back(tenant);
        }
        queue.push_back(id);
        self.len += 1;
    }

    fn push_front(&mut self, id: SeqId, tenant: Tenant) {
        self.by_tenant.entry(tenant).or_default().push_front(id);
        self.turns.retain(|&t| t != tenant);
        self.turns.push_front(tenant);
        self.len += 1;
    }

    fn front(&self) -> Option<SeqId> {
        self.turns.front().and_then(|t| self.by_tenant.get(t)?.front().copied())
    }

    fn pop_front(&mut self) -> Option<SeqId> {
        let tenant = self.turns.pop_front()?;
        let queue = self.by_tenant.get_mut(&tenant)?;
        let id = queue.pop_front();
        if queue.is_empty() {
            self.by_tenant.remove(&tenant);
        } else {
            self.turns.push_back(tenant);
        }
        self.len -= usize::from(id.is_some());
        id
    }

    fn remove(&mut self, id: SeqId, tenant: Tenant) -> bool {
        let Some(queue) = self.by_tenant.get_mut(&tenant) else { return false };
        let before = queue.len();
        queue.retain(|&x| x != id);
        let removed = queue.len() != before;
        if queue.is_empty() {
            self.by_tenant.remove(&tenant);
            self.turns.retain(|&t| t != tenant);
        }
        self.len -= usize::from(removed);
        removed
    }

    fn iter(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.turns.iter().flat_map(|t| self.by_tenant.get(t).into_iter().flatten().copied())
    }
}

/// The waiting sequences, one fair class per priority.
#[derive(Debug, Default)]
pub(super) struct WaitingQueue {
    interactive: FairClass,
    batch: FairClass,
}

impl WaitingQueue {
    /// The queue of one class.
    fn class(&mut self, priority: Priority) -> &mut FairClass {
        match priority {
            Priority::Interactive => &mut self.interactive,
            Priority::Batch => &mut self.batch,
        }
    }

    /// Queues a new arrival of `tenant` at the back of its tenant's queue in its class.
    pub(super) fn push_back(&mut self, id: SeqId, priority: Priority, tenant: Tenant) {
        self.class(priority).push_back(id, tenant);
    }

    /// Puts a preempted sequence back at the front of its tenant's queue, its tenant's turn next.
    pub(super) fn push_front(&mut self, id: SeqId, priority: Priority, tenant: Tenant) {
        self.class(priority).push_front(id, tenant);
    }

    /// The next sequence to admit.
    pub(super) fn front(&self) -> Option<SeqId> {
        self.interactive.front().or(self.batch.front())
    }

    /// Removes the next sequence to admit (its tenant's turn passes).
    pub(super) fn pop_front(&mut self) -> Option<SeqId> {
        self.interactive.pop_front().or_else(|| self.batch.pop_front())
    }

    /// Removes `id` of `tenant` from its class (O(the tenant's waiting), for cancellations).
    pub(super) fn remove(&mut self, id: SeqId, priority: Priority, tenant: Tenant) -> bool {
        self.class(priority).remove(id, tenant)
    }

    /// Sequences waiting in `priority`'s class.
    pub(super) fn len_of(&self, priority: Priority) -> usize {
        match priority {
            Priority::Interactive => self.interactive.len,
            Priority::Batch => self.batch.len,
        }
    }

    /// Sequences waiting in all classes.
    pub(super) fn len(&self) -> usize {
        self.interactive.len + self.batch.len
    }

    /// Every waiting sequence with its class: interactive first, tenant by tenant in turn order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (SeqId, Priority)> + '_ {
        let i = self.interactive.iter().map(|id| (id, Priority::Interactive));
        i.chain(self.batch.iter().map(|id| (id, Priority::Batch)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_take_turns_and_a_flood_queues_behind_itself() {
        let mut q = WaitingQueue::default();
        let (flood, quiet) = (1, 2);
        for id in 0..100 {
            q.push_back(SeqId(id), Priority::Interactive, flood);
        }
        q.push_back(SeqId(500), Priority::Interactive, quiet);
        q.push_back(SeqId(501), Priority::Interactive, quiet);
        let order: Vec<SeqId> = std::iter::from_fn(|| q.pop_front()).take(5).collect();
        assert_eq!(
            order,
            [0, 500, 1, 501, 2].map(SeqId).to_vec(),
            "one admission per tenant in turn, FIFO within one"
        );
        assert_eq!(q.len(), 97);
    }

    #[test]
    fn preempted_go_first_and_removals_keep_the_counts() {
        let mut q = WaitingQueue::default();
        q.push_back(SeqId(1), Priority::Batch, 7);
        q.push_back(SeqId(2), Priority::Batch, 8);
        q.push_back(SeqId(3), Priority::Interactive, 8);
        assert_eq!(q.front(), Some(SeqId(3)), "interactive ahead of batch");
        q.push_front(SeqId(9), Priority::Batch, 8);
        assert_eq!(q.pop_front(), Some(SeqId(3)));
        assert_eq!(q.pop_front(), Some(SeqId(9)), "the preempted sequence, its tenant's turn next");
        assert!(q.remove(SeqId(1), Priority::Batch, 7));
        assert!(!q.remove(SeqId(1), Priority::Batch, 7));
        assert_eq!((q.len(), q.len_of(Priority::Batch)), (1, 1));
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![(SeqId(2), Priority::Batch)]);
        assert_eq!(q.pop_front(), Some(SeqId(2)));
        assert_eq!((q.pop_front(), q.len()), (None, 0));
    }
}
