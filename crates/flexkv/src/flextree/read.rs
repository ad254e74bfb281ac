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

/// Where in the tree a range started when a search found it: the leaf, the entry in it
/// and how far into that entry the range's first byte lay, with the leaf's stamp then.
/// [`FlexTree::extents_hinted`] starts there without a descent for as long as the leaf
/// has not changed since (its stamp is the same), given the range's offset now.
///
/// Why that is enough: the leaf's entries lie in the same order at the same distances
/// from one another until the leaf changes; a change anywhere before the leaf (an insert
/// or a collapse in an earlier one) moves the whole leaf and the range's first byte by
/// the same amount, and a change after it moves neither. So the first byte is still
/// `within` bytes into the same entry. The caller must give the offset the same byte has
/// now (the sorted keyspace keeps hints per interval, whose offsets its index tracks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hint {
    pub(crate) leaf: NodeId,
    pub(crate) stamp: u64,
    pub(crate) pos: u32,
    pub(crate) within: u64,
}

impl FlexTree {
    /// The extents from the one holding byte `off` to the end of the space, as
    /// [`FlexTree::extents_from`] gives them, starting at `hint` without a descent if it
    /// still holds (see [`Hint`]: `off` must be where the hinted byte lies now); also the
    /// hint for `off` now (`hint` itself if it held). `off < len()`.
    pub fn extents_hinted(&self, off: u64, hint: Option<Hint>) -> (Extents<'_>, Option<Hint>) {
        if let Some(h) = hint.filter(|h| self.holds(h) && h.within <= off) {
            let leaf = self.leaf(h.leaf);
            let extents = Extents {
                tree: self,
                leaf: h.leaf,
                current: Some(leaf),
                next: h.pos as usize,
                offset: off - h.within,
            };
            return (extents, Some(h));
        }
        if off >= self.size {
            return (self.extents_from(off), None);
        }
        let (leaf, pos, offset) = self.locate(off);
        let hint = Hint {
            leaf,
            stamp: self.stamp(leaf),
            pos: pos as u32,
            within: off - offset,
        };
        let extents = Extents {
            tree: self,
            leaf,
            current: Some(self.leaf(leaf)),
            next: pos,
            offset,
        };
        (extents, Some(hint))
    }

    /// Asks the processor for what [`FlexTree::extents_hinted`] looks at first when
    /// `h` holds: the leaf's stamp and node (the entries themselves are behind the
    /// node, which has to arrive before they can be asked for).
    pub fn prefetch_hint(&self, h: &Hint) {
        let at = h.leaf as usize;
        crate::prefetch::prefetch(self.stamps.get(at..at + 1).unwrap_or_default());
        crate::prefetch::prefetch(self.nodes.get(at..at + 1).unwrap_or_default());
    }

    /// Whether `h` still holds: its leaf has not changed since it was made.
    pub fn holds(&self, h: &Hint) -> bool {
        (h.leaf as usize) < self.stamps.len() && self.stamp(h.leaf) == h.stamp
    }

    /// The hint for the extent `extents` yielded last, which holds byte `off`, or `None`
    /// if it has yielded none.
    pub fn hint_at(&self, extents: &Extents<'_>, off: u64, last: &Extent) -> Option<Hint> {
        if extents.next == 0 || extents.current.is_none() || off < last.offset {
            return None;
        }
        Some(Hint {
            leaf: extents.leaf,
            stamp: self.stamp(extents.leaf),
            pos: (extents.next - 1) as u32,
            within: off - last.offset,
        })
    }

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
        self.check_range("query", off, len)?;
        runs_of(self.extents_from(off), off, len, out);
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

/// The physical runs that map `[off, off + len)` into `out` (cleared first), from
/// `extents`, which start at the extent holding `off` ([`FlexTree::query_into`]).
pub(crate) fn runs_of(extents: Extents<'_>, off: u64, len: u64, out: &mut Vec<Run>) {
    out.clear();
    let end = off + len;
    for e in extents {
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
}
