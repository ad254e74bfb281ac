//! FlexTree: an extent index with O(log n) insert-range and collapse-range.
//!
//! A FlexTree maps a byte-granular logical address space `[0, len())` onto physical
//! addresses, as a list of extents `(length, address)`. It is the B+-tree of FlexSpace
//! §3 ("Efficient Data Management with a Flexible Address Space"): entries store
//! *partial* offsets, every child pointer carries a *shift* value, and an entry's
//! effective offset is the sum of the shifts on its path plus its partial offset. Shifting
//! every extent after a point (an insert or a collapse) then updates one pointer per level
//! instead of every later entry.
//!
//! # Each node is relative to itself
//! flexkv applies the paper's rebasing (§3.3: subtract a node's smallest partial offset
//! and add it to the shift on the pointer to the node) eagerly, after every change: each
//! node's partial offsets are relative to the node's own start. The shift value on the
//! pointer to child `i` is then the child's start within its parent, which is exactly the
//! pivot between child `i - 1` and child `i`, so the shift is stored once, as that pivot.
//! Effective offset = sum of the shifts on the path + partial offset, as in the paper.
//! Two things follow. A child pointer is a bare 4-byte id, as in a plain B+-tree; storing a
//! separate 64-bit shift beside it made lookups ~20% slower at 10^6 extents by pushing the
//! internal nodes out of cache (measured with `flexkv-bench paper-flextree`). And every
//! partial offset lies within its node's span, so none can overflow or need rebasing.
//!
//! # Holes and tags
//! An unmapped range is an explicit extent at address [`HOLE`], so the leaf level is
//! always contiguous (a write past the end inserts a hole first). Each extent carries an
//! 8-bit tag, kept by the extent that starts at the tagged offset; splitting an extent
//! gives the tail tag 0. The sorted keyspace marks interval heads with tags.
//!
//! # Shape
//! Nodes split one entry before they are full, on the way down (an insert into the middle
//! of an extent adds two entries). A node left under a quarter full by a removal merges with
//! a sibling, or, if the two do not fit in one node, the pair is redistributed evenly.
//! Nodes carry ids and dirty flags for copy-on-write persistence by `space`.
//!
//! ```
//! use flexkv::flextree::{FlexTree, Run};
//!
//! let mut t = FlexTree::new();
//! t.insert(0, 100, 5000)?;          // [0, 100) -> 5000..5100
//! t.insert(40, 10, 9000)?;          // splits it; [50, 110) moves up by 10
//! assert_eq!(t.len(), 110);
//! assert_eq!(
//!     t.query(35, 20)?,
//!     vec![
//!         Run { addr: Some(5035), len: 5 },
//!         Run { addr: Some(9000), len: 10 },
//!         Run { addr: Some(5040), len: 5 },
//!     ]
//! );
//! t.collapse(40, 10)?;              // and back
//! assert_eq!(t.query(0, 100)?, vec![
//!     Run { addr: Some(5000), len: 40 },
//!     Run { addr: Some(5040), len: 60 },
//! ]);
//! t.check().expect("invariants hold");
//! # Ok::<(), flexkv::Error>(())
//! ```

mod check;
pub(crate) mod image;
mod node;
mod read;
mod update;

pub use node::NodeId;
pub(crate) use read::runs_of;
pub use read::{Extents, Hint};

use crate::{Error, Result};
use node::{Leaf, Node};
use update::Step;

/// The reserved physical address of an unmapped range (a hole). Data addresses must keep
/// `addr + len <= HOLE`.
pub const HOLE: u64 = (1 << 56) - 1;

/// The largest address space a FlexTree holds, in bytes (2^62): far beyond any file, and
/// small enough that no offset arithmetic near it can overflow.
pub const MAX_LEN: u64 = 1 << 62;

/// Node capacities. The defaults suit the in-memory index; small values make deep trees
/// for tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlexTreeOptions {
    /// Most entries a leaf holds (at least 4).
    pub leaf_capacity: usize,
    /// Most children an internal node holds (at least 6).
    pub internal_capacity: usize,
}

impl Default for FlexTreeOptions {
    fn default() -> Self {
        FlexTreeOptions {
            leaf_capacity: 168,
            internal_capacity: 64,
        }
    }
}

/// One extent: `len` bytes of the address space starting at `offset`, stored at `addr`
/// (`None` for a hole).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// The effective (logical) offset where the extent starts.
    pub offset: u64,
    /// Its length in bytes (never 0).
    pub len: u64,
    /// Its physical address, or `None` for a hole.
    pub addr: Option<u64>,
    /// Its tag (0 if never set).
    pub tag: u8,
}

/// A piece of a range query's answer: `len` bytes at physical `addr` (`None`: a hole).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Where the bytes are, or `None` if they are unmapped.
    pub addr: Option<u64>,
    /// How many bytes.
    pub len: u64,
}

/// The FlexTree extent index. See the [module documentation](self).
#[derive(Debug)]
pub struct FlexTree {
    opts: FlexTreeOptions,
    nodes: Vec<Node>,
    dirty: Vec<bool>,
    /// The next leaf in address order, per node id (only meaningful for leaves). Not part
    /// of a node's persistent content, so changing it does not dirty the node.
    next_leaf: Vec<node::NodeId>,
    /// When each node last changed, per node id: the value [`FlexTree::changes`] took
    /// then. A [`Hint`] holds while its leaf's stamp is the one it was made with.
    stamps: Vec<u64>,
    /// Node changes so far (allocations and releases included): never repeats a value.
    changes: u64,
    free: Vec<node::NodeId>,
    /// Ids released since the last [`FlexTree::take_freed`].
    freed: Vec<node::NodeId>,
    root: node::NodeId,
    height: usize,
    size: u64,
    extents: u64,
    /// Scratch space for the root-to-leaf path of the current update.
    path: Vec<Step>,
}

impl Default for FlexTree {
    fn default() -> Self {
        Self::new()
    }
}

impl FlexTree {
    /// An empty tree with default node capacities.
    pub fn new() -> Self {
        Self::with_options(FlexTreeOptions::default()).expect("default options are valid")
    }

    /// An empty tree with the given node capacities.
    pub fn with_options(opts: FlexTreeOptions) -> Result<Self> {
        if !(4..=65_536).contains(&opts.leaf_capacity)
            || !(6..=65_536).contains(&opts.internal_capacity)
        {
            return Err(Error::invalid(format!(
                "FlexTree capacities must be 4..=65536 (leaf) and 6..=65536 (internal), got {opts:?}"
            )));
        }
        let mut t = FlexTree {
            opts,
            nodes: Vec::new(),
            dirty: Vec::new(),
            next_leaf: Vec::new(),
            stamps: Vec::new(),
            changes: 0,
            free: Vec::new(),
            freed: Vec::new(),
            root: 0,
            height: 1,
            size: 0,
            extents: 0,
            path: Vec::new(),
        };
        t.root = t.alloc(Node::Leaf(Leaf::default()));
        Ok(t)
    }

    /// A copy of the tree for reading only: every query, walk and hint answers on it as
    /// on this tree now, whatever this tree does next. It keeps none of the update
    /// machinery (dirty flags, free ids), so it must not be changed or checkpointed;
    /// its nodes' arrays are cut to their length, so it takes a little less memory
    /// than the tree. Copies every node: O(extents).
    pub(crate) fn read_copy(&self) -> FlexTree {
        FlexTree {
            opts: self.opts,
            nodes: self.nodes.clone(),
            dirty: Vec::new(),
            next_leaf: self.next_leaf.clone(),
            stamps: self.stamps.clone(),
            changes: self.changes,
            free: Vec::new(),
            freed: Vec::new(),
            root: self.root,
            height: self.height,
            size: self.size,
            extents: self.extents,
            path: Vec::new(),
        }
    }

    /// The size of the address space in bytes (holes included).
    pub fn len(&self) -> u64 {
        self.size
    }

    /// Whether the address space is empty.
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The number of extents (holes included).
    pub fn extent_count(&self) -> u64 {
        self.extents
    }

    /// The number of levels (1 for a lone leaf).
    pub fn height(&self) -> usize {
        self.height
    }

    /// The node capacities.
    pub fn options(&self) -> FlexTreeOptions {
        self.opts
    }

    pub(crate) fn check_range(&self, what: &str, off: u64, len: u64) -> Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(Error::invalid(format!(
                "{what} of [{off}, {off}+{len}) is outside the address space of {} bytes",
                self.size
            ))),
        }
    }

    fn check_growth(&self, what: &str, len: u64) -> Result<()> {
        if len > MAX_LEN - self.size {
            return Err(Error::invalid(format!(
                "{what} of {len} bytes would grow the space past {MAX_LEN} bytes"
            )));
        }
        Ok(())
    }

    fn check_addr(addr: u64, len: u64) -> Result<()> {
        if addr.checked_add(len).is_none_or(|end| end > HOLE) {
            return Err(Error::invalid(format!(
                "physical range [{addr}, {addr}+{len}) reaches the reserved hole address {HOLE}"
            )));
        }
        Ok(())
    }

    /// Inserts `len` bytes stored at `addr` at offset `off` (`off <= len()`), shifting every
    /// later byte forward by `len`. An extent that holds `off` is split around it.
    pub fn insert(&mut self, off: u64, len: u64, addr: u64) -> Result<()> {
        Self::check_addr(addr, len)?;
        self.insert_mapping(off, len, addr)
    }

    /// Inserts an unmapped range of `len` bytes at `off`, shifting later bytes forward.
    pub fn insert_hole(&mut self, off: u64, len: u64) -> Result<()> {
        self.insert_mapping(off, len, HOLE)
    }

    fn insert_mapping(&mut self, off: u64, len: u64, addr: u64) -> Result<()> {
        self.check_range("insert", off, 0)?;
        self.check_growth("insert", len)?;
        if len > 0 {
            self.insert_entry(off, len, addr, None);
        }
        Ok(())
    }

    /// As [`FlexTree::insert`], but if the inserted range continues the extent that ends at
    /// `off` both logically and physically (and that extent is in the same leaf), that
    /// extent grows instead, up to `max_extent` bytes. How a log-structured writer keeps
    /// consecutive small writes in one extent.
    pub(crate) fn insert_merging(
        &mut self,
        off: u64,
        len: u64,
        addr: u64,
        max_extent: u64,
    ) -> Result<()> {
        Self::check_addr(addr, len)?;
        self.check_range("insert", off, 0)?;
        self.check_growth("insert", len)?;
        if len > 0 {
            self.insert_entry(off, len, addr, Some(max_extent));
        }
        Ok(())
    }

    /// Removes `[off, off + len)` from the address space without leaving a hole: every
    /// later byte moves back by `len`. Extents cut by either end are split first.
    pub fn collapse(&mut self, off: u64, len: u64) -> Result<()> {
        self.check_range("collapse", off, len)?;
        if len == 0 {
            return Ok(());
        }
        self.split_at(off);
        self.split_at(off + len);
        let mut left = len;
        while left > 0 {
            left -= self.remove_entries_at(off, left);
        }
        Ok(())
    }

    /// Maps `[off, off + len)` to `addr` (`None`: a hole), replacing whatever mapped it.
    /// `off` may lie past the end: the gap becomes a hole, so a write past the end works.
    pub fn overwrite(&mut self, off: u64, len: u64, addr: Option<u64>) -> Result<()> {
        if let Some(a) = addr {
            Self::check_addr(a, len)?;
        }
        let end = off
            .checked_add(len)
            .filter(|&e| e <= MAX_LEN)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "overwrite of [{off}, {off}+{len}) ends past {MAX_LEN}"
                ))
            })?;
        if len == 0 {
            return Ok(());
        }
        let addr = addr.unwrap_or(HOLE);
        if end <= self.size && self.overwrite_in_extent(off, len, addr) {
            return Ok(());
        }
        if off > self.size {
            self.insert_entry(self.size, off - self.size, HOLE, None);
        }
        self.collapse(off, len.min(self.size - off))?;
        self.insert_entry(off, end - off, addr, None);
        Ok(())
    }

    /// Moves `[off, off + len)`, which must be mapped contiguously to `[old_addr,
    /// old_addr + len)`, to `[new_addr, new_addr + len)` without shifting anything: how
    /// garbage collection records a relocation. Refused, with nothing changed, if the
    /// range is not mapped that way (the caller's view is stale).
    pub fn remap(&mut self, off: u64, len: u64, old_addr: u64, new_addr: u64) -> Result<()> {
        self.check_range("remap", off, len)?;
        Self::check_addr(new_addr, len)?;
        if len > 0 && self.remap_whole_extent(off, len, old_addr, new_addr) {
            return Ok(());
        }
        let mut at = off;
        for e in self.extents_from(off) {
            if at >= off + len {
                break;
            }
            let expected = old_addr + (at - off);
            if e.addr.map(|a| a + (at - e.offset)) != Some(expected) {
                return Err(Error::invalid(format!(
                    "remap: byte {at} is not stored at {expected} (extent {e:?})"
                )));
            }
            at = e.offset + e.len;
        }
        if len > 0 {
            self.split_at(off);
            self.split_at(off + len);
            self.rewrite_addrs(off, len, new_addr);
        }
        Ok(())
    }

    /// [`FlexTree::remap`] of a range that is exactly one extent (what garbage
    /// collection moves, but for an extent cut at a segment's end): one descent that
    /// checks and rewrites the entry, where the general case descends four times (a
    /// check, a split at each end, the rewrite). Returns false, with nothing changed,
    /// if the range is not one whole extent mapped to `old_addr`.
    fn remap_whole_extent(&mut self, off: u64, len: u64, old_addr: u64, new_addr: u64) -> bool {
        let update::LeafPos { leaf, frame } = self.descend(off, false);
        let pos = self.entries_at_or_before(leaf, off - frame) - 1;
        let e = self.leaf(leaf).entry(pos);
        if frame + e.poff != off || e.len != len || e.is_hole() || e.addr() != old_addr {
            return false;
        }
        self.leaf_mut(leaf).set_addr(pos, new_addr);
        true
    }

    /// Tags the extent that starts at `off`, splitting the extent that holds `off` if it
    /// starts earlier. `off < len()`.
    pub fn set_tag(&mut self, off: u64, tag: u8) -> Result<()> {
        if off >= self.size {
            return Err(Error::invalid(format!(
                "set_tag at {off} is outside the address space of {} bytes",
                self.size
            )));
        }
        self.split_at(off);
        let update::LeafPos { leaf, frame } = self.descend(off, false);
        let pos = self.entries_at_or_before(leaf, off - frame) - 1;
        self.leaf_mut(leaf).set_tag(pos, tag);
        Ok(())
    }

    /// The ids of the nodes changed since the last [`FlexTree::clear_dirty`].
    pub fn dirty_nodes(&self) -> Vec<NodeId> {
        (0..self.dirty.len() as NodeId)
            .filter(|&id| self.dirty[id as usize])
            .collect()
    }

    /// Marks every node clean (after a checkpoint saved the dirty ones).
    pub fn clear_dirty(&mut self) {
        self.dirty.iter_mut().for_each(|d| *d = false);
    }

    /// The ids of nodes released since the last call (their slots may already be reused).
    pub fn take_freed(&mut self) -> Vec<NodeId> {
        std::mem::take(&mut self.freed)
    }

    /// The id of the root node.
    pub fn root(&self) -> NodeId {
        self.root
    }
}

#[cfg(test)]
mod tests;
