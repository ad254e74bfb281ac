//! Reading a FlexTree: point lookups, range queries and extent iteration.
//!
//! A read descends once to find the starting extent, then walks the leaf chain. Walking
//! needs no shift values: the leaf level is contiguous (holes are explicit entries), so
//! each extent starts where the previous one ended (FlexTree §3.2, "Querying Mappings").

use super::node::{Leaf, Node, NodeId, NIL};
use super::{Extent, FlexTree, Run};

/// An iterator over the extents of a [`FlexTree`] in address-space order, from
/// [`FlexTree::extents_from`] or [`FlexTree::extents`].
#[derive(Clone, Debug)]
pub struct Extents<'a> {
    tree: &'a FlexTree,
    /// The current leaf's node: its successor is looked up only when the iterator gets
    /// there, so a point lookup never touches the leaf chain.
    leaf: NodeId,
    /// The current leaf (`None` past the end).
    current: Option<&'a Leaf>,
    /// The index in it of the next entry to yield.
    next: usize,
    offset: u64,
}

impl Extents<'_> {
    /// Moves to the next leaf; `None` at the end. Kept out of line: `next` crosses a leaf
    /// once per dozens of extents.
    #[cold]
    #[inline(never)]
    fn next_leaf(&mut self) -> Option<()> {
        if self.leaf == NIL {
            return None;
        }
        self.leaf = self.tree.next_leaf[self.leaf as usize];
        if self.leaf == NIL {
            self.current = None;
            return None;
        }
        self.current = Some(self.tree.leaf(self.leaf));
        self.next = 0;
        Some(())
    }
}

impl Iterator for Extents<'_> {
    type Item = Extent;

    #[inline]
    fn next(&mut self) -> Option<Extent> {
        loop {
            let leaf = self.current?;
            if self.next < leaf.len() {
                let e = leaf.entry(self.next);
                self.next += 1;
                let offset = self.offset;
                self.offset += e.len;
                return Some(Extent {
                    offset,
                    len: e.len,
                    addr: (!e.is_hole()).then(|| e.addr()),
                    tag: e.tag(),
                });
            }
            self.next_leaf()?;
        }
    }
}

impl FlexTree {
    /// Descends without changing anything; returns the leaf holding `off`, the index of
    /// the entry that holds it, and that entry's effective start. `off < len()`.
    fn locate(&self, off: u64) -> (NodeId, usize, u64) {
        debug_assert!(off < self.size);
        let (mut id, mut frame) = (self.root, 0u64);
        loop {
            match &self.nodes[id as usize] {
                Node::Internal(node) => {
                    // As a leaf's search (`Leaf::position`), with the lines asked for
                    // first.
                    crate::prefetch::prefetch(&node.pivots);
                    let idx = node.pivots.partition_point(|&p| p <= off - frame);
                    frame += node.shift(idx);
                    id = node.children[idx];
                }
                Node::Leaf(leaf) => {
                    let pos = leaf.position(off - frame) - 1;
                    return (id, pos, frame + leaf.poffs()[pos]);
                }
                Node::Free => panic!("descent reached a free node {id}"),
            }
        }
    }

    /// The extent that holds byte `off`, or `None` if `off >= len()`.
    pub fn lookup(&self, off: u64) -> Option<Extent> {
        self.extents_from(off).next()
    }

    /// The extents from the one holding byte `off` to the end of the space (none if
    /// `off >= len()`). The first extent may start before `off`.
    pub fn extents_from(&self, off: u64) -> Extents<'_> {
        if off >= self.size {
            return Extents {
                tree: self,
                leaf: NIL,
                current: None,
                next: 0,
                offset: self.size,
            };
        }
        let (leaf, pos, offset) = self.locate(off);
        Extents {
            tree: self,
            leaf,
            current: Some(self.leaf(leaf)),
            next: pos,
            offset,
        }
    }

    /// All extents, in order.
    pub fn extents(&self) -> Extents<'_> {
        self.extents_from(0)
    }

    /// The physical runs that map `[off, off + len)`, in order, into `out` (cleared first):
    /// one run per extent touched, the first and last cut to the range. Holes come back as
    /// runs with no address.
    pub fn query_into(&self, off: u64, len: u64, out: &mut Vec<Run>) -> crate::Result<()> {
        out.clear();
        self.check_range("query", off, len)?;
        let end = off + len;
        for e in self.extents_from(off) {
            if e.offset >= end {
                break;
            }
            let from = off.max(e.offset);
            let to = end.min(e.offset + e.len);
            out.push(Run {
                addr: e.addr.map(|a| a + (from - e.offset)),
                len: to - from,
            });
        }
        Ok(())
    }

    /// [`FlexTree::query_into`] into a new vector.
    pub fn query(&self, off: u64, len: u64) -> crate::Result<Vec<Run>> {
        let mut out = Vec::new();
        self.query_into(off, len, &mut out)?;
        Ok(out)
    }

    /// The tag of the extent that starts exactly at `off`; `None` if no extent starts there.
    pub fn tag_at(&self, off: u64) -> Option<u8> {
        self.lookup(off).filter(|e| e.offset == off).map(|e| e.tag)
    }
}
