//! The sparse KV index of FlexDB §5.1: one entry per *interval* (a run of consecutive
//! records in the keyspace's FlexSpace), keyed by an index key at or below the interval's
//! first record and above the previous interval's last (see [`separator`]), giving the
//! interval's offset and size.
//!
//! Offsets are stored as FlexTree stores them: a leaf entry holds a *partial* offset, and
//! every child pointer of an internal node holds a *shift*; an interval's offset is its
//! partial offset plus the shifts on its path. Growing or shrinking one interval moves
//! every later interval, which costs one update per later entry in the same leaf and per
//! later child on the path: O(fanout × height), never O(intervals). Index keys are the
//! search keys; shifting never touches them.
//!
//! Invariants ([`SparseIndex::check`]): the first interval's key is empty (it covers
//! every key below the second); keys strictly increase; offsets are contiguous from 0
//! (each interval starts where the previous one ends); every pivot separates its
//! neighbouring subtrees. Nodes split when full; a node that empties is removed, and a
//! root with one child gives way to it (folding its shift down), so the tree never grows
//! taller than its most recent splits made it. Underfull nodes are not merged: the index
//! is rebuilt at every open, which compacts it.

mod keys;

use super::cache::Slot;
use crate::{Error, Result};
use keys::Keys;

type NodeId = usize;

/// Entries per leaf and children per internal node before a split. At 10M pairs (857K
/// intervals) 128 rather than 64 takes a level off the tree, whose lower levels miss
/// the processor's caches at every descent, and the committer descends for every
/// interval it changes: a 10M random load ran 1.09 times as fast (paired, five of
/// five rounds) and 10M UDB YCSB's load 1.07 (six of six), while YCSB A after it ran
/// 0.92 (three of four behind; docs/benchmarks.md, seventieth session).
pub(crate) const FANOUT: usize = 128;
const _: () = assert!(
    FANOUT <= keys::HEADS_INLINE,
    "a full node's heads fit inside it"
);

/// The shortest prefix of `next` that sorts above `prev`, which sorts below `next`:
/// the index key for an interval that starts at `next` right after `prev`. Any key
/// between the two would route lookups correctly, because no record lies between them;
/// the shortest saves index memory (a few bytes instead of the whole key).
pub(crate) fn separator<'a>(prev: &[u8], next: &'a [u8]) -> &'a [u8] {
    debug_assert!(prev < next);
    let shared = prev.iter().zip(next).take_while(|(a, b)| a == b).count();
    &next[..(shared + 1).min(next.len())]
}

/// Entries a node's vectors grow by when full.
const GROWTH: usize = 4;

/// Makes room in `v` for `n` more items, [`GROWTH`] items' worth at a time (for bytes,
/// `GROWTH` times `n`) instead of doubling. A node fills from half its fanout (a split)
/// to all of it, so doubling left its vectors a quarter empty on average: at 10M UDB
/// pairs (with 8-byte key heads) the index took 45.7 MB that way and 36.6 MB this way
/// (docs/design.md). A node's vectors are at most a few hundred bytes, so the extra
/// copies cost little.
fn grow<T>(v: &mut Vec<T>, n: usize) {
    if v.capacity() - v.len() < n {
        v.reserve_exact(n.max(1) * GROWTH);
    }
}

/// An interval's place in a [`SparseIndex`], from [`SparseIndex::locate`]: valid until
/// the index next changes (the caller holds the keyspace's lock across both calls).
#[derive(Clone, Copy, Debug)]
pub struct Position {
    leaf: NodeId,
    j: usize,
    shift: i64,
}

/// One interval as the index sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    /// The interval's index key (empty for the first interval): at or below its first
    /// record's key, above the previous interval's last.
    pub key: Vec<u8>,
    /// Where the interval starts in the FlexSpace.
    pub offset: u64,
    /// The interval's size in bytes.
    pub size: u64,
}

#[derive(Debug)]
enum Node {
    Leaf {
        keys: Keys,
        /// Where each entry starts, as a partial offset.
        partial: Vec<i64>,
        /// Where the last entry ends, as a partial offset. Intervals are contiguous, so
        /// every other entry ends where the next begins and no size is stored.
        end: i64,
        /// Each entry's interval if the interval cache holds it (the cache fills and
        /// empties these; see [`Slot`]): a point read that found its entry has its
        /// interval one load away, with no hash lookup.
        slots: Vec<Slot>,
    },
    Internal {
        /// `pivots[i]` separates `children[i]` (all keys below it) from
        /// `children[i + 1]` (all keys at or above it).
        pivots: Keys,
        children: Vec<NodeId>,
        shifts: Vec<i64>,
    },
}

/// The index: a B+-tree over interval keys with partial offsets and shifts.
#[derive(Debug)]
pub struct SparseIndex {
    nodes: Vec<Node>,
    free: Vec<NodeId>,
    root: NodeId,
    len: usize,
    fanout: usize,
}

impl Default for SparseIndex {
    fn default() -> Self {
        SparseIndex::new()
    }
}

/// One step of a root-to-leaf path: the node and the child (or entry) taken.
type Path = Vec<(NodeId, usize)>;

/// Where [`SparseIndex::find_to_edit`] found an interval: the path down to it.
#[derive(Debug)]
pub(crate) struct Found {
    path: Path,
}

/// A leaf's keys, partial offsets, partial end and cache slots.
type LeafMut<'a> = (
    &'a mut Keys,
    &'a mut Vec<i64>,
    &'a mut i64,
    &'a mut Vec<Slot>,
);

/// The size of entry `j` of a leaf with these partial offsets and end.
fn size_in(partial: &[i64], end: i64, j: usize) -> u64 {
    let next = partial.get(j + 1).copied().unwrap_or(end);
    u64::try_from(next - partial[j]).unwrap_or_else(|_| unreachable!("sizes are never negative"))
}

/// The leaf and entry a path ends at.
fn end(path: &Path) -> (NodeId, usize) {
    *path
        .last()
        .unwrap_or_else(|| unreachable!("a path is never empty"))
}

impl SparseIndex {
    /// An index of one empty interval (an empty keyspace).
    pub fn new() -> Self {
        SparseIndex::with_fanout(FANOUT)
    }

    /// As [`SparseIndex::new`], with nodes of `fanout` (at least 4) entries; small
    /// fanouts make tests reach deep trees.
    pub fn with_fanout(fanout: usize) -> Self {
        let leaf = Node::Leaf {
            keys: Keys::from_sorted([&[][..]]),
            partial: vec![0],
            end: 0,
            slots: vec![Slot::default()],
        };
        SparseIndex {
            nodes: vec![leaf],
            free: Vec::new(),
            root: 0,
            len: 1,
            fanout: fanout.max(4),
        }
    }

    /// A copy of the index for reading only (it must not be changed): the same
    /// intervals at the same offsets, each slot with the interval's shortcut and cached
    /// interval now (a view's; `sorted/view.rs`). Copies every node: O(intervals).
    pub(crate) fn find_copy(&self) -> SparseIndex {
        let nodes = self
            .nodes
            .iter()
            .map(|n| match n {
                Node::Leaf {
                    keys,
                    partial,
                    end,
                    slots,
                } => Node::Leaf {
                    keys: keys.clone(),
                    partial: partial.clone(),
                    end: *end,
                    slots: slots.iter().map(Slot::view_copy).collect(),
                },
                Node::Internal {
                    pivots,
                    children,
                    shifts,
                } => Node::Internal {
                    pivots: pivots.clone(),
                    children: children.clone(),
                    shifts: shifts.clone(),
                },
            })
            .collect();
        SparseIndex {
            nodes,
            free: Vec::new(),
            root: self.root,
            len: self.len,
            fanout: self.fanout,
        }
    }

    /// The number of intervals.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the index is empty (never: there is always a first interval).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Descends to the entry whose key is the greatest at or below `key`, telling
    /// `step` each node and the child (or entry) taken; returns the leaf, the entry and
    /// the sum of shifts along the way.
    fn walk(&self, key: &[u8], mut step: impl FnMut(NodeId, usize)) -> (NodeId, usize, i64) {
        let mut shift = 0;
        let mut id = self.root;
        loop {
            let node = &self.nodes[id];
            // The whole node at once, its keys' heads among it: their lines arrive
            // together, where asking for the heads waited for the node's first line.
            crate::prefetch::prefetch(std::slice::from_ref(node));
            match node {
                Node::Internal {
                    pivots,
                    children,
                    shifts,
                } => {
                    let c = pivots.rank(key, true);
                    step(id, c);
                    shift += shifts[c];
                    id = children[c];
                }
                Node::Leaf { keys, partial, .. } => {
                    let j = keys.rank(key, true).saturating_sub(1);
                    // What a point read that misses the cache reads after the entry's
                    // slot (its first wait, which these overlap): the entry's offsets
                    // and its key's bounds.
                    crate::prefetch::prefetch(
                        partial
                            .get(j..(j + 2).min(partial.len()))
                            .unwrap_or_default(),
                    );
                    keys.prefetch_key(j);
                    step(id, j);
                    return (id, j, shift);
                }
            }
        }
    }

    /// [`SparseIndex::walk`], recording the path.
    fn descend(&self, key: &[u8]) -> (Path, i64) {
        let mut path = Vec::new();
        let (_, _, shift) = self.walk(key, |id, c| path.push((id, c)));
        (path, shift)
    }

    fn interval_at(&self, leaf: NodeId, j: usize, shift: i64) -> Interval {
        let Node::Leaf {
            keys, partial, end, ..
        } = &self.nodes[leaf]
        else {
            unreachable!("paths end at leaves")
        };
        Interval {
            key: keys.get(j).to_vec(),
            offset: u64::try_from(partial[j] + shift)
                .unwrap_or_else(|_| unreachable!("offsets are never negative")),
            size: size_in(partial, *end, j),
        }
    }

    /// The interval that holds `key` (the one with the greatest index key at or below it).
    pub fn find(&self, key: &[u8]) -> Interval {
        // No path recorded: this is every point read's first step.
        let (leaf, j, shift) = self.walk(key, |_, _| {});
        self.interval_at(leaf, j, shift)
    }

    /// [`SparseIndex::find`] for a caller about to change the interval's records: its
    /// slot forgets the interval's [`Shortcut`](crate::space::Shortcut). Returns too
    /// where it was found, for [`SparseIndex::resize_found`] and
    /// [`SparseIndex::slot_found`].
    pub(crate) fn find_to_edit(&mut self, key: &[u8]) -> (Interval, Found) {
        let (path, shift) = self.descend(key);
        let (leaf, j) = end(&path);
        match &mut self.nodes[leaf] {
            Node::Leaf { slots, .. } => slots[j].forget_shortcut(),
            Node::Internal { .. } => unreachable!("paths end at leaves"),
        }
        (self.interval_at(leaf, j, shift), Found { path })
    }

    /// Whether `found` is still the path down to the interval keyed `key`: every step
    /// leads to the next, and the entry it ends at has that key.
    fn still_found(&self, found: &Found, key: &[u8]) -> bool {
        let path = &found.path;
        let steps_hold = path.windows(2).all(|w| {
            matches!(self.nodes.get(w[0].0), Some(Node::Internal { children, .. })
                if children.get(w[0].1) == Some(&w[1].0))
        });
        let (leaf, j) = end(path);
        steps_hold
            && path.first().is_some_and(|&(id, _)| id == self.root)
            && matches!(self.nodes.get(leaf), Some(Node::Leaf { keys, .. })
                if j < keys.len() && keys.get(j) == key)
    }

    /// [`SparseIndex::resize`] of the interval [`SparseIndex::find_to_edit`] found
    /// (`found`, for `key`), by that path if it still leads there, with no second
    /// descent: the committer resizes each interval it changes right after finding it.
    pub(crate) fn resize_found(&mut self, found: &Found, key: &[u8], delta: i64) -> Result<()> {
        if self.still_found(found, key) {
            self.resize_path(&found.path, delta)
        } else {
            self.resize(key, delta)
        }
    }

    /// [`SparseIndex::slot_of`] the interval [`SparseIndex::find_to_edit`] found
    /// (`found`, for `key`), by that path if it still leads there.
    pub(crate) fn slot_found(&self, found: &Found, key: &[u8]) -> Option<&Slot> {
        if !self.still_found(found, key) {
            return self.slot_of(key);
        }
        let (leaf, j) = end(&found.path);
        match &self.nodes[leaf] {
            Node::Leaf { slots, .. } => Some(&slots[j]),
            Node::Internal { .. } => unreachable!("paths end at leaves"),
        }
    }

    /// The index key of the interval that holds `key` ([`SparseIndex::find`] without
    /// copying anything).
    pub fn find_key(&self, key: &[u8]) -> &[u8] {
        self.key_of(self.locate(key))
    }

    /// Where the interval that holds `key` is in the index: one descent, from which
    /// [`SparseIndex::key_of`] gives its key without copying and
    /// [`SparseIndex::interval_of`] the whole interval. A point read looks its key up
    /// in the cache and, on a miss, needs the interval without a second descent.
    pub fn locate(&self, key: &[u8]) -> Position {
        let (leaf, j, shift) = self.walk(key, |_, _| {});
        Position { leaf, j, shift }
    }

    /// The index key at `at`, which the index has not changed since it was found.
    pub fn key_of(&self, at: Position) -> &[u8] {
        match &self.nodes[at.leaf] {
            Node::Leaf { keys, .. } => keys.get(at.j),
            Node::Internal { .. } => unreachable!("paths end at leaves"),
        }
    }

    /// The interval at `at`, which the index has not changed since it was found.
    pub fn interval_of(&self, at: Position) -> Interval {
        self.interval_at(at.leaf, at.j, at.shift)
    }

    /// The cache slot of the interval at `at`, which the index has not changed since
    /// it was found.
    pub(crate) fn slot_at(&self, at: Position) -> &Slot {
        match &self.nodes[at.leaf] {
            Node::Leaf { slots, .. } => &slots[at.j],
            Node::Internal { .. } => unreachable!("paths end at leaves"),
        }
    }

    /// The cache slot of the interval keyed exactly `key`, if there is one.
    pub(crate) fn slot_of(&self, key: &[u8]) -> Option<&Slot> {
        let at = self.locate(key);
        (self.key_of(at) == key).then(|| self.slot_at(at))
    }

    /// Every interval's cache slot, in key order.
    pub(crate) fn slots(&self) -> Vec<&Slot> {
        let mut out = Vec::with_capacity(self.len);
        self.walk_slots(None, true, |_, s| {
            out.push(s);
            true
        });
        out
    }

    /// Tells `visit` the index keys of the intervals from the one holding `from` on, in
    /// key order (`forward`) or in reverse, until it returns `false` or the intervals
    /// end; `None` starts at the first interval (forward) or the last (backward). One
    /// descent for the lot: a scan reads several neighbouring intervals, and a fresh
    /// search for each would repeat the same top of the tree.
    pub fn walk_keys(
        &self,
        from: Option<&[u8]>,
        forward: bool,
        mut visit: impl FnMut(&[u8]) -> bool,
    ) {
        self.walk_slots(from, forward, |k, _| visit(k));
    }

    /// [`SparseIndex::walk_keys`], telling `visit` each interval's cache slot too.
    pub(crate) fn walk_slots<'a>(
        &'a self,
        from: Option<&[u8]>,
        forward: bool,
        mut visit: impl FnMut(&'a [u8], &'a Slot) -> bool,
    ) {
        self.walk_intervals(from, forward, 0, |key, _, _, slot| visit(key, slot));
    }

    /// [`SparseIndex::walk_slots`], telling `visit` each interval's offset and size
    /// too: the first's from the path down to it, each later one's from its neighbour
    /// (intervals lie end to end), with no search. With `ahead` above 0, each step asks
    /// for the cached interval `ahead` slots further on in the same leaf
    /// ([`Slot::prefetch`]); the first step in a leaf asks for all up to there.
    pub(crate) fn walk_intervals<'a>(
        &'a self,
        from: Option<&[u8]>,
        forward: bool,
        ahead: usize,
        mut visit: impl FnMut(&'a [u8], u64, u64, &'a Slot) -> bool,
    ) {
        let mut path = match from {
            Some(key) => self.descend(key).0,
            None => {
                let mut path = Vec::new();
                self.edge(self.root, forward, &mut path);
                path
            }
        };
        // Forward, where the next interval starts; backward, where the last one
        // visited does (so where the next one ends). `None` before the first.
        let mut cursor: Option<u64> = None;
        loop {
            let (leaf, j) = end(&path);
            let Node::Leaf {
                keys,
                partial,
                end,
                slots,
            } = &self.nodes[leaf]
            else {
                unreachable!("paths end at leaves")
            };
            let shift = cursor.is_none().then(|| self.path_shift(&path));
            let mut first = true;
            let mut visit = |i: usize| {
                if ahead > 0 {
                    let near = if first { 1 } else { ahead };
                    first = false;
                    for d in near..=ahead {
                        let k = if forward {
                            i.checked_add(d)
                        } else {
                            i.checked_sub(d)
                        };
                        if let Some(s) = k.and_then(|k| slots.get(k)) {
                            s.prefetch();
                        }
                    }
                }
                let size = size_in(partial, *end, i);
                let offset = match (cursor, shift) {
                    (Some(c), _) if forward => c,
                    (Some(c), _) => c - size,
                    (None, Some(shift)) => u64::try_from(partial[i] + shift)
                        .unwrap_or_else(|_| unreachable!("offsets are never negative")),
                    (None, None) => unreachable!("the first leaf's shift is known"),
                };
                cursor = Some(if forward { offset + size } else { offset });
                visit(keys.get(i), offset, size, &slots[i])
            };
            let more = if forward {
                (j..keys.len()).all(&mut visit)
            } else {
                (0..=j).rev().all(&mut visit)
            };
            if !more {
                return;
            }
            // Up to the nearest node with a child beyond the path's, then down that
            // child's near edge.
            path.pop();
            loop {
                let Some((node, c)) = path.last_mut() else {
                    return;
                };
                let Node::Internal { children, .. } = &self.nodes[*node] else {
                    unreachable!("a path's inner steps are internal nodes")
                };
                let beyond = if forward {
                    (*c + 1 < children.len()).then_some(*c + 1)
                } else {
                    c.checked_sub(1)
                };
                if let Some(b) = beyond {
                    *c = b;
                    let child = children[b];
                    self.edge(child, forward, &mut path);
                    break;
                }
                path.pop();
            }
        }
    }

    /// The sum of the shifts of the children a path takes.
    fn path_shift(&self, path: &Path) -> i64 {
        (path.iter())
            .map(|&(id, c)| match &self.nodes[id] {
                Node::Internal { shifts, .. } => shifts[c],
                Node::Leaf { .. } => 0,
            })
            .sum()
    }

    /// Extends `path` from node `id` down its first entries (`forward`) or its last.
    fn edge(&self, mut id: NodeId, forward: bool, path: &mut Path) {
        loop {
            let (len, next) = match &self.nodes[id] {
                Node::Internal { children, .. } => (children.len(), Some(children)),
                Node::Leaf { keys, .. } => (keys.len(), None),
            };
            let c = if forward { 0 } else { len - 1 };
            path.push((id, c));
            match next {
                Some(children) => id = children[c],
                None => return,
            }
        }
    }

    /// The path to the interval whose index key is exactly `key`.
    fn exact(&self, key: &[u8]) -> Result<(Path, i64)> {
        let (path, shift) = self.descend(key);
        let (leaf, j) = end(&path);
        match &self.nodes[leaf] {
            Node::Leaf { keys, .. } if keys.get(j) == key => Ok((path, shift)),
            _ => Err(Error::invalid(format!(
                "{key:?} is not an interval's index key"
            ))),
        }
    }

    /// The key of the interval after the one at `at` (which the index has not changed
    /// since it was found), if there is one: read from the same leaf unless `at` is
    /// its last entry (one time in `FANOUT` or so), else found by
    /// [`SparseIndex::next`]'s descent.
    pub fn next_key_of(&self, at: Position) -> Option<std::borrow::Cow<'_, [u8]>> {
        match &self.nodes[at.leaf] {
            Node::Leaf { keys, .. } if at.j + 1 < keys.len() => {
                Some(std::borrow::Cow::Borrowed(keys.get(at.j + 1)))
            }
            Node::Leaf { keys, .. } => self
                .next(keys.get(at.j))
                .map(|n| std::borrow::Cow::Owned(n.key)),
            Node::Internal { .. } => unreachable!("paths end at leaves"),
        }
    }

    /// The first interval whose key is greater than `key`, if any.
    pub fn next(&self, key: &[u8]) -> Option<Interval> {
        self.successor(self.root, key, 0)
    }

    fn successor(&self, id: NodeId, key: &[u8], shift: i64) -> Option<Interval> {
        match &self.nodes[id] {
            Node::Leaf { keys, .. } => {
                let j = keys.rank(key, true);
                (j < keys.len()).then(|| self.interval_at(id, j, shift))
            }
            Node::Internal {
                pivots,
                children,
                shifts,
            } => {
                // Child `c` may hold it; every later child holds only greater keys, so
                // the first of those that is not empty gives its first interval.
                let c = pivots.rank(key, true);
                (c..children.len())
                    .find_map(|i| self.successor(children[i], key, shift + shifts[i]))
            }
        }
    }

    /// The last interval whose key is less than `key`, if any.
    pub fn prev(&self, key: &[u8]) -> Option<Interval> {
        self.predecessor(self.root, key, 0)
    }

    fn predecessor(&self, id: NodeId, key: &[u8], shift: i64) -> Option<Interval> {
        match &self.nodes[id] {
            Node::Leaf { keys, .. } => {
                let j = keys.rank(key, false);
                j.checked_sub(1).map(|j| self.interval_at(id, j, shift))
            }
            Node::Internal {
                pivots,
                children,
                shifts,
            } => {
                // Children after `c` hold only keys at or above `key`; child `c` (and,
                // after merges, an earlier one) may hold none below it either.
                let c = pivots.rank(key, false);
                (0..=c)
                    .rev()
                    .find_map(|i| self.predecessor(children[i], key, shift + shifts[i]))
            }
        }
    }

    /// Bytes of memory the index takes: the capacity of every node's vectors (key
    /// bytes, key ends, key heads, and offsets or children and shifts) and the nodes
    /// themselves.
    pub fn memory_bytes(&self) -> usize {
        let node = |n: &Node| -> usize {
            std::mem::size_of::<Node>()
                + match n {
                    Node::Leaf {
                        keys,
                        partial,
                        slots,
                        ..
                    } => {
                        keys.memory_bytes()
                            + partial.capacity() * 8
                            + slots.capacity() * std::mem::size_of::<Slot>()
                    }
                    Node::Internal {
                        pivots,
                        children,
                        shifts,
                    } => pivots.memory_bytes() + children.capacity() * 8 + shifts.capacity() * 8,
                }
        };
        self.nodes.iter().map(node).sum::<usize>() + self.free.capacity() * 8
    }

    /// How many live nodes keep their keys' heads outside the node.
    #[cfg(test)]
    fn nodes_with_heads_outside(&self) -> usize {
        let live = |id: &NodeId| !self.free.contains(id);
        (0..self.nodes.len())
            .filter(live)
            .filter(|&id| match &self.nodes[id] {
                Node::Leaf { keys, .. } => keys.heads_outside(),
                Node::Internal { pivots, .. } => pivots.heads_outside(),
            })
            .count()
    }

    /// The last interval.
    pub fn last(&self) -> Interval {
        let mut id = self.root;
        let mut shift = 0;
        loop {
            match &self.nodes[id] {
                Node::Internal {
                    children, shifts, ..
                } => {
                    shift += shifts[shifts.len() - 1];
                    id = children[children.len() - 1];
                }
                Node::Leaf { keys, .. } => return self.interval_at(id, keys.len() - 1, shift),
            }
        }
    }

    /// Every interval, in key order.
    pub fn intervals(&self) -> Vec<Interval> {
        let mut out = Vec::with_capacity(self.len);
        let mut cur = Some(self.find(&[]));
        while let Some(i) = cur {
            cur = self.next(&i.key);
            out.push(i);
        }
        out
    }

    /// The total size of all intervals.
    pub fn total(&self) -> u64 {
        let mut id = self.root;
        let mut shift = 0;
        loop {
            match &self.nodes[id] {
                Node::Internal {
                    children, shifts, ..
                } => {
                    shift += shifts[shifts.len() - 1];
                    id = children[children.len() - 1];
                }
                Node::Leaf { end, .. } => return (end + shift) as u64,
            }
        }
    }

    /// Grows (or, negative, shrinks) the interval keyed `key` by `delta` bytes, moving
    /// every later interval by as much.
    pub fn resize(&mut self, key: &[u8], delta: i64) -> Result<()> {
        let (path, _) = self.exact(key)?;
        self.resize_path(&path, delta)
    }

    /// [`SparseIndex::resize`] of the interval `path` leads to.
    fn resize_path(&mut self, path: &Path, delta: i64) -> Result<()> {
        let (leaf, j) = end(path);
        let (_, partial, end, _) = self.leaf_mut(leaf);
        let size = size_in(partial, *end, j);
        if size.checked_add_signed(delta).is_none() {
            return Err(Error::invalid(format!(
                "interval of {size} bytes cannot change by {delta}"
            )));
        }
        partial[j + 1..].iter_mut().for_each(|p| *p += delta);
        *end += delta;
        for &(id, c) in &path[..path.len() - 1] {
            if let Node::Internal { shifts, .. } = &mut self.nodes[id] {
                shifts[c + 1..].iter_mut().for_each(|s| *s += delta);
            }
        }
        Ok(())
    }

    /// Splits the interval keyed `key` at `at` bytes from its start: the first `at` bytes
    /// stay, the rest become a new interval keyed `new_key`, which must lie between `key`
    /// and the next interval's key. No other interval moves.
    pub fn split(&mut self, key: &[u8], at: u64, new_key: &[u8]) -> Result<()> {
        let (mut path, _) = self.exact(key)?;
        if new_key <= key || self.next(key).is_some_and(|n| new_key >= n.key.as_slice()) {
            return Err(Error::invalid(
                "a split key must lie between its neighbours' keys",
            ));
        }
        let (leaf, j) = end(&path);
        let (keys, partial, leaf_end, slots) = self.leaf_mut(leaf);
        let size = size_in(partial, *leaf_end, j);
        if at > size {
            return Err(Error::invalid(format!(
                "split at {at} of a {size}-byte interval"
            )));
        }
        // The new entry goes right after the old one, in the same leaf: every pivot is
        // its subtree's first key (`check_node`), and `new_key` is below the next key.
        // The old entry now ends where the new one begins.
        // The new interval is not cached: the committer caches its pieces after it
        // has split them here, and the old entry's slot holds the whole interval
        // until then (readers wait for the keyspace's lock meanwhile).
        keys.insert(j + 1, new_key);
        grow(partial, 1);
        partial.insert(j + 1, partial[j] + at as i64);
        grow(slots, 1);
        slots.insert(j + 1, Slot::default());
        self.len += 1;
        self.split_full(&mut path);
        Ok(())
    }

    /// Merges the interval after the one keyed `key` into it: the two become one, keyed
    /// `key`. No interval moves.
    pub fn merge_next(&mut self, key: &[u8]) -> Result<()> {
        let (path, shift) = self.exact(key)?;
        let (leaf, j) = end(&path);
        let next = self
            .next(key)
            .ok_or_else(|| Error::invalid("the last interval has nothing to merge with"))?;
        let (_, partial, leaf_end, _) = self.leaf_mut(leaf);
        if j + 1 == partial.len() {
            // The next interval begins the next leaf: this one, last in its own, now
            // ends where that one ended.
            *leaf_end = (next.offset + next.size) as i64 - shift;
        }
        let (path, _) = self.exact(&next.key)?;
        let (leaf, j) = end(&path);
        let (keys, partial, _, slots) = self.leaf_mut(leaf);
        keys.remove(j);
        partial.remove(j);
        // The cache's entry for the absorbed interval, if any, has no slot from now
        // on: the committer removes it from the cache next.
        slots.remove(j);
        self.len -= 1;
        self.remove_empty(path);
        // A pivot that named the removed key (it began a subtree) must name the subtree's
        // new first key, the removed key's successor: left as it was, keys between the
        // two would be routed into that subtree and find no interval at or below them
        // there.
        if let Some(succ) = self.next(&next.key) {
            self.repoint(&next.key, &succ.key);
        }
        // The merged interval absorbs the bytes (in a shared leaf, by losing the next
        // entry's start); later offsets are unchanged.
        Ok(())
    }

    /// Replaces the pivot `old`, if one is `old`, with `new` (which must sort between
    /// that pivot's neighbours).
    fn repoint(&mut self, old: &[u8], new: &[u8]) {
        let mut id = self.root;
        while let Node::Internal {
            pivots, children, ..
        } = &mut self.nodes[id]
        {
            let c = pivots.rank(old, true);
            if c > 0 && pivots.get(c - 1) == old {
                pivots.remove(c - 1);
                pivots.insert(c - 1, new);
                return;
            }
            id = children[c];
        }
    }

    fn leaf_mut(&mut self, id: NodeId) -> LeafMut<'_> {
        match &mut self.nodes[id] {
            Node::Leaf {
                keys,
                partial,
                end,
                slots,
            } => (keys, partial, end, slots),
            Node::Internal { .. } => unreachable!("paths end at leaves"),
        }
    }

    fn alloc(&mut self, node: Node) -> NodeId {
        match self.free.pop() {
            Some(id) => {
                self.nodes[id] = node;
                id
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        }
    }

    fn entries(&self, id: NodeId) -> usize {
        match &self.nodes[id] {
            Node::Leaf { keys, .. } => keys.len(),
            Node::Internal { children, .. } => children.len(),
        }
    }

    /// Splits the last node of `path` if it is over full, and its ancestors in turn.
    fn split_full(&mut self, path: &mut Path) {
        while let Some((id, _)) = path.pop() {
            if self.entries(id) <= self.fanout {
                return;
            }
            let (right, pivot) = match &mut self.nodes[id] {
                Node::Leaf {
                    keys,
                    partial,
                    end,
                    slots,
                } => {
                    let half = keys.len() / 2;
                    let right_partial = partial.split_off(half);
                    let right = Node::Leaf {
                        keys: keys.split_off(half),
                        end: std::mem::replace(end, right_partial[0]),
                        partial: right_partial,
                        slots: slots.split_off(half),
                    };
                    // The insert that overfilled the node doubled its vectors; left
                    // so, the half kept here would hold four times the room it uses.
                    keys.shrink_to_fit();
                    partial.shrink_to_fit();
                    slots.shrink_to_fit();
                    let Node::Leaf { keys: rk, .. } = &right else {
                        unreachable!()
                    };
                    let pivot: Box<[u8]> = rk.get(0).into();
                    (right, pivot)
                }
                Node::Internal {
                    pivots,
                    children,
                    shifts,
                } => {
                    let half = children.len() / 2;
                    let right_children = children.split_off(half);
                    let right_shifts = shifts.split_off(half);
                    let mut right_pivots = pivots.split_off(half - 1);
                    let pivot = right_pivots.remove(0);
                    pivots.shrink_to_fit();
                    children.shrink_to_fit();
                    shifts.shrink_to_fit();
                    let right = Node::Internal {
                        pivots: right_pivots,
                        children: right_children,
                        shifts: right_shifts,
                    };
                    (right, pivot)
                }
            };
            let right = self.alloc(right);
            match path.last() {
                Some(&(parent, c)) => {
                    let Node::Internal {
                        pivots,
                        children,
                        shifts,
                    } = &mut self.nodes[parent]
                    else {
                        unreachable!("a parent is internal")
                    };
                    // The new node inherits the old one's shift: its entries keep their
                    // effective offsets.
                    let inherited = shifts[c];
                    pivots.insert(c, &pivot);
                    grow(children, 1);
                    grow(shifts, 1);
                    children.insert(c + 1, right);
                    shifts.insert(c + 1, inherited);
                }
                None => {
                    self.root = self.alloc(Node::Internal {
                        pivots: Keys::from_sorted([&pivot[..]]),
                        children: vec![id, right],
                        shifts: vec![0, 0],
                    });
                    return;
                }
            }
        }
    }

    /// Removes the last node of `path` if it is empty (and ancestors left empty), then
    /// lets a root with a single child give way to it.
    fn remove_empty(&mut self, mut path: Path) {
        while let Some((id, _)) = path.pop() {
            if self.entries(id) > 0 || id == self.root {
                break;
            }
            self.free.push(id);
            let &(parent, c) = path
                .last()
                .unwrap_or_else(|| unreachable!("a non-root has a parent"));
            if let Node::Internal {
                pivots,
                children,
                shifts,
            } = &mut self.nodes[parent]
            {
                children.remove(c);
                shifts.remove(c);
                if !pivots.is_empty() {
                    pivots.remove(c.saturating_sub(1));
                }
            }
        }
        while let Node::Internal {
            children, shifts, ..
        } = &self.nodes[self.root]
        {
            if children.len() != 1 {
                break;
            }
            let (child, shift) = (children[0], shifts[0]);
            match &mut self.nodes[child] {
                Node::Leaf { partial, end, .. } => {
                    partial.iter_mut().for_each(|p| *p += shift);
                    *end += shift;
                }
                Node::Internal { shifts, .. } => shifts.iter_mut().for_each(|s| *s += shift),
            }
            self.free.push(self.root);
            self.root = child;
        }
    }

    /// Checks every invariant; `Err` says which one fails where.
    pub fn check(&self) -> std::result::Result<(), String> {
        let all = self.intervals();
        if all.len() != self.len {
            return Err(format!(
                "{} intervals reachable, {} counted",
                all.len(),
                self.len
            ));
        }
        if all
            .first()
            .is_none_or(|f| !f.key.is_empty() || f.offset != 0)
        {
            return Err("the first interval must have the empty key and offset 0".into());
        }
        for w in all.windows(2) {
            if w[0].key >= w[1].key {
                return Err(format!(
                    "keys out of order: {:?} then {:?}",
                    w[0].key, w[1].key
                ));
            }
            if w[0].offset + w[0].size != w[1].offset {
                return Err(format!(
                    "interval {:?} does not start where {:?} ends",
                    w[1].key, w[0].key
                ));
            }
        }
        self.check_node(self.root, None, None)
    }

    /// Every key under `id` lies in `[lo, hi)`, and the first is `lo` itself: a pivot
    /// is its subtree's first key, so that every key routed into a subtree finds an
    /// interval at or below it there.
    fn check_node(
        &self,
        id: NodeId,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> std::result::Result<(), String> {
        match &self.nodes[id] {
            Node::Leaf { keys, .. } => {
                if let Some(l) = lo {
                    if keys.is_empty() || keys.get(0) != l {
                        return Err(format!(
                            "leaf {id} begins at {:?}, but its pivot is {l:?}",
                            keys.iter().next()
                        ));
                    }
                }
                for k in keys.iter() {
                    if lo.is_some_and(|l| k < l) || hi.is_some_and(|h| k >= h) {
                        return Err(format!("key {k:?} outside its pivots"));
                    }
                }
                Ok(())
            }
            Node::Internal {
                pivots,
                children,
                shifts,
            } => {
                if children.len() != pivots.len() + 1
                    || shifts.len() != children.len()
                    || children.len() > self.fanout
                {
                    return Err(format!("internal node {id} is malformed"));
                }
                for (c, &child) in children.iter().enumerate() {
                    let l = if c == 0 { lo } else { Some(pivots.get(c - 1)) };
                    let h = if c == pivots.len() {
                        hi
                    } else {
                        Some(pivots.get(c))
                    };
                    self.check_node(child, l, h)?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests;
