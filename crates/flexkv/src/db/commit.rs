//! Memtables and the committer thread (FlexDB §5.3).
//!
//! Writes go to the *active* memtable. When it is full (or old), it is *frozen*: under
//! the lock that orders WAL appends, a new WAL segment and a new memtable start, so the
//! frozen memtable holds exactly the batches of the WAL segments up to the one closed.
//! The committer applies the oldest frozen memtable to every sorted keyspace, syncs the
//! value log and each keyspace's FlexSpace, records the memtable's last sequence as
//! applied in the manifest, drops the memtable and removes its WAL segments. A crash
//! anywhere in that leaves the WAL segments in place, and the replay re-applies them
//! (a version is applied only if newer than the record it meets, so nothing goes twice).
//!
//! At most one memtable is frozen at a time: a writer that finds the active one full
//! while another is frozen waits on a condition (never spins), and the wait is counted.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::pace::PACE_POLL;
use super::Inner;
use crate::memtable::{self, ChunkPool, KeyspaceId, Memtable, Value};
use crate::sorted::commit::{Context, Update};
use crate::{Error, Result};

/// How soon the committer looks again for intervals to rewrite for the reads after a
/// look that found some (otherwise it looks whenever it wakes: at least every
/// `idle_commit` or `commit_interval`, whichever is shorter).
const REWRITE_POLL: Duration = Duration::from_millis(10);
/// Frozen memtables allowed before writers wait.
const MAX_FROZEN: usize = 1;
/// Steps of the idle sweep ([`SortedStore::sweep_steps`]) between looks for writes,
/// each under the commit lock: 16 steps are about 1 MiB of intervals.
const SWEEP_STEPS: usize = 16;
/// The idle sweep goes on beside writes that, at their rate since the active memtable
/// was made, would take at least this many idle times to fill it
/// ([`Memtable::fill`]; 4 MiB/s with the defaults); faster writes pause it. YCSB E's
/// inserts after a load wrote 7.7 MB of pairs in its 16.6 s at 10M UDB pairs. This
/// is not [`TRICKLE`]'s rule, which measures growth against the memtable's own bytes
/// and so never calls a memtable made after a commit idle.
const SWEEP_TRICKLE: u32 = 64;

/// A memtable the committer has yet to apply.
#[derive(Debug)]
pub(crate) struct Frozen {
    pub(crate) table: Arc<Memtable>,
    /// The last sequence it holds.
    pub(crate) last_seq: u64,
    /// Its batches are in WAL segments up to this one.
    pub(crate) wal_through: u32,
}

/// The memtables: the active one and the frozen ones, oldest first.
#[derive(Debug)]
pub(crate) struct Tables {
    pub(crate) active: Arc<Memtable>,
    pub(crate) frozen: VecDeque<Frozen>,
    /// Bumped whenever the list changes (a freeze, a commit), so an iterator knows
    /// when the memtables it holds are still the ones to read.
    pub(crate) generation: u64,
    /// The memory committed memtables leave for the next ones.
    pub(crate) pool: Arc<ChunkPool>,
}

impl Tables {
    pub(crate) fn new(
        frozen: Option<Frozen>,
        memtable_size: usize,
        pool: Arc<ChunkPool>,
    ) -> Tables {
        Tables {
            active: Arc::new(Memtable::with_pool(memtable_size, &pool)),
            frozen: frozen.into_iter().collect(),
            generation: 0,
            pool,
        }
    }

    /// The version of `key` a reader at `seq` sees in the memtables (the newest one that
    /// has any), without cloning the list.
    pub(crate) fn get(&self, ks: KeyspaceId, key: &[u8], seq: u64) -> Option<Value> {
        let hash = memtable::key_hash(ks, key);
        std::iter::once(&self.active)
            .chain(self.frozen.iter().rev().map(|f| &f.table))
            .find_map(|t| t.get_hashed(ks, key, hash, seq))
            .map(|(_, v)| v)
    }

    /// Every memtable, newest first: the order a reader consults them in.
    pub(crate) fn newest_first(&self) -> Vec<Arc<Memtable>> {
        let mut v = Vec::with_capacity(1 + self.frozen.len());
        v.push(Arc::clone(&self.active));
        v.extend(self.frozen.iter().rev().map(|f| Arc::clone(&f.table)));
        v
    }
}

/// A memtable that grew by at most 1 / this of its bytes over the idle time counts as
/// idle: a trickle of writes after a load (YCSB E's inserts) would otherwise keep a
/// large memtable for every scan to search until the commit interval. At that rate it
/// would take 64 idle times to double; a memtable taking writes faster is not idle.
const TRICKLE: usize = 64;

/// An active memtable older than the idle time whose iterators have searched it at
/// least this many times per version it holds is committed: a scan pays a search of
/// every memtable (O(log n) cache misses each), where committing costs about one
/// interval rewrite per version, so scans that keep coming while writes trickle (YCSB
/// E) would pay for a large memtable far more than its commit would.
const SEARCHES_PER_VERSION: u64 = 4;

/// How writes stand, for the idle sweep ([`Inner::sweep_due`]).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Writes {
    /// The active memtable is empty and none is frozen: nothing to commit.
    Stopped,
    /// No memtable is frozen, and the active one fills at most a trickle
    /// ([`SWEEP_TRICKLE`]).
    Trickle,
    /// Faster, or a memtable is frozen.
    Flowing,
}

/// The active memtable as the committer last looked at it: when it was born, and how
/// many bytes it held when it was last seen growing faster than a trickle
/// ([`TRICKLE`]), and since when it has grown no faster.
#[derive(Debug, Default)]
struct Quiet(Option<((Instant, usize), Instant)>);

impl Quiet {
    /// How long `table` has taken at most a trickle of writes: at least the time since
    /// its last batch, and otherwise since the committer first saw it stop growing
    /// faster than a trickle (zero if it has just taken more, or is a new one). The
    /// sampled time alone would start, after a commit, at the commit's end however
    /// long ago the writes stopped.
    fn quiet_for(&mut self, table: &Memtable) -> Duration {
        let (born, bytes) = (table.made(), table.approximate_bytes());
        let sampled = match self.0 {
            Some(((b, from), since))
                if b == born && bytes.saturating_sub(from) <= bytes / TRICKLE =>
            {
                since.elapsed()
            }
            _ => {
                self.0 = Some(((born, bytes), Instant::now()));
                Duration::ZERO
            }
        };
        sampled.max(table.unwritten_for())
    }
}

/// Whether iterators have searched `table` [`SEARCHES_PER_VERSION`] times per version it
/// holds.
fn searched_out(table: &Memtable) -> bool {
    let versions = u64::try_from(table.len()).unwrap_or(u64::MAX);
    table.searches() >= versions.saturating_mul(SEARCHES_PER_VERSION)
}

/// What wakes the committer, and writers waiting for room.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    pub(crate) state: Mutex<Flags>,
    pub(crate) cond: Condvar,
}

#[derive(Debug, Default)]
pub(crate) struct Flags {
    pub(crate) shutdown: bool,
    /// Bumped whenever a memtable is frozen or committed.
    pub(crate) generation: u64,
}

impl Signal {
    fn bump(&self) {
        self.state.lock().generation += 1;
        self.cond.notify_all();
    }
}

/// What a writer waited for before its write.
#[derive(Clone, Copy, PartialEq)]
enum Waited {
    /// The active memtable full while another is frozen.
    Stall,
    /// The active memtable ahead of the commit
    /// ([`CommitPace::limit`](super::pace::CommitPace::limit)).
    Pace,
}

impl Inner {
    /// Called before a write: freezes a full active memtable, or waits while the
    /// active one is full and another is still being committed, or (with
    /// `pace_writes`) while the active one has filled too far ahead of that commit
    /// ([`CommitPace::limit`](super::pace::CommitPace::limit)).
    pub(crate) fn make_room(&self) -> Result<()> {
        let mut waited: Option<(Instant, Waited)> = None;
        let r = loop {
            self.check_writable()?;
            let (full, frozen, fill) = {
                let t = self.tables.read();
                let full = t.active.full(self.opts.memtable_size);
                // The fill is worked out only where a writer may be paced.
                let paced = self.opts.pace_writes && !full && !t.frozen.is_empty();
                let fill = paced.then(|| t.active.fill(self.opts.memtable_size));
                (full, t.frozen.len(), fill)
            };
            let why = match (full, fill) {
                (false, None) => break Ok(()),
                (false, Some(fill)) => {
                    if fill <= self.pace.limit(Instant::now()) {
                        break Ok(());
                    }
                    Waited::Pace
                }
                (true, _) if frozen < MAX_FROZEN => break self.freeze(true),
                (true, _) => Waited::Stall,
            };
            self.pace.held();
            // A write that had to wait for a full memtable counts as a stall.
            match &mut waited {
                Some((_, w)) if why == Waited::Stall => *w = why,
                Some(_) => {}
                None => waited = Some((Instant::now(), why)),
            }
            let mut flags = self.signal.state.lock();
            if flags.shutdown {
                break Err(Error::Closed);
            }
            if self.tables.read().frozen.len() >= MAX_FROZEN {
                let wait = match why {
                    Waited::Stall => Duration::from_millis(100),
                    Waited::Pace => PACE_POLL,
                };
                self.signal.cond.wait_for(&mut flags, wait);
            }
        };
        if let Some((t0, why)) = waited {
            let us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
            let (count, micros) = match why {
                Waited::Stall => (&self.stats.stalls, &self.stats.stall_micros),
                Waited::Pace => (&self.stats.delays, &self.stats.delay_micros),
            };
            count.fetch_add(1, Ordering::Relaxed);
            micros.fetch_add(us, Ordering::Relaxed);
        }
        r
    }

    /// Freezes the active memtable (if `only_if_full`, only if it is still full and
    /// there is room for another frozen one) and wakes the committer.
    pub(crate) fn freeze(&self, only_if_full: bool) -> Result<()> {
        let next = self.next_seq.lock();
        {
            let t = self.tables.read();
            let full = t.active.full(self.opts.memtable_size);
            if t.active.is_empty() || (only_if_full && (!full || t.frozen.len() >= MAX_FROZEN)) {
                return Ok(());
            }
        }
        let wal_through = self.wal.rotate().inspect_err(|_| {
            self.poisoned.store(true, Ordering::Release);
        })?;
        let mut t = self.tables.write();
        let fresh = Arc::new(Memtable::with_pool(self.opts.memtable_size, &t.pool));
        let table = std::mem::replace(&mut t.active, fresh);
        t.generation += 1;
        self.tables_generation
            .store(t.generation, Ordering::Release);
        t.frozen.push_back(Frozen {
            table,
            last_seq: *next,
            wal_through,
        });
        drop(t);
        drop(next);
        self.signal.bump();
        Ok(())
    }

    /// The committer thread's loop: commits frozen memtables as they come, freezes an
    /// active one that has grown old or idle, and stops at shutdown (the closing thread
    /// commits what is left).
    pub(crate) fn committer_loop(&self) {
        let mut quiet = Quiet::default();
        // The last look for intervals to rewrite for the reads found some: look again
        // soon, since the reads queue more while the committer waits.
        let mut rewriting = false;
        loop {
            {
                let mut flags = self.signal.state.lock();
                loop {
                    if flags.shutdown {
                        return;
                    }
                    if !self.tables.read().frozen.is_empty() {
                        break;
                    }
                    let wanted = self.rewrites_wanted();
                    // Rewrites for the reads; or, once a short wait brought no more, a
                    // sync of those not yet durable.
                    if !wanted && self.sweep_due() && self.freeze_due(&mut quiet).is_some() {
                        drop(flags);
                        if let Err(e) = self.sweep_idle(&mut quiet) {
                            self.fail_commit(e);
                            return;
                        }
                        flags = self.signal.state.lock();
                        continue;
                    }
                    if wanted || (!rewriting && self.rewrites_unsynced()) {
                        drop(flags);
                        if let Err(e) = self.rewrite_for_reads(wanted) {
                            self.fail_commit(e);
                            return;
                        }
                        rewriting = wanted;
                        flags = self.signal.state.lock();
                        continue;
                    }
                    match self.freeze_due(&mut quiet) {
                        Some(wait) => {
                            let wait = if rewriting {
                                wait.min(REWRITE_POLL)
                            } else {
                                wait
                            };
                            rewriting = false;
                            self.signal.cond.wait_for(&mut flags, wait);
                        }
                        None => {
                            drop(flags);
                            if self.freeze(false).is_err() {
                                return;
                            }
                            flags = self.signal.state.lock();
                        }
                    }
                }
            }
            // Looked at before the commit, so that a memtable that took at most a trickle
            // of writes while it ran is idle for all that time, and is frozen as soon as
            // it ends.
            {
                let t = self.tables.read();
                quiet.quiet_for(&t.active);
            }
            if let Err(e) = self.commit_oldest() {
                self.fail_commit(e);
                return;
            }
        }
    }

    /// Whether some keyspace has intervals for the committer to rewrite for the reads
    /// ([`SortedStore::wanted`](crate::sorted::store::SortedStore::wanted)).
    fn rewrites_wanted(&self) -> bool {
        self.stores
            .read()
            .values()
            .any(|s| !s.wanted.lock().is_empty())
    }

    /// Whether the committer is to sweep scattered intervals now
    /// ([`Builder::idle_sweep`](crate::Builder::idle_sweep)): it is on, and some keyspace
    /// has a pass under way or due ([`SortedStore::sweep_due`]) with writes stopped and
    /// everything committed, or trickling ([`SWEEP_TRICKLE`]).
    fn sweep_due(&self) -> bool {
        let trickle = match self.writes() {
            Writes::Stopped => false,
            Writes::Trickle => true,
            Writes::Flowing => return false,
        };
        self.opts.idle_sweep && self.stores.read().values().any(|s| s.sweep_due(trickle))
    }

    /// How writes stand for the idle sweep.
    fn writes(&self) -> Writes {
        let t = self.tables.read();
        if !t.frozen.is_empty() {
            return Writes::Flowing;
        }
        if t.active.is_empty() {
            return Writes::Stopped;
        }
        let idle = self.opts.idle_commit.as_secs_f64();
        let age = t.active.made().elapsed().as_secs_f64();
        let fill = t.active.fill(self.opts.memtable_size);
        if idle > 0.0 && fill * f64::from(SWEEP_TRICKLE) * idle <= age {
            Writes::Trickle
        } else {
            Writes::Flowing
        }
    }

    /// Sweeps scattered intervals ([`SortedStore::sweep_steps`]) until no keyspace has
    /// a pass under way or due ([`Inner::sweep_due`]), the active memtable is to be
    /// frozen, writes come faster than a trickle, or the database closes. The commit
    /// lock is taken for [`SWEEP_STEPS`] steps at a time, so `Db::check`, the value
    /// log's write-back and a commit wait for at most that.
    fn sweep_idle(&self, quiet: &mut Quiet) -> Result<()> {
        let stores: Vec<_> = self.stores.read().values().cloned().collect();
        for store in stores {
            loop {
                match self.writes() {
                    Writes::Flowing => return Ok(()),
                    Writes::Trickle if !store.sweep_due(true) => break,
                    Writes::Trickle if self.freeze_due(quiet).is_none() => return Ok(()),
                    _ => {}
                }
                if self.signal.state.lock().shutdown {
                    return Ok(());
                }
                let _commit = self.applying.lock();
                if !store.sweep_steps(&self.holds, SWEEP_STEPS)? {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Whether some keyspace has intervals rewritten for the reads and not yet synced.
    fn rewrites_unsynced(&self) -> bool {
        self.stores
            .read()
            .values()
            .any(|s| s.rewrites_unsynced.load(Ordering::Relaxed) > 0)
    }

    /// Rewrites the intervals reads asked for (if `wanted`), or else syncs what was
    /// rewritten, while there is nothing to commit: rewriting stops once a memtable
    /// is frozen, so writers never wait for it, or the database is closing.
    fn rewrite_for_reads(&self, wanted: bool) -> Result<()> {
        let stores: Vec<_> = self.stores.read().values().cloned().collect();
        let stop = || !self.tables.read().frozen.is_empty() || self.signal.state.lock().shutdown;
        for store in stores {
            let _commit = self.applying.lock();
            if wanted {
                store.rewrite_wanted(&self.holds, stop)?;
            } else {
                store.sync_rewrites(&self.holds)?;
            }
        }
        Ok(())
    }

    /// Whether the active memtable is to be frozen now (`None`: it has taken no write
    /// for the idle time, or it is older than the commit interval), or else how long
    /// to wait before asking again.
    fn freeze_due(&self, quiet: &mut Quiet) -> Option<Duration> {
        let idle = self.opts.idle_commit;
        let every = self.opts.commit_interval;
        let t = self.tables.read();
        if t.active.is_empty() {
            *quiet = Quiet::default();
            // Writes have stopped and all is committed: the memory kept for the next
            // memtables goes back, so an idle database does not hold it.
            let pool = Arc::clone(&t.pool);
            drop(t);
            pool.clear();
            return Some(if idle.is_zero() {
                every
            } else {
                every.min(idle)
            });
        }
        let age = t.active.made().elapsed();
        let mut due = every.saturating_sub(age);
        if !idle.is_zero() {
            let quiet_for = quiet.quiet_for(&t.active);
            due = due.min(idle.saturating_sub(quiet_for));
            if searched_out(&t.active) {
                due = due.min(idle.saturating_sub(age));
            }
        }
        (!due.is_zero()).then_some(due)
    }

    /// Runs a background thread's body. A panic in it fails the database as an error
    /// would, rather than leaving writers waiting for a commit that never comes: every
    /// sorted store is marked broken (the panic may have left one half edited, so its
    /// reads are refused too), the database poisoned, and the panic kept for `close`.
    pub(crate) fn background(&self, thread: &'static str, body: impl FnOnce()) {
        let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) else {
            return;
        };
        let message = panic
            .downcast_ref::<&str>()
            .map(|m| m.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        for store in self.stores.read().values() {
            store.broken.store(true, Ordering::Release);
        }
        self.fail_commit(Error::Panicked { thread, message });
    }

    pub(crate) fn fail_commit(&self, e: Error) {
        self.poisoned.store(true, Ordering::Release);
        *self.commit_error.lock() = Some(e);
        self.signal.bump();
    }

    /// Commits the oldest frozen memtable, if there is one; returns whether there was.
    pub(crate) fn commit_oldest(&self) -> Result<bool> {
        let Some((table, last_seq, wal_through)) = self
            .tables
            .read()
            .frozen
            .front()
            .map(|f| (Arc::clone(&f.table), f.last_seq, f.wal_through))
        else {
            return Ok(false);
        };
        let _commit = self.applying.lock();
        // Every batch of the memtable is in it before it is read.
        self.vis.wait_visible(last_seq);
        self.pace.begin(table.len() as u64, Instant::now());
        // Records pointing into the value log may change: the manifest's counts are
        // unknown until the commit is durable (a crash in between recounts on open).
        if table.has_separated() || !self.vlog.store_counts().is_empty() {
            self.counts_unknown()?;
        }
        // The records about to be written point at these values: durable first.
        self.vlog.sync()?;
        let cx = Context {
            vlog: &self.vlog,
            snapshots: &self.snapshots,
            holds: &self.holds,
            pace: &self.pace,
        };
        let mut touched = Vec::new();
        for ks in table.keyspaces() {
            let store = self.store(ks)?;
            store.commit(
                table
                    .grouped(ks)
                    .map(|(key, versions)| Update { key, versions }),
                &cx,
            )?;
            touched.push(store);
        }
        self.pace.all_applied(Instant::now());
        self.vlog.sync()?; // history records written during the commit
        for store in &touched {
            store.sync(&self.holds)?;
        }
        self.write_manifest_counts(Some(last_seq))?;
        // Tombstones no snapshot needs any more go now (made durable by a later sync;
        // until then a crash only brings back a tombstone, which reads as nothing).
        let stores: Vec<_> = self.stores.read().values().cloned().collect();
        for store in stores {
            store.sweep(&cx)?;
        }
        self.vlog.release_pins(self.snapshots.oldest());
        // The WAL segments go before the memtable leaves the list: `flush` returns once
        // the list is empty, and then the commit must be wholly done.
        self.wal.remove_through(wal_through)?;
        {
            let mut t = self.tables.write();
            t.frozen.pop_front();
            // Under the lock, so a writer never sees the next frozen memtable with
            // this one's progress.
            self.pace.end(Instant::now());
            t.generation += 1;
            self.tables_generation
                .store(t.generation, Ordering::Release);
        }
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        self.signal.bump();
        Ok(true)
    }

    /// Stops the committer and commits everything still in memtables (at close).
    pub(crate) fn drain(&self) -> Result<()> {
        {
            self.signal.state.lock().shutdown = true;
            self.signal.cond.notify_all();
        }
        if let Some(h) = self.committer.lock().take() {
            let _ = h.join();
        }
        if let Some(e) = self.commit_error.lock().take() {
            return Err(e);
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Ok(());
        }
        while self.commit_oldest()? {}
        self.freeze(false)?;
        while self.commit_oldest()? {}
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Writes;
    use crate::Db;
    use std::time::Duration;

    /// A pass under way goes on beside a trickle of writes, and one is due beside it
    /// once commits changed as many keys as the keyspace has intervals; faster writes
    /// pause the sweep. With idle commits after 10 s a trickle is at most 64 MiB per
    /// 640 s, about 100 KiB/s.
    #[test]
    fn the_sweep_goes_on_beside_a_trickle_of_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::builder(dir.path())
            .idle_commit(Duration::from_secs(10))
            .commit_interval(Duration::from_secs(600))
            .open()
            .unwrap();
        let put_many = |n: u32, len: usize| {
            for i in 0..n {
                db.put(&i.to_be_bytes(), &vec![b'v'; len]).unwrap();
            }
        };
        put_many(2_000, 100);
        db.flush().unwrap();
        let store = db.inner.stores.read().values().next().cloned().unwrap();
        let intervals = store.state.read().index.len() as u64;
        assert!(intervals > 10, "{intervals} intervals");
        // The commit's pass ends at once: the keyspace fits its cache.
        let started = std::time::Instant::now();
        while store.sweep.lock().due() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the pass never ended"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // The commit lock keeps the committer from taking up a pass the test sets
        // (it would end at once, the keyspace fitting its cache) while it asks.
        let commit = db.inner.applying.lock();
        let set = |at: bool, changed: u64| {
            let mut sweep = store.sweep.lock();
            sweep.at = at.then(Vec::new);
            sweep.changed = changed;
        };
        set(false, 1);
        assert_eq!(db.inner.writes(), Writes::Stopped);
        assert!(db.inner.sweep_due(), "a key changed, writes stopped");
        db.put(b"k", b"v").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            db.inner.writes(),
            Writes::Trickle,
            "one small write in 20 ms"
        );
        assert!(!db.inner.sweep_due(), "a key changed, beside a trickle");
        set(false, intervals);
        assert!(
            db.inner.sweep_due(),
            "a key per interval changed, beside a trickle"
        );
        set(true, 0);
        assert!(db.inner.sweep_due(), "a pass under way beside a trickle");
        put_many(4_000, 500);
        assert_eq!(db.inner.writes(), Writes::Flowing, "2 MB in a moment");
        assert!(
            !db.inner.sweep_due(),
            "a pass under way beside faster writes"
        );
        set(false, 0);
        drop(commit);
    }

    /// With idle commits off there is no trickle ([`super::SWEEP_TRICKLE`] is counted
    /// in idle times): the committer sweeps only once writes have stopped and
    /// everything is committed, and a write in the active memtable stops it (the next
    /// commit by age is 5 s away).
    #[test]
    fn the_sweep_waits_for_writes_to_stop_and_be_committed() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::builder(dir.path())
            .idle_commit(std::time::Duration::ZERO)
            .open()
            .unwrap();
        assert_eq!(db.inner.writes(), Writes::Stopped);
        db.put(b"k", b"v").unwrap();
        assert_eq!(
            db.inner.writes(),
            Writes::Flowing,
            "a write in the active memtable"
        );
        assert!(!db.inner.sweep_due(), "a sweep due beside a write");
        db.flush().unwrap();
        assert_eq!(db.inner.writes(), Writes::Stopped);
    }
}
