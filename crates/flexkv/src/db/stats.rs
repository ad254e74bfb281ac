//! [`Stats`]: the engine's counters, read with [`Db::stats`](crate::Db::stats).

use std::sync::atomic::Ordering;

use super::Inner;

/// A copy of the engine's counters since the database was opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Key and value bytes of acknowledged batches.
    pub user_bytes: u64,
    /// Bytes written to the WAL (framing included).
    pub wal_bytes: u64,
    /// Bytes written to the value log (record headers and keys included).
    pub vlog_bytes: u64,
    /// Syncs of the WAL.
    pub wal_syncs: u64,
    /// Microseconds spent in WAL syncs issued by group commit.
    pub wal_sync_micros: u64,
    /// Syncs of the value log.
    pub vlog_syncs: u64,
    /// Acknowledged batches.
    pub batches: u64,
    /// Group commits (WAL records written).
    pub groups: u64,
    /// Batches written by all group commits.
    pub grouped_batches: u64,
    /// The most batches one group commit carried.
    pub max_group: u64,
    /// Approximate memtable size in bytes.
    pub memtable_bytes: u64,
    /// Versions held by the memtable.
    pub memtable_entries: u64,
    /// Value-log bytes still referenced (per segment, summed).
    pub vlog_live_bytes: u64,
    /// Snapshots and iterators alive.
    pub live_snapshots: u64,
    /// The sequence of the oldest live snapshot: the watermark below which no version
    /// may be dropped yet.
    pub oldest_snapshot: Option<u64>,
    /// Whether the open that made this handle cut a torn WAL tail.
    pub wal_tail_cut: bool,
    /// The sequence new readers see.
    pub visible_seq: u64,
    /// The highest sequence known durable.
    pub durable_seq: u64,
}

impl Stats {
    /// Batches per group commit, on average.
    pub fn mean_group_size(&self) -> f64 {
        if self.groups == 0 {
            0.0
        } else {
            self.grouped_batches as f64 / self.groups as f64
        }
    }

    /// Syncs (WAL and value log) per acknowledged batch.
    pub fn syncs_per_batch(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            (self.wal_syncs + self.vlog_syncs) as f64 / self.batches as f64
        }
    }
}

impl Inner {
    pub(crate) fn stats(&self) -> Stats {
        let c = &self.stats;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            user_bytes: get(&c.user_bytes),
            wal_bytes: self.wal.bytes_written(),
            vlog_bytes: self.vlog.bytes_written(),
            wal_syncs: self.wal.syncs(),
            wal_sync_micros: self.wal.sync_micros(),
            vlog_syncs: self.vlog.syncs(),
            batches: get(&c.batches),
            groups: get(&c.groups),
            grouped_batches: get(&c.grouped_batches),
            max_group: get(&c.max_group),
            memtable_bytes: self.memtable.approximate_bytes() as u64,
            memtable_entries: self.memtable.len() as u64,
            vlog_live_bytes: self.vlog.live_bytes().values().sum(),
            live_snapshots: self.snapshots.count() as u64,
            oldest_snapshot: self.snapshots.oldest(),
            wal_tail_cut: self.wal_tail_cut,
            visible_seq: self.vis.visible(),
            durable_seq: self.sync.durable(),
        }
    }
}
