//! FlexTree nodes and the arena that owns them.
//!
//! Nodes live in one `Vec` and are named by [`NodeId`] (their index), so a node keeps its
//! id for its whole life and `space` can map ids to on-disk slots for copy-on-write.
//! Every mutable access goes through [`FlexTree::leaf_mut`] / [`FlexTree::internal_mut`]
//! (or, for a node's birth and death, [`FlexTree::alloc`] / [`FlexTree::release`]), which
//! mark the node changed ([`FlexTree::changed`]): dirty, so no change can escape the next
//! checkpoint, and stamped, so no [`Hint`](super::Hint) into it outlives the change.
//!
//! Offsets inside nodes are *partial*: relative to the node's own start. The shift value
//! of a child pointer is the child's start relative to its parent, which is exactly the
//! pivot that separates it from its left sibling (0 for the first child), so it is stored
//! once, as that pivot. An entry's effective offset is the sum of the shifts on its path
//! plus its partial offset (see the module doc of [`crate::flextree`]).

use super::FlexTree;

/// The id of a node: its index in the tree's arena, stable for the node's life.
pub type NodeId = u32;

/// No node (the end of the leaf chain).
pub(crate) const NIL: NodeId = NodeId::MAX;

/// How many low bits of a leaf's address-and-tag word hold the physical address.
const ADDR_BITS: u32 = 56;
const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;

/// One extent of a leaf, as a value: `len` bytes starting at partial offset `poff`,
/// stored at physical address `addr` (or a hole), with an 8-bit tag. A [`Leaf`] does not
/// store it as such (see there); its accessors hand entries out and take them in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeafEntry {
    pub poff: u64,
    pub len: u64,
    addr_tag: u64,
}

/// An address and a tag in one word, as a leaf stores them.
fn addr_tag(addr: u64, tag: u8) -> u64 {
    debug_assert!(addr <= ADDR_MASK);
    addr | (u64::from(tag) << ADDR_BITS)
}

impl LeafEntry {
    pub fn new(poff: u64, len: u64, addr: u64, tag: u8) -> Self {
        LeafEntry {
            poff,
            len,
            addr_tag: addr_tag(addr, tag),
        }
    }

    /// The physical address; [`super::HOLE`] for an unmapped range.
    pub fn addr(&self) -> u64 {
        self.addr_tag & ADDR_MASK
    }

    pub fn tag(&self) -> u8 {
        (self.addr_tag >> ADDR_BITS) as u8
    }

    pub fn is_hole(&self) -> bool {
        self.addr() == super::HOLE
    }
}

/// A leaf's extents, in two arrays: the partial offsets, which a search reads, apart
/// from the addresses and tags, which only the entry found needs. No length is stored:
/// an entry ends where the next one starts, and the last where the leaf does (`span`).
/// Two arrays of 8-byte words take 16 bytes an extent where entries of offset, length
/// and address took 24 (most of a large space's tree memory), and the offsets a search
/// touches lie in a third of the lines (see [`Leaf::position`]).
///
/// Invariants (checked by [`FlexTree::check`]): both arrays have the same length; the
/// offsets rise strictly from 0 and stay below `span` (no entry is empty); an empty
/// leaf (only the root of an empty tree) has span 0.
#[derive(Clone, Debug, Default)]
pub(crate) struct Leaf {
    poffs: Vec<u64>,
    addr_tags: Vec<u64>,
    /// The leaf's length: where its last entry ends, relative to its start.
    span: u64,
}

/// Bytes a leaf stores per entry: an offset and an address-and-tag word (what the
/// memory tests count an extent as).
#[cfg(test)]
pub(crate) const ENTRY_BYTES: usize = 2 * std::mem::size_of::<u64>();

/// Entries a leaf's arrays grow by when full, and most they keep spare after they
/// shrink. A vector left to itself doubles: leaves fill to between a quarter and all
/// of their capacity, and doubling left them with about 1.8 times the room their
/// entries take, most of a large tree's memory.
const LEAF_GROWTH: usize = 8;

impl Leaf {
    /// A leaf of `entries`, which must lie end to end from 0 (an image's, a test's);
    /// `Err` says where they do not.
    pub fn from_entries(entries: &[LeafEntry]) -> Result<Leaf, String> {
        let mut leaf = Leaf {
            poffs: Vec::with_capacity(entries.len()),
            addr_tags: Vec::with_capacity(entries.len()),
            span: 0,
        };
        for (i, e) in entries.iter().enumerate() {
            if e.poff != leaf.span {
                return Err(format!(
                    "leaf entry {i} starts at {}, the one before ends at {}",
                    e.poff, leaf.span
                ));
            }
            if e.len == 0 {
                return Err(format!("leaf entry {i} is empty"));
            }
            leaf.span = leaf
                .span
                .checked_add(e.len)
                .ok_or_else(|| format!("leaf entry {i} ends past 2^64"))?;
            leaf.poffs.push(e.poff);
            leaf.addr_tags.push(e.addr_tag);
        }
        Ok(leaf)
    }

    /// Entries in the leaf.
    pub fn len(&self) -> usize {
        self.poffs.len()
    }

    /// The leaf's length in bytes.
    pub fn span(&self) -> u64 {
        self.span
    }

    /// The partial offsets, in order.
    pub fn poffs(&self) -> &[u64] {
        &self.poffs
    }

    /// Where entry `i` ends (the next one's start, or the leaf's end).
    pub fn end_of(&self, i: usize) -> u64 {
        self.poffs.get(i + 1).copied().unwrap_or(self.span)
    }

    /// Entry `i`.
    pub fn entry(&self, i: usize) -> LeafEntry {
        let poff = self.poffs[i];
        LeafEntry {
            poff,
            len: self.end_of(i) - poff,
            addr_tag: self.addr_tags[i],
        }
    }

    /// Every entry, in order.
    pub fn entries(&self) -> impl Iterator<Item = LeafEntry> + '_ {
        (0..self.len()).map(|i| self.entry(i))
    }

    /// The number of entries that start at or before the leaf-relative `rel`. The
    /// search asks for every line of the offsets first, so that the lines its probes
    /// land on come in together rather than one miss after another.
    pub fn position(&self, rel: u64) -> usize {
        crate::prefetch::prefetch(&self.poffs);
        self.poffs.partition_point(|&p| p <= rel)
    }

    /// Makes room for one more entry, growing by [`LEAF_GROWTH`] if full.
    fn reserve_one(&mut self) {
        if self.poffs.len() == self.poffs.capacity() {
            self.poffs.reserve_exact(LEAF_GROWTH);
        }
        if self.addr_tags.len() == self.addr_tags.capacity() {
            self.addr_tags.reserve_exact(LEAF_GROWTH);
        }
    }

    /// Inserts an entry starting at `poff` (an existing entry's start, which it takes
    /// over, or its middle, which cuts it, or the leaf's end) at index `i`, mapped to
    /// `addr` with `tag`. Nothing moves: the entry before it ends where it now starts,
    /// and it ends where the entry at `i` starts (or the leaf ends), so the caller
    /// [`shift_from`](Leaf::shift_from)s the entries after it by whatever it adds.
    pub fn insert(&mut self, i: usize, poff: u64, addr: u64, tag: u8) {
        self.reserve_one();
        self.poffs.insert(i, poff);
        self.addr_tags.insert(i, addr_tag(addr, tag));
    }

    /// Adds `delta` (wrapping, so a negative shift is `delta.wrapping_neg()`) to the
    /// offsets of the entries from `from` on and to the leaf's length: the entry before
    /// `from` grows or shrinks by `delta`.
    pub fn shift_from(&mut self, from: usize, delta: u64) {
        if let Some(later) = self.poffs.get_mut(from..) {
            later.iter_mut().for_each(|p| *p = p.wrapping_add(delta));
        }
        self.span = self.span.wrapping_add(delta);
    }

    /// Replaces entry `i` by `parts` (offset, address, tag), which must cover its range
    /// from its start without gaps (the last ending where it did).
    pub fn replace(&mut self, i: usize, parts: &[(u64, u64, u8)]) {
        self.poffs.splice(i..=i, parts.iter().map(|p| p.0));
        self.addr_tags
            .splice(i..=i, parts.iter().map(|&(_, a, t)| addr_tag(a, t)));
    }

    /// Removes entries `from..to` and moves the later ones back by the bytes they
    /// held; returns those bytes.
    pub fn remove(&mut self, from: usize, to: usize) -> u64 {
        let removed = self.end_of(to - 1) - self.poffs[from];
        self.poffs.drain(from..to);
        self.addr_tags.drain(from..to);
        self.shift_from(from, removed.wrapping_neg());
        self.trim();
        removed
    }

    pub fn set_addr(&mut self, i: usize, addr: u64) {
        debug_assert!(addr <= ADDR_MASK);
        self.addr_tags[i] = (self.addr_tags[i] & !ADDR_MASK) | addr;
    }

    pub fn set_tag(&mut self, i: usize, tag: u8) {
        self.addr_tags[i] = addr_tag(self.addr_tags[i] & ADDR_MASK, tag);
    }

    /// Moves the entries from `at` on into a new leaf of their own, rebased to start at
    /// 0; returns it and the offset it starts at in this one (this leaf's new length).
    pub fn split_off(&mut self, at: usize) -> (Leaf, u64) {
        let mut poffs = self.poffs.split_off(at);
        let addr_tags = self.addr_tags.split_off(at);
        let separator = poffs[0];
        poffs.iter_mut().for_each(|p| *p -= separator);
        let upper = Leaf {
            poffs,
            addr_tags,
            span: self.span - separator,
        };
        self.span = separator;
        self.trim();
        (upper, separator)
    }

    /// Appends the entries of `right`, which starts where this leaf ends.
    pub fn append(&mut self, right: Leaf) {
        let fold = self.span;
        self.poffs.reserve_exact(right.len());
        self.addr_tags.reserve_exact(right.len());
        self.poffs.extend(right.poffs.iter().map(|p| p + fold));
        self.addr_tags.extend(right.addr_tags);
        self.span = fold + right.span;
    }

    /// Gives back room beyond [`LEAF_GROWTH`] spare entries, once there is twice that.
    fn trim(&mut self) {
        for v in [&mut self.poffs, &mut self.addr_tags] {
            if v.capacity() - v.len() > 2 * LEAF_GROWTH {
                v.shrink_to(v.len() + LEAF_GROWTH);
            }
        }
    }

    /// Bytes the leaf's arrays hold room for.
    pub fn memory_bytes(&self) -> usize {
        (self.poffs.capacity() + self.addr_tags.capacity()) * std::mem::size_of::<u64>()
    }
}

/// `pivots[i]` is the start of `children[i + 1]` relative to this node's start: the shift
/// value of that child pointer. The first child starts where the node starts (shift 0),
/// so it has no pivot.
#[derive(Clone, Debug, Default)]
pub(crate) struct Internal {
    pub pivots: Vec<u64>,
    pub children: Vec<NodeId>,
}

impl Internal {
    /// The shift value of the pointer to child `i`: its start relative to this node.
    pub fn shift(&self, i: usize) -> u64 {
        if i == 0 {
            0
        } else {
            self.pivots[i - 1]
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Node {
    Leaf(Leaf),
    Internal(Internal),
    Free,
}

impl FlexTree {
    /// Bytes of memory the tree holds: its nodes' allocations (what their vectors have
    /// room for, not only what they hold) and its per-node tables.
    pub fn memory_bytes(&self) -> u64 {
        use std::mem::size_of;
        let nodes: usize = self
            .nodes
            .iter()
            .map(|n| match n {
                Node::Leaf(l) => l.memory_bytes(),
                Node::Internal(i) => {
                    i.pivots.capacity() * size_of::<u64>()
                        + i.children.capacity() * size_of::<NodeId>()
                }
                Node::Free => 0,
            })
            .sum();
        let tables = self.nodes.capacity() * size_of::<Node>()
            + self.dirty.capacity()
            + self.next_leaf.capacity() * size_of::<NodeId>()
            + self.stamps.capacity() * size_of::<u64>()
            + (self.free.capacity() + self.freed.capacity()) * size_of::<NodeId>();
        (nodes + tables) as u64
    }

    pub(crate) fn alloc(&mut self, node: Node) -> NodeId {
        let id = match self.free.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                let id = NodeId::try_from(self.nodes.len())
                    .ok()
                    .filter(|&id| id != NIL)
                    .expect("FlexTree node ids exhausted");
                self.nodes.push(node);
                self.dirty.push(false);
                self.next_leaf.push(NIL);
                self.stamps.push(0);
                id
            }
        };
        self.changed(id);
        self.next_leaf[id as usize] = NIL;
        id
    }

    /// Marks node `id` changed: dirty for the next checkpoint, and stamped, so that no
    /// [`Hint`](super::Hint) into it made before holds any more. Every change to a node
    /// goes through here.
    pub(crate) fn changed(&mut self, id: NodeId) {
        self.dirty[id as usize] = true;
        self.restamp(id);
    }

    /// Stamps node `id` with the next count of changes.
    fn restamp(&mut self, id: NodeId) {
        self.changes += 1;
        self.stamps[id as usize] = self.changes;
    }

    /// The stamp of node `id`'s last change.
    pub(crate) fn stamp(&self, id: NodeId) -> u64 {
        self.stamps[id as usize]
    }

    /// Returns a node's slot to the arena; `take` the node out first if it is still needed.
    pub(crate) fn release(&mut self, id: NodeId) {
        self.nodes[id as usize] = Node::Free;
        self.changed(id);
        self.dirty[id as usize] = false;
        self.next_leaf[id as usize] = NIL;
        self.free.push(id);
        self.freed.push(id);
    }

    pub(crate) fn take(&mut self, id: NodeId) -> Node {
        self.restamp(id);
        std::mem::replace(&mut self.nodes[id as usize], Node::Free)
    }

    pub(crate) fn is_leaf(&self, id: NodeId) -> bool {
        matches!(self.nodes[id as usize], Node::Leaf(_))
    }

    pub(crate) fn leaf(&self, id: NodeId) -> &Leaf {
        match &self.nodes[id as usize] {
            Node::Leaf(l) => l,
            other => panic!("node {id} is not a leaf: {other:?}"),
        }
    }

    pub(crate) fn internal(&self, id: NodeId) -> &Internal {
        match &self.nodes[id as usize] {
            Node::Internal(n) => n,
            other => panic!("node {id} is not internal: {other:?}"),
        }
    }

    pub(crate) fn leaf_mut(&mut self, id: NodeId) -> &mut Leaf {
        self.changed(id);
        match &mut self.nodes[id as usize] {
            Node::Leaf(l) => l,
            other => panic!("node {id} is not a leaf: {other:?}"),
        }
    }

    pub(crate) fn internal_mut(&mut self, id: NodeId) -> &mut Internal {
        self.changed(id);
        match &mut self.nodes[id as usize] {
            Node::Internal(n) => n,
            other => panic!("node {id} is not internal: {other:?}"),
        }
    }

    /// Entries of a leaf or children of an internal node.
    pub(crate) fn fill(&self, id: NodeId) -> usize {
        match &self.nodes[id as usize] {
            Node::Leaf(l) => l.len(),
            Node::Internal(n) => n.children.len(),
            Node::Free => 0,
        }
    }

    /// Full means one short of capacity: an insert into the middle of an extent adds two
    /// entries (the split-off tail and the new extent), and splitting a child adds one
    /// child, so a node is split on the way down before it could overflow.
    pub(crate) fn is_full(&self, id: NodeId) -> bool {
        let (fill, capacity) = match &self.nodes[id as usize] {
            Node::Leaf(l) => (l.len(), self.opts.leaf_capacity),
            Node::Internal(n) => (n.children.len(), self.opts.internal_capacity),
            Node::Free => panic!("capacity of a free node {id}"),
        };
        fill + 1 >= capacity
    }

    /// The most entries (or children) node `id` may hold.
    pub(crate) fn capacity(&self, id: NodeId) -> usize {
        if self.is_leaf(id) {
            self.opts.leaf_capacity
        } else {
            self.opts.internal_capacity
        }
    }

    /// The fewest entries (or children) a non-root node may keep; below it, a removal
    /// merges the node with a sibling.
    pub(crate) fn min_fill(&self, id: NodeId) -> usize {
        if self.is_leaf(id) {
            (self.opts.leaf_capacity / 4).max(1)
        } else {
            (self.opts.internal_capacity / 4).max(2)
        }
    }
}
