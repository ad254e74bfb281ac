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

use super::node::{Internal, Leaf, LeafEntry, Node, NodeId, NIL};
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
        self.leaf(leaf).entries.partition_point(|e| e.poff <= rel)
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
                let mut upper = leaf.entries.split_off(leaf.entries.len() / 2);
                leaf.trim();
                let separator = upper[0].poff;
                upper.iter_mut().for_each(|e| e.poff -= separator);
                (Node::Leaf(Leaf { entries: upper }), separator)
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
        self.dirty[old as usize] = true;
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

    /// Adds `delta` (wrapping, as above) to the partial offsets of the entries of `leaf`
    /// from `from` on.
    pub(crate) fn shift_leaf_from(&mut self, leaf: NodeId, from: usize, delta: u64) {
        if from >= self.leaf(leaf).entries.len() {
            return;
        }
        for e in &mut self.leaf_mut(leaf).entries[from..] {
            e.poff = e.poff.wrapping_add(delta);
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
        let Some(&e) = self.leaf(leaf).entries.get(i.wrapping_sub(1)) else {
            return 0; // an empty (root) leaf
        };
        if e.poff == rel {
            return i - 1;
        }
        if rel >= e.poff + e.len {
            return i; // the end of the leaf
        }
        let head = rel - e.poff;
        let tail = LeafEntry::new(
            rel,
            e.len - head,
            if e.is_hole() {
                e.addr()
            } else {
                e.addr() + head
            },
            0,
        );
        let node = self.leaf_mut(leaf);
        node.entries[i - 1].len = head;
        node.insert(i, tail);
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
        let prev = pos.checked_sub(1).map(|p| self.leaf(leaf).entries[p]);
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
            self.leaf_mut(leaf).entries[pos - 1].len += len;
            self.shift_leaf_from(leaf, pos, len);
        } else {
            let entry = LeafEntry::new(off - frame, len, addr, 0);
            self.leaf_mut(leaf).insert(pos, entry);
            self.shift_leaf_from(leaf, pos + 1, len);
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
        let Some(&e) = self.leaf(leaf).entries.get(i.wrapping_sub(1)) else {
            return false;
        };
        if rel + len > e.poff + e.len {
            return false;
        }
        let (head, tail) = (rel - e.poff, e.poff + e.len - rel - len);
        let tail_addr = if e.is_hole() {
            e.addr()
        } else {
            e.addr() + head + len
        };
        let parts = [
            (head > 0).then(|| LeafEntry::new(e.poff, head, e.addr(), e.tag())),
            Some(LeafEntry::new(rel, len, addr, 0)),
            (tail > 0).then(|| LeafEntry::new(rel + len, tail, tail_addr, 0)),
        ];
        let added = parts.iter().flatten().count() as u64 - 1;
        // The descent's early splits left the leaf room for two more entries.
        self.leaf_mut(leaf)
            .entries
            .splice(i - 1..i, parts.into_iter().flatten());
        self.extents += added;
        true
    }

    /// Removes whole entries starting at the boundary `off`, as many as fit in `max` bytes
    /// and lie in one leaf, shifts everything after them back, and rebalances. Returns the
    /// bytes removed (at least one entry's worth).
    pub(crate) fn remove_entries_at(&mut self, off: u64, max: u64) -> u64 {
        let LeafPos { leaf, frame } = self.descend(off, false);
        let pos = self.entries_at_or_before(leaf, off - frame) - 1;
        let entries = &self.leaf(leaf).entries;
        debug_assert_eq!(entries[pos].poff, off - frame, "not a boundary");
        let (mut end, mut removed) = (pos, 0u64);
        while end < entries.len() && removed + entries[end].len <= max {
            removed += entries[end].len;
            end += 1;
        }
        assert!(
            end > pos,
            "collapse range does not end on an extent boundary"
        );
        let node = self.leaf_mut(leaf);
        node.entries.drain(pos..end);
        node.trim();
        self.shift_leaf_from(leaf, pos, removed.wrapping_neg());
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
                let entries = &mut self.leaf_mut(l).entries;
                entries.reserve_exact(right.entries.len());
                entries.extend(right.entries.into_iter().map(|mut e| {
                    e.poff += fold;
                    e
                }));
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
            if pos == self.leaf(leaf).entries.len() {
                leaf = self.next_leaf[leaf as usize];
                debug_assert_ne!(leaf, NIL);
                pos = 0;
            }
            let e = &mut self.leaf_mut(leaf).entries[pos];
            e.set_addr(new_addr + done);
            done += e.len;
            pos += 1;
        }
        debug_assert_eq!(done, len);
    }
}
