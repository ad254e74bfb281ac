//! The sorted keys of one index node, laid out for searching.
//!
//! A point read descends the sparse index through a few nodes, and at each one a binary
//! search compares the read's key with about six of the node's keys. Kept as one boxed
//! slice per key, every comparison chased two pointers into memory the cache rarely
//! holds, and the descent was most of a cached read's time. Here a node keeps:
//!
//! - `bytes`: every key back to back, and `ends`, where each one ends;
//! - `prefix`: how many leading bytes all its keys share;
//! - `heads`: the 4 bytes of each key after that prefix (zero-padded, big-endian),
//!   side by side, inside the struct (so inside the index's node) for up to
//!   [`HEADS_INLINE`] keys.
//!
//! A search compares the key's own head with `heads` and looks at a stored key's bytes
//! only when the heads are equal. The prefix itself is kept in the struct too (`lead`,
//! up to [`LEAD`] bytes), so a search starts on the heads, whose lines it asks for all
//! at once, rather than on the first key, whose end and bytes it used to wait for
//! before it could read a head (10M UDB point reads 1.03× with both; docs/benchmarks.md,
//! thirty-fifth session). Heads preserve order (a shorter key padded with zeros
//! never sorts above a longer one it is a prefix of), so the result is exactly that of
//! comparing whole keys.
//!
//! Inside the node, the heads' lines are asked for with the node's own
//! (`SparseIndex::walk` asks for the whole node as it reaches it); in an allocation of
//! their own, a descent waited at each level for the node's line to learn where they
//! were, then for them. A descent of an index of 900K intervals (a 10M load's) ran
//! 1.23 times as fast (docs/benchmarks.md, seventy-fifth session).

use std::cmp::Ordering;

use smallvec::SmallVec;

use super::grow;
use crate::sorted::interval::{common_prefix, head};

#[derive(Debug, Clone, Default)]
pub(super) struct Keys {
    bytes: Vec<u8>,
    ends: Vec<u32>,
    /// Inside the struct (and so inside the node) for up to [`HEADS_INLINE`] keys:
    /// a descent that knows a node's place can ask for its heads at once, where a
    /// separate allocation had to wait for the node's pointer to it first.
    heads: SmallVec<[u32; HEADS_INLINE]>,
    prefix: usize,
    /// The first `prefix` bytes every key starts with, if they are at most [`LEAD`].
    lead: [u8; LEAD],
}

/// The longest shared prefix kept in the struct; a longer one is read from the first key.
const LEAD: usize = 16;

/// Heads kept inside the struct: a node of the default fanout
/// ([`FANOUT`](super::FANOUT)) holds them all until the insert that splits it.
pub(super) const HEADS_INLINE: usize = 128;

impl Keys {
    /// The keys of `keys`, which must be in increasing order.
    pub(super) fn from_sorted<'a>(keys: impl IntoIterator<Item = &'a [u8]>) -> Keys {
        let mut k = Keys::default();
        for key in keys {
            k.bytes.extend_from_slice(key);
            k.ends.push(to_u32(k.bytes.len()));
        }
        k.shrink_to_fit();
        k.rebuild_heads();
        k
    }

    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn start(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.ends[i - 1] as usize
        }
    }

    /// Asks the processor for where key `i` ends and starts (its bytes lie behind
    /// them, and are asked for only once they arrive).
    pub(super) fn prefetch_key(&self, i: usize) {
        let ends = self.ends.get(i.saturating_sub(1)..(i + 1).min(self.len()));
        crate::prefetch::prefetch(ends.unwrap_or_default());
    }

    /// Key `i`.
    pub(super) fn get(&self, i: usize) -> &[u8] {
        &self.bytes[self.start(i)..self.ends[i] as usize]
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// How many keys are at or below `key` (`or_equal`), or below it.
    pub(super) fn rank(&self, key: &[u8], or_equal: bool) -> usize {
        crate::prefetch::prefetch(&self.heads);
        if self.is_empty() {
            return 0;
        }
        // Every key starts with the same `prefix` bytes; a key that does not sorts
        // wholly before or after them.
        let p = self.prefix;
        let theirs = match self.lead.get(..p) {
            Some(lead) => lead,
            None => &self.get(0)[..p],
        };
        let mine = &key[..p.min(key.len())];
        match mine.cmp(theirs) {
            Ordering::Less => return 0,
            Ordering::Greater => return self.len(),
            Ordering::Equal => {}
        }
        let h = head(key, p);
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let below = match self.heads[mid].cmp(&h) {
                Ordering::Less => true,
                Ordering::Greater => false,
                Ordering::Equal => {
                    let k = self.get(mid);
                    if or_equal {
                        k <= key
                    } else {
                        k < key
                    }
                }
            };
            if below {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Puts `key` at position `i` (the caller keeps the order). The vectors grow a few
    /// keys at a time, not by doubling ([`grow`]); the heads have a full node's room
    /// inside the struct already.
    pub(super) fn insert(&mut self, i: usize, key: &[u8]) {
        grow(&mut self.ends, 1);
        grow(&mut self.bytes, key.len());
        let at = self.start(i);
        self.bytes.splice(at..at, key.iter().copied());
        let n = to_u32(key.len());
        self.ends.insert(i, to_u32(at) + n);
        self.ends[i + 1..].iter_mut().for_each(|e| *e += n);
        // Sorted keys share exactly what the first and the last share.
        let p = match self.len() {
            0 | 1 => 0,
            n => common_prefix(self.get(0), self.get(n - 1)),
        };
        if p == self.prefix {
            self.heads.insert(i, head(key, p));
        } else {
            self.rebuild_heads();
        }
    }

    /// Takes key `i` out, returning it. The prefix the rest share stays valid (it
    /// may now be shorter than what they share, which costs only speed).
    pub(super) fn remove(&mut self, i: usize) -> Box<[u8]> {
        let (a, b) = (self.start(i), self.ends[i] as usize);
        let key: Box<[u8]> = self.bytes.drain(a..b).collect();
        let n = to_u32(key.len());
        self.ends.remove(i);
        self.ends[i..].iter_mut().for_each(|e| *e -= n);
        self.heads.remove(i);
        key
    }

    /// Keeps the first `at` keys and returns the rest.
    pub(super) fn split_off(&mut self, at: usize) -> Keys {
        let right = Keys::from_sorted((at..self.len()).map(|i| self.get(i)));
        self.bytes.truncate(self.start(at));
        self.ends.truncate(at);
        self.rebuild_heads();
        right
    }

    /// Gives back room the vectors hold beyond their contents.
    pub(super) fn shrink_to_fit(&mut self) {
        self.bytes.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.heads.shrink_to_fit();
    }

    fn rebuild_heads(&mut self) {
        self.prefix = match self.len() {
            0 | 1 => 0,
            n => common_prefix(self.get(0), self.get(n - 1)),
        };
        let p = self.prefix;
        if p <= LEAD && !self.is_empty() {
            let mut lead = [0; LEAD];
            lead[..p].copy_from_slice(&self.get(0)[..p]);
            self.lead = lead;
        }
        self.heads = (0..self.len()).map(|i| head(self.get(i), p)).collect();
    }

    /// Whether the heads lie outside the struct (more than [`HEADS_INLINE`] keys).
    #[cfg(test)]
    pub(super) fn heads_outside(&self) -> bool {
        self.heads.spilled()
    }

    /// Bytes of memory held.
    pub(super) fn memory_bytes(&self) -> usize {
        // Heads inside the struct are counted with the node.
        let heads = if self.heads.spilled() {
            4 * self.heads.capacity()
        } else {
            0
        };
        self.bytes.capacity() + 4 * self.ends.capacity() + heads
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or_else(|_| unreachable!("an index node holds less than 4 GiB of keys"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// A key from a small alphabet, often sharing long prefixes (and sometimes being a
    /// prefix of another, or ending in zero bytes, where padded heads tie).
    fn key(rng: &mut SmallRng) -> Vec<u8> {
        let stem: &[u8] = [&b""[..], b"user", b"user0000", b"user00000000"][rng.random_range(0..4)];
        let mut k = stem.to_vec();
        for _ in 0..rng.random_range(0..12) {
            k.push([0u8, 1, b'0', b'1', b'9', 255][rng.random_range(0..6)]);
        }
        k
    }

    fn check(keys: &Keys, model: &[Vec<u8>], rng: &mut SmallRng) {
        let got: Vec<&[u8]> = keys.iter().collect();
        let want: Vec<&[u8]> = model.iter().map(|k| k.as_slice()).collect();
        assert_eq!(got, want);
        let mut probes: Vec<Vec<u8>> = (0..40).map(|_| key(rng)).collect();
        probes.extend(model.iter().cloned());
        for p in &probes {
            for or_equal in [true, false] {
                let want = model
                    .iter()
                    .filter(|k| {
                        if or_equal {
                            k.as_slice() <= p.as_slice()
                        } else {
                            k.as_slice() < p.as_slice()
                        }
                    })
                    .count();
                assert_eq!(keys.rank(p, or_equal), want, "rank of {p:?} in {model:?}");
            }
        }
    }

    #[test]
    fn ranks_match_whole_key_comparison_through_inserts_removes_and_splits() {
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..200 {
            let mut model: Vec<Vec<u8>> = Vec::new();
            let mut keys = Keys::default();
            for _ in 0..rng.random_range(1..40) {
                let k = key(&mut rng);
                if let Err(at) = model.binary_search(&k) {
                    assert_eq!(keys.rank(&k, true), at);
                    model.insert(at, k.clone());
                    keys.insert(at, &k);
                }
                if rng.random_ratio(1, 5) && !model.is_empty() {
                    let at = rng.random_range(0..model.len());
                    assert_eq!(&*keys.remove(at), model.remove(at).as_slice());
                }
                check(&keys, &model, &mut rng);
            }
            let at = rng.random_range(0..=model.len());
            let right = keys.split_off(at);
            let model_right = model.split_off(at);
            check(&keys, &model, &mut rng);
            check(&right, &model_right, &mut rng);
            let rebuilt = Keys::from_sorted(model_right.iter().map(|k| k.as_slice()));
            check(&rebuilt, &model_right, &mut rng);
        }
    }

    #[test]
    fn heads_preserve_order_where_one_key_prefixes_another() {
        let model: Vec<Vec<u8>> = vec![
            b"ab".to_vec(),
            b"ab\0".to_vec(),
            b"ab\0\0".to_vec(),
            b"ab\x01".to_vec(),
        ];
        let keys = Keys::from_sorted(model.iter().map(|k| k.as_slice()));
        assert_eq!(keys.prefix, 2);
        assert_eq!(keys.rank(b"ab", true), 1);
        assert_eq!(keys.rank(b"ab", false), 0);
        assert_eq!(keys.rank(b"ab\0", true), 2);
        assert_eq!(keys.rank(b"ab\0\0\0", true), 3);
        assert_eq!(keys.rank(b"a", true), 0);
        assert_eq!(keys.rank(b"ac", false), 4);
    }
}
