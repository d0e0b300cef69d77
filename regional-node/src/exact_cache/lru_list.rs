//! Doubly linked LRU lists threaded through one arena by index, so that entries move between the cache's
//! segments in O(1) without pointers, `unsafe`, or a reallocation per entry.

/// The "no node" index.
const NIL: usize = usize::MAX;

/// Storage for the nodes of every list, addressed by index; freed slots are reused.
pub(super) struct Arena<T> {
    /// Nodes by index.
    slots: Vec<Slot<T>>,
    /// Indexes of free slots, reused before the arena grows.
    free: Vec<usize>,
}

/// A node: its value and its neighbours in the list it is in.
struct Slot<T> {
    /// `None` while the slot is free.
    value: Option<T>,
    /// The less recently used neighbour, or `NIL`.
    prev: usize,
    /// The more recently used neighbour, or `NIL`.
    next: usize,
}

/// The two ends of one list: `head` is the least recently used node, `tail` the most recently used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct List {
    /// Least recently used node, or `NIL`.
    head: usize,
    /// Most recently used node, or `NIL`.
    tail: usize,
}

impl Default for List {
    fn default() -> Self {
        Self { head: NIL, tail: NIL }
    }
}

impl List {
    /// The least recently used node.
    pub(super) fn head(&self) -> Option<usize> {
        (self.head != NIL).then_some(self.head)
    }
}

impl<T> Arena<T> {
    /// An empty arena.
    pub(super) fn new() -> Self {
        Self { slots: Vec::new(), free: Vec::new() }
    }

    /// Stores `value` in a node that is in no list yet, and returns its index.
    pub(super) fn alloc(&mut self, value: T) -> usize {
        let slot = Slot { value: Some(value), prev: NIL, next: NIL };
        match self.free.pop() {
            Some(index) => {
                self.slots[index] = slot;
                index
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        }
    }

    /// Frees a node that is in no list (unlink it first) and returns its value.
    pub(super) fn free(&mut self, index: usize) -> Option<T> {
        let value = self.slots.get_mut(index)?.value.take();
        if value.is_some() {
            self.free.push(index);
        }
        value
    }

    /// The value of a live node.
    pub(super) fn get(&self, index: usize) -> Option<&T> {
        self.slots.get(index)?.value.as_ref()
    }

    /// The value of a live node, to change it.
    pub(super) fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        self.slots.get_mut(index)?.value.as_mut()
    }

    /// Appends a node that is in no list to `list`, as its most recently used node.
    pub(super) fn push_back(&mut self, list: &mut List, index: usize) {
        self.slots[index].prev = list.tail;
        self.slots[index].next = NIL;
        match list.tail {
            NIL => list.head = index,
            tail => self.slots[tail].next = index,
        }
        list.tail = index;
    }

    /// Takes a node out of `list`, the list it is in.
    pub(super) fn unlink(&mut self, list: &mut List, index: usize) {
        let (prev, next) = (self.slots[index].prev, self.slots[index].next);
        match prev {
            NIL => list.head = next,
            prev => self.slots[prev].next = next,
        }
        match next {
            NIL => list.tail = prev,
            next => self.slots[next].prev = prev,
        }
        self.slots[index].prev = NIL;
        self.slots[index].next = NIL;
    }

    /// Moves a node of `list` to its most-recently-used end.
    pub(super) fn move_to_back(&mut self, list: &mut List, index: usize) {
        if list.tail != index {
            self.unlink(list, index);
            self.push_back(list, index);
        }
    }

    /// The nodes of `list` from least to most recently used (for tests and invariant checks).
    #[cfg(test)]
    pub(super) fn iter<'a>(&'a self, list: &List) -> impl Iterator<Item = usize> + 'a {
        std::iter::successors(list.head(), move |&index| {
            let next = self.slots[index].next;
            (next != NIL).then_some(next)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(arena: &Arena<char>, list: &List) -> String {
        arena.iter(list).filter_map(|index| arena.get(index)).collect()
    }

    #[test]
    fn links_moves_and_reuses_slots() {
        let mut arena = Arena::new();
        let (mut first, mut second) = (List::default(), List::default());
        let [a, b, c] = ['a', 'b', 'c'].map(|value| arena.alloc(value));
        for index in [a, b, c] {
            arena.push_back(&mut first, index);
        }
        assert_eq!((order(&arena, &first), first.head()), ("abc".to_owned(), Some(a)));
        arena.move_to_back(&mut first, a);
        assert_eq!(order(&arena, &first), "bca");
        arena.unlink(&mut first, c);
        arena.push_back(&mut second, c);
        assert_eq!((order(&arena, &first), order(&arena, &second)), ("ba".to_owned(), "c".to_owned()));
        arena.unlink(&mut first, b);
        arena.unlink(&mut first, a);
        assert_eq!((first, first.head()), (List::default(), None));
        assert_eq!(arena.free(b), Some('b'));
        assert_eq!(arena.free(b), None, "a freed slot is not freed twice");
        assert_eq!(arena.alloc('d'), b, "freed slots are reused");
        assert_eq!(arena.get(b), Some(&'d'));
    }
}
