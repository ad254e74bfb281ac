//! An insert-only concurrent skip list whose nodes live in the memtable's [`Arena`].
//!
//! Each node is one region: a fixed header (keyspace, key and value lengths, sequence,
//! kind, height, a predecessor hint), its tower of next pointers, the key, then the
//! value. Nodes are never changed after they are linked (except their towers' atomics
//! and the hint) and never removed before the whole list is dropped, so a reader
//! holding `&List` can follow any pointer it loads, and an [`Entry`] is a plain pointer
//! with the list's lifetime.
//!
//! Order: keyspace, then key, then sequence *descending*. A node whose order key equals
//! an existing node's goes in front of it, so the later insert is the one a search finds
//! (the memtable removes a batch's repeated keys before inserting; this keeps a stray
//! repeat harmless).
//!
//! Concurrency (insert-only lock-free skip list): a node's header, key, value and whole
//! tower are written before it is linked anywhere; it is linked level by level from
//! the bottom, each level with one compare-and-swap on its predecessor's pointer
//! (release), which readers load with acquire. A failed swap searches that level again
//! from the same predecessor, which stays below the node's key. Readers take no lock
//! and write nothing.
//!
//! Sorted batches: [`List::insert_sorted`] keeps the *splice* of the last insert (its
//! predecessor and successor at every level) and searches each next key only from the
//! lowest level whose splice still brackets it, instead of from the top: a batch's keys
//! are sorted, so each search starts close to where the last one ended. Invariants of a
//! splice that make this sound (kept by every update, see `link`): predecessors rise
//! and successors fall from the top level down, every predecessor sorts below the key
//! being inserted, and every successor at or above the bracketing level sorts at or
//! above it.
//!
//! Updates of keys the list holds: a one-level node for a key the hash index knows
//! goes just in front of the key's newest node, and its search starts at that node's
//! predecessor hint (`Header::prev`, set at every link at level 0), with no descent
//! from the top. The hint is a node that once sorted just below; nodes never move, so
//! it still sorts below, and the insert checks that it sorts below the new entry too
//! before starting there (another writer's newer version of the key may not).
//!
//! Point reads: the list keeps a hash index ([`HashIndex`], `index.rs`) naming each
//! key's newest node by address; [`List::newest`] turns a word of it back into a node
//! of this list, and only this list's nodes ever go into it.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::cmp::Ordering;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering as Atomic};

use super::arena::{Arena, ChunkPool};
use super::index::{self, HashIndex, Lookup};
use super::KeyspaceId;

/// The most levels a node can have. With one node in four promoted, 12 levels index
/// 4^12 (16M) entries before the top level thins out.
pub(crate) const MAX_HEIGHT: usize = 12;

/// How many entries ahead of the one being inserted [`List::insert_sorted`] asks for
/// the hash index's slot.
const INDEX_AHEAD: usize = 8;

/// What a node's value bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// The list's head: no key, never returned.
    Head = 0,
    /// A delete (no value bytes).
    Tombstone = 1,
    /// The value itself.
    Inline = 2,
    /// An encoded value-log pointer.
    Separated = 3,
}

/// The fixed part of a node. The tower, the key and the value follow it in the same
/// region (see [`layout`]).
#[repr(C)]
struct Header {
    seq: u64,
    /// A node that sorted just below this one at level 0 when it was last set (null:
    /// none yet). Only inserts read it, as a place to start a search (see
    /// [`List::link_by_hint`]); since no node ever moves, whatever it names still
    /// sorts below this node.
    prev: AtomicPtr<Header>,
    ks: KeyspaceId,
    key_len: u32,
    val_len: u32,
    kind: Kind,
    height: u8,
    /// The key's first bytes ([`prefix_of`]): most comparisons of a search end here,
    /// on the header's cache line, without reading the key past the tower.
    prefix: u64,
}

/// The first 8 bytes of `key`, big-endian, zero-padded: two keys whose prefixes differ
/// sort as their prefixes do (a shorter key pads with zeros, and sorts below a longer
/// one that differs from it there); equal prefixes decide nothing.
pub(crate) fn prefix_of(key: &[u8]) -> u64 {
    match key.first_chunk::<8>() {
        Some(b) => u64::from_be_bytes(*b),
        None => {
            let mut b = [0u8; 8];
            b[..key.len()].copy_from_slice(key);
            u64::from_be_bytes(b)
        }
    }
}

const HEADER: usize = std::mem::size_of::<Header>();
const SLOT: usize = std::mem::size_of::<AtomicPtr<Header>>();
const _: () = assert!(HEADER.is_multiple_of(SLOT), "the tower must be aligned");

/// Bytes of a node with this height, key and value.
fn node_size(height: usize, key_len: usize, val_len: usize) -> usize {
    HEADER + height * SLOT + key_len + val_len
}

/// One entry to insert.
pub(crate) struct NewEntry<'a> {
    pub(crate) ks: KeyspaceId,
    /// The key's hash ([`key_hash`](super::key_hash)), for the hash index.
    pub(crate) hash: u64,
    pub(crate) key: &'a [u8],
    /// [`prefix_of`] the key.
    pub(crate) prefix: u64,
    pub(crate) seq: u64,
    pub(crate) kind: Kind,
    pub(crate) value: &'a [u8],
}

/// A node's place in the arena, borrowed from the list for `'a`. Every method's
/// safety rests on the list invariant: the pointer is to a fully written node of a
/// list that lives for `'a`.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Node<'a>(NonNull<Header>, PhantomData<&'a List>);

impl<'a> Node<'a> {
    fn new(p: NonNull<Header>) -> Self {
        Node(p, PhantomData)
    }

    fn header(self) -> &'a Header {
        // SAFETY: the node's header was written before the node was linked or
        // returned, is never written again but for its atomic `prev`, and lives as
        // long as the list.
        unsafe { self.0.as_ref() }
    }

    fn level(self, level: usize) -> &'a AtomicPtr<Header> {
        debug_assert!(level < usize::from(self.header().height));
        // SAFETY: the tower holds `height` slots right after the header, inside the
        // node's region, aligned (HEADER is a multiple of the slot size and regions
        // are 8-aligned); the pointer derives from the arena chunk's own pointer.
        unsafe {
            &*self
                .0
                .as_ptr()
                .cast::<u8>()
                .add(HEADER + level * SLOT)
                .cast()
        }
    }

    fn key(self) -> &'a [u8] {
        let h = self.header();
        // SAFETY: the key's bytes follow the tower inside the node's region and were
        // written before the node was published.
        unsafe {
            let at = self
                .0
                .as_ptr()
                .cast::<u8>()
                .add(HEADER + usize::from(h.height) * SLOT);
            std::slice::from_raw_parts(at, h.key_len as usize)
        }
    }

    fn value(self) -> &'a [u8] {
        let h = self.header();
        let off = HEADER + usize::from(h.height) * SLOT + h.key_len as usize;
        // SAFETY: the value's bytes follow the key inside the node's region.
        unsafe {
            std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>().add(off), h.val_len as usize)
        }
    }

    fn next(self, level: usize) -> Option<Node<'a>> {
        NonNull::new(self.level(level).load(Atomic::Acquire)).map(Node::new)
    }

    /// The node [`Header::prev`] names, if any.
    fn prev_hint(self) -> Option<Node<'a>> {
        NonNull::new(self.header().prev.load(Atomic::Acquire)).map(Node::new)
    }

    /// Names `p`, a linked node sorting below this one, as its predecessor at level 0.
    fn set_prev_hint(self, p: Node<'a>) {
        self.header().prev.store(p.0.as_ptr(), Atomic::Release);
    }

    /// The node's address, for the hash index (which keeps it with its provenance
    /// exposed, and gives it back only to [`List::node_at`]).
    fn addr(self) -> usize {
        self.0.as_ptr().expose_provenance()
    }

    /// Whether this node holds `key` of keyspace `ks`.
    fn holds(self, ks: KeyspaceId, key: &[u8]) -> bool {
        self.header().ks == ks && self.key() == key
    }

    /// How this node sorts against the probe `(ks, key, seq)`, whose key's
    /// [`prefix_of`] is `prefix`.
    fn cmp(self, ks: KeyspaceId, prefix: u64, key: &[u8], seq: u64) -> Ordering {
        let h = self.header();
        debug_assert!(h.kind != Kind::Head);
        debug_assert_eq!(prefix, prefix_of(key));
        h.ks.cmp(&ks)
            .then_with(|| h.prefix.cmp(&prefix))
            .then_with(|| self.key().cmp(key))
            .then_with(|| seq.cmp(&h.seq))
    }
}

/// One entry of the list, borrowed from it.
#[derive(Clone, Copy)]
pub(crate) struct Entry<'a>(Node<'a>);

impl<'a> Entry<'a> {
    pub(crate) fn ks(&self) -> KeyspaceId {
        self.0.header().ks
    }

    pub(crate) fn seq(&self) -> u64 {
        self.0.header().seq
    }

    pub(crate) fn kind(&self) -> Kind {
        self.0.header().kind
    }

    pub(crate) fn key(&self) -> &'a [u8] {
        self.0.key()
    }

    pub(crate) fn value(&self) -> &'a [u8] {
        self.0.value()
    }

    /// The entry after this one.
    pub(crate) fn next(&self) -> Option<Entry<'a>> {
        self.0.next(0).map(Entry)
    }
}

/// What [`List::newest`] knows of a key.
pub(crate) enum Newest<'a> {
    /// The key's newest version.
    Found(Entry<'a>),
    /// The list holds no version of the key.
    Absent,
    /// The index overflowed and cannot say: search the list.
    Unknown,
}

/// A node's predecessor and successor at every level, from the last insert.
struct Splice<'a> {
    prev: [Node<'a>; MAX_HEIGHT],
    next: [Option<Node<'a>>; MAX_HEIGHT],
    /// Levels the splice is valid for (0: none).
    height: usize,
}

/// The skip list.
pub(crate) struct List {
    head: NonNull<Header>,
    /// Levels in use: the head's pointers above are null.
    height: AtomicUsize,
    len: AtomicUsize,
    arena: Arena,
    /// Every key's newest node, by the key's hash. Its words are addresses of this
    /// list's nodes, read back only while the list lives.
    index: HashIndex,
    /// Nodes linked by [`List::link_by_hint`] (for the tests).
    #[cfg(test)]
    hinted: AtomicUsize,
}

// SAFETY: the list's raw pointers are to nodes in its own arena, which are written only
// before they are published (then read-only but for the towers' atomics), so sharing
// and sending the list is as safe as sharing its arena.
unsafe impl Send for List {}
// SAFETY: as above.
unsafe impl Sync for List {}

impl std::fmt::Debug for List {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "List({} entries)", self.len())
    }
}

thread_local! {
    static RNG: Cell<u64> = Cell::new({
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new().build_hasher().finish() | 1
    });
}

/// A random height: 1, and one more with probability 1/4 per level.
fn random_height() -> usize {
    let r = RNG.with(|c| {
        // xorshift64*
        let mut x = c.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        c.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    });
    1 + (r.trailing_zeros() as usize / 2).min(MAX_HEIGHT - 1)
}

impl List {
    /// An empty list for a memtable of about `budget` bytes, whose arena takes chunks
    /// from `pool` and gives them back to it up to `budget` bytes.
    pub(crate) fn new(pool: Option<std::sync::Arc<ChunkPool>>, budget: usize) -> List {
        let arena = Arena::new(pool, budget);
        let mut region = Vec::with_capacity(1);
        arena.alloc_each(&[node_size(MAX_HEIGHT, 0, 0)], &mut region);
        let head = Self::write_node(
            region[0],
            MAX_HEIGHT,
            &NewEntry {
                ks: 0,
                hash: 0,
                key: &[],
                prefix: 0,
                seq: 0,
                kind: Kind::Head,
                value: &[],
            },
        );
        List {
            head: head.0,
            height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
            arena,
            index: HashIndex::for_budget(budget),
            #[cfg(test)]
            hinted: AtomicUsize::new(0),
        }
    }

    fn head(&self) -> Node<'_> {
        Node::new(self.head)
    }

    /// The node whose [`Node::addr`] this list's hash index kept in `word`.
    fn node_at(&self, word: u64) -> Node<'_> {
        let p = std::ptr::with_exposed_provenance_mut::<Header>(index::address(word));
        Node::new(NonNull::new(p).unwrap_or_else(|| unreachable!("the index keeps no null")))
    }

    /// Bytes of the hash index.
    pub(crate) fn index_bytes(&self) -> usize {
        self.index.memory_bytes()
    }

    /// Whether the hash index is as full as it should get: the memtable should take no
    /// more keys.
    pub(crate) fn index_full(&self) -> bool {
        self.index.full()
    }

    /// How near [`List::index_full`] the hash index is, from 0 to 1.
    pub(crate) fn index_fill(&self) -> f64 {
        self.index.fill()
    }

    /// The newest version of `key` (of any sequence), as the hash index knows it.
    pub(crate) fn newest(&self, ks: KeyspaceId, key: &[u8], hash: u64) -> Newest<'_> {
        match self.index.find(hash, |w| self.node_at(w).holds(ks, key)) {
            Lookup::Found(w) => Newest::Found(Entry(self.node_at(w))),
            Lookup::Absent => Newest::Absent,
            Lookup::Unknown => Newest::Unknown,
        }
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Atomic::Relaxed)
    }

    /// Writes a node into `region` (at least [`node_size`] bytes, 8-aligned, owned by
    /// the caller) with a tower of null pointers.
    fn write_node<'a>(region: NonNull<u8>, height: usize, e: &NewEntry<'_>) -> Node<'a> {
        let key_len =
            u32::try_from(e.key.len()).unwrap_or_else(|_| unreachable!("keys are limited"));
        let val_len =
            u32::try_from(e.value.len()).unwrap_or_else(|_| unreachable!("values are limited"));
        let p = region.as_ptr();
        // SAFETY: the region is ours alone, large enough for the header, `height`
        // slots, the key and the value, and aligned for the header and the slots. No
        // other thread can see the node before `link` publishes it.
        unsafe {
            p.cast::<Header>().write(Header {
                seq: e.seq,
                prev: AtomicPtr::new(std::ptr::null_mut()),
                ks: e.ks,
                key_len,
                val_len,
                kind: e.kind,
                height: height as u8,
                prefix: e.prefix,
            });
            for l in 0..height {
                p.add(HEADER + l * SLOT)
                    .cast::<AtomicPtr<Header>>()
                    .write(AtomicPtr::new(std::ptr::null_mut()));
            }
            let key_at = p.add(HEADER + height * SLOT);
            std::ptr::copy_nonoverlapping(e.key.as_ptr(), key_at, e.key.len());
            std::ptr::copy_nonoverlapping(e.value.as_ptr(), key_at.add(e.key.len()), e.value.len());
        }
        Node::new(region.cast())
    }

    /// Inserts `entries`, which must be in ascending order, searching for each from
    /// where the last one went; returns the bytes their nodes take. Other threads may
    /// insert and read meanwhile.
    pub(crate) fn insert_sorted(&self, entries: &[NewEntry<'_>]) -> usize {
        debug_assert!(entries.windows(2).all(|w| {
            (w[0].ks, w[0].key, std::cmp::Reverse(w[0].seq))
                <= (w[1].ks, w[1].key, std::cmp::Reverse(w[1].seq))
        }));
        let heights: Vec<usize> = entries.iter().map(|_| random_height()).collect();
        let sizes: Vec<usize> = (entries.iter().zip(&heights))
            .map(|(e, &h)| node_size(h, e.key.len(), e.value.len()))
            .collect();
        let mut regions = Vec::with_capacity(entries.len());
        self.arena.alloc_each(&sizes, &mut regions);
        let mut splice = Splice {
            prev: [self.head(); MAX_HEIGHT],
            next: [None; MAX_HEIGHT],
            height: 0,
        };
        // The index's slots are where a batch's time went (a cache miss each, in a
        // table of 8 MiB for a 64 MiB memtable): asked for a few entries ahead, they
        // arrive while the entries before them are linked.
        for e in entries.iter().take(INDEX_AHEAD) {
            self.index.prefetch(e.hash);
        }
        for (i, ((e, &h), &region)) in entries.iter().zip(&heights).zip(&regions).enumerate() {
            if let Some(ahead) = entries.get(i + INDEX_AHEAD) {
                self.index.prefetch(ahead.hash);
            }
            let node = Self::write_node(region, h, e);
            if h == 1 && self.link_by_hint(node, e) {
                // The splice no longer describes the last insert: the next search
                // starts from the top.
                splice.height = 0;
            } else {
                self.link(node, e, &mut splice);
            }
            // After the node is in the list: a reader the index sends to it may
            // search the list from there.
            self.index.insert(
                e.hash,
                node.addr(),
                |w| self.node_at(w).holds(e.ks, e.key),
                // A repeat of the same version (inserted on its own) replaces it, as
                // it goes in front of it in the list.
                |w| self.node_at(w).header().seq > e.seq,
            );
        }
        self.len.fetch_add(entries.len(), Atomic::Relaxed);
        sizes
            .iter()
            .map(|s| s.next_multiple_of(super::arena::ALIGN))
            .sum()
    }

    /// Whether the splice at `level` brackets the probe: its predecessor sorts below it
    /// and its successor (if any) at or above it.
    fn brackets(&self, s: &Splice, level: usize, e: &NewEntry<'_>) -> bool {
        let below =
            s.prev[level] == self.head() || s.prev[level].cmp(e.ks, e.prefix, e.key, e.seq).is_lt();
        below && s.next[level].is_none_or(|n| n.cmp(e.ks, e.prefix, e.key, e.seq).is_ge())
    }

    /// At `level`, from `start` (which sorts below the probe), the last node below the
    /// probe and the first at or above it.
    fn find_at<'a>(
        &'a self,
        start: Node<'a>,
        level: usize,
        e: &NewEntry<'_>,
    ) -> (Node<'a>, Option<Node<'a>>) {
        let mut x = start;
        loop {
            match x.next(level) {
                Some(n) if n.cmp(e.ks, e.prefix, e.key, e.seq).is_lt() => x = n,
                n => return (x, n),
            }
        }
    }

    /// Links `node` (entry `e`, not yet visible, one level high) at level 0 by the key's
    /// newest node, which the hash index finds with no descent: an update of a key
    /// the memtable holds goes just in front of that node, and the search starts from
    /// the node named as its predecessor ([`Header::prev`]), usually one step away.
    /// Returns `false`, having done nothing, if the index does not know the key or the
    /// named node does not sort below `e` (another writer's newer version of the key
    /// may lie there); the caller then searches from the top.
    fn link_by_hint<'a>(&'a self, node: Node<'a>, e: &NewEntry<'_>) -> bool {
        debug_assert_eq!(node.header().height, 1);
        let Newest::Found(newest) = self.newest(e.ks, e.key, e.hash) else {
            return false;
        };
        let Some(start) = newest.0.prev_hint() else {
            return false;
        };
        if start != self.head() && !start.cmp(e.ks, e.prefix, e.key, e.seq).is_lt() {
            return false;
        }
        self.link_level0(node, e, start);
        #[cfg(test)]
        self.hinted.fetch_add(1, Atomic::Relaxed);
        true
    }

    /// Links `node` (entry `e`, one level high) at level 0, searching from `start`,
    /// which sorts below the probe.
    fn link_level0<'a>(&'a self, node: Node<'a>, e: &NewEntry<'_>, start: Node<'a>) {
        let (p, n) = self.find_at(start, 0, e);
        self.link_at(node, e, 0, p, n);
    }

    /// Links `node` (entry `e`) at `level` between `p` (which sorts below the probe)
    /// and `n`, found for it; returns the two it went between. At level 0 it keeps the
    /// predecessor hints of `node` and of `n`.
    fn link_at<'a>(
        &'a self,
        node: Node<'a>,
        e: &NewEntry<'_>,
        level: usize,
        mut p: Node<'a>,
        mut n: Option<Node<'a>>,
    ) -> (Node<'a>, Option<Node<'a>>) {
        loop {
            let n_ptr = n.map_or(std::ptr::null_mut(), |n| n.0.as_ptr());
            node.level(level).store(n_ptr, Atomic::Relaxed);
            // Release: a reader that loads the pointer sees the node written.
            if p.level(level)
                .compare_exchange(n_ptr, node.0.as_ptr(), Atomic::AcqRel, Atomic::Acquire)
                .is_ok()
            {
                if level == 0 {
                    node.set_prev_hint(p);
                    if let Some(n) = n {
                        n.set_prev_hint(node);
                    }
                }
                return (p, n);
            }
            // Another node went in between: search this level again from the same
            // predecessor, which still sorts below the probe.
            (p, n) = self.find_at(p, level, e);
        }
    }

    /// Links `node` (entry `e`, not yet visible) into every level of its tower.
    fn link<'a>(&'a self, node: Node<'a>, e: &NewEntry<'_>, s: &mut Splice<'a>) {
        let h = usize::from(node.header().height);
        let top = self.height.fetch_max(h, Atomic::Relaxed).max(h);
        // The lowest level whose splice brackets the probe; every level above it does
        // too (predecessors rise and successors fall going down).
        let from = if s.height < top {
            s.prev = [self.head(); MAX_HEIGHT];
            s.next = [None; MAX_HEIGHT];
            s.height = top;
            top
        } else {
            (0..top).find(|&l| self.brackets(s, l, e)).unwrap_or(top)
        };
        let mut x = if from == top {
            self.head()
        } else {
            s.prev[from]
        };
        for l in (0..from).rev() {
            let (p, n) = self.find_at(x, l, e);
            s.prev[l] = p;
            s.next[l] = n;
            x = p;
        }
        for l in 0..h {
            (s.prev[l], s.next[l]) = self.link_at(node, e, l, s.prev[l], s.next[l]);
        }
        // The node is the predecessor of the next (greater) key on its levels; its
        // successors there stay as found.
        for prev in s.prev.iter_mut().take(h) {
            *prev = node;
        }
    }

    /// The first entry at or after (`inclusive`) or strictly after the probe.
    pub(crate) fn seek(
        &self,
        ks: KeyspaceId,
        key: &[u8],
        seq: u64,
        inclusive: bool,
    ) -> Option<Entry<'_>> {
        self.descend(ks, key, seq, !inclusive).1.map(Entry)
    }

    /// The last entry before (or at, if `inclusive`) the probe.
    pub(crate) fn seek_back(
        &self,
        ks: KeyspaceId,
        key: &[u8],
        seq: u64,
        inclusive: bool,
    ) -> Option<Entry<'_>> {
        let (x, _) = self.descend(ks, key, seq, inclusive);
        (x != self.head()).then_some(Entry(x))
    }

    /// From the top, the last node below the probe (or at it too, with `pass_equal`;
    /// the head if none) and the node after it.
    fn descend(
        &self,
        ks: KeyspaceId,
        key: &[u8],
        seq: u64,
        pass_equal: bool,
    ) -> (Node<'_>, Option<Node<'_>>) {
        let prefix = prefix_of(key);
        let past = |n: Node<'_>| {
            let o = n.cmp(ks, prefix, key, seq);
            o.is_lt() || (pass_equal && o.is_eq())
        };
        let mut x = self.head();
        // The node a level's step stopped at is often the next level's too: no need to
        // compare it again.
        let mut refused: Option<Node<'_>> = None;
        let mut next = None;
        for l in (0..self.height.load(Atomic::Relaxed)).rev() {
            loop {
                next = x.next(l);
                match next {
                    Some(n) if refused != Some(n) && past(n) => x = n,
                    _ => break,
                }
            }
            refused = next;
        }
        (x, next)
    }

    /// The first entry.
    pub(crate) fn first(&self) -> Option<Entry<'_>> {
        self.head().next(0).map(Entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    /// An entry to insert, owned (the test keeps it while the list borrows it).
    type Owned = (KeyspaceId, Vec<u8>, u64, Vec<u8>);

    fn borrowed(o: &[Owned]) -> Vec<NewEntry<'_>> {
        o.iter()
            .map(|(ks, key, seq, value)| NewEntry {
                ks: *ks,
                hash: super::super::key_hash(*ks, key),
                key,
                prefix: prefix_of(key),
                seq: *seq,
                kind: Kind::Inline,
                value,
            })
            .collect()
    }

    type Model = BTreeMap<(KeyspaceId, Vec<u8>, std::cmp::Reverse<u64>), Vec<u8>>;

    fn assert_matches(list: &List, model: &Model) {
        let mut got = Vec::new();
        let mut e = list.first();
        while let Some(x) = e {
            got.push((
                (x.ks(), x.key().to_vec(), std::cmp::Reverse(x.seq())),
                x.value().to_vec(),
            ));
            e = x.next();
        }
        let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(got, want);
        assert_eq!(list.len(), model.len());
        // Every level is sorted and a subsequence of the one below.
        for l in 1..MAX_HEIGHT {
            let mut x = list.head().next(l);
            let mut last: Option<Node<'_>> = None;
            while let Some(n) = x {
                if let Some(p) = last {
                    let h = n.header();
                    assert!(
                        p.cmp(h.ks, prefix_of(n.key()), n.key(), h.seq).is_lt(),
                        "level {l} out of order"
                    );
                }
                last = Some(n);
                x = n.next(l);
            }
        }
    }

    /// Updates one key at a time, most of them of keys the list holds (so most go in by
    /// the predecessor hint), some with sequences below the key's newest (which must
    /// go behind it): one order, every version in it, and the hint taken. (A repeat of
    /// a version is `an_equal_key_goes_in_front_so_the_later_insert_is_found`'s.)
    #[test]
    fn updates_linked_by_the_predecessor_hint_keep_one_order() {
        let list = List::new(None, 1 << 26);
        let mut model = Model::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut older = 0;
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = format!("k{:03}", x % 400).into_bytes();
            // Mostly rising; now and then one of the older sequences (below a third of
            // the rising ones), each used once.
            let seq = if x.is_multiple_of(8) {
                older += 1;
                3 * older + 1
            } else {
                3 * i + 3
            };
            let value = format!("{i}").into_bytes();
            let e = (0, key, seq, value);
            model.insert((0, e.1.clone(), std::cmp::Reverse(seq)), e.3.clone());
            list.insert_sorted(&borrowed(std::slice::from_ref(&e)));
        }
        assert_matches(&list, &model);
        let hinted = list.hinted.load(Atomic::Relaxed);
        assert!(
            hinted > 10_000,
            "only {hinted} of 20,000 inserts went by the hint"
        );
        // Every key's newest version is what a search from the top finds.
        for k in 0..400 {
            let key = format!("k{k:03}").into_bytes();
            let first = model
                .range((0, key.clone(), std::cmp::Reverse(u64::MAX))..)
                .next()
                .filter(|((_, mk, _), _)| *mk == key);
            let found = list
                .seek(0, &key, u64::MAX, true)
                .filter(|e| e.key() == key);
            assert_eq!(
                found.map(|e| e.value().to_vec()),
                first.map(|(_, v)| v.clone())
            );
        }
    }

    /// Keys of 0–12 bytes from three byte values (zero among them), so that keys
    /// often share their first 8 bytes, or are one another's prefixes.
    fn short_keys() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        proptest::collection::vec(proptest::sample::select(vec![0u8, 1, b'a']), 0..=12)
    }

    proptest::proptest! {
        #[test]
        fn prefixes_that_differ_sort_as_their_keys(a in short_keys(), b in short_keys()) {
            let by_prefix = prefix_of(&a).cmp(&prefix_of(&b));
            proptest::prop_assert!(by_prefix.is_eq() || by_prefix == a.cmp(&b));
        }

        #[test]
        fn keys_sharing_prefixes_keep_their_order_in_the_list(
            batches in proptest::collection::vec(
                proptest::collection::btree_set(short_keys(), 0..40), 1..8),
            probes in proptest::collection::vec(short_keys(), 1..40),
        ) {
            let list = List::new(None, 0);
            let mut model = Model::new();
            for (i, keys) in batches.iter().enumerate() {
                let seq = i as u64 + 1;
                let batch: Vec<Owned> =
                    keys.iter().map(|k| (0, k.clone(), seq, vec![i as u8])).collect();
                for (ks, key, _, value) in &batch {
                    model.insert((*ks, key.clone(), std::cmp::Reverse(seq)), value.clone());
                }
                list.insert_sorted(&borrowed(&batch));
            }
            assert_matches(&list, &model);
            // Keys the list may not hold: the first key at or after each.
            for k in &probes {
                let want = model
                    .range((0, k.clone(), std::cmp::Reverse(u64::MAX))..)
                    .next()
                    .map(|(m, _)| m.1.clone());
                let got = list.seek(0, k, u64::MAX, true).map(|e| e.key().to_vec());
                proptest::prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn sorted_batches_interleave_into_one_order_and_seeks_find_bounds() {
        let list = List::new(None, 0);
        let mut model = Model::new();
        let mut rng_state = 7u64;
        let mut rand = move || {
            rng_state ^= rng_state << 13;
            rng_state ^= rng_state >> 7;
            rng_state ^= rng_state << 17;
            rng_state
        };
        for seq in 1..=200u64 {
            let mut batch: Vec<Owned> = (0..rand() % 60)
                .map(|_| {
                    let k = format!("k{:05}", rand() % 3000).into_bytes();
                    ((rand() % 3) as u32, k, seq, format!("v{seq}").into_bytes())
                })
                .collect();
            batch.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
            batch.dedup_by(|a, b| (a.0, &a.1) == (b.0, &b.1));
            for (ks, key, _, value) in &batch {
                model.insert((*ks, key.clone(), std::cmp::Reverse(seq)), value.clone());
            }
            list.insert_sorted(&borrowed(&batch));
        }
        assert_matches(&list, &model);
        for _ in 0..2000 {
            let ks = (rand() % 4) as u32;
            let key = format!("k{:05}", rand() % 3100).into_bytes();
            let seq = rand() % 220;
            let probe = (ks, key.clone(), std::cmp::Reverse(seq));
            let key_of = |e: Entry<'_>| (e.ks(), e.key().to_vec(), std::cmp::Reverse(e.seq()));
            use std::ops::Bound::{Excluded, Included, Unbounded};
            let want = model
                .range((Included(&probe), Unbounded))
                .next()
                .map(|(k, _)| k.clone());
            assert_eq!(list.seek(ks, &key, seq, true).map(key_of), want);
            let want = model
                .range((Excluded(&probe), Unbounded))
                .next()
                .map(|(k, _)| k.clone());
            assert_eq!(list.seek(ks, &key, seq, false).map(key_of), want);
            let want = model
                .range((Unbounded, Included(&probe)))
                .next_back()
                .map(|(k, _)| k.clone());
            assert_eq!(list.seek_back(ks, &key, seq, true).map(key_of), want);
            let want = model
                .range((Unbounded, Excluded(&probe)))
                .next_back()
                .map(|(k, _)| k.clone());
            assert_eq!(list.seek_back(ks, &key, seq, false).map(key_of), want);
        }
    }

    #[test]
    fn an_equal_key_goes_in_front_so_the_later_insert_is_found() {
        let list = List::new(None, 0);
        list.insert_sorted(&borrowed(&[(0, b"k".to_vec(), 3, b"first".to_vec())]));
        list.insert_sorted(&borrowed(&[(0, b"k".to_vec(), 3, b"second".to_vec())]));
        let e = list.seek(0, b"k", 3, true).unwrap();
        assert_eq!(e.value(), b"second");
        assert_eq!(e.next().unwrap().value(), b"first");
    }

    /// Writers insert sorted batches of overlapping keys at once while readers walk
    /// and seek: every level stays sorted, nothing is lost, and readers never see a
    /// level out of order or an entry half written.
    #[test]
    fn concurrent_writers_and_readers_keep_one_order() {
        const WRITERS: u64 = 4;
        const BATCHES: u64 = 150;
        let pool = Arc::new(ChunkPool::default());
        let list = Arc::new(List::new(Some(Arc::clone(&pool)), 1 << 30));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (list, done) = (Arc::clone(&list), Arc::clone(&done));
                std::thread::spawn(move || {
                    let mut walks = 0;
                    while !done.load(Atomic::Relaxed) || walks == 0 {
                        let mut last: Option<(u32, Vec<u8>, u64)> = None;
                        let mut e = list.seek(0, b"", u64::MAX, true);
                        while let Some(x) = e {
                            // A value names its own key and sequence: a half-written
                            // node would not.
                            assert_eq!(x.value(), format!("{:?}@{}", x.key(), x.seq()).as_bytes());
                            let k = (x.ks(), x.key().to_vec(), x.seq());
                            if let Some(l) = &last {
                                assert!(
                                    (l.0, &l.1, std::cmp::Reverse(l.2))
                                        < (k.0, &k.1, std::cmp::Reverse(k.2))
                                );
                            }
                            last = Some(k);
                            e = x.next();
                        }
                        walks += 1;
                    }
                    walks
                })
            })
            .collect();
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let list = Arc::clone(&list);
                std::thread::spawn(move || {
                    let mut model = Model::new();
                    for b in 0..BATCHES {
                        let seq = b * WRITERS + t + 1;
                        let mut keys: Vec<Vec<u8>> = (0..40)
                            .map(|i| {
                                format!("key{:04}", (i * 97 + b * 13 + t * 7) % 1000).into_bytes()
                            })
                            .collect();
                        keys.sort();
                        keys.dedup();
                        let batch: Vec<Owned> = keys
                            .into_iter()
                            .map(|k| {
                                let v = format!("{k:?}@{seq}").into_bytes();
                                (0, k, seq, v)
                            })
                            .collect();
                        for (_, key, _, value) in &batch {
                            model.insert((0, key.clone(), std::cmp::Reverse(seq)), value.clone());
                        }
                        list.insert_sorted(&borrowed(&batch));
                    }
                    model
                })
            })
            .collect();
        let mut model = Model::new();
        for w in writers {
            model.extend(w.join().unwrap());
        }
        done.store(true, Atomic::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
        assert_matches(&list, &model);
        drop(list);
        assert!(
            pool.bytes() > 0,
            "the dropped list's chunks went to the pool"
        );
    }
}
