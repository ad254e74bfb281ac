//! Read handles: [`Keyspace`], [`Snapshot`] and [`Iter`].
//!
//! Every read happens at one sequence. A point read at "now" uses the visible sequence;
//! a snapshot or an iterator registers its sequence with the snapshot registry (so the
//! committer and GC keep what it can see) and releases it when dropped. An iterator
//! remembers only its bounds and the last key it returned, and re-seeks from there on
//! every step: it holds no lock between calls and sees exactly one sequence.

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use super::batch::check_value;
use super::Inner;
use crate::memtable::{KeyspaceId, Value};
use crate::{Durability, Result, WriteBatch};

/// A named keyspace of a [`Db`](crate::Db): its own sorted key order. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Keyspace {
    db: Arc<Inner>,
    id: KeyspaceId,
    name: Arc<str>,
}

impl Keyspace {
    pub(crate) fn new(db: Arc<Inner>, id: KeyspaceId, name: &str) -> Self {
        Keyspace {
            db,
            id,
            name: name.into(),
        }
    }

    pub(crate) fn id(&self) -> KeyspaceId {
        self.id
    }

    pub(crate) fn db_id(&self) -> u64 {
        self.db.id
    }

    /// The keyspace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Puts `value` (which may be empty) at `key`, with [`Durability::Sync`].
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_with(key, value, Durability::Sync)
    }

    /// Puts `value` at `key` with the given durability.
    pub fn put_with(&self, key: &[u8], value: &[u8], durability: Durability) -> Result<()> {
        check_value(value)?;
        let mut b = WriteBatch::new();
        b.durability(durability).put(self, key, value)?;
        self.db.write(b).map(drop)
    }

    /// Deletes `key`, with [`Durability::Sync`]. Deleting a missing key is not an error.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.delete_with(key, Durability::Sync)
    }

    /// Deletes `key` with the given durability.
    pub fn delete_with(&self, key: &[u8], durability: Durability) -> Result<()> {
        let mut b = WriteBatch::new();
        b.durability(durability).delete(self, key)?;
        self.db.write(b).map(drop)
    }

    /// The value at `key`, as of now.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db.get_at(self.id, key, self.db.vis.visible())
    }

    /// Whether `key` has a value (possibly empty), as of now.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        self.db.contains_at(self.id, key, self.db.vis.visible())
    }

    /// A snapshot at the current visible sequence, reading this keyspace.
    pub fn snapshot(&self) -> Snapshot {
        let seq = self.db.snapshots.acquire(&self.db.vis);
        Snapshot {
            guard: Arc::new(Guard {
                db: Arc::clone(&self.db),
                seq,
            }),
            ks: self.id,
        }
    }

    /// The pairs with keys in `range`, in key order (reverse with `.rev()`), as of now.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        self.snapshot().range(range)
    }

    /// The pairs whose keys start with `prefix`, as of now.
    pub fn prefix(&self, prefix: &[u8]) -> Iter {
        self.snapshot().prefix(prefix)
    }

    /// Every pair, as of now.
    pub fn iter(&self) -> Iter {
        self.snapshot().iter()
    }
}

/// Keeps a sequence registered as a live snapshot until the last user drops it.
#[derive(Debug)]
struct Guard {
    db: Arc<Inner>,
    seq: u64,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.db.snapshots.release(self.seq);
    }
}

/// A consistent read-only view of the database at one sequence: it sees every write
/// acknowledged before it was taken and nothing after. Released when dropped (with
/// every [`Iter`] made from it). Reads go to one keyspace; [`Snapshot::keyspace`] gives
/// a view of another at the same sequence.
#[derive(Clone, Debug)]
pub struct Snapshot {
    guard: Arc<Guard>,
    ks: KeyspaceId,
}

impl Snapshot {
    /// The sequence this snapshot reads at.
    pub fn seq(&self) -> u64 {
        self.guard.seq
    }

    /// The same snapshot, reading keyspace `ks` (of the same database).
    pub fn keyspace(&self, ks: &Keyspace) -> Result<Snapshot> {
        if ks.db.id != self.guard.db.id {
            return Err(crate::Error::invalid(
                "the keyspace belongs to another database than the snapshot",
            ));
        }
        Ok(Snapshot {
            guard: Arc::clone(&self.guard),
            ks: ks.id,
        })
    }

    /// The value at `key` as of the snapshot.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.guard.db.get_at(self.ks, key, self.guard.seq)
    }

    /// Whether `key` had a value as of the snapshot.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        self.guard.db.contains_at(self.ks, key, self.guard.seq)
    }

    /// The pairs with keys in `range` as of the snapshot.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        let own = |b: Bound<&K>| match b {
            Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        Iter {
            guard: Arc::clone(&self.guard),
            ks: self.ks,
            lo: own(range.start_bound()),
            hi: own(range.end_bound()),
            done: false,
        }
    }

    /// The pairs whose keys start with `prefix` as of the snapshot.
    pub fn prefix(&self, prefix: &[u8]) -> Iter {
        let hi = match successor(prefix) {
            Some(s) => Bound::Excluded(s),
            None => Bound::Unbounded,
        };
        let mut it = self.range::<&[u8], _>(..);
        it.lo = Bound::Included(prefix.to_vec());
        it.hi = hi;
        it
    }

    /// Every pair as of the snapshot.
    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }
}

/// The smallest key greater than every key starting with `prefix`, if there is one.
fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last < u8::MAX {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// An iterator over `(key, value)` pairs of one keyspace at one sequence, in key order
/// from the front and in reverse from the back ([`DoubleEndedIterator`]). An item is an
/// error if a value cannot be read (a value-log record fails its checks) or the
/// database was closed; iteration may go on after a value error.
#[derive(Debug)]
pub struct Iter {
    guard: Arc<Guard>,
    ks: KeyspaceId,
    /// What is left to visit: shrinks from both ends as items are returned.
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    done: bool,
}

type Item = Result<(Vec<u8>, Vec<u8>)>;

impl Iter {
    fn inside(&self, key: &[u8]) -> bool {
        let above_lo = match &self.lo {
            Bound::Included(l) => key >= l.as_slice(),
            Bound::Excluded(l) => key > l.as_slice(),
            Bound::Unbounded => true,
        };
        let below_hi = match &self.hi {
            Bound::Included(h) => key <= h.as_slice(),
            Bound::Excluded(h) => key < h.as_slice(),
            Bound::Unbounded => true,
        };
        above_lo && below_hi
    }

    fn step(&mut self, forward: bool) -> Option<Item> {
        while !self.done {
            let db = &self.guard.db;
            if let Err(e) = db.check_open() {
                self.done = true;
                return Some(Err(e));
            }
            let seq = self.guard.seq;
            let found = if forward {
                db.memtable.next_at(self.ks, as_ref(&self.lo), seq)
            } else {
                db.memtable.prev_at(self.ks, as_ref(&self.hi), seq)
            };
            let Some((key, _, value)) = found.filter(|(k, _, _)| self.inside(k)) else {
                self.done = true;
                return None;
            };
            let key = key.into_vec();
            if forward {
                self.lo = Bound::Excluded(key.clone());
            } else {
                self.hi = Bound::Excluded(key.clone());
            }
            if matches!(value, Value::Tombstone) {
                continue;
            }
            return Some(match db.resolve(self.ks, &key, value) {
                Ok(Some(v)) => Ok((key, v)),
                Ok(None) => continue,
                Err(e) => Err(e),
            });
        }
        None
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl Iterator for Iter {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        self.step(true)
    }
}

impl DoubleEndedIterator for Iter {
    fn next_back(&mut self) -> Option<Item> {
        self.step(false)
    }
}

#[cfg(test)]
mod tests {
    use super::successor;

    #[test]
    fn successor_is_the_first_key_past_a_prefix() {
        assert_eq!(successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(successor(b"\xff\xff"), None);
        assert_eq!(successor(b""), None);
    }
}
