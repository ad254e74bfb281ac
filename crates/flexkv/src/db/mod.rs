//! [`Db`]: the engine's front door. It owns the directory (lock file, manifest, WAL,
//! value log), the memtable, the sequence oracle and the snapshot registry, and hands
//! out [`Keyspace`], [`Snapshot`] and [`Iter`] handles.
//!
//! A write goes to the WAL and the active memtable; the committer ([`commit`]) moves
//! frozen memtables into each keyspace's sorted store ([`crate::sorted`]) and records
//! the applied sequence in the manifest; recovery replays the WAL above it.
//!
//! Directory layout: `LOCK`, `MANIFEST`, `wal-NNNNNNNN.log`, `vlog-NNNNNNNN.seg`, and a
//! directory `ks-NNNNNNNN` (a FlexSpace) per keyspace.

mod batch;
mod commit;
mod gc;
mod manifest;
mod options;
pub(crate) mod pace;
mod read;
mod stats;
mod write;

pub use batch::WriteBatch;
pub use gc::GcReport;
pub use manifest::KeyspaceKind;
pub use options::{
    Builder, Durability, GcHook, GcOptions, GcStep, Options, WalRecovery, MAX_BATCH_BYTES,
    MAX_BATCH_OPS, MAX_INLINE_VALUE, MAX_KEYSPACE_NAME_LEN, MAX_KEY_LEN, MAX_SCAN_READ_THREADS,
    MAX_VALUE_LEN,
};
pub use read::{Iter, Keys, Keyspace, LazyIter, LazyValue, Snapshot};
pub use stats::Stats;

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, RwLock};

use crate::io::{FileLock, ReadOnlyVfs, Vfs};
use crate::memtable::{self, BatchEntry, ChunkPool, KeyspaceId, Memtable, Value};
use crate::mvcc::{Snapshots, Visibility};
use crate::sorted::commit::LockHolds;
use crate::sorted::history;
use crate::sorted::store::{SortedStore, StoreOptions};
use crate::vlog::{Holder, Readers, ValueLog};
use crate::wal::format::Op;
use crate::wal::group::GroupCommit;
use crate::wal::sync::SyncPoint;
use crate::wal::Wal;
use crate::{Error, Result};
use commit::{Frozen, Signal, Tables};
use manifest::{Entry, Manifest};
use write::{Request, Written};

/// What [`Db::check`] verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckReport {
    /// Group-commit records read from the WAL.
    pub wal_records: u64,
    /// Records read from the value log.
    pub vlog_records: u64,
    /// Separated values read through their pointers.
    pub values_read: u64,
    /// Records read from the sorted keyspaces.
    pub sorted_records: u64,
}

/// The lock file's name.
pub(crate) const LOCK_FILE: &str = "LOCK";

static NEXT_DB_ID: AtomicU64 = AtomicU64::new(1);

/// An open database.
///
/// ```
/// # fn main() -> flexkv::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let db = flexkv::Db::open(dir.path())?;
/// db.put(b"greeting", b"hello")?;
/// assert_eq!(db.get(b"greeting")?.as_deref(), Some(&b"hello"[..]));
/// db.delete(b"greeting")?;
/// assert!(!db.contains(b"greeting")?);
///
/// let snap = db.snapshot();
/// db.put(b"later", b"!")?;
/// assert_eq!(snap.get(b"later")?, None); // the snapshot predates the put
/// for item in db.prefix(b"lat") {
///     let (key, value) = item?;
///     assert_eq!((&key[..], &value[..]), (&b"later"[..], &b"!"[..]));
/// }
/// db.close()?;
/// # Ok(())
/// # }
/// ```
///
/// `Db` is `Send + Sync`; share it between threads with an `Arc` or by reference.
/// Dropping the last handle (the `Db` and every [`Keyspace`], [`Snapshot`] and [`Iter`]
/// made from it) closes the database as [`Db::close`] does; `close` itself closes at
/// once, and handles used after it return [`Error::Closed`].
#[derive(Debug)]
pub struct Db {
    inner: Handle,
    default: Keyspace,
}

/// A user's reference to the database. The committer thread holds the engine with a
/// plain `Arc`, so it never keeps a database open: when the last handle goes (the
/// `Db` and every keyspace, snapshot and iterator), the database closes.
pub(crate) struct Handle(Arc<Inner>);

impl Handle {
    fn new(inner: Arc<Inner>) -> Handle {
        inner.handles.fetch_add(1, Ordering::AcqRel);
        Handle(inner)
    }
}

impl Clone for Handle {
    fn clone(&self) -> Self {
        Handle::new(Arc::clone(&self.0))
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if self.0.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Best effort: an error here has nobody to go to; what was acknowledged as
            // `Sync` is durable already, and recovery handles the rest.
            let _ = self.0.close();
        }
    }
}

impl std::ops::Deref for Handle {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Debug, Default)]
struct Counters {
    user_bytes: AtomicU64,
    batches: AtomicU64,
    groups: AtomicU64,
    grouped_batches: AtomicU64,
    max_group: AtomicU64,
    commits: AtomicU64,
    stalls: AtomicU64,
    stall_micros: AtomicU64,
    delays: AtomicU64,
    delay_micros: AtomicU64,
    read_ahead: AtomicU64,
}

pub(crate) struct Inner {
    id: u64,
    dir: PathBuf,
    vfs: Arc<dyn Vfs>,
    opts: Options,
    lock: Mutex<Option<FileLock>>,
    manifest: Mutex<Manifest>,
    names: RwLock<HashMap<String, KeyspaceId>>,
    tables: RwLock<Tables>,
    /// `tables.generation`, readable without the lock: an iterator compares it at every
    /// step. It is stored under the write lock after the list changed; a reader that
    /// still sees the old value reads the list as it was, which is as right (a freeze
    /// adds only a memtable newer than the reader, and a committed memtable's pairs are
    /// in the store as well). On a cache line of its own, away from the locks every read
    /// takes (`stores`, `tables`), whose writes by one thread would otherwise make the
    /// other threads' iterators miss it at every step.
    tables_generation: CachePadded<AtomicU64>,
    stores: RwLock<BTreeMap<KeyspaceId, Arc<SortedStore>>>,
    signal: Signal,
    committer: Mutex<Option<std::thread::JoinHandle<()>>>,
    commit_error: Mutex<Option<Error>>,
    /// The WAL record of a group being built, kept between groups (the leader's).
    wal_payload: Mutex<Vec<u8>>,
    holds: LockHolds,
    handles: AtomicU64,
    /// Serializes [`Db::flush`] calls.
    flushing: Mutex<()>,
    /// Held while keyspace records change: by a commit, and by GC's write-back.
    applying: Mutex<()>,
    /// The progress of the commit running now, which writers pace themselves by.
    pace: pace::CommitPace,
    gc: gc::Gc,
    /// Threads for scans' value reads ahead, started on first use.
    readers: Readers,
    vlog: ValueLog,
    wal: Wal,
    group: GroupCommit<Request, Result<Written>>,
    sync: SyncPoint,
    vis: Visibility,
    snapshots: Snapshots,
    /// The last sequence handed out; locked by the group leader only.
    next_seq: Mutex<u64>,
    poisoned: AtomicBool,
    /// Loaded at every step of every iterator: on a cache line of its own, away from
    /// the counters that writers bump.
    closed: CachePadded<AtomicBool>,
    stats: Counters,
    wal_tail_cut: bool,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("dir", &self.dir).finish()
    }
}

impl Db {
    /// Opens the database in directory `path`, creating it if the directory is missing
    /// or empty, with default [`Options`].
    ///
    /// Fails with [`Error::Locked`] if another handle or process has it open,
    /// [`Error::NotADatabase`] if the directory holds other files and no manifest,
    /// [`Error::UnsupportedVersion`] if a newer flexkv wrote it, and
    /// [`Error::Corruption`] if its WAL is damaged before the tail.
    pub fn open(path: impl AsRef<Path>) -> Result<Db> {
        Db::builder(path).open()
    }

    /// A builder to set options before opening.
    pub fn builder(path: impl AsRef<Path>) -> Builder {
        Builder::new(path.as_ref())
    }

    pub(crate) fn open_with(path: &Path, mut opts: Options) -> Result<Db> {
        if opts.memtable_size < 4 << 10 {
            return Err(Error::invalid(format!(
                "memtable_size of {} bytes is under 4 KiB",
                opts.memtable_size
            )));
        }
        if !(0.0..=1.0).contains(&opts.record_cache_share) {
            return Err(Error::invalid(format!(
                "record_cache_share of {} is not between 0 and 1",
                opts.record_cache_share
            )));
        }
        if opts.scan_read_threads > MAX_SCAN_READ_THREADS {
            return Err(Error::invalid(format!(
                "scan_read_threads of {} is over {MAX_SCAN_READ_THREADS}",
                opts.scan_read_threads
            )));
        }
        opts.value_threshold = opts.value_threshold.min(MAX_INLINE_VALUE + 1);
        for (name, size) in [
            ("wal_segment_size", opts.wal_segment_size),
            ("vlog_segment_size", opts.vlog_segment_size),
        ] {
            if size < 64 << 10 {
                return Err(Error::invalid(format!(
                    "{name} of {size} bytes is under 64 KiB"
                )));
            }
        }
        let scan_read_threads = opts.scan_read_threads;
        let poll_syncs = opts.poll_syncs;
        if opts.read_only {
            // Every component below asks it, and anything that would still change a
            // file is refused there.
            opts.vfs = Arc::new(ReadOnlyVfs::new(Arc::clone(&opts.vfs)));
        }
        let vfs = Arc::clone(&opts.vfs);
        let fresh = check_directory(
            vfs.as_ref(),
            path,
            opts.create_if_missing && !opts.read_only,
        )?;
        if fresh {
            vfs.create_dir_all(path)?;
        }
        let lock = vfs.lock(&path.join(LOCK_FILE))?;
        let manifest = match Manifest::read(vfs.as_ref(), path)? {
            Some(m) => m,
            None => {
                let m = Manifest::new();
                m.write(vfs.as_ref(), path)?;
                m
            }
        };
        let vlog = ValueLog::open(Arc::clone(&vfs), path, opts.vlog_segment_size)?;
        let accept_prefix = opts.wal_recovery == WalRecovery::AcceptPrefix;
        let (wal, recovered) = Wal::recover(
            Arc::clone(&vfs),
            path,
            opts.wal_segment_size,
            manifest.applied,
            accept_prefix,
            |op| match op {
                Op::PutSeparated { key, ptr, .. } => vlog.holds(ptr, key.len()),
                _ => Ok(true),
            },
        )?;
        vlog.cut_tail()?;
        let names: HashMap<String, KeyspaceId> = manifest
            .keyspaces
            .iter()
            .map(|e| (e.name.clone(), e.id))
            .collect();
        let mut stores = BTreeMap::new();
        for e in &manifest.keyspaces {
            stores.insert(e.id, Arc::new(open_store(&opts, path, e.id)?));
        }
        let pool = Arc::new(ChunkPool::default());
        let memtable = Memtable::with_pool(opts.memtable_size, &pool);
        let mut entries = Vec::new();
        for g in &recovered.groups {
            for (i, batch) in g.batches.iter().enumerate() {
                let seq = g.first + i as u64;
                for op in batch {
                    entries.push(replay(&vlog, &manifest, path, op)?);
                }
                if entries.len() > 1 {
                    let ops =
                        (entries.iter()).map(|(ks, k, v)| (*ks, &k[..], memtable::separated(v)));
                    for (p, key_len) in memtable::replaced_in_batch(ops) {
                        vlog.hold(&p, key_len, Some(Holder::Memory), None);
                    }
                }
                memtable.insert_batch(seq, &mut entries);
            }
        }
        let mut manifest = manifest;
        match &manifest.vlog_store {
            Some(counts) => vlog.set_store_counts(counts),
            None => {
                // A crash while records were changing: count again, and write it down.
                let mut counts = BTreeMap::new();
                for store in stores.values() {
                    for (seg, bytes) in store.separated_bytes()? {
                        *counts.entry(seg).or_insert(0) += bytes;
                    }
                }
                vlog.set_store_counts(&counts);
                manifest.vlog_store = Some(counts);
                if !vfs.read_only() {
                    manifest.write(vfs.as_ref(), path)?;
                }
            }
        }
        let last = recovered.last_seq;
        if memtable.is_empty() && wal.active_segment() > 1 && !vfs.read_only() {
            // Every batch the older segments hold is applied, and no commit will come
            // to remove them until something is written: without this, each open of a
            // database that took no writes since the last left one more segment behind
            // (a `flexkv get` in a loop, a file each), and every open read them all.
            wal.remove_through(wal.active_segment() - 1)?;
        }
        // What the WAL replay found is committed first, in the background.
        let frozen = (!memtable.is_empty()).then(|| Frozen {
            table: Arc::new(memtable),
            last_seq: last,
            wal_through: wal.active_segment() - 1,
        });
        let tables = Tables::new(frozen, opts.memtable_size, pool);
        let inner = Arc::new(Inner {
            id: NEXT_DB_ID.fetch_add(1, Ordering::Relaxed),
            dir: path.to_path_buf(),
            vfs,
            opts,
            lock: Mutex::new(Some(lock)),
            manifest: Mutex::new(manifest),
            names: RwLock::new(names),
            tables: RwLock::new(tables),
            tables_generation: CachePadded::new(AtomicU64::new(0)),
            stores: RwLock::new(stores),
            signal: Signal::default(),
            committer: Mutex::new(None),
            commit_error: Mutex::new(None),
            wal_payload: Mutex::new(Vec::new()),
            holds: LockHolds::default(),
            handles: AtomicU64::new(0),
            flushing: Mutex::new(()),
            applying: Mutex::new(()),
            pace: pace::CommitPace::default(),
            gc: gc::Gc::default(),
            readers: Readers::new(scan_read_threads),
            vlog,
            wal,
            group: GroupCommit::new(),
            sync: SyncPoint::new(last, poll_syncs),
            vis: Visibility::new(last),
            snapshots: Snapshots::default(),
            next_seq: Mutex::new(last),
            poisoned: AtomicBool::new(false),
            closed: CachePadded::new(AtomicBool::new(false)),
            stats: Counters::default(),
            wal_tail_cut: recovered.cut_tail,
        });
        if inner.opts.read_only {
            // Nothing to commit or collect: the replayed memtable stays in memory.
            let inner = Handle::new(inner);
            let default = Keyspace::new(inner.clone(), 0, manifest::DEFAULT);
            return Ok(Db { inner, default });
        }
        let worker = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("flexkv-committer".into())
            .spawn(move || worker.background("committer", || worker.committer_loop()))
            .map_err(|e| Error::io("spawn the committer thread", path, e))?;
        *inner.committer.lock() = Some(thread);
        if inner.opts.gc.background {
            let worker = Arc::clone(&inner);
            let thread = std::thread::Builder::new()
                .name("flexkv-gc".into())
                .spawn(move || worker.background("GC", || worker.gc_loop()))
                .map_err(|e| Error::io("spawn the GC thread", path, e))?;
            *inner.gc.thread.lock() = Some(thread);
        }
        let inner = Handle::new(inner);
        let default = Keyspace::new(inner.clone(), 0, manifest::DEFAULT);
        Ok(Db { inner, default })
    }

    /// The default keyspace, which [`Db::put`], [`Db::get`] and the others act on.
    pub fn default_keyspace(&self) -> Keyspace {
        self.default.clone()
    }

    /// Opens the keyspace `name`, creating it (durably, in the manifest) if it does not
    /// exist. Names are 1 to [`MAX_KEYSPACE_NAME_LEN`] bytes of ASCII letters, digits,
    /// `_`, `-` and `.`.
    pub fn keyspace(&self, name: &str) -> Result<Keyspace> {
        self.inner.check_open()?;
        check_keyspace_name(name)?;
        if let Some(&id) = self.inner.names.read().get(name) {
            return Ok(Keyspace::new(self.inner.clone(), id, name));
        }
        if self.inner.opts.read_only {
            return Err(Error::ReadOnly(format!("no keyspace {name:?} to open")));
        }
        let mut manifest = self.inner.manifest.lock();
        if let Some(&id) = self.inner.names.read().get(name) {
            return Ok(Keyspace::new(self.inner.clone(), id, name));
        }
        let mut next = manifest.clone();
        let id = next.next_id;
        if id >= history::HISTORY {
            return Err(Error::invalid("no keyspace numbers are left"));
        }
        next.next_id += 1;
        next.keyspaces.push(Entry {
            id,
            kind: KeyspaceKind::Sorted,
            name: name.to_string(),
        });
        let store = open_store(&self.inner.opts, &self.inner.dir, id)?;
        next.write(self.inner.vfs.as_ref(), &self.inner.dir)?;
        *manifest = next;
        self.inner.stores.write().insert(id, Arc::new(store));
        self.inner.names.write().insert(name.to_string(), id);
        Ok(Keyspace::new(self.inner.clone(), id, name))
    }

    /// The names and kinds of every keyspace, sorted by name.
    pub fn keyspaces(&self) -> Vec<(String, KeyspaceKind)> {
        let m = self.inner.manifest.lock();
        let mut v: Vec<_> = m
            .keyspaces
            .iter()
            .map(|e| (e.name.clone(), e.kind))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Writes `batch` atomically with its [`Durability`] and returns its sequence number.
    /// An empty batch writes nothing and returns the current visible sequence.
    pub fn write(&self, batch: WriteBatch) -> Result<u64> {
        self.inner.write(batch)
    }

    /// Puts `value` at `key` in the default keyspace, with [`Durability::Sync`].
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.default.put(key, value)
    }

    /// The value at `key` in the default keyspace.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.default.get(key)
    }

    /// Deletes `key` from the default keyspace, with [`Durability::Sync`].
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.default.delete(key)
    }

    /// Whether `key` has a value (possibly empty) in the default keyspace.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        self.default.contains(key)
    }

    /// The pairs of the default keyspace with keys in `range`, in key order (reverse
    /// with `.rev()`), as of now.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        self.default.range(range)
    }

    /// The pairs of the default keyspace whose keys start with `prefix`.
    pub fn prefix(&self, prefix: &[u8]) -> Iter {
        self.default.prefix(prefix)
    }

    /// Every pair of the default keyspace.
    pub fn iter(&self) -> Iter {
        self.default.iter()
    }

    /// A snapshot of the whole database at the current visible sequence: it sees every
    /// write acknowledged before this call and nothing written after. Reads through it
    /// go to the default keyspace; [`Snapshot::keyspace`] reads another one.
    pub fn snapshot(&self) -> Snapshot {
        self.default.snapshot()
    }

    /// Makes every write acknowledged so far durable (the [`Durability::Buffered`] ones
    /// included).
    pub fn sync(&self) -> Result<()> {
        self.inner.check_writable()?;
        let seq = self.inner.sync.written_seq();
        self.inner.wait_durable(seq)
    }

    /// Verifies every checksum the database has: every WAL record, every value-log
    /// record, every record of every sorted keyspace (with the keyspace's invariants),
    /// and every separated value through its pointer (key and check value included).
    /// Returns what was checked, or the first [`Error::Corruption`] found, naming the
    /// file and offset.
    pub fn check(&self) -> Result<CheckReport> {
        self.inner.check_open()?;
        let inner = &self.inner;
        let wal_records = inner.wal.check()?;
        let vlog_records = inner.vlog.check()?;
        let mut separated = Vec::new();
        for t in inner.tables.read().newest_first() {
            separated.extend(t.separated());
        }
        let mut sorted_records = 0;
        let stores: Vec<_> = inner.stores.read().values().cloned().collect();
        {
            // No commit or GC write-back runs while the counts are compared.
            let _commit = inner.applying.lock();
            let mut counted = BTreeMap::new();
            for store in stores {
                let (records, ptrs) = store.check()?;
                sorted_records += records;
                for (k, p) in ptrs {
                    *counted.entry(p.segment).or_insert(0u64) += p.record_len(k.len());
                    separated.push((store.ks, k, p));
                }
            }
            let kept = inner.vlog.store_counts();
            if kept != counted {
                return Err(Error::corruption(
                    inner.dir.join(manifest::FILE),
                    0,
                    format!(
                        "value-log counts disagree with the keyspaces: counted {kept:?}, \
                         the records point to {counted:?}"
                    ),
                ));
            }
        }
        for (ks, key, ptr) in &separated {
            inner.vlog.read(ptr, *ks, key)?;
        }
        Ok(CheckReport {
            wal_records,
            vlog_records,
            values_read: separated.len() as u64,
            sorted_records,
        })
    }

    /// Commits every write so far to the sorted keyspaces now (the committer does this
    /// in the background when a memtable fills or ages), and waits until it is done.
    pub fn flush(&self) -> Result<()> {
        self.inner.check_writable()?;
        let _one = self.inner.flushing.lock();
        self.inner.freeze(false)?;
        // The committer takes frozen memtables in order; wait for ours to go.
        let mut flags = self.inner.signal.state.lock();
        loop {
            if self.inner.tables.read().frozen.is_empty() {
                return Ok(());
            }
            if self.inner.poisoned.load(Ordering::Acquire) {
                return Err(Error::Poisoned);
            }
            if flags.shutdown {
                return Err(Error::Closed);
            }
            self.inner
                .signal
                .cond
                .wait_for(&mut flags, std::time::Duration::from_millis(50));
        }
    }

    /// Runs one value-log GC pass now: collects every segment at least
    /// [`GcOptions::segment_garbage`] garbage that no memtable or snapshot still needs,
    /// whatever the space amplification, and reports what it did. The background
    /// thread ([`GcOptions::background`]) does the same on its own, at a limited rate,
    /// while the space amplification is over its target.
    pub fn gc(&self) -> Result<GcReport> {
        self.inner.check_writable()?;
        self.inner.gc_pass(true)
    }

    /// The engine's counters.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The sorted store of keyspace `ks`, for unit tests of the store's internals.
    #[cfg(test)]
    pub(crate) fn store_of(&self, ks: &Keyspace) -> Arc<SortedStore> {
        self.inner.store(ks.id()).expect("the keyspace has a store")
    }

    /// The directory the database lives in.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Closes the database: waits for the write in progress, makes every acknowledged
    /// write durable, and releases the lock. Handles still alive return
    /// [`Error::Closed`] afterwards. Returns the error of the final sync, if any.
    pub fn close(self) -> Result<()> {
        self.inner.close()
    }
}

impl Inner {
    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if self.opts.read_only {
            return Err(Error::ReadOnly(
                "writes, syncs, flushes and GC are refused".into(),
            ));
        }
        if self.poisoned.load(Ordering::Acquire) || self.sync.failed() {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if self.opts.read_only {
            // Nothing was written, and nothing is to be: the stores go (their spaces
            // were closed from the start) and the lock with them.
            self.stores.write().clear();
            self.lock.lock().take();
            return Ok(());
        }
        self.group.close();
        self.sync.nudge();
        let r = if self.poisoned.load(Ordering::Acquire) {
            Ok(())
        } else {
            self.wait_durable(self.sync.written_seq())
        };
        self.stop_gc();
        // Commit everything, so the next open replays nothing.
        let drained = self.drain();
        let mut closed = Ok(());
        for (_, store) in std::mem::take(&mut *self.stores.write()) {
            let c = match Arc::try_unwrap(store) {
                Ok(s) => s.close(),
                // A reader still holds it (an iterator keeps it until dropped, and its
                // next step is refused): closed all the same, so the next open has as
                // little to read, and nothing is written once the lock is released.
                Err(s) => s.close_shared(),
            };
            if closed.is_ok() {
                closed = c;
            }
        }
        self.lock.lock().take();
        r.and(drained).and(closed)
    }

    /// The sorted store of keyspace `ks`.
    pub(crate) fn store(&self, ks: KeyspaceId) -> Result<Arc<SortedStore>> {
        match self.stores.read().get(&ks) {
            Some(s) => Ok(Arc::clone(s)),
            None => Err(self.no_store(ks)),
        }
    }

    /// Why keyspace `ks` has no store: the database is closed (close takes them all),
    /// or the keyspace is not one of its own.
    fn no_store(&self, ks: KeyspaceId) -> Error {
        match self.check_open() {
            Err(e) => e,
            Ok(()) => Error::invalid(format!("keyspace {ks} has no store")),
        }
    }

    /// Resolves the version a reader at `seq` found to the value it gets. If GC removed
    /// the value's segment after the version was found, the key is looked up again
    /// (GC removes a segment only once the relocated pointers are in place).
    fn resolve(
        &self,
        ks: KeyspaceId,
        key: &[u8],
        mut v: Value,
        seq: u64,
        exact: bool,
    ) -> Result<Option<Vec<u8>>> {
        for _ in 0..8 {
            match v {
                Value::Tombstone => return Ok(None),
                Value::Inline(b) => return Ok(Some(b.into_vec())),
                Value::Separated(p) => match self.vlog.read_unless_retired(&p, ks, key)? {
                    Some(b) => return Ok(Some(b)),
                    None => v = self.version_at(ks, key, seq, exact)?,
                },
            }
        }
        Err(Error::corruption(
            &self.dir,
            0,
            format!("key {key:?} of keyspace {ks} kept pointing into removed value-log segments"),
        ))
    }

    /// The version of `key` a reader at `seq` sees: from the memtables (newest first),
    /// else from the keyspace's sorted store. A snapshot (`exact`) follows the history
    /// chain of a record newer than it; a read at "now" takes the newest committed
    /// version, which was visible before the read began.
    fn version_at(&self, ks: KeyspaceId, key: &[u8], seq: u64, exact: bool) -> Result<Value> {
        self.check_open()?;
        batch::check_key(key)?;
        // The memtables are read before the store: a memtable committed in between is
        // then in the store already.
        if let Some(v) = self.tables.read().get(ks, key, seq) {
            return Ok(v);
        }
        // Read under the lock of the stores, not through a clone of the store's `Arc`:
        // two fewer writes to a line every reading thread writes.
        let found = match self.stores.read().get(&ks) {
            Some(store) => store.get(key)?,
            None => return Err(self.no_store(ks)),
        };
        let Some(found) = found else {
            return Ok(Value::Tombstone);
        };
        let v = if exact && found.seq > seq {
            history::at(&self.vlog, ks, key, found, seq)?
        } else {
            Some(found)
        };
        Ok(v.map_or(Value::Tombstone, |v| v.value))
    }

    fn get_at(&self, ks: KeyspaceId, key: &[u8], seq: u64, exact: bool) -> Result<Option<Vec<u8>>> {
        let v = self.version_at(ks, key, seq, exact)?;
        self.resolve(ks, key, v, seq, exact)
    }

    fn contains_at(&self, ks: KeyspaceId, key: &[u8], seq: u64, exact: bool) -> Result<bool> {
        Ok(!matches!(
            self.version_at(ks, key, seq, exact)?,
            Value::Tombstone
        ))
    }
}

/// Opens the sorted store of keyspace `id` under `dir`.
fn open_store(opts: &Options, dir: &Path, id: KeyspaceId) -> Result<SortedStore> {
    SortedStore::open(
        Arc::clone(&opts.vfs),
        &dir.join(store_dir_name(id)),
        id,
        StoreOptions {
            cache_bytes: opts.cache_bytes,
            record_share: opts.record_cache_share,
            recovery_step: opts.recovery_step,
            index_fanout: opts.index_fanout,
            split_pairs: opts.interval_pairs,
            space: opts.space,
        },
    )
}

/// The directory of keyspace `id`'s sorted store.
pub(crate) fn store_dir_name(id: KeyspaceId) -> String {
    format!("ks-{id:08}")
}

/// Decides whether `path` may be opened: `Ok(true)` if a new database is to be created
/// there, `Ok(false)` if one exists, an error (and nothing changed) otherwise.
fn check_directory(vfs: &dyn Vfs, path: &Path, create: bool) -> Result<bool> {
    let not_db = |reason: String| Error::NotADatabase {
        path: path.to_path_buf(),
        reason,
    };
    if !vfs.exists(path)? {
        return if create {
            Ok(true)
        } else {
            Err(not_db("the directory does not exist".into()))
        };
    }
    let names = vfs.list(path)?;
    if names.iter().any(|n| n == manifest::FILE) {
        // Read it before taking the lock, so a newer version changes nothing at all.
        Manifest::read(vfs, path)?;
        return Ok(false);
    }
    match names.iter().find(|n| !manifest::is_creation_leftover(n)) {
        Some(stranger) => Err(not_db(format!(
            "it holds {} entries and no MANIFEST, e.g. {stranger:?}",
            names.len()
        ))),
        None if create => Ok(true),
        None => Err(not_db("there is no MANIFEST".into())),
    }
}

fn check_keyspace_name(name: &str) -> Result<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if name.is_empty() || name.len() > MAX_KEYSPACE_NAME_LEN || !name.chars().all(ok_char) {
        return Err(Error::invalid(format!(
            "keyspace name {name:?} must be 1 to MAX_KEYSPACE_NAME_LEN \
             ({MAX_KEYSPACE_NAME_LEN}) bytes of ASCII letters, digits, '_', '-' and '.'"
        )));
    }
    Ok(())
}

/// One recovered op as the memtable takes it.
fn replay(vlog: &ValueLog, manifest: &Manifest, dir: &Path, op: &Op) -> Result<BatchEntry> {
    let (ks, key, value) = match op {
        Op::Put { ks, key, value } => (*ks, key, Value::Inline(value.clone().into_boxed_slice())),
        Op::PutSeparated { ks, key, ptr } => {
            vlog.count_live(ptr, key.len());
            (*ks, key, Value::Separated(*ptr))
        }
        Op::Delete { ks, key } => (*ks, key, Value::Tombstone),
    };
    if !manifest.keyspaces.iter().any(|e| e.id == ks) {
        return Err(Error::corruption(
            dir.join(manifest::FILE),
            0,
            format!("the WAL writes to keyspace {ks}, which the manifest does not know"),
        ));
    }
    Ok((ks, key.clone(), value))
}
