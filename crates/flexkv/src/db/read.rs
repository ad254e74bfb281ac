//! Read handles: [`Keyspace`], [`Snapshot`] and [`Iter`].
//!
//! Every read happens at one sequence. A point read at "now" uses the visible sequence;
//! a snapshot or an iterator registers its sequence with the snapshot registry (so the
//! committer and GC keep what it can see) and releases it when dropped. An iterator
//! remembers only its bounds and the last key it returned, and re-seeks from there on
//! every step: it holds no lock between calls and sees exactly one sequence.

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;

use super::batch::check_value;
use super::Handle;
use crate::memtable::{KeyspaceId, Value};
use crate::sorted::history::{self, Version};
use crate::sorted::store::Run;
use crate::sorted::Record;
use crate::sorted::RecordValue;
use crate::vlog::Pointer;
use crate::{Durability, Result, WriteBatch};

/// A named keyspace of a [`Db`](crate::Db): its own sorted key order. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Keyspace {
    db: Handle,
    id: KeyspaceId,
    name: Arc<str>,
}

impl Keyspace {
    pub(crate) fn new(db: Handle, id: KeyspaceId, name: &str) -> Self {
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
        self.db.get_at(self.id, key, self.db.vis.visible(), false)
    }

    /// Whether `key` has a value (possibly empty), as of now.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        self.db
            .contains_at(self.id, key, self.db.vis.visible(), false)
    }

    /// A snapshot at the current visible sequence, reading this keyspace.
    pub fn snapshot(&self) -> Snapshot {
        let seq = self.db.snapshots.acquire(&self.db.vis);
        Snapshot {
            guard: Arc::new(Guard {
                db: self.db.clone(),
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
    db: Handle,
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
        self.guard.db.get_at(self.ks, key, self.guard.seq, true)
    }

    /// Whether `key` had a value as of the snapshot.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        self.guard
            .db
            .contains_at(self.ks, key, self.guard.seq, true)
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
            buf: StoreBuf::default(),
            buf_epoch: None,
            buf_forward: true,
            buf_end: false,
            ahead: HashMap::new(),
            streak: 0,
            batch: READAHEAD_FIRST,
            mems: Vec::new(),
            mems_generation: None,
            mems_forward: true,
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
///
/// Each step merges the memtables with the sorted store. From each memtable it keeps
/// the next entry found (searched again only once the iterator passes it, or when the
/// memtable list changes); from the store it reads an interval at a time. Buffered
/// records are used only while the store's epoch is unchanged; after a commit the
/// iterator seeks again by key. No lock is held between steps.
#[derive(Debug)]
pub struct Iter {
    guard: Arc<Guard>,
    ks: KeyspaceId,
    /// What is left to visit: shrinks from both ends as items are returned.
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    done: bool,
    /// Store records past the bound in the current direction, nearest first.
    buf: StoreBuf,
    /// The store epoch `buf` was read at (`None`: nothing read).
    buf_epoch: Option<u64>,
    buf_forward: bool,
    /// The store has nothing past `buf` in this direction.
    buf_end: bool,
    /// Values read ahead, by pointer: a record's bytes never change, so a value read
    /// ahead is right whenever its pointer comes up.
    ahead: HashMap<Pointer, Result<Option<Vec<u8>>>>,
    /// Separated values resolved in a row without read-ahead.
    streak: u32,
    /// The next read-ahead's size: it doubles from [`READAHEAD_FIRST`] to [`READAHEAD`],
    /// so a short scan does not read far past where it stops.
    batch: usize,
    /// The memtables (newest first) with the next entry of each in the direction
    /// `mems_forward`, taken from the memtable list of generation `mems_generation`.
    mems: Vec<MemHead>,
    mems_generation: Option<u64>,
    mems_forward: bool,
}

/// Store records an iterator has read ahead of its position, nearest first: runs of
/// cached intervals (never empty), decoded a record at a time as it comes to them.
#[derive(Debug, Default)]
struct StoreBuf {
    runs: VecDeque<Run>,
}

impl StoreBuf {
    fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    fn clear(&mut self) {
        self.runs.clear();
    }

    /// The nearest record's place in its interval.
    fn nearest(run: &Run, forward: bool) -> usize {
        if forward {
            run.range.start
        } else {
            run.range.end - 1
        }
    }

    fn front_key(&self, forward: bool) -> Option<&[u8]> {
        let run = self.runs.front()?;
        Some(run.interval.key(Self::nearest(run, forward)))
    }

    /// Passes the nearest record; returns its key and version if `decode`.
    fn pop(&mut self, forward: bool, decode: bool) -> Option<(Box<[u8]>, Version)> {
        let run = self.runs.front_mut()?;
        let out = decode.then(|| {
            let r = run.interval.record(Self::nearest(run, forward));
            (Box::from(r.key), Version::from_record(&r))
        });
        if forward {
            run.range.start += 1;
        } else {
            run.range.end -= 1;
        }
        if run.range.is_empty() {
            self.runs.pop_front();
        }
        out
    }

    /// Every record held, nearest first.
    fn records(&self, forward: bool) -> impl Iterator<Item = Record<'_>> {
        self.runs.iter().flat_map(move |run| {
            let order: Box<dyn Iterator<Item = usize>> = if forward {
                Box::new(run.range.clone())
            } else {
                Box::new(run.range.clone().rev())
            };
            order.map(|i| run.interval.record(i))
        })
    }
}

/// One memtable as an iterator reads it. What a memtable holds at or below the
/// iterator's sequence never changes (a batch goes into the memtable that was active
/// when its sequence was handed out, before that sequence becomes visible), so entries
/// found ahead of the iterator stay right until it passes them. Going forward, one
/// search finds the next several (a walk along the skip list after it), twice as
/// many each time up to [`MEM_AHEAD`], so a scan through many memtable entries does
/// not search from the top for each; going backward, one at a time.
#[derive(Debug)]
struct MemHead {
    table: Arc<crate::memtable::Memtable>,
    /// Entries found ahead in the iterator's direction, nearest first.
    ahead: VecDeque<(Box<[u8]>, Value)>,
    /// The memtable may hold more past `ahead` (searched once `ahead` is empty).
    more: bool,
    /// How many entries the next search finds.
    batch: usize,
}

/// Entries a memtable search finds ahead of an iterator at first...
const MEM_AHEAD_FIRST: usize = 4;
/// ...and at most.
const MEM_AHEAD: usize = 64;

impl MemHead {
    fn new(table: Arc<crate::memtable::Memtable>) -> Self {
        MemHead {
            table,
            ahead: VecDeque::new(),
            more: true,
            batch: MEM_AHEAD_FIRST,
        }
    }

    fn front_key(&self) -> Option<&[u8]> {
        self.ahead.front().map(|(k, _)| &**k)
    }
}

/// Separated values an iterator reads one by one before it starts reading ahead.
const READAHEAD_AFTER: u32 = 2;
/// Read ahead only when at least this many values are known to come...
const READAHEAD_MIN: usize = 4;
/// ...the first read-ahead takes this many, each next one twice as many...
const READAHEAD_FIRST: usize = 8;
/// ...up to this many at once...
const READAHEAD: usize = 64;
/// ...and the most bytes of them.
const READAHEAD_BYTES: u64 = 8 << 20;

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

    /// Refills the buffer of store records in the direction if it is empty or stale.
    fn fill_store_buf(&mut self, forward: bool) -> Result<()> {
        let db = &self.guard.db;
        let store = db.store(self.ks)?;
        let epoch = store.epoch.load(Ordering::SeqCst);
        if self.buf_epoch != Some(epoch) || self.buf_forward != forward {
            self.buf.clear();
            self.buf_epoch = None;
        }
        if self.buf.is_empty() && !(self.buf_epoch.is_some() && self.buf_end) {
            let from = if forward {
                as_ref(&self.lo)
            } else {
                as_ref(&self.hi)
            };
            let min = if self.streak >= READAHEAD_AFTER {
                self.batch
            } else {
                1
            };
            let (e, recs) = store.scan(from, forward, min)?;
            self.buf_epoch = Some(e);
            self.buf_forward = forward;
            self.buf_end = recs.is_empty();
            self.buf.runs = recs.into();
        }
        Ok(())
    }

    /// Brings `mems` up to date: the current memtable list (keeping the entries found
    /// in memtables still on it), each searched for its next entry in the direction.
    fn fill_mems(&mut self, forward: bool) {
        let db = &self.guard.db;
        let generation = db.tables.read().generation;
        if self.mems_generation != Some(generation) {
            let (tables, generation) = {
                let t = db.tables.read();
                (t.newest_first(), t.generation)
            };
            let mut old = std::mem::take(&mut self.mems);
            self.mems = tables
                .into_iter()
                .map(
                    |table| match old.iter().position(|m| Arc::ptr_eq(&m.table, &table)) {
                        Some(i) => old.swap_remove(i),
                        None => MemHead::new(table),
                    },
                )
                .collect();
            self.mems_generation = Some(generation);
        }
        if self.mems_forward != forward {
            for m in &mut self.mems {
                *m = MemHead::new(Arc::clone(&m.table));
            }
            self.mems_forward = forward;
        }
        let (ks, seq) = (self.ks, self.guard.seq);
        for m in &mut self.mems {
            if m.ahead.is_empty() && m.more {
                if forward {
                    let from = as_ref(&self.lo);
                    m.more = m.table.next_run_at(ks, from, seq, m.batch, &mut m.ahead);
                    m.batch = (m.batch * 2).min(MEM_AHEAD);
                } else {
                    let found = m.table.prev_at(ks, as_ref(&self.hi), seq);
                    m.more = found.is_some();
                    m.ahead.extend(found.map(|(k, _, v)| (k, v)));
                }
            }
        }
    }

    /// The next pair in the direction, with its value resolved (read ahead when the
    /// values come from the value log one after another).
    fn step(&mut self, forward: bool) -> Option<Item> {
        let (key, v) = match self.step_raw(forward)? {
            Ok(kv) => kv,
            Err(e) => return Some(Err(e)),
        };
        match self.value(&key, v) {
            Ok(Some(v)) => Some(Ok((key, v))),
            // Only a lookup again after GC gets here, and it reads at the same sequence.
            Ok(None) => Some(Err(crate::Error::corruption(
                &self.guard.db.dir,
                0,
                format!("key {key:?} vanished from the iterator's snapshot"),
            ))),
            Err(e) => Some(Err(e)),
        }
    }

    /// The value of `key` given the version found: read ahead, or read now.
    fn value(&mut self, key: &[u8], v: Value) -> Result<Option<Vec<u8>>> {
        let (ks, seq) = (self.ks, self.guard.seq);
        let Value::Separated(p) = v else {
            self.streak = 0;
            return self.guard.db.resolve(ks, key, v, seq, true);
        };
        if !self.ahead.contains_key(&p) {
            self.streak += 1;
            if self.streak > READAHEAD_AFTER {
                self.read_ahead(p, key);
            }
        }
        match self.ahead.remove(&p) {
            Some(Ok(Some(b))) => Ok(Some(b)),
            Some(Err(e)) => Err(e),
            // Not read ahead, or its segment was collected since: the usual way.
            Some(Ok(None)) | None => self.guard.db.resolve(ks, key, v, seq, true),
        }
    }

    /// Reads `p` and the separated values of the buffered store records after it in
    /// parallel (WiscKey §3.3.1), up to the current batch size (at most [`READAHEAD`])
    /// or [`READAHEAD_BYTES`].
    fn read_ahead(&mut self, p: Pointer, key: &[u8]) {
        if self.ahead.len() > 2 * READAHEAD {
            self.ahead.clear(); // read ahead for keys a memtable shadowed
        }
        let seq = self.guard.seq;
        let mut want: Vec<(Pointer, KeyspaceId, &[u8])> = vec![(p, self.ks, key)];
        let mut bytes = u64::from(p.len);
        for r in self.buf.records(self.buf_forward) {
            if want.len() >= self.batch || bytes >= READAHEAD_BYTES {
                break;
            }
            if let (true, RecordValue::Separated(q)) = (r.seq <= seq, r.value) {
                if !self.ahead.contains_key(&q) && q != p {
                    want.push((q, self.ks, r.key));
                    bytes += u64::from(q.len);
                }
            }
        }
        if want.len() < READAHEAD_MIN {
            return; // too few to be worth the threads: read the one value now
        }
        self.batch = (self.batch * 2).min(READAHEAD);
        let db = &self.guard.db;
        db.stats
            .read_ahead
            .fetch_add(want.len() as u64, Ordering::Relaxed);
        let got = db.vlog.read_many(&want, db.read_pool());
        let ptrs: Vec<Pointer> = want.iter().map(|w| w.0).collect();
        self.ahead.extend(ptrs.into_iter().zip(got));
    }

    /// The next key with a value at this sequence, and its version's value unresolved.
    fn step_raw(&mut self, forward: bool) -> Option<Result<(Vec<u8>, Value)>> {
        while !self.done {
            match self.step_once(forward) {
                Ok(Some(Some(item))) => return Some(Ok(item)),
                Ok(Some(None)) => continue,
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Err((e, fatal)) => {
                    self.done |= fatal;
                    return Some(Err(e));
                }
            }
        }
        None
    }

    /// One key: `None` at the end, `Some(None)` for a key with no value at this
    /// sequence, an error with whether iteration must stop.
    #[allow(clippy::type_complexity)]
    fn step_once(
        &mut self,
        forward: bool,
    ) -> std::result::Result<Option<Option<(Vec<u8>, Value)>>, (crate::Error, bool)> {
        let fatal = |e| (e, true);
        self.guard.db.check_open().map_err(fatal)?;
        let seq = self.guard.seq;
        let ks = self.ks;
        // Memtables first (listed before the store's epoch is read), newest first.
        self.fill_mems(forward);
        self.fill_store_buf(forward).map_err(fatal)?;
        // The nearest memtable entry; on a tie the newer memtable's.
        let mut best: Option<(usize, &[u8])> = None;
        for (i, m) in self.mems.iter().enumerate() {
            if let Some(k) = m.front_key() {
                let better = best.is_none_or(|(_, b)| if forward { k < b } else { k > b });
                if better {
                    best = Some((i, k));
                }
            }
        }
        let mem = best.filter(|(_, k)| self.inside(k));
        let stored = self.buf.front_key(forward).filter(|k| self.inside(k));
        let (take_mem, same) = match (mem, stored) {
            (None, None) => return Ok(None),
            (Some(_), None) => (true, false),
            (None, Some(_)) => (false, false),
            (Some((_, m)), Some(s)) => (if forward { m <= s } else { m >= s }, m == s),
        };
        let (key, value) = if let (true, Some((i, _))) = (take_mem, mem) {
            let Some((k, v)) = self.mems[i].ahead.pop_front() else {
                unreachable!("chosen because present")
            };
            if same {
                self.buf.pop(forward, false);
            }
            (k, Some(v))
        } else {
            let (k, found) = self
                .buf
                .pop(forward, true)
                .unwrap_or_else(|| unreachable!("chosen because present"));
            let db = &self.guard.db;
            let v = history::at(&db.vlog, ks, &k, found, seq).map_err(|e| (e, false))?;
            (k, v.map(|v| v.value))
        };
        // Older memtables' versions of the same key are passed with it.
        for m in &mut self.mems {
            if m.front_key() == Some(&key) {
                m.ahead.pop_front();
            }
        }
        let key = key.into_vec();
        if forward {
            self.lo = Bound::Excluded(key.clone());
        } else {
            self.hi = Bound::Excluded(key.clone());
        }
        match value {
            None | Some(Value::Tombstone) => Ok(Some(None)),
            Some(v) => Ok(Some(Some((key, v)))),
        }
    }

    /// The keys only: no value is read.
    pub fn keys(self) -> Keys {
        Keys(self)
    }

    /// Pairs whose values are read only when asked ([`LazyValue::load`]): for scans
    /// that look at keys (or value lengths) and read few values.
    pub fn lazy(self) -> LazyIter {
        LazyIter(self)
    }
}

/// An iterator over keys only ([`Iter::keys`]).
#[derive(Debug)]
pub struct Keys(Iter);

impl Iterator for Keys {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.step_raw(true).map(|r| r.map(|(k, _)| k))
    }
}

impl DoubleEndedIterator for Keys {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.step_raw(false).map(|r| r.map(|(k, _)| k))
    }
}

/// An iterator whose values are loaded on demand ([`Iter::lazy`]).
#[derive(Debug)]
pub struct LazyIter(Iter);

impl LazyIter {
    fn wrap(&self, r: Result<(Vec<u8>, Value)>) -> Result<(Vec<u8>, LazyValue)> {
        let (key, value) = r?;
        let lazy = LazyValue {
            guard: Arc::clone(&self.0.guard),
            ks: self.0.ks,
            key: key.clone(),
            value,
        };
        Ok((key, lazy))
    }
}

impl Iterator for LazyIter {
    type Item = Result<(Vec<u8>, LazyValue)>;

    fn next(&mut self) -> Option<Self::Item> {
        let r = self.0.step_raw(true)?;
        Some(self.wrap(r))
    }
}

impl DoubleEndedIterator for LazyIter {
    fn next_back(&mut self) -> Option<Self::Item> {
        let r = self.0.step_raw(false)?;
        Some(self.wrap(r))
    }
}

/// A value not read yet. It keeps the iterator's snapshot alive, so it loads the
/// version the iterator saw however much later [`LazyValue::load`] is called.
#[derive(Debug)]
pub struct LazyValue {
    guard: Arc<Guard>,
    ks: KeyspaceId,
    key: Vec<u8>,
    value: Value,
}

impl LazyValue {
    /// The value's length in bytes, known without reading it.
    pub fn len(&self) -> usize {
        match &self.value {
            Value::Inline(b) => b.len(),
            Value::Separated(p) => p.len as usize,
            Value::Tombstone => 0,
        }
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the value lives in the value log (reading it is a disk read).
    pub fn is_separated(&self) -> bool {
        matches!(self.value, Value::Separated(_))
    }

    /// Reads the value (checksums verified).
    pub fn load(&self) -> Result<Vec<u8>> {
        let db = &self.guard.db;
        let v = db.resolve(self.ks, &self.key, self.value.clone(), self.guard.seq, true)?;
        v.ok_or_else(|| {
            crate::Error::corruption(
                &db.dir,
                0,
                format!("key {:?} vanished from a lazy value's snapshot", self.key),
            )
        })
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
