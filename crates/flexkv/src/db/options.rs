//! Options, limits and durability levels.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::io::{RealVfs, Vfs};
use crate::{Db, Result};

/// The longest key, in bytes. A key must fit comfortably inside one interval of the
/// sorted keyspace (16 KiB), with its value pointer and neighbours.
pub const MAX_KEY_LEN: usize = 4096;
/// The longest value, in bytes (64 MiB).
pub const MAX_VALUE_LEN: usize = 64 << 20;
/// The largest value kept inline in the sorted keyspace; larger values always go to
/// the value log, whatever [`Builder::value_threshold`] says, so a record fits an
/// interval (16 KiB).
pub const MAX_INLINE_VALUE: usize = 8 << 10;
/// The most operations in one [`WriteBatch`](crate::WriteBatch).
pub const MAX_BATCH_OPS: usize = 1 << 20;
/// The most key and value bytes in one [`WriteBatch`](crate::WriteBatch) (256 MiB).
pub const MAX_BATCH_BYTES: usize = 256 << 20;
/// The most threads reading values ahead for scans ([`Builder::scan_read_threads`]).
pub const MAX_SCAN_READ_THREADS: usize = 64;
/// The longest keyspace name, in bytes. Names use ASCII letters, digits, `_`, `-` and
/// `.`, and are not empty.
pub const MAX_KEYSPACE_NAME_LEN: usize = 64;

/// When a write is acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Acknowledged once on the device: a crash after the call returns cannot lose it.
    /// The default.
    #[default]
    Sync,
    /// Acknowledged once handed to the operating system: it survives the process being
    /// killed but not a power cut until a later sync ([`Db::sync`], or any `Sync` write,
    /// which covers every write before it).
    Buffered,
}

/// What recovery does when the WAL is damaged before its tail (bytes that a later
/// record proves were once durable).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WalRecovery {
    /// Refuse to open with [`Error::Corruption`](crate::Error::Corruption). The default.
    #[default]
    Strict,
    /// Open with the longest undamaged prefix of the log, dropping what follows.
    AcceptPrefix,
}

/// Settings for [`Db`], built with [`Db::builder`].
#[derive(Clone, Debug)]
pub struct Options {
    pub(crate) vfs: Arc<dyn Vfs>,
    pub(crate) create_if_missing: bool,
    pub(crate) read_only: bool,
    pub(crate) value_threshold: usize,
    pub(crate) wal_segment_size: u64,
    pub(crate) vlog_segment_size: u64,
    pub(crate) wal_recovery: WalRecovery,
    pub(crate) memtable_size: usize,
    pub(crate) cache_bytes: usize,
    pub(crate) record_cache_share: f64,
    pub(crate) commit_interval: std::time::Duration,
    pub(crate) idle_commit: std::time::Duration,
    pub(crate) recovery_step: u64,
    pub(crate) index_fanout: usize,
    pub(crate) interval_pairs: usize,
    pub(crate) space: crate::space::SpaceOptions,
    pub(crate) gc: GcOptions,
    pub(crate) scan_read_threads: usize,
    pub(crate) scan_reads_slow: bool,
    pub(crate) poll_syncs: bool,
    pub(crate) pace_writes: bool,
    pub(crate) idle_sweep: bool,
}

/// Value-log garbage collection settings ([`Builder::gc`]); set fields with
/// `GcOptions { background: false, ..GcOptions::default() }`.
#[derive(Clone, Debug)]
pub struct GcOptions {
    /// Whether a background thread collects on its own (default `true`). [`Db::gc`]
    /// works either way.
    pub background: bool,
    /// The background thread works while total value-log bytes exceed this many times
    /// the live bytes (default 1.5).
    pub space_amplification: f64,
    /// A segment is a candidate once at least this fraction of it is garbage (default
    /// 0.25).
    pub segment_garbage: f64,
    /// The background thread reads and writes at most this many bytes per second
    /// (default 64 MiB/s), so foreground writes keep the device.
    pub bytes_per_sec: u64,
    /// How often the background thread looks (default 1 s).
    pub interval: std::time::Duration,
    /// Called at each step of a pass, for tests that act in between (hidden).
    #[doc(hidden)]
    pub hook: Option<GcHook>,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            background: true,
            space_amplification: 1.5,
            segment_garbage: 0.25,
            bytes_per_sec: 64 << 20,
            interval: std::time::Duration::from_secs(1),
            hook: None,
        }
    }
}

/// The steps of collecting one segment, as [`GcOptions::hook`] sees them.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcStep {
    /// The segment was read and each record's liveness decided; nothing written yet.
    Scanned(u32),
    /// The live records were appended to the value log and synced.
    Relocated(u32),
    /// The keyspaces point at the new copies, durably.
    WrittenBack(u32),
}

/// A test hook for GC steps.
#[doc(hidden)]
#[derive(Clone)]
pub struct GcHook(pub Arc<dyn Fn(GcStep) + Send + Sync>);

impl std::fmt::Debug for GcHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GcHook")
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            vfs: Arc::new(RealVfs),
            create_if_missing: true,
            read_only: false,
            value_threshold: 4096,
            wal_segment_size: 64 << 20,
            vlog_segment_size: 64 << 20,
            wal_recovery: WalRecovery::Strict,
            memtable_size: 64 << 20,
            cache_bytes: 256 << 20,
            record_cache_share: 0.5,
            commit_interval: std::time::Duration::from_secs(5),
            idle_commit: std::time::Duration::from_millis(250),
            recovery_step: 16 << 10,
            index_fanout: crate::sorted::index::FANOUT,
            interval_pairs: crate::sorted::commit::SPLIT_PAIRS,
            space: crate::space::SpaceOptions::default(),
            gc: GcOptions::default(),
            // The scan itself reads too, so one core is left to it.
            scan_read_threads: std::thread::available_parallelism()
                .map_or(1, |n| n.get().saturating_sub(1))
                .clamp(1, 8),
            scan_reads_slow: false,
            poll_syncs: true,
            pace_writes: true,
            idle_sweep: true,
        }
    }
}

/// Builds a [`Db`] with options: `Db::builder(path).value_threshold(1024).open()`.
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `open` is called"]
pub struct Builder {
    pub(crate) path: PathBuf,
    pub(crate) opts: Options,
}

impl Builder {
    pub(crate) fn new(path: &Path) -> Self {
        Builder {
            path: path.to_path_buf(),
            opts: Options::default(),
        }
    }

    /// The file system to use (the real one by default; tests pass a
    /// [`FaultVfs`](crate::io::FaultVfs)).
    pub fn vfs(mut self, vfs: Arc<dyn Vfs>) -> Self {
        self.opts.vfs = vfs;
        self
    }

    /// Whether to create the database if the directory holds none (default `true`).
    pub fn create_if_missing(mut self, yes: bool) -> Self {
        self.opts.create_if_missing = yes;
        self
    }

    /// Opens the database read-only (default `false`): nothing in its directory is
    /// created, changed or removed, and its files are opened for reading only, so a
    /// database on a full disk, a read-only mount or read-only files opens too. Reads, iterators,
    /// snapshots, [`Db::stats`](crate::Db::stats) and [`Db::check`](crate::Db::check)
    /// work; a write, [`Db::sync`](crate::Db::sync), [`Db::flush`](crate::Db::flush),
    /// [`Db::gc`](crate::Db::gc) and a keyspace that does not exist yet fail with
    /// [`Error::ReadOnly`](crate::Error::ReadOnly). What the WAL holds beyond the
    /// committed keyspaces (after a crash) is replayed into memory as on any open, and
    /// left in the WAL; a torn tail is read up to the tear and left in place. No
    /// background thread runs. The lock is shared: any number of read-only handles, in
    /// any processes, open a database at once, and none beside a handle that writes
    /// (either way the later open fails with [`Error::Locked`](crate::Error::Locked)).
    pub fn read_only(mut self, yes: bool) -> Self {
        self.opts.read_only = yes;
        self
    }

    /// Values of at least this many bytes go to the value log, written once, and the WAL
    /// and the sorted keyspace hold a pointer (default 4096). Values above
    /// [`MAX_INLINE_VALUE`] are separated whatever this says.
    pub fn value_threshold(mut self, bytes: usize) -> Self {
        self.opts.value_threshold = bytes;
        self
    }

    /// Start a new WAL segment past this size (default 64 MiB; at least 64 KiB).
    pub fn wal_segment_size(mut self, bytes: u64) -> Self {
        self.opts.wal_segment_size = bytes;
        self
    }

    /// Start a new value-log segment past this size (default 64 MiB; at least 64 KiB).
    /// GC reclaims whole segments, reading one into memory at a time.
    pub fn vlog_segment_size(mut self, bytes: u64) -> Self {
        self.opts.vlog_segment_size = bytes;
        self
    }

    /// What to do with a WAL damaged before its tail (default [`WalRecovery::Strict`]).
    pub fn wal_recovery(mut self, mode: WalRecovery) -> Self {
        self.opts.wal_recovery = mode;
        self
    }

    /// The memtable's size in bytes (default 64 MiB, at least 4 KiB). A full memtable
    /// is frozen and committed to the sorted keyspaces in the background while a new
    /// one takes writes; writers wait only when a second one fills before the first is
    /// committed.
    pub fn memtable_size(mut self, bytes: usize) -> Self {
        self.opts.memtable_size = bytes;
        self
    }

    /// The memory budget in bytes, per keyspace, of the caches and the in-memory
    /// indexes together (default 256 MiB): the sparse index over the intervals and the
    /// FlexTree over the data file grow with the keyspace, and the caches get what they
    /// leave, at least an eighth of the budget
    /// ([`Stats::cache_capacity_bytes`](crate::Stats::cache_capacity_bytes) and
    /// [`Stats::record_cache_capacity_bytes`](crate::Stats::record_cache_capacity_bytes)).
    /// The memtables ([`Builder::memtable_size`]) are not part of it, nor the page
    /// cache's pages that reads of the data files map into the process (see
    /// [`SpaceOptions::map_data`](crate::space::SpaceOptions::map_data)).
    pub fn cache_bytes(mut self, bytes: usize) -> Self {
        self.opts.cache_bytes = bytes;
        self
    }

    /// The share of the caches' memory (see [`Builder::cache_bytes`]) that goes to the
    /// record cache while a keyspace is too large for its interval cache to hold whole
    /// (default 0.5; from 0 to 1). The record cache holds single records that point
    /// reads fetched from disk: with the hot keys of a skewed load scattered one or two
    /// per interval, it holds several times as many of them as the interval cache
    /// would in the same memory. Scans use only the interval cache, so a keyspace read
    /// mostly by scans wants 0, and one read only by point reads 1. A keyspace that
    /// fits gives the interval cache everything, whatever this says; one that needs
    /// less than twice the room gives the record cache only part of its share, in
    /// proportion to what does not fit.
    pub fn record_cache_share(mut self, share: f64) -> Self {
        self.opts.record_cache_share = share;
        self
    }

    /// A memtable older than this is committed even if it is not full (default 5 s).
    pub fn commit_interval(mut self, every: std::time::Duration) -> Self {
        self.opts.commit_interval = every;
        self
    }

    /// A memtable that took no writes for this long, or so few that it grew by at most
    /// 1/64 of its size, is committed even if it is neither full nor old (default
    /// 250 ms; zero turns this off): after a load, reads stop merging a large memtable
    /// with the sorted keyspace soon after writes stop or slow to a trickle, and a
    /// crash has less WAL to replay. It costs nothing extra on disk: the pairs are
    /// written to the keyspace once either way. A memtable older than this that
    /// iterators have searched at least four times per version it holds is committed
    /// too, however fast it takes writes: each scan searches every memtable, so scans
    /// that keep coming pay more for a memtable than its commit costs. That one may
    /// write more: an interval that two smaller commits touch is written twice.
    pub fn idle_commit(mut self, after: std::time::Duration) -> Self {
        self.opts.idle_commit = after;
        self
    }

    /// Whether the committer, once writes have stopped and everything is committed,
    /// sweeps each sorted keyspace in key order and rewrites contiguous the runs of
    /// intervals that lie scattered over the data file (default `true`). A random load
    /// leaves each interval in several extents, each in a place of its own; swept, a
    /// point read makes one read of the file and a scan reads its intervals in file
    /// order. Writes faster than a trickle pause it, and it goes on from where it
    /// stood once they stop or slow down. A trickle (at most 1/64 of the memtable per
    /// [`idle_commit`](Self::idle_commit) time, 4 MiB/s with the defaults; none with
    /// idle commits off) lets a pass under way go on, and starts one once commits have
    /// changed as many keys as the keyspace has intervals, as a load does. It writes
    /// each scattered byte once more
    /// ([`Stats::swept_bytes`](crate::Stats::swept_bytes)). Point reads that meet one
    /// of its short write sections read a view of the keyspace instead of waiting, as
    /// beside a commit (a copy of the sparse index and the FlexTree, outside the cache
    /// budget, which holds the segments the sweep empties until it goes); scans wait.
    pub fn idle_sweep(mut self, on: bool) -> Self {
        self.opts.idle_sweep = on;
        self
    }

    /// On open, each keyspace's index is rebuilt by reading one interval head's key at
    /// most every this many bytes (default 16 KiB; 0 reads every head). Larger steps
    /// open faster and leave larger intervals, which split again as they are written.
    pub fn recovery_step(mut self, bytes: u64) -> Self {
        self.opts.recovery_step = bytes;
        self
    }

    /// Entries per sparse-index node (default 128; at least 4). For tests: small nodes
    /// make a modest keyspace's index several levels deep, so its node splits, merges
    /// and pivots are exercised (hidden).
    #[doc(hidden)]
    pub fn index_fanout(mut self, entries: usize) -> Self {
        self.opts.index_fanout = entries;
        self
    }

    /// Pairs past which a sorted keyspace's interval splits (default 16; at least 2).
    /// For tests: small intervals make a few hundred keys many intervals (hidden).
    #[doc(hidden)]
    pub fn interval_pairs(mut self, pairs: usize) -> Self {
        self.opts.interval_pairs = pairs;
        self
    }

    /// The FlexSpace options of each keyspace (segment size, extent size, log size,
    /// the space amplification its garbage collection keeps to, whether its data file
    /// is read through a mapping).
    pub fn space_options(mut self, opts: crate::space::SpaceOptions) -> Self {
        self.opts.space = opts;
        self
    }

    /// Value-log garbage collection settings (see [`GcOptions`]).
    pub fn gc(mut self, opts: GcOptions) -> Self {
        self.opts.gc = opts;
        self
    }

    /// Threads that read separated values ahead of scans (WiscKey §3.3.1; default: one
    /// fewer than the cores, at least 1 and at most 8; at most
    /// [`MAX_SCAN_READ_THREADS`]). A scan reads the values the threads have not begun
    /// itself, so 0 works too (no threads, reads in the scan's own thread). More
    /// threads than cores pay when values come from a device with deep queues rather
    /// than from the page cache, where they only take turns with the scan.
    pub fn scan_read_threads(mut self, threads: usize) -> Self {
        self.opts.scan_read_threads = threads;
        self
    }

    /// Whether a `Sync` writer whose write the sync in flight covers polls for that
    /// sync's end, yielding the CPU between looks, instead of sleeping until it is woken
    /// (default: true). Only while syncs are fast: for at most twice the typical sync,
    /// and not at all once syncs typically take over 125 µs. On two cores, eight `Sync`
    /// writers put about 1.2 times as much per second with it, and used about a quarter
    /// more CPU per put; turn it off where CPU time counts for more than write latency.
    pub fn poll_syncs(mut self, yes: bool) -> Self {
        self.opts.poll_syncs = yes;
        self
    }

    /// Whether writers that outrun the committer are paced by it (default: true).
    /// Unpaced, a writer fills the active memtable at full speed while the frozen one
    /// is committed, and then waits for the rest of that commit: at 10M pairs over half
    /// a second, the longest write latency by far. Paced, once writers have had to wait
    /// during a commit, each write waits a little whenever the active memtable runs
    /// ahead of the commit's progress, so the waits are many and short; a burst that
    /// the two memtables hold is never paced. Measured on a load of 10M pairs on two
    /// cores (batches of 1,000): p99.9 batch latency 107–115 ms instead of 587–688 ms,
    /// p99 6.2–6.7 ms instead of 1.7–1.9 ms, p50 1.6–1.7 ms instead of 0.9, at the
    /// same rate (1.00×) and 1.06 times the CPU time. Turn it off where the median
    /// write's latency counts for more than the slowest's. See the design's "Writers
    /// paced by the commit".
    pub fn pace_writes(mut self, yes: bool) -> Self {
        self.opts.pace_writes = yes;
        self
    }

    /// Treats every value a scan reads ahead as if it had waited on the device, so the
    /// read-ahead's device path (a growing window, jobs taken nearest first, the scan
    /// reading queued jobs while it waits) runs on a fast file system. For tests
    /// (hidden).
    #[doc(hidden)]
    pub fn scan_reads_slow(mut self, yes: bool) -> Self {
        self.opts.scan_reads_slow = yes;
        self
    }

    /// Opens (or creates) the database.
    pub fn open(self) -> Result<Db> {
        Db::open_with(&self.path, self.opts)
    }
}
