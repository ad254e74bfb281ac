//! The structural changes of FlexTree: descending with early splits, shifting every
//! later extent in O(log n), and merging underfull nodes with shift folding.
//!
//! Invariants kept here (and checked by [`FlexTree::check`]):
//! - Every node's partial offsets are relative to its own start: a leaf's first entry is
//!   at 0, and a child pointer's shift is the child's start within its parent (its pivot).
//! - A split moves the upper half of a node into a new sibling. The new pointer's shift
//!   (its pivot) is the median's partial offset plus the shift the old pointer had
//!   (FlexTree §3.2, Figure 5), and the moved entries are rebased onto the new node's
//!   start, so no effective offset changes.
//! - A shift of `delta` after a leaf position adds `delta` to the later entries of that
//!   leaf and, on every ancestor, to the pivots after the path: those pivots are the
//!   shifts of the later pointers, so each later extent sees exactly one addition.
//! - A merge folds the right node's shift relative to the left node into the right node's
//!   partial offsets, so effective offsets are unchanged.

use super::node::{Internal, Node, NodeId, NIL};
use super::FlexTree;

/// One step of a root-to-leaf path: the internal node and the index of the child taken.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Step {
    pub node: NodeId,
    pub idx: usize,
}

/// Where a descent ended: the leaf and its start (the sum of the shifts on its path).
/// The steps are left in `FlexTree::path`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeafPos {
    pub leaf: NodeId,
    pub frame: u64,
}

impl FlexTree {
    /// The index of the child of `id` whose range holds the node-relative offset `rel`:
    /// the number of pivots at or before it.
    pub(crate) fn child_index(&self, id: NodeId, rel: u64) -> usize {
        self.internal(id).pivots.partition_point(|&p| p <= rel)
    }

    /// The number of entries of `leaf` that start at or before the leaf-relative `rel`.
    pub(crate) fn entries_at_or_before(&self, leaf: NodeId, rel: u64) -> usize {
        self.leaf(leaf).position(rel)
    }

    /// Descends to the leaf that holds `off` (the last leaf for `off == len()`), recording
    /// the path in `self.path`. With `split_full`, every full node met on the way is split
    /// first, so the leaf and all its ancestors have room for what the caller adds.
    pub(crate) fn descend(&mut self, off: u64, split_full: bool) -> LeafPos {
        if split_full && self.is_full(self.root) {
            let old = self.root;
            self.root = self.alloc(Node::Internal(Internal {
                pivots: Vec::new(),
                children: vec![old],
            }));
            self.height += 1;
            self.split_child(self.root, 0);
        }
        self.path.clear();
        let (mut id, mut frame) = (self.root, 0u64);
        while !self.is_leaf(id) {
            let mut idx = self.child_index(id, off - frame);
            if split_full && self.is_full(self.internal(id).children[idx]) {
                self.split_child(id, idx);
                idx = self.child_index(id, off - frame);
            }
            self.path.push(Step { node: id, idx });
            let node = self.internal(id);
            frame += node.shift(idx);
            id = node.children[idx];
        }
        LeafPos { leaf: id, frame }
    }

    /// Splits the full child at `idx` of `parent` into two (FlexTree §3.2, Figure 5).
    pub(crate) fn split_child(&mut self, parent: NodeId, idx: usize) {
        let old = self.internal(parent).children[idx];
        let old_shift = self.internal(parent).shift(idx);
        let (new_node, separator) = match &mut self.nodes[old as usize] {
            Node::Leaf(leaf) => {
                let (upper, separator) = leaf.split_off(leaf.len() / 2);
                (Node::Leaf(upper), separator)
            }
            Node::Internal(node) => {
                let mid = node.children.len() / 2;
                let children = node.children.split_off(mid);
                let mut pivots = node.pivots.split_off(mid);
                let separator = node.pivots.pop().expect("a full node has pivots");
                pivots.iter_mut().for_each(|p| *p -= separator);
                (Node::Internal(Internal { pivots, children }), separator)
            }
            Node::Free => panic!("split of a free node {old}"),
        };
        self.changed(old);
        let new_id = self.alloc(new_node);
        if self.is_leaf(new_id) {
            self.next_leaf[new_id as usize] = self.next_leaf[old as usize];
            self.next_leaf[old as usize] = new_id;
        }
        let p = self.internal_mut(parent);
        p.children.insert(idx + 1, new_id);
        p.pivots.insert(idx, old_shift + separator);
    }

    /// Adds `delta` (wrapping, so a negative shift is `delta.wrapping_neg()`) to the shift
    /// of every pointer after the recorded path, on every ancestor. The leaf's own later
    /// entries are the caller's to shift.
    pub(crate) fn shift_after_path(&mut self, delta: u64) {
        for i in 0..self.path.len() {
            let Step { node, idx } = self.path[i];
            // Nothing after the path here (an append): the node stays clean.
            if idx < self.internal(node).pivots.len() {
                for p in &mut self.internal_mut(node).pivots[idx..] {
                    *p = p.wrapping_add(delta);
                }
            }
        }
    }

    /// Makes `off` an extent boundary (splitting the extent that holds it), so a collapse,
    /// tag or remap can work on whole entries. A no-op at 0 and at the end.
    pub(crate) fn split_at(&mut self, off: u64) {
        if off == 0 || off >= self.size {
            return;
        }
        let LeafPos { leaf, frame } = self.descend(off, true);
        self.boundary_in_leaf(leaf, off - frame);
    }

    /// Makes the leaf-relative `rel` an entry boundary inside `leaf` (which holds it and has
    /// room for one more entry) and returns the index of the entry that starts there, or
    /// the number of entries if `rel` is the leaf's end.
    fn boundary_in_leaf(&mut self, leaf: NodeId, rel: u64) -> usize {
        let i = self.entries_at_or_before(leaf, rel);
        if i == 0 {
            return 0; // an empty (root) leaf
        }
        let e = self.leaf(leaf).entry(i - 1);
        if e.poff == rel {
            return i - 1;
        }
        if rel >= e.poff + e.len {
            return i; // the end of the leaf
        }
        let head = rel - e.poff;
        let tail_addr = if e.is_hole() {
            e.addr()
        } else {
            e.addr() + head
        };
        // The tail starts at `rel`, which ends the head there.
        self.leaf_mut(leaf).insert(i, rel, tail_addr, 0);
        self.extents += 1;
        i
    }

    /// Inserts one entry of `len` bytes at `off` (`off <= len()`), shifting everything
    /// after it forward (FlexTree §3.2, Figure 4). One descent: the early splits leave the
    /// leaf room for both the split-off tail and the new entry. With `merge_up_to`, an
    /// insert that continues the extent just before it (in the same leaf) both logically
    /// and physically grows that extent instead, up to that length.
    pub(crate) fn insert_entry(&mut self, off: u64, len: u64, addr: u64, merge_up_to: Option<u64>) {
        let LeafPos { leaf, frame } = self.descend(off, true);
        let pos = self.boundary_in_leaf(leaf, off - frame);
        let prev = pos.checked_sub(1).map(|p| self.leaf(leaf).entry(p));
        let merges = match (prev, merge_up_to) {
            (Some(p), Some(max)) => {
                !p.is_hole()
                    && addr != super::HOLE
                    && p.poff + p.len == off - frame
                    && p.addr() + p.len == addr
                    && p.len + len <= max
            }
            _ => false,
        };
        if merges {
            // The entry before grows by the bytes the ones after it move up.
            self.leaf_mut(leaf).shift_from(pos, len);
        } else {
            let node = self.leaf_mut(leaf);
            node.insert(pos, off - frame, addr, 0);
            node.shift_from(pos + 1, len);
            self.extents += 1;
        }
        self.shift_after_path(len);
        self.size += len;
    }

    /// [`FlexTree::overwrite`] of a range inside one extent (a record rewritten at its own
    /// size, the common case): that extent is cut around the range in its leaf and no
    /// offset moves, where a collapse and an insert would each descend and shift every
    /// later extent twice. The result is the same mapping and tags (the head keeps the
    /// extent's tag; the new range and the tail have none). Returns false, with nothing
    /// changed but early splits, if the range is not inside one extent.
    pub(crate) fn overwrite_in_extent(&mut self, off: u64, len: u64, addr: u64) -> bool {
        let LeafPos { leaf, frame } = self.descend(off, true);
        let rel = off - frame;
        let i = self.entries_at_or_before(leaf, rel);
        if i == 0 {
            return false;
        }
        let e = self.leaf(leaf).entry(i - 1);
        if rel + len > e.poff + e.len {
            return false;
        }
        let (head, tail) = (rel - e.poff, e.poff + e.len - rel - len);
        let tail_addr = if e.is_hole() {
            e.addr()
        } else {
            e.addr() + head + len
        };
        let parts: Vec<_> = [
            (head > 0).then_some((e.poff, e.addr(), e.tag())),
            Some((rel, addr, 0)),
            (tail > 0).then_some((rel + len, tail_addr, 0)),
        ]
        .into_iter()
        .flatten()
        .collect();
        // The descent's early splits left the leaf room for two more entries.
        self.leaf_mut(leaf).replace(i - 1, &parts);
        self.extents += parts.len() as u64 - 1;
        true
    }

    /// Removes whole entries starting at the boundary `off`, as many as fit in `max` bytes
    /// and lie in one leaf, shifts everything after them back, and rebalances. Returns the
    /// bytes removed (at least one entry's worth).
    pub(crate) fn remove_entries_at(&mut self, off: u64, max: u64) -> u64 {
        let LeafPos { leaf, frame } = self.descend(off, false);
        let pos = self.entries_at_or_before(leaf, off - frame) - 1;
        let node = self.leaf(leaf);
        let start = node.poffs()[pos];
        debug_assert_eq!(start, off - frame, "not a boundary");
        let mut end = pos;
        while end < node.len() && node.end_of(end) - start <= max {
            end += 1;
        }
        assert!(
            end > pos,
            "collapse range does not end on an extent boundary"
        );
        let removed = self.leaf_mut(leaf).remove(pos, end);
        self.shift_after_path(removed.wrapping_neg());
        self.size -= removed;
        self.extents -= (end - pos) as u64;
        self.rebalance(leaf);
        removed
    }

    /// Walks up the recorded path from `node` merging underfull nodes with a sibling
    /// (re-splitting the merged node evenly if it came out full), then drops a root that
    /// was left with a single child.
    fn rebalance(&mut self, mut node: NodeId) {
        for level in (0..self.path.len()).rev() {
            if self.fill(node) >= self.min_fill(node) {
                break;
            }
            let Step { node: parent, idx } = self.path[level];
            let left = idx.saturating_sub(1);
            self.merge_children(parent, left);
            if self.is_full(self.internal(parent).children[left]) {
                self.split_child(parent, left);
            }
            node = parent;
        }
        // A root with one child: the child starts where the root does (shift 0), so it
        // becomes the root with nothing to fold.
        while !self.is_leaf(self.root) && self.fill(self.root) == 1 {
            let only = self.internal(self.root).children[0];
            self.release(self.root);
            self.root = only;
            self.height -= 1;
        }
    }

    /// Merges child `left + 1` of `parent` into child `left` (FlexTree §3.2, Figure 8).
    pub(crate) fn merge_children(&mut self, parent: NodeId, left: usize) {
        let p = self.internal(parent);
        let (l, r) = (p.children[left], p.children[left + 1]);
        // The right node's shift relative to the left node: folded into its offsets.
        let fold = p.shift(left + 1) - p.shift(left);
        match self.take(r) {
            Node::Leaf(right) => {
                let left = self.leaf_mut(l);
                debug_assert_eq!(
                    left.span(),
                    fold,
                    "the right leaf starts where the left ends"
                );
                left.append(right);
                self.next_leaf[l as usize] = self.next_leaf[r as usize];
            }
            Node::Internal(right) => {
                let node = self.internal_mut(l);
                node.pivots.push(fold);
                node.pivots.extend(right.pivots.iter().map(|p| p + fold));
                node.children.extend(right.children);
            }
            Node::Free => panic!("merge with a free node {r}"),
        }
        self.release(r);
        let p = self.internal_mut(parent);
        p.children.remove(left + 1);
        p.pivots.remove(left);
    }

    /// Rewrites the addresses of the entries covering `[off, off + len)` (both ends already
    /// boundaries) to `new_addr + (entry offset - off)`.
    pub(crate) fn rewrite_addrs(&mut self, off: u64, len: u64, new_addr: u64) {
        let LeafPos { mut leaf, frame } = self.descend(off, false);
        let mut pos = self.entries_at_or_before(leaf, off - frame) - 1;
        let mut done = 0;
        while done < len {
            if pos == self.leaf(leaf).len() {
                leaf = self.next_leaf[leaf as usize];
                debug_assert_ne!(leaf, NIL);
                pos = 0;
            }
            let node = self.leaf_mut(leaf);
            node.set_addr(pos, new_addr + done);
            done += node.entry(pos).len;
            pos += 1;
        }
        debug_assert_eq!(done, len);
    }
}
