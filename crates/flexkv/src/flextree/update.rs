//! The structural changes of FlexTree: descending with early splits, shifting every
//! later extent in O(log n), and merging underfull nodes with shift folding.
//!
//! Invariants kept here (and checked by [`FlexTree::check`]):
//! - A split moves the upper half of a node into a new sibling whose pointer inherits the
//!   old pointer's shift, and the new pivot is the median's partial offset plus that shift
//!   (FlexTree §3.2, Figure 5), so no moved entry changes its effective offset.
//! - A shift of `delta` after a leaf position adds `delta` to the later entries of that
//!   leaf and, on every ancestor, to the shifts of the pointers after the path and the
//!   pivots after the path: each later extent sees exactly one of these additions.
//! - A merge folds the difference of the two pointers' shifts into the right node's
//!   partial offsets (and its children's shifts), so effective offsets are unchanged.

use super::node::{Child, Internal, Leaf, LeafEntry, Node, NodeId, NIL};
use super::FlexTree;

/// One step of a root-to-leaf path: the internal node and the index of the child taken.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Step {
    pub node: NodeId,
    pub idx: usize,
}

/// Where a descent ended: the leaf and its frame. The steps are left in `FlexTree::path`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeafPos {
    pub leaf: NodeId,
    pub frame: u64,
}

impl FlexTree {
    /// The index of the child of `id` whose range holds `off`: the number of pivots at or
    /// before `off`. Pivots are compared as effective offsets, never as raw partials.
    pub(crate) fn child_index(&self, id: NodeId, frame: u64, off: u64) -> usize {
        self.internal(id)
            .pivots
            .partition_point(|&p| frame.wrapping_add(p) <= off)
    }

    /// The number of entries of `leaf` that start at or before `off`.
    pub(crate) fn entries_at_or_before(&self, leaf: NodeId, frame: u64, off: u64) -> usize {
        self.leaf(leaf)
            .entries
            .partition_point(|e| frame.wrapping_add(e.poff) <= off)
    }

    /// Descends to the leaf that holds `off` (the last leaf for `off == len()`), recording
    /// the path in `self.path`. With `split_full`, every full node met on the way is split
    /// first, so the leaf and all its ancestors have room for what the caller adds.
    pub(crate) fn descend(&mut self, off: u64, split_full: bool) -> LeafPos {
        if split_full && self.is_full(self.root) {
            let old = self.root;
            self.root = self.alloc(Node::Internal(Internal {
                pivots: Vec::new(),
                children: vec![Child { id: old, shift: 0 }],
            }));
            self.height += 1;
            self.split_child(self.root, 0);
        }
        self.path.clear();
        let (mut id, mut frame) = (self.root, 0u64);
        while !self.is_leaf(id) {
            let mut idx = self.child_index(id, frame, off);
            if split_full && self.is_full(self.internal(id).children[idx].id) {
                self.split_child(id, idx);
                idx = self.child_index(id, frame, off);
            }
            self.path.push(Step { node: id, idx });
            let child = self.internal(id).children[idx];
            frame = frame.wrapping_add(child.shift);
            id = child.id;
        }
        LeafPos { leaf: id, frame }
    }

    /// Splits the full child at `idx` of `parent` into two (FlexTree §3.2, Figure 5).
    pub(crate) fn split_child(&mut self, parent: NodeId, idx: usize) {
        let old = self.internal(parent).children[idx];
        let (new_node, separator) = match &mut self.nodes[old.id as usize] {
            Node::Leaf(leaf) => {
                let upper = leaf.entries.split_off(leaf.entries.len() / 2);
                let separator = upper[0].poff;
                (Node::Leaf(Leaf { entries: upper }), separator)
            }
            Node::Internal(node) => {
                let mid = node.children.len() / 2;
                let children = node.children.split_off(mid);
                let pivots = node.pivots.split_off(mid);
                let separator = node.pivots.pop().expect("a full node has pivots");
                (Node::Internal(Internal { pivots, children }), separator)
            }
            Node::Free => panic!("split of a free node {}", old.id),
        };
        self.dirty[old.id as usize] = true;
        let new_id = self.alloc(new_node);
        if self.is_leaf(new_id) {
            self.next_leaf[new_id as usize] = self.next_leaf[old.id as usize];
            self.next_leaf[old.id as usize] = new_id;
        }
        let p = self.internal_mut(parent);
        p.children.insert(
            idx + 1,
            Child {
                id: new_id,
                shift: old.shift,
            },
        );
        p.pivots.insert(idx, separator.wrapping_add(old.shift));
    }

    /// Adds `delta` (wrapping; a negative shift is a large `u64`) to everything after the
    /// recorded path on every ancestor: pointers after the path and the pivots that start
    /// them. The leaf's own later entries are the caller's to shift.
    pub(crate) fn shift_after_path(&mut self, delta: u64) {
        for i in 0..self.path.len() {
            let Step { node, idx, .. } = self.path[i];
            let n = self.internal_mut(node);
            for c in &mut n.children[idx + 1..] {
                c.shift = c.shift.wrapping_add(delta);
            }
            for p in &mut n.pivots[idx..] {
                *p = p.wrapping_add(delta);
            }
        }
    }

    /// Adds `delta` to the partial offsets of the entries of `leaf` from `from` on.
    pub(crate) fn shift_leaf_from(&mut self, leaf: NodeId, from: usize, delta: u64) {
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
        self.boundary_in_leaf(leaf, frame, off);
    }

    /// Makes `off` an entry boundary inside `leaf` (which holds `off` and has room for one
    /// more entry) and returns the index of the entry that starts at `off`, or the number
    /// of entries if `off` is the leaf's end.
    fn boundary_in_leaf(&mut self, leaf: NodeId, frame: u64, off: u64) -> usize {
        let i = self.entries_at_or_before(leaf, frame, off);
        let Some(&e) = self.leaf(leaf).entries.get(i.wrapping_sub(1)) else {
            return 0; // an empty (root) leaf
        };
        let start = frame.wrapping_add(e.poff);
        if start == off {
            return i - 1;
        }
        if off >= start + e.len {
            return i; // the end of the leaf
        }
        let head = off - start;
        let tail = LeafEntry::new(
            e.poff.wrapping_add(head),
            e.len - head,
            if e.is_hole() {
                e.addr()
            } else {
                e.addr() + head
            },
            0,
        );
        let entries = &mut self.leaf_mut(leaf).entries;
        entries[i - 1].len = head;
        entries.insert(i, tail);
        self.extents += 1;
        i
    }

    /// Inserts one entry of `len` bytes at `off` (`off <= len()`), shifting everything
    /// after it forward (FlexTree §3.2, Figure 4). One descent: the early splits leave the
    /// leaf room for both the split-off tail and the new entry.
    pub(crate) fn insert_entry(&mut self, off: u64, len: u64, addr: u64) {
        let LeafPos { leaf, frame } = self.descend(off, true);
        let pos = self.boundary_in_leaf(leaf, frame, off);
        let entry = LeafEntry::new(off.wrapping_sub(frame), len, addr, 0);
        self.leaf_mut(leaf).entries.insert(pos, entry);
        self.shift_leaf_from(leaf, pos + 1, len);
        self.shift_after_path(len);
        self.size += len;
        self.extents += 1;
    }

    /// Removes whole entries starting at the boundary `off`, as many as fit in `max` bytes
    /// and lie in one leaf, shifts everything after them back, and rebalances. Returns the
    /// bytes removed (at least one entry's worth).
    pub(crate) fn remove_entries_at(&mut self, off: u64, max: u64) -> u64 {
        let LeafPos { leaf, frame } = self.descend(off, false);
        let entries = &self.leaf(leaf).entries;
        let pos = self.entries_at_or_before(leaf, frame, off) - 1;
        debug_assert_eq!(frame.wrapping_add(entries[pos].poff), off, "not a boundary");
        let (mut end, mut removed) = (pos, 0u64);
        while end < entries.len() && removed + entries[end].len <= max {
            removed += entries[end].len;
            end += 1;
        }
        assert!(
            end > pos,
            "collapse range does not end on an extent boundary"
        );
        self.leaf_mut(leaf).entries.drain(pos..end);
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
            let Step {
                node: parent, idx, ..
            } = self.path[level];
            let left = idx.saturating_sub(1);
            self.merge_children(parent, left);
            if self.is_full(self.internal(parent).children[left].id) {
                self.split_child(parent, left);
            }
            node = parent;
        }
        self.shrink_root();
    }

    /// Merges child `left + 1` of `parent` into child `left` (FlexTree §3.2, Figure 8).
    pub(crate) fn merge_children(&mut self, parent: NodeId, left: usize) {
        let p = self.internal(parent);
        let (l, r, separator) = (p.children[left], p.children[left + 1], p.pivots[left]);
        // The right node's offsets move from its frame to the left node's frame.
        let delta = r.shift.wrapping_sub(l.shift);
        match self.take(r.id) {
            Node::Leaf(right) => {
                let entries = &mut self.leaf_mut(l.id).entries;
                entries.extend(right.entries.into_iter().map(|mut e| {
                    e.poff = e.poff.wrapping_add(delta);
                    e
                }));
                self.next_leaf[l.id as usize] = self.next_leaf[r.id as usize];
            }
            Node::Internal(right) => {
                let node = self.internal_mut(l.id);
                node.pivots.push(separator.wrapping_sub(l.shift));
                node.pivots
                    .extend(right.pivots.iter().map(|p| p.wrapping_add(delta)));
                node.children.extend(right.children.iter().map(|c| Child {
                    id: c.id,
                    shift: c.shift.wrapping_add(delta),
                }));
            }
            Node::Free => panic!("merge with a free node {}", r.id),
        }
        self.release(r.id);
        let p = self.internal_mut(parent);
        p.children.remove(left + 1);
        p.pivots.remove(left);
    }

    /// While the root is an internal node with one child, the child becomes the root, with
    /// the dropped pointer's shift folded into it.
    fn shrink_root(&mut self) {
        while !self.is_leaf(self.root) && self.fill(self.root) == 1 {
            let only = self.internal(self.root).children[0];
            if only.shift != 0 {
                self.add_to_frame(only.id, only.shift);
            }
            self.release(self.root);
            self.root = only.id;
            self.height -= 1;
        }
    }

    /// Adds `delta` to the effective frame of everything in node `id`'s own offsets.
    fn add_to_frame(&mut self, id: NodeId, delta: u64) {
        if self.is_leaf(id) {
            self.shift_leaf_from(id, 0, delta);
        } else {
            let n = self.internal_mut(id);
            n.pivots.iter_mut().for_each(|p| *p = p.wrapping_add(delta));
            n.children
                .iter_mut()
                .for_each(|c| c.shift = c.shift.wrapping_add(delta));
        }
    }

    /// Rewrites the addresses of the entries covering `[off, off + len)` (both ends already
    /// boundaries) to `new_addr + (entry offset - off)`.
    pub(crate) fn rewrite_addrs(&mut self, off: u64, len: u64, new_addr: u64) {
        let LeafPos { mut leaf, frame } = self.descend(off, false);
        let mut pos = self.entries_at_or_before(leaf, frame, off) - 1;
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
