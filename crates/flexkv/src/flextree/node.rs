//! FlexTree nodes and the arena that owns them.
//!
//! Nodes live in one `Vec` and are named by [`NodeId`] (their index), so a node keeps its
//! id for its whole life and `space` can map ids to on-disk slots for copy-on-write.
//! Every mutable access goes through [`FlexTree::leaf_mut`] / [`FlexTree::internal_mut`],
//! which set the node's dirty flag: no change can escape the next checkpoint.
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

/// How many low bits of [`LeafEntry::addr_tag`] hold the physical address.
const ADDR_BITS: u32 = 56;
const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;

/// One extent in a leaf: `len` bytes starting at partial offset `poff`, stored at physical
/// address `addr` (or a hole), with an 8-bit tag. Address and tag share one word so that an
/// entry is 24 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeafEntry {
    pub poff: u64,
    pub len: u64,
    addr_tag: u64,
}

impl LeafEntry {
    pub fn new(poff: u64, len: u64, addr: u64, tag: u8) -> Self {
        debug_assert!(addr <= ADDR_MASK);
        LeafEntry {
            poff,
            len,
            addr_tag: addr | (u64::from(tag) << ADDR_BITS),
        }
    }

    /// The physical address; [`super::HOLE`] for an unmapped range.
    pub fn addr(&self) -> u64 {
        self.addr_tag & ADDR_MASK
    }

    pub fn tag(&self) -> u8 {
        (self.addr_tag >> ADDR_BITS) as u8
    }

    pub fn set_addr(&mut self, addr: u64) {
        debug_assert!(addr <= ADDR_MASK);
        self.addr_tag = (self.addr_tag & !ADDR_MASK) | addr;
    }

    pub fn set_tag(&mut self, tag: u8) {
        self.addr_tag = self.addr() | (u64::from(tag) << ADDR_BITS);
    }

    pub fn is_hole(&self) -> bool {
        self.addr() == super::HOLE
    }
}

#[derive(Debug, Default)]
pub(crate) struct Leaf {
    pub entries: Vec<LeafEntry>,
}

/// Entries a leaf's vector grows by when full, and most it keeps spare after it
/// shrinks. A vector left to itself doubles: leaves fill to between a quarter and all
/// of their capacity, and doubling left them with about 1.8 times the room their
/// entries take, most of a large tree's memory.
const LEAF_GROWTH: usize = 8;

impl Leaf {
    /// Inserts `e` at `i`, growing the vector by [`LEAF_GROWTH`] entries if it is full.
    pub fn insert(&mut self, i: usize, e: LeafEntry) {
        if self.entries.len() == self.entries.capacity() {
            self.entries.reserve_exact(LEAF_GROWTH);
        }
        self.entries.insert(i, e);
    }

    /// Gives back room beyond [`LEAF_GROWTH`] spare entries, once there is twice that.
    pub fn trim(&mut self) {
        if self.entries.capacity() - self.entries.len() > 2 * LEAF_GROWTH {
            self.entries.shrink_to(self.entries.len() + LEAF_GROWTH);
        }
    }
}

/// `pivots[i]` is the start of `children[i + 1]` relative to this node's start: the shift
/// value of that child pointer. The first child starts where the node starts (shift 0),
/// so it has no pivot.
#[derive(Debug, Default)]
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

#[derive(Debug)]
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
                Node::Leaf(l) => l.entries.capacity() * size_of::<LeafEntry>(),
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
                id
            }
        };
        self.dirty[id as usize] = true;
        self.next_leaf[id as usize] = NIL;
        id
    }

    /// Returns a node's slot to the arena; `take` the node out first if it is still needed.
    pub(crate) fn release(&mut self, id: NodeId) {
        self.nodes[id as usize] = Node::Free;
        self.dirty[id as usize] = false;
        self.next_leaf[id as usize] = NIL;
        self.free.push(id);
        self.freed.push(id);
    }

    pub(crate) fn take(&mut self, id: NodeId) -> Node {
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
        self.dirty[id as usize] = true;
        match &mut self.nodes[id as usize] {
            Node::Leaf(l) => l,
            other => panic!("node {id} is not a leaf: {other:?}"),
        }
    }

    pub(crate) fn internal_mut(&mut self, id: NodeId) -> &mut Internal {
        self.dirty[id as usize] = true;
        match &mut self.nodes[id as usize] {
            Node::Internal(n) => n,
            other => panic!("node {id} is not internal: {other:?}"),
        }
    }

    /// Entries of a leaf or children of an internal node.
    pub(crate) fn fill(&self, id: NodeId) -> usize {
        match &self.nodes[id as usize] {
            Node::Leaf(l) => l.entries.len(),
            Node::Internal(n) => n.children.len(),
            Node::Free => 0,
        }
    }

    /// Full means one short of capacity: an insert into the middle of an extent adds two
    /// entries (the split-off tail and the new extent), and splitting a child adds one
    /// child, so a node is split on the way down before it could overflow.
    pub(crate) fn is_full(&self, id: NodeId) -> bool {
        let (fill, capacity) = match &self.nodes[id as usize] {
            Node::Leaf(l) => (l.entries.len(), self.opts.leaf_capacity),
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
