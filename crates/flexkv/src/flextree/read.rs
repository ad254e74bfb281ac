//! Reading a FlexTree: point lookups, range queries and extent iteration.
//!
//! A read descends once to find the starting extent, then walks the leaf chain. Walking
//! needs no shift values: the leaf level is contiguous (holes are explicit entries), so
//! each extent starts where the previous one ended (FlexTree §3.2, "Querying Mappings").

use super::node::{NodeId, NIL};
use super::{Extent, FlexTree, Run};

/// An iterator over the extents of a [`FlexTree`] in address-space order, from
/// [`FlexTree::extents_from`] or [`FlexTree::extents`].
#[derive(Clone, Debug)]
pub struct Extents<'a> {
    tree: &'a FlexTree,
    leaf: NodeId,
    pos: usize,
    offset: u64,
}

impl Iterator for Extents<'_> {
    type Item = Extent;

    fn next(&mut self) -> Option<Extent> {
        while self.leaf != NIL {
            let entries = &self.tree.leaf(self.leaf).entries;
            if let Some(e) = entries.get(self.pos) {
                let extent = Extent {
                    offset: self.offset,
                    len: e.len,
                    addr: (!e.is_hole()).then(|| e.addr()),
                    tag: e.tag(),
                };
                self.pos += 1;
                self.offset += e.len;
                return Some(extent);
            }
            self.leaf = self.tree.next_leaf[self.leaf as usize];
            self.pos = 0;
        }
        None
    }
}

impl FlexTree {
    /// Descends without changing anything; returns the leaf holding `off`, the index of
    /// the entry that holds it, and that entry's effective start. `off < len()`.
    fn locate(&self, off: u64) -> (NodeId, usize, u64) {
        debug_assert!(off < self.size);
        let (mut id, mut frame) = (self.root, 0u64);
        while !self.is_leaf(id) {
            let child = self.internal(id).children[self.child_index(id, frame, off)];
            frame = frame.wrapping_add(child.shift);
            id = child.id;
        }
        let pos = self.entries_at_or_before(id, frame, off) - 1;
        let start = frame.wrapping_add(self.leaf(id).entries[pos].poff);
        (id, pos, start)
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
                pos: 0,
                offset: self.size,
            };
        }
        let (leaf, pos, offset) = self.locate(off);
        Extents {
            tree: self,
            leaf,
            pos,
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
