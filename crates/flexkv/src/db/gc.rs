//! Value-log garbage collection (WiscKey §3.3.2, with SkimpyFTL's watermark for
//! history, §3.4).
//!
//! **What is garbage** is known exactly, never sampled: the value log counts, for every
//! segment, the bytes held by memtables, by keyspace records and by pins for live
//! snapshots ([`crate::vlog::SegmentUsage`]); the committer moves bytes between them as
//! it applies versions. A history record, and a value only history points to, is pinned
//! until no snapshot is older than the sequence that superseded it; then it is garbage
//! without anyone looking it up.
//!
//! **Which segment**: any sealed one (not only the oldest) that no memtable and no
//! snapshot still needs and whose garbage is at least [`GcOptions::segment_garbage`] of
//! it, ranked by cost-benefit, `(1 − u) · age / (1 + u)` with `u` its live fraction and
//! `age` how many segments were started after it. A candidate that cannot be taken now
//! is passed over for the next one.
//!
//! **Collecting one segment**:
//! 1. read it whole and decide each record's liveness: a value is live iff its keyspace's
//!    record still has that sequence and points at exactly that place;
//! 2. append the live ones (same keyspace, key, sequence) to the value log and sync it;
//! 3. under the commit lock, mark the manifest's counts unknown, swap each keyspace
//!    record to the new pointer *only if* it still has that sequence and the old pointer
//!    (a write, delete or commit in between wins, and its copy is garbage), sync the
//!    keyspaces, and write the manifest with the new counts;
//! 4. remove the segment and sync the directory, if still nothing needs it.
//!
//! A relocation never inserts a record, so it cannot bring back a key deleted while it
//! ran, whether or not the tombstone has been swept. A reader that found the old pointer
//! just before step 4 either still has the file open (it lives until the last handle
//! goes) or finds the segment retired and looks its key up again, finding the new
//! pointer. A crash before step 3 leaves unreferenced copies (garbage, counted as such by
//! the next open); a crash inside step 3 leaves the counts marked unknown, so the next
//! open recounts them from the keyspaces; a crash before step 4 leaves a segment that is
//! all garbage, collected again later.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::options::{GcOptions, GcStep};
use super::Inner;
use crate::memtable::Value;
use crate::sorted::history::HISTORY;
use crate::sorted::store::Move;
use crate::vlog::{Holder, NewValue, SegmentUsage};
use crate::Result;

/// What one pass of [`Db::gc`](crate::Db::gc) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcReport {
    /// Segments read.
    pub segments_scanned: u64,
    /// Segments removed.
    pub segments_removed: u64,
    /// Candidates passed over because a memtable or a snapshot still needs them.
    pub segments_skipped: u64,
    /// Bytes of live records copied to the head of the log.
    pub bytes_relocated: u64,
    /// Bytes of segment files removed.
    pub bytes_reclaimed: u64,
}

/// GC's shared state: one pass at a time, the background thread, its counters.
#[derive(Debug, Default)]
pub(crate) struct Gc {
    pub(crate) running: Mutex<()>,
    pub(crate) thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    pub(crate) stop: Mutex<bool>,
    pub(crate) wake: Condvar,
    pub(crate) passes: AtomicU64,
    pub(crate) relocated: AtomicU64,
    pub(crate) reclaimed: AtomicU64,
    pub(crate) removed: AtomicU64,
}

/// Total value-log bytes over live bytes (1 for an empty log; infinite if nothing is
/// live but something is there).
pub(crate) fn space_amplification(usage: &BTreeMap<u32, SegmentUsage>) -> f64 {
    let total: u64 = usage.values().map(|u| u.total).sum();
    let live: u64 = usage.values().map(|u| u.live().min(u.total)).sum();
    match (total, live) {
        (0, _) => 1.0,
        (_, 0) => f64::INFINITY,
        (t, l) => t as f64 / l as f64,
    }
}

/// The segments worth collecting now, best first.
fn candidates(usage: &BTreeMap<u32, SegmentUsage>, active: u32, opts: &GcOptions) -> Vec<u32> {
    let mut c: Vec<(f64, u32)> = usage
        .iter()
        .filter(|(&id, u)| {
            id < active
                && u.total > 0
                && u.garbage() as f64 >= opts.segment_garbage * u.total as f64
        })
        .map(|(&id, u)| {
            let util = u.live() as f64 / u.total as f64;
            let age = f64::from(active - id);
            ((1.0 - util) * age / (1.0 + util), id)
        })
        .collect();
    c.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    c.into_iter().map(|(_, id)| id).collect()
}

impl Inner {
    fn gc_step(&self, step: GcStep) {
        if let Some(h) = &self.opts.gc.hook {
            (h.0)(step);
        }
    }

    /// One GC pass. On demand (`all`), every candidate is collected; in the background,
    /// only until the space amplification is back under its target, and at the
    /// configured rate.
    pub(crate) fn gc_pass(&self, all: bool) -> Result<GcReport> {
        let _one = self.gc.running.lock();
        let mut report = GcReport::default();
        self.vlog.release_pins(self.snapshots.oldest());
        let started = Instant::now();
        let mut io = 0u64;
        let mut tried = BTreeSet::new();
        loop {
            self.check_writable()?;
            let usage = self.vlog.usage();
            if !all && space_amplification(&usage) <= self.opts.gc.space_amplification {
                break;
            }
            let active = self.vlog.active_segment();
            let Some(id) = candidates(&usage, active, &self.opts.gc)
                .into_iter()
                .find(|id| !tried.contains(id))
            else {
                break;
            };
            tried.insert(id);
            let u = usage[&id];
            if u.memory > 0 || u.pinned > 0 {
                report.segments_skipped += 1;
                continue;
            }
            io += u.total + self.collect(id, &mut report)?;
            if !all {
                // Stay under the rate: sleep until the bytes moved fit the budget.
                let rate = self.opts.gc.bytes_per_sec.max(1) as f64;
                let due = Duration::from_secs_f64(io as f64 / rate);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    let mut stop = self.gc.stop.lock();
                    if !*stop {
                        self.gc.wake.wait_for(&mut stop, wait);
                    }
                    if *stop {
                        break;
                    }
                }
            }
        }
        self.gc.passes.fetch_add(1, Ordering::Relaxed);
        Ok(report)
    }

    /// Collects segment `id` (the numbered steps in the module docs); returns the bytes
    /// it wrote.
    fn collect(&self, id: u32, report: &mut GcReport) -> Result<u64> {
        // 1. Liveness.
        let mut relocated = 0;
        let records = self.vlog.scan_segment(id)?;
        report.segments_scanned += 1;
        let mut live = Vec::new();
        for r in records {
            if r.ks & HISTORY != 0 {
                continue; // nothing is pinned here: no snapshot reads it
            }
            let Some(store) = self.stores.read().get(&r.ks).cloned() else {
                continue;
            };
            if store
                .get(&r.key)?
                .is_some_and(|v| v.seq == r.seq && v.value == Value::Separated(r.ptr))
            {
                live.push(r);
            }
        }
        self.gc_step(GcStep::Scanned(id));
        // 2. Copies at the head, durable before anything points at them.
        let mut moved: Vec<(u32, Move)> = Vec::with_capacity(live.len());
        let mut written = 0;
        let chunk = (self.opts.vlog_segment_size / 4).max(1);
        let mut i = 0;
        while i < live.len() {
            let mut bytes = 0;
            let mut j = i;
            while j < live.len() && (j == i || bytes < chunk) {
                bytes += live[j].ptr.record_len(live[j].key.len());
                j += 1;
            }
            let values: Vec<NewValue> = live[i..j]
                .iter()
                .map(|r| NewValue {
                    ks: r.ks,
                    key: &r.key,
                    seq: r.seq,
                    value: &r.value,
                })
                .collect();
            let ptrs = self.vlog.append_as(&values, Holder::Memory)?;
            for (r, p) in live[i..j].iter().zip(ptrs) {
                moved.push((r.ks, (r.key.clone(), r.seq, r.ptr, p)));
            }
            written += bytes;
            i = j;
        }
        self.vlog.sync()?;
        self.gc_step(GcStep::Relocated(id));
        // 3. Write-back, serialized with commits (nothing to do if nothing was live).
        if !moved.is_empty() {
            let _commit = self.applying.lock();
            self.counts_unknown()?;
            let mut by_ks: BTreeMap<u32, Vec<Move>> = BTreeMap::new();
            for (ks, m) in moved {
                by_ks.entry(ks).or_default().push(m);
            }
            for (ks, moves) in by_ks {
                let store = self.store(ks)?;
                let swapped = store.relocate(&moves, &self.holds)?;
                for ((key, _, old, new), ok) in moves.iter().zip(swapped) {
                    if ok {
                        self.vlog
                            .hold(new, key.len(), Some(Holder::Memory), Some(Holder::Store));
                        self.vlog.hold(old, key.len(), Some(Holder::Store), None);
                        relocated += new.record_len(key.len());
                    } else {
                        self.vlog.hold(new, key.len(), Some(Holder::Memory), None);
                    }
                }
                store.sync(&self.holds)?;
            }
            self.write_manifest_counts(None)?;
        }
        self.gc_step(GcStep::WrittenBack(id));
        // 4. Removal, if a commit in between did not pin anything here.
        let u = self.vlog.usage().get(&id).copied().unwrap_or_default();
        if u.memory == 0 && u.pinned == 0 {
            debug_assert_eq!(u.store, 0, "segment {id}: counts disagree with the scan");
            let freed = self.vlog.retire(id)?;
            report.segments_removed += 1;
            report.bytes_reclaimed += freed;
            self.gc.removed.fetch_add(1, Ordering::Relaxed);
            self.gc.reclaimed.fetch_add(freed, Ordering::Relaxed);
        } else {
            report.segments_skipped += 1;
        }
        report.bytes_relocated += relocated;
        self.gc.relocated.fetch_add(relocated, Ordering::Relaxed);
        Ok(written)
    }

    /// Marks the manifest's value-log counts unknown before the keyspaces' pointers
    /// change (a no-op if they already are). Call with the commit lock held.
    pub(crate) fn counts_unknown(&self) -> Result<()> {
        let mut m = self.manifest.lock();
        if m.vlog_store.is_some() {
            let mut next = m.clone();
            next.vlog_store = None;
            next.write(self.vfs.as_ref(), &self.dir)?;
            *m = next;
        }
        Ok(())
    }

    /// Records the current counts (and `applied`, if given) in the manifest, once the
    /// keyspaces are durable. Call with the commit lock held.
    pub(crate) fn write_manifest_counts(&self, applied: Option<u64>) -> Result<()> {
        let mut m = self.manifest.lock();
        let mut next = m.clone();
        if let Some(a) = applied {
            next.applied = a;
        }
        next.vlog_store = Some(self.vlog.store_counts());
        next.write(self.vfs.as_ref(), &self.dir)?;
        *m = next;
        Ok(())
    }

    /// The background GC thread: looks every interval (or when woken), and collects
    /// while the space amplification is over its target.
    pub(crate) fn gc_loop(self: &Arc<Self>) {
        loop {
            {
                let mut stop = self.gc.stop.lock();
                if *stop {
                    return;
                }
                self.gc.wake.wait_for(&mut stop, self.opts.gc.interval);
                if *stop {
                    return;
                }
            }
            self.vlog.release_pins(self.snapshots.oldest());
            if space_amplification(&self.vlog.usage()) <= self.opts.gc.space_amplification {
                continue;
            }
            match self.gc_pass(false) {
                Ok(_) => {}
                Err(crate::Error::Poisoned | crate::Error::Closed) => return,
                Err(e) => {
                    self.fail_commit(e);
                    return;
                }
            }
        }
    }

    /// Stops the background GC thread and waits for it.
    pub(crate) fn stop_gc(&self) {
        *self.gc.stop.lock() = true;
        self.gc.wake.notify_all();
        if let Some(h) = self.gc.thread.lock().take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(total: u64, store: u64) -> SegmentUsage {
        SegmentUsage {
            total,
            store,
            ..SegmentUsage::default()
        }
    }

    #[test]
    fn candidates_are_sealed_over_the_threshold_and_ranked_by_cost_benefit() {
        let usage = BTreeMap::from([
            (1, seg(100, 80)), // 20% garbage: under the threshold
            (2, seg(100, 50)), // old, half garbage
            (3, seg(100, 10)), // young, mostly garbage
            (4, seg(100, 0)),  // the active one: never
        ]);
        let opts = GcOptions::default();
        assert_eq!(candidates(&usage, 4, &opts), vec![3, 2]);
        assert!((space_amplification(&usage) - 400.0 / 140.0).abs() < 1e-9);
        assert_eq!(space_amplification(&BTreeMap::new()), 1.0);
        assert_eq!(
            space_amplification(&BTreeMap::from([(1, seg(5, 0))])),
            f64::INFINITY
        );
    }
}
