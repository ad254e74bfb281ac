//! [`Stats`]: the engine's counters, read with [`Db::stats`](crate::Db::stats).

use std::sync::atomic::Ordering;

use super::Inner;
use crate::sorted::store::SortedStore;
use crate::vlog::SegmentUsage;

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
    /// Approximate memory the memtables take, in bytes (entries and key filters).
    pub memtable_bytes: u64,
    /// Versions held by the memtable.
    pub memtable_entries: u64,
    /// Memtables frozen and waiting for the committer.
    pub frozen_memtables: u64,
    /// Memtables the committer has applied to the sorted keyspaces.
    pub commits: u64,
    /// Writes that waited for the committer because two memtables were full.
    pub write_stalls: u64,
    /// Microseconds those writes waited in all.
    pub write_stall_micros: u64,
    /// Writes that waited a little, while a memtable was being committed, because the
    /// active memtable had filled further ahead of the commit's progress than writers
    /// may run: only with [`Builder::pace_writes`](crate::Builder::pace_writes) (the
    /// design's "Writers paced by the commit").
    pub write_delays: u64,
    /// Microseconds those writes waited in all.
    pub write_delay_micros: u64,
    /// Keys whose new versions the committer applied.
    pub pairs_committed: u64,
    /// Versions written to the value log as history for snapshots.
    pub history_records: u64,
    /// Interval-cache hits.
    pub cache_hits: u64,
    /// Interval-cache misses (intervals read from the FlexSpace).
    pub cache_misses: u64,
    /// Point reads answered by the record cache, which holds single records read from
    /// the FlexSpace while a keyspace does not fit in its budget (not counted in
    /// `cache_hits` or `cache_misses`).
    pub record_cache_hits: u64,
    /// Bytes the record caches hold.
    pub record_cache_bytes: u64,
    /// Bytes the record caches may hold now: a share of what the indexes leave of each
    /// keyspace's budget while the keyspace does not fit in its interval cache
    /// ([`Builder::record_cache_share`](crate::Builder::record_cache_share)), else 0.
    pub record_cache_capacity_bytes: u64,
    /// Fragmented intervals rewritten whole.
    pub defrags: u64,
    /// Intervals the committer rewrote contiguous, while it had nothing to commit,
    /// because reads kept fetching them from the FlexSpace in scattered extents (see
    /// the design's "reads that defragment").
    pub read_defrags: u64,
    /// Bytes of intervals the committer rewrote contiguous in its sweep of scattered
    /// intervals while writes had stopped (see [`Builder::idle_sweep`](crate::Builder::idle_sweep)).
    pub swept_bytes: u64,
    /// Intervals read from the FlexSpace at the spot kept beside their sparse-index
    /// entry (where they lay in one piece), with no search of the FlexTree (see the
    /// design's "Spots"); counted in `cache_misses` too.
    pub spot_reads: u64,
    /// Intervals in pieces read from the FlexSpace by the hint kept beside their
    /// sparse-index entry: the walk of their extents started at the FlexTree leaf it
    /// names, with no descent (see the design's "Hints"); counted in `cache_misses` too.
    pub hint_reads: u64,
    /// Point reads that found the keyspace's lock held by the committer and their
    /// interval not cached, and read a view of the keyspace instead of waiting (see the
    /// design's "Views"); not counted in `cache_misses`.
    pub view_reads: u64,
    /// Views of a keyspace the committer made for those reads (one at a time, at most
    /// one per commit unless the value log's GC retires it).
    pub views_made: u64,
    /// Intervals the committer split off a grown interval (one per new interval).
    pub interval_splits: u64,
    /// Intervals the committer merged into a neighbour (emptied ones, and two small
    /// neighbours that fit in one).
    pub interval_merges: u64,
    /// Intervals in the sparse indexes.
    pub intervals: u64,
    /// Bytes of memory the sparse indexes take.
    pub index_bytes: u64,
    /// Bytes the interval caches hold.
    pub cache_bytes: u64,
    /// Bytes the interval caches may hold now: each keyspace's budget
    /// ([`Builder::cache_bytes`](crate::Builder::cache_bytes)) less what its sparse
    /// index and FlexTree take, but never below an eighth of the budget, less the
    /// record cache's share of that ([`Stats::record_cache_capacity_bytes`]).
    pub cache_capacity_bytes: u64,
    /// Bytes written to the keyspaces' FlexSpaces (data, log and tree files).
    pub space_bytes: u64,
    /// Of `space_bytes`: the data files (records and GC relocations).
    pub space_data_bytes: u64,
    /// Of `space_bytes`: the logical logs.
    pub space_log_bytes: u64,
    /// Garbage-collection passes of the keyspaces' FlexSpaces (each relocates the live
    /// extents of a few least-used segments of the data file).
    pub space_gc_passes: u64,
    /// Of `space_gc_passes`: those a write ran itself, holding the keyspace's write
    /// lock throughout (the committer runs the others in steps that readers pass).
    pub space_gc_passes_in_writes: u64,
    /// Of `space_data_bytes`: what those passes relocated.
    pub space_gc_bytes_relocated: u64,
    /// Bytes of records the keyspaces hold.
    pub space_live_bytes: u64,
    /// Extents the keyspaces' FlexSpaces map (an interval read takes one read per extent).
    pub space_extents: u64,
    /// Bytes of memory the keyspaces' FlexTrees take (the extent maps, held whole in
    /// memory: 16 bytes an extent, and the room their nodes keep free).
    pub space_tree_memory_bytes: u64,
    /// The longest time the committer held a keyspace's write lock (in a commit's
    /// sections, a GC pass's, a sync's first and last steps), and the 99th percentile
    /// (to a power of two), in microseconds.
    pub lock_hold_max_micros: u64,
    /// See `lock_hold_max_micros`.
    pub lock_hold_p99_micros: u64,
    /// Value-log bytes someone still needs: memtables, keyspace records, and history
    /// for live snapshots (exact; see [`SegmentUsage`]).
    pub vlog_live_bytes: u64,
    /// Bytes of whole records in the value log's segment files now.
    pub vlog_disk_bytes: u64,
    /// `vlog_disk_bytes − vlog_live_bytes`: what GC can reclaim.
    pub vlog_garbage_bytes: u64,
    /// Every value-log segment's counts (garbage by segment), by segment number.
    pub vlog_segments: Vec<(u32, SegmentUsage)>,
    /// Separated values iterators read ahead, in parallel batches.
    pub values_read_ahead: u64,
    /// GC passes run (background and [`Db::gc`](crate::Db::gc)).
    pub gc_passes: u64,
    /// Bytes GC copied to the head of the value log and swapped in.
    pub gc_bytes_relocated: u64,
    /// Bytes of segment files GC removed.
    pub gc_bytes_reclaimed: u64,
    /// Segment files GC removed.
    pub gc_segments_removed: u64,
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

    /// The value log's space amplification: disk bytes over live bytes (1 when
    /// empty, infinite when nothing in it is live).
    pub fn vlog_space_amplification(&self) -> f64 {
        match (self.vlog_disk_bytes, self.vlog_live_bytes) {
            (0, _) => 1.0,
            (_, 0) => f64::INFINITY,
            (d, l) => d as f64 / l as f64,
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
        let tables = self.tables.read().newest_first();
        let stores: Vec<_> = self.stores.read().values().cloned().collect();
        let sum = |f: &dyn Fn(&SortedStore) -> u64| stores.iter().map(|s| f(s)).sum::<u64>();
        let shapes: Vec<_> = stores.iter().map(|s| s.shape()).collect();
        let (max_hold, p99_hold) = self.holds.max_and_p99();
        self.vlog.release_pins(self.snapshots.oldest());
        let usage = self.vlog.usage();
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
            memtable_bytes: tables
                .iter()
                .map(|t| (t.approximate_bytes() + t.index_bytes()) as u64)
                .sum(),
            memtable_entries: tables.iter().map(|t| t.len() as u64).sum(),
            frozen_memtables: tables.len() as u64 - 1,
            commits: get(&c.commits),
            write_stalls: get(&c.stalls),
            write_stall_micros: get(&c.stall_micros),
            write_delays: get(&c.delays),
            write_delay_micros: get(&c.delay_micros),
            pairs_committed: sum(&|s| get(&s.counters.pairs_committed)),
            history_records: sum(&|s| get(&s.counters.history_written)),
            cache_hits: sum(&|s| get(&s.counters.cache_hits)),
            cache_misses: sum(&|s| get(&s.counters.cache_misses)),
            record_cache_hits: sum(&|s| get(&s.counters.record_hits)),
            record_cache_bytes: sum(&|s| s.rows.used()),
            record_cache_capacity_bytes: sum(&|s| s.rows.capacity()),
            defrags: sum(&|s| get(&s.counters.defrags)),
            read_defrags: sum(&|s| get(&s.counters.read_defrags)),
            swept_bytes: sum(&|s| get(&s.counters.swept_bytes)),
            spot_reads: sum(&|s| get(&s.counters.spot_reads)),
            hint_reads: sum(&|s| get(&s.counters.hint_reads)),
            view_reads: sum(&|s| get(&s.counters.view_reads)),
            views_made: sum(&|s| get(&s.counters.views_made)),
            interval_splits: sum(&|s| get(&s.counters.splits)),
            interval_merges: sum(&|s| get(&s.counters.merges)),
            intervals: shapes.iter().map(|s| s.0).sum(),
            index_bytes: shapes.iter().map(|s| s.1).sum(),
            cache_bytes: shapes.iter().map(|s| s.2).sum(),
            cache_capacity_bytes: sum(&|s| s.cache.capacity() as u64),
            space_bytes: shapes
                .iter()
                .map(|s| s.3.data_bytes_written + s.3.log_bytes_written + s.3.tree_bytes_written)
                .sum(),
            space_data_bytes: shapes.iter().map(|s| s.3.data_bytes_written).sum(),
            space_log_bytes: shapes.iter().map(|s| s.3.log_bytes_written).sum(),
            space_gc_passes: shapes.iter().map(|s| s.3.gc_passes).sum(),
            space_gc_passes_in_writes: shapes.iter().map(|s| s.3.gc_passes_in_changes).sum(),
            space_gc_bytes_relocated: shapes.iter().map(|s| s.3.gc_bytes_relocated).sum(),
            space_live_bytes: shapes.iter().map(|s| s.3.live_bytes).sum(),
            space_extents: shapes.iter().map(|s| s.3.extents).sum(),
            space_tree_memory_bytes: shapes.iter().map(|s| s.3.tree_memory_bytes).sum(),
            lock_hold_max_micros: max_hold,
            lock_hold_p99_micros: p99_hold,
            vlog_live_bytes: usage.values().map(|u| u.live().min(u.total)).sum(),
            vlog_disk_bytes: usage.values().map(|u| u.total).sum(),
            vlog_garbage_bytes: usage.values().map(|u| u.garbage()).sum(),
            vlog_segments: usage.into_iter().collect(),
            values_read_ahead: get(&c.read_ahead),
            gc_passes: get(&self.gc.passes),
            gc_bytes_relocated: get(&self.gc.relocated),
            gc_bytes_reclaimed: get(&self.gc.reclaimed),
            gc_segments_removed: get(&self.gc.removed),
            live_snapshots: self.snapshots.count() as u64,
            oldest_snapshot: self.snapshots.oldest(),
            wal_tail_cut: self.wal_tail_cut,
            visible_seq: self.vis.visible(),
            durable_seq: self.sync.durable(),
        }
    }
}
