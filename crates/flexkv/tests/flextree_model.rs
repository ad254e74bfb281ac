//! FlexTree against a naive model: a `Vec` of extents where every shift is done by hand.
//!
//! Each operation is applied to both; after each one the tree's invariant checker runs and
//! the full extent lists (offsets, lengths, addresses, tags) must be equal. Extents are
//! compared exactly, not just the bytes they map: the model splits extents exactly where
//! the tree must (insert, collapse ends, tags, remap ends) and nowhere else.

#![allow(clippy::unwrap_used)] // a test helper panics on failure by design

use flexkv::flextree::{Extent, FlexTree, FlexTreeOptions, Hint, Run, HOLE, MAX_LEN};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MExt {
    len: u64,
    addr: Option<u64>,
    tag: u8,
}

#[derive(Default)]
struct Model {
    exts: Vec<MExt>,
}

impl Model {
    fn len(&self) -> u64 {
        self.exts.iter().map(|e| e.len).sum()
    }

    /// Index of the extent starting at `off` (splitting one if `off` falls inside it), or
    /// `exts.len()` for the end.
    fn boundary(&mut self, off: u64) -> usize {
        let mut at = 0;
        for i in 0..self.exts.len() {
            let e = self.exts[i];
            if at == off {
                return i;
            }
            if off < at + e.len {
                let head = off - at;
                self.exts[i].len = head;
                let tail = MExt {
                    len: e.len - head,
                    addr: e.addr.map(|a| a + head),
                    tag: 0,
                };
                self.exts.insert(i + 1, tail);
                return i + 1;
            }
            at += e.len;
        }
        self.exts.len()
    }

    fn insert(&mut self, off: u64, len: u64, addr: Option<u64>) {
        if len > 0 {
            let i = self.boundary(off);
            self.exts.insert(i, MExt { len, addr, tag: 0 });
        }
    }

    fn collapse(&mut self, off: u64, len: u64) {
        if len > 0 {
            let a = self.boundary(off);
            let b = self.boundary(off + len);
            self.exts.drain(a..b);
        }
    }

    fn overwrite(&mut self, off: u64, len: u64, addr: Option<u64>) {
        if len == 0 {
            return;
        }
        let size = self.len();
        if off > size {
            self.insert(size, off - size, None);
        }
        let size = self.len();
        self.collapse(off, len.min(size - off));
        self.insert(off, len, addr);
    }

    fn set_tag(&mut self, off: u64, tag: u8) {
        let i = self.boundary(off);
        self.exts[i].tag = tag;
    }

    fn stored_at(&self, off: u64) -> Option<u64> {
        let mut at = 0;
        for e in &self.exts {
            if off < at + e.len {
                return e.addr.map(|a| a + (off - at));
            }
            at += e.len;
        }
        None
    }

    fn remap_valid(&self, off: u64, len: u64, old: u64) -> bool {
        // Check extent by extent (lengths may be huge): each piece must continue `old`.
        let mut at = 0;
        for e in &self.exts {
            let (s, t) = (at.max(off), (at + e.len).min(off + len));
            if s < t && e.addr.map(|a| a + (s - at)) != Some(old + (s - off)) {
                return false;
            }
            at += e.len;
        }
        true
    }

    fn remap(&mut self, off: u64, len: u64, new: u64) {
        if len > 0 {
            let a = self.boundary(off);
            let b = self.boundary(off + len);
            let mut done = 0;
            for e in &mut self.exts[a..b] {
                e.addr = Some(new + done);
                done += e.len;
            }
        }
    }

    fn extents(&self) -> Vec<Extent> {
        let mut at = 0;
        self.exts
            .iter()
            .map(|e| {
                let x = Extent {
                    offset: at,
                    len: e.len,
                    addr: e.addr,
                    tag: e.tag,
                };
                at += e.len;
                x
            })
            .collect()
    }

    fn query(&self, off: u64, len: u64) -> Vec<Run> {
        let end = off + len;
        self.extents()
            .into_iter()
            .filter(|e| e.offset < end && e.offset + e.len > off)
            .map(|e| {
                let from = off.max(e.offset);
                Run {
                    addr: e.addr.map(|a| a + (from - e.offset)),
                    len: end.min(e.offset + e.len) - from,
                }
            })
            .collect()
    }
}

/// One operation with raw parameters; `apply` maps them onto the current size, so the
/// same value means something sensible whatever the tree holds (and shrinks well).
#[derive(Clone, Debug)]
enum Op {
    Insert {
        at: u64,
        len: u64,
        addr: u64,
    },
    InsertHole {
        at: u64,
        len: u64,
    },
    Collapse {
        at: u64,
        len: u64,
    },
    Overwrite {
        at: u64,
        len: u64,
        addr: Option<u64>,
    },
    SetTag {
        at: u64,
        tag: u8,
    },
    /// With `whole`, the range is the extent holding `at`, as garbage collection
    /// moves them (the one-descent path).
    Remap {
        at: u64,
        len: u64,
        new: u64,
        stale: bool,
        whole: bool,
    },
    Query {
        at: u64,
        len: u64,
    },
    Lookup {
        at: u64,
    },
    OutOfRange {
        which: u8,
        by: u64,
    },
}

/// `x` mapped into `0..=n`.
fn within(x: u64, n: u64) -> u64 {
    if n == u64::MAX {
        x
    } else {
        x % (n + 1)
    }
}

fn apply(t: &mut FlexTree, m: &mut Model, op: &Op) {
    let size = t.len();
    assert_eq!(size, m.len());
    match *op {
        Op::Insert { at, len, addr } => {
            let len = len.min(HOLE / 2); // data must fit below the hole address
            let (off, addr) = (within(at, size), addr % (HOLE - len));
            if len <= MAX_LEN - size {
                t.insert(off, len, addr).unwrap();
                m.insert(off, len, Some(addr));
            } else {
                assert!(t.insert(off, len, addr).is_err());
            }
        }
        Op::InsertHole { at, len } => {
            let off = within(at, size);
            if len <= MAX_LEN - size {
                t.insert_hole(off, len).unwrap();
                m.insert(off, len, None);
            } else {
                assert!(t.insert_hole(off, len).is_err());
            }
        }
        Op::Collapse { at, len } => {
            let off = within(at, size);
            let len = within(len, size - off);
            t.collapse(off, len).unwrap();
            m.collapse(off, len);
        }
        Op::Overwrite { at, len, addr } => {
            let len = len.min(HOLE / 2);
            let off = within(at, size + size / 4 + 8);
            let addr = addr.map(|a| a % (HOLE - len));
            if off + len <= MAX_LEN {
                t.overwrite(off, len, addr).unwrap();
                m.overwrite(off, len, addr);
            } else {
                assert!(t.overwrite(off, len, addr).is_err());
            }
        }
        Op::SetTag { at, tag } if size > 0 => {
            let off = within(at, size - 1);
            t.set_tag(off, tag).unwrap();
            m.set_tag(off, tag);
        }
        Op::SetTag { .. } => assert!(t.set_tag(0, 1).is_err()),
        Op::Remap {
            at,
            len,
            new,
            stale,
            whole,
        } if size > 0 => {
            let off = within(at, size - 1);
            let (off, len) = if whole {
                let e = t.lookup(off).expect("a byte inside the space");
                (e.offset, e.len)
            } else {
                (off, 1 + within(len, size - off - 1))
            };
            // A whole extent may be a hole longer than any mapping (refused either way).
            let new = new % HOLE.saturating_sub(len).max(1);
            let old = m.stored_at(off).unwrap_or(0) + u64::from(stale);
            let valid = m.remap_valid(off, len, old);
            assert_eq!(
                t.remap(off, len, old, new).is_ok(),
                valid,
                "remap {off}+{len}"
            );
            if valid {
                m.remap(off, len, new);
            }
        }
        Op::Remap { .. } => assert!(t.remap(0, 1, 0, 0).is_err()),
        Op::Query { at, len } => {
            let off = within(at, size);
            let len = within(len, size - off);
            assert_eq!(t.query(off, len).unwrap(), m.query(off, len));
        }
        Op::Lookup { at } => {
            let off = within(at, size + 2);
            let want = m.extents().into_iter().find(|e| off < e.offset + e.len);
            assert_eq!(t.lookup(off), want);
        }
        Op::OutOfRange { which, by } => {
            let past = size.saturating_add(1 + by % 1000);
            let r = match which % 4 {
                0 => t.insert(past, 1, 0),
                1 => t.collapse(size / 2, size - size / 2 + 1 + by % 10),
                2 => t.set_tag(past - 1, 1),
                _ => t.query(past, 1).map(|_| ()),
            };
            assert!(r.is_err(), "{op:?} on size {size} must be refused");
        }
    }
    if let Err(e) = t.check() {
        panic!("after {op:?}: {e}");
    }
    assert_eq!(t.extents().collect::<Vec<_>>(), m.extents(), "after {op:?}");
    assert_eq!(t.extent_count() as usize, m.exts.len());
}

/// Bytes followed through the operations with the hint a search gave for each: where
/// each byte is now, as the operations move it, and its hint.
#[derive(Default)]
struct Hinted {
    bytes: Vec<(u64, Hint)>,
    /// How often a hint still held, and how often one had lapsed.
    held: usize,
    lapsed: usize,
}

impl Hinted {
    /// Follows the bytes through `op` (applied to a tree of `size` bytes), dropping the
    /// ones it removes.
    fn follow(&mut self, op: &Op, size: u64) {
        // (where, removed, inserted): bytes at `where..where + removed` go, and
        // `inserted` new ones take their place.
        let (at, removed, inserted) = match *op {
            Op::Insert { at, len, .. } => {
                let len = len.min(HOLE / 2);
                if len > MAX_LEN - size {
                    return;
                }
                (within(at, size), 0, len)
            }
            Op::InsertHole { at, len } => {
                if len > MAX_LEN - size {
                    return;
                }
                (within(at, size), 0, len)
            }
            Op::Collapse { at, len } => {
                let off = within(at, size);
                (off, within(len, size - off), 0)
            }
            Op::Overwrite { at, len, .. } => {
                let len = len.min(HOLE / 2);
                let off = within(at, size + size / 4 + 8);
                if off + len > MAX_LEN || len == 0 || off >= size {
                    // Refused, nothing, or all past the bytes followed.
                    return;
                }
                (off, len.min(size - off), len)
            }
            _ => return,
        };
        self.bytes.retain_mut(|(pos, _)| {
            if *pos < at {
                return true;
            }
            if *pos < at + removed {
                return false;
            }
            *pos = *pos - removed + inserted;
            true
        });
    }

    /// Every hint that still holds starts the walk where a search does; a new byte is
    /// followed now and then.
    fn check(&mut self, t: &FlexTree, rng_pick: u64) {
        for (pos, h) in &mut self.bytes {
            let (walk, now) = t.extents_hinted(*pos, Some(*h));
            let searched: Vec<Extent> = t.extents_from(*pos).take(3).collect();
            assert_eq!(
                walk.take(3).collect::<Vec<_>>(),
                searched,
                "hint {h:?} at {pos}"
            );
            let now = now.expect("a byte inside the space has a hint");
            if now == *h {
                self.held += 1;
            } else {
                self.lapsed += 1;
            }
            *h = now;
        }
        if self.bytes.len() < 8 && !t.is_empty() {
            let pos = rng_pick % t.len();
            let (_, h) = t.extents_hinted(pos, None);
            self.bytes
                .push((pos, h.expect("a byte inside the space has a hint")));
        }
    }
}

/// Lengths: mostly small, sometimes large, rarely enormous (to drive shifts and partial
/// offsets through wrap-around).
fn random_len(rng: &mut SmallRng) -> u64 {
    match rng.random_range(0..100) {
        0..=79 => rng.random_range(1..64),
        80..=97 => rng.random_range(64..100_000),
        _ => rng.random_range(1u64 << 40..1 << 58),
    }
}

fn random_op(rng: &mut SmallRng) -> Op {
    let at = rng.random();
    match rng.random_range(0..100) {
        0..=29 => Op::Insert {
            at,
            len: random_len(rng),
            addr: rng.random(),
        },
        30..=34 => Op::InsertHole {
            at,
            len: random_len(rng),
        },
        35..=54 => Op::Collapse {
            at,
            // Mostly a few extents' worth, sometimes everything after `at`.
            len: if rng.random_bool(0.9) {
                rng.random_range(0..300)
            } else {
                u64::MAX
            },
        },
        55..=64 => Op::Overwrite {
            at,
            len: random_len(rng),
            addr: rng.random_bool(0.9).then(|| rng.random()),
        },
        65..=74 => Op::SetTag {
            at,
            tag: rng.random(),
        },
        75..=82 => Op::Remap {
            at,
            len: rng.random_range(0..200),
            new: rng.random(),
            stale: rng.random_bool(0.3),
            whole: rng.random_bool(0.5),
        },
        83..=90 => Op::Query {
            at,
            len: rng.random_range(0..5_000),
        },
        91..=96 => Op::Lookup { at },
        _ => Op::OutOfRange {
            which: rng.random(),
            by: rng.random(),
        },
    }
}

fn run_seeded(seed: u64, opts: FlexTreeOptions, ops: usize) -> usize {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut t = FlexTree::with_options(opts).unwrap();
    let mut m = Model::default();
    let mut hinted = Hinted::default();
    let mut max_height = 1;
    for _ in 0..ops {
        let op = random_op(&mut rng);
        let size = t.len();
        apply(&mut t, &mut m, &op);
        hinted.follow(&op, size);
        hinted.check(&t, rng.random());
        max_height = max_height.max(t.height());
    }
    // Hints both hold (a change elsewhere leaves them) and lapse (one to their leaf).
    assert!(
        hinted.held > ops && hinted.lapsed >= 10,
        "{} held, {} lapsed",
        hinted.held,
        hinted.lapsed
    );
    max_height
}

/// At least 100,000 operations per run, over capacities from the smallest allowed (deep
/// trees, constant splits and merges) to the default.
#[test]
fn random_operations_match_the_model() {
    let configs = [(4, 6), (5, 7), (6, 9), (8, 8), (16, 12), (64, 64)];
    let mut total = 0;
    for (i, &(leaf, internal)) in configs.iter().enumerate() {
        let opts = FlexTreeOptions {
            leaf_capacity: leaf,
            internal_capacity: internal,
        };
        let ops = 17_000;
        let height = run_seeded(0xF1E7 + i as u64, opts, ops);
        assert!(
            height >= 2,
            "capacities {leaf}/{internal} never grew a tree"
        );
        total += ops;
    }
    assert!(total >= 100_000);
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let len = prop_oneof![8 => 1u64..64, 2 => 64u64..100_000, 1 => (1u64 << 40)..(1 << 58)];
    prop_oneof![
        6 => (any::<u64>(), len.clone(), any::<u64>()).prop_map(|(at, len, addr)| Op::Insert { at, len, addr }),
        1 => (any::<u64>(), len.clone()).prop_map(|(at, len)| Op::InsertHole { at, len }),
        4 => (any::<u64>(), 0u64..300).prop_map(|(at, len)| Op::Collapse { at, len }),
        2 => (any::<u64>(), len, any::<Option<u64>>()).prop_map(|(at, len, addr)| Op::Overwrite { at, len, addr }),
        2 => (any::<u64>(), any::<u8>()).prop_map(|(at, tag)| Op::SetTag { at, tag }),
        2 => (any::<u64>(), 0u64..200, any::<u64>(), any::<bool>(), any::<bool>()).prop_map(|(at, len, new, stale, whole)| Op::Remap { at, len, new, stale, whole }),
        2 => (any::<u64>(), 0u64..5_000).prop_map(|(at, len)| Op::Query { at, len }),
        1 => any::<u64>().prop_map(|at| Op::Lookup { at }),
        1 => (any::<u8>(), any::<u64>()).prop_map(|(which, by)| Op::OutOfRange { which, by }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The same check with shrinking: a failure comes back as a short sequence.
    #[test]
    fn shrinking_sequences_match_the_model(
        ops in prop::collection::vec(op_strategy(), 1..300),
        leaf in 4usize..9,
        internal in 6usize..10,
    ) {
        let opts = FlexTreeOptions { leaf_capacity: leaf, internal_capacity: internal };
        let mut t = FlexTree::with_options(opts).unwrap();
        let mut m = Model::default();
        let mut hinted = Hinted::default();
        for (i, op) in ops.iter().enumerate() {
            let size = t.len();
            apply(&mut t, &mut m, op);
            hinted.follow(op, size);
            hinted.check(&t, (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        }
    }
}
