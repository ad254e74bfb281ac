//! Multi-version concurrency: which sequence numbers readers may see, and which the
//! oldest live snapshot still needs.
//!
//! Every batch gets one sequence number (its commit timestamp) from the group-commit
//! leader, in WAL order. A batch is *applied* once it is in the WAL (in the OS) and in
//! the memtable. [`Visibility`] advances the visible sequence only over a contiguous
//! prefix of applied sequences, so a reader never sees half a batch or a batch whose
//! predecessor is still missing. [`Snapshots`] counts the live snapshots per sequence;
//! its minimum is the watermark the committer and value-log GC will use (SkimpyFTL §3.4).
//!
//! Invariants: `visible` only grows; every sequence `<= visible` is applied; a snapshot's
//! sequence is `<= visible` when it is taken.

use std::collections::{BTreeMap, BTreeSet};

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};

/// Tracks applied sequences and publishes the contiguous prefix as visible.
#[derive(Debug)]
pub(crate) struct Visibility {
    state: Mutex<VisState>,
    advanced: Condvar,
    /// `state.visible`, published (release) after it changes so a reader takes it
    /// without the lock (acquire), and with it every entry of the batches it covers.
    published: AtomicU64,
}

#[derive(Debug)]
struct VisState {
    visible: u64,
    /// Applied sequences above `visible` that wait for a gap below them to fill.
    early: BTreeSet<u64>,
}

impl Visibility {
    /// Starts with every sequence up to `visible` applied.
    pub(crate) fn new(visible: u64) -> Self {
        Visibility {
            state: Mutex::new(VisState {
                visible,
                early: BTreeSet::new(),
            }),
            advanced: Condvar::new(),
            published: AtomicU64::new(visible),
        }
    }

    /// The highest sequence a new reader sees.
    pub(crate) fn visible(&self) -> u64 {
        self.published.load(Ordering::Acquire)
    }

    /// Marks `seq` applied, advances the visible prefix, and waits until `seq` itself is
    /// visible (every batch before it has been applied too).
    pub(crate) fn applied_and_wait(&self, seq: u64) {
        let mut s = self.state.lock();
        debug_assert!(seq > s.visible, "sequence {seq} applied twice");
        if seq == s.visible + 1 {
            s.visible = seq;
            let s = &mut *s;
            while s.early.remove(&(s.visible + 1)) {
                s.visible += 1;
            }
            self.published.store(s.visible, Ordering::Release);
            self.advanced.notify_all();
        } else {
            s.early.insert(seq);
            // The batches before this one are being put in by their writers: watch
            // for them without the lock before sleeping (`spin.rs`).
            let published = &self.published;
            parking_lot::MutexGuard::unlocked(&mut s, || {
                crate::spin::until(|| published.load(Ordering::Acquire) >= seq);
            });
        }
        while s.visible < seq {
            self.advanced.wait(&mut s);
        }
    }

    /// Waits until every sequence up to `seq` is applied and visible. The committer
    /// calls this before it commits a memtable, so no batch of it is still being put in.
    pub(crate) fn wait_visible(&self, seq: u64) {
        let mut s = self.state.lock();
        while s.visible < seq {
            self.advanced.wait(&mut s);
        }
    }
}

/// The registry of live snapshots: how many are open at each sequence.
#[derive(Debug, Default)]
pub(crate) struct Snapshots {
    live: Mutex<BTreeMap<u64, usize>>,
}

impl Snapshots {
    /// Registers a snapshot at the current visible sequence and returns that sequence.
    /// The visible sequence is read under the registry lock, so the watermark never
    /// passes a snapshot that is being taken.
    pub(crate) fn acquire(&self, vis: &Visibility) -> u64 {
        let mut live = self.live.lock();
        let seq = vis.visible();
        *live.entry(seq).or_insert(0) += 1;
        seq
    }

    /// Releases one snapshot at `seq`.
    pub(crate) fn release(&self, seq: u64) {
        let mut live = self.live.lock();
        match live.get_mut(&seq) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                live.remove(&seq);
            }
            None => debug_assert!(false, "snapshot at {seq} released twice"),
        }
    }

    /// The sequence of the oldest live snapshot, if any: no version it can see may be
    /// dropped.
    pub(crate) fn oldest(&self) -> Option<u64> {
        self.live.lock().keys().next().copied()
    }

    /// Whether a live snapshot reads at a sequence in `[from, to)`: one that sees a
    /// version written at `from` and superseded at `to`, which must then be kept.
    pub(crate) fn any_in(&self, from: u64, to: u64) -> bool {
        from < to && self.live.lock().range(from..to).next().is_some()
    }

    /// How many snapshots are live.
    pub(crate) fn count(&self) -> usize {
        self.live.lock().values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn visible_advances_only_over_a_contiguous_prefix() {
        let vis = Arc::new(Visibility::new(10));
        // 12 applied first must wait for 11.
        let v = Arc::clone(&vis);
        let waiter = std::thread::spawn(move || v.applied_and_wait(12));
        while vis.state.lock().early.is_empty() {
            std::thread::yield_now();
        }
        assert_eq!(
            vis.visible(),
            10,
            "12 must not be visible while 11 is missing"
        );
        vis.applied_and_wait(11);
        waiter.join().unwrap();
        assert_eq!(vis.visible(), 12);
    }

    /// A writer whose predecessor is applied long after the watch before sleeping
    /// (`spin.rs`) sleeps and is woken; one applied at once is seen while watching.
    #[test]
    fn a_writer_waits_for_its_predecessor_whether_it_comes_late_or_soon() {
        for late in [true, false] {
            let vis = Arc::new(Visibility::new(0));
            let v = Arc::clone(&vis);
            let waiter = std::thread::spawn(move || v.applied_and_wait(2));
            while vis.state.lock().early.is_empty() {
                std::thread::yield_now();
            }
            if late {
                std::thread::sleep(std::time::Duration::from_millis(20));
                assert_eq!(vis.visible(), 0, "2 waits for 1");
            }
            vis.applied_and_wait(1);
            waiter.join().unwrap();
            assert_eq!(vis.visible(), 2);
        }
    }

    #[test]
    fn oldest_snapshot_is_the_watermark() {
        let vis = Visibility::new(5);
        let snaps = Snapshots::default();
        assert_eq!(snaps.oldest(), None);
        let a = snaps.acquire(&vis);
        vis.applied_and_wait(6);
        let b = snaps.acquire(&vis);
        let c = snaps.acquire(&vis);
        assert_eq!((a, b, c), (5, 6, 6));
        assert_eq!(snaps.oldest(), Some(5));
        assert_eq!(snaps.count(), 3);
        snaps.release(a);
        assert_eq!(snaps.oldest(), Some(6));
        snaps.release(b);
        assert_eq!(snaps.oldest(), Some(6));
        assert!(snaps.any_in(6, 7) && !snaps.any_in(7, 100) && !snaps.any_in(0, 6));
        assert!(!snaps.any_in(6, 6), "an empty range holds no snapshot");
        snaps.release(c);
        assert_eq!(snaps.oldest(), None);
    }
}
