//! The durable-sequence watermark: which sequences a completed sync covers.
//!
//! At most one sync is in flight. A sync covers every group whose write finished before
//! it started (`written` at that moment); when it returns, `durable` advances to that.
//! A writer that needs durability waits until `durable` reaches its sequence, starting a
//! sync itself if none is in flight. So while one sync is on the device, the groups
//! written meanwhile gather behind the next one.
//!
//! A sync is also not started while the group-commit queue is busy (a leader is writing,
//! or writers wait to be led): those writes are microseconds from done, and the sync
//! should cover them too. Without this, the first writer back after a sync would sync a
//! group of one while everyone else queued behind it, and syncs would alternate between
//! covering one writer and covering the rest. The deferral is bounded (each thread has
//! at most one write in the queue) and the queue wakes the waiters whenever it changes
//! ([`SyncPoint::nudge`]). For the same reason a writer about to start a sync first
//! yields the CPU once, so that writers the last sync just woke can queue their writes.
//!
//! A waiter that the sync in flight covers *polls* for its end, yielding the CPU
//! between looks, instead of sleeping, if syncs have been fast: up to twice the
//! typical sync time from the sync's start, and never past [`POLL_LIMIT`]. Waking a
//! sleeper costs the waker a system call and, on another core, an interrupt, and on the
//! two virtual cores this was measured on the eight writers a sync covered came back
//! over 10–70 µs, one after another, while the next sync waited for them. A poller sees
//! the new watermark on its next look. Where syncs are slow, nobody polls: the wake-up
//! is small beside the sync, and polling through it would burn a core.
//!
//! A failed sync is permanent (Linux may drop the dirty pages it could not write and
//! report success later): every later wait fails.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::{Error, Result};

/// The longest a waiter polls for a sync's end, from the sync's start; syncs typically
/// longer than half of this are waited for asleep.
const POLL_LIMIT: Duration = Duration::from_micros(250);

#[derive(Debug)]
struct State {
    written: u64,
    durable: u64,
    in_flight: bool,
    failed: bool,
    /// Waiters that hold back a sync only because the queue is busy: the ones a
    /// [`SyncPoint::nudge`] must wake.
    deferring: u32,
    /// What the sync in flight covers, and when it started.
    covering: u64,
    started: Instant,
    /// A moving average of recent syncs' durations (each new one weighs 1/8).
    typical: Duration,
}

/// Tracks `written` and `durable` sequences and serializes syncs.
#[derive(Debug)]
pub(crate) struct SyncPoint {
    st: Mutex<State>,
    cv: Condvar,
    /// `st.durable`, for the waiters that poll it.
    durable: AtomicU64,
    /// Whether covered waiters may poll at all.
    poll: bool,
    /// Waits that polled, for tests.
    polls: AtomicU64,
}

impl SyncPoint {
    /// Starts with everything up to `seq` written and durable (what recovery found);
    /// `poll` lets covered waiters poll for fast syncs' ends.
    pub(crate) fn new(seq: u64, poll: bool) -> Self {
        SyncPoint {
            st: Mutex::new(State {
                written: seq,
                durable: seq,
                in_flight: false,
                failed: false,
                deferring: 0,
                covering: seq,
                started: Instant::now(),
                // Nobody polls until a few syncs have shown they are fast.
                typical: POLL_LIMIT,
            }),
            cv: Condvar::new(),
            durable: AtomicU64::new(seq),
            poll,
            polls: AtomicU64::new(0),
        }
    }

    /// Records that every sequence up to `seq` is written (in the OS).
    pub(crate) fn written(&self, seq: u64) {
        let mut st = self.st.lock();
        st.written = st.written.max(seq);
    }

    /// The highest written sequence.
    pub(crate) fn written_seq(&self) -> u64 {
        self.st.lock().written
    }

    /// The highest sequence a completed sync covers.
    pub(crate) fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Whether a sync has failed.
    pub(crate) fn failed(&self) -> bool {
        self.st.lock().failed
    }

    /// Marks the watermark failed (a write failed, so what follows it is unknown).
    pub(crate) fn fail(&self) {
        self.st.lock().failed = true;
        self.cv.notify_all();
    }

    /// Wakes the waiters to re-check whether to start a sync (the queue `busy` reads
    /// changed).
    pub(crate) fn nudge(&self) {
        let st = self.st.lock();
        // Waiters behind an in-flight sync are woken when it ends; waking them on every
        // group would be a herd of futile wake-ups.
        if st.deferring > 0 && !st.in_flight {
            self.cv.notify_all();
        }
    }

    /// Waits until every sequence up to `target` is durable, running `sync` (which must
    /// make everything written so far durable) when no sync is in flight and `busy`
    /// says no write is about to land.
    pub(crate) fn wait_durable(
        &self,
        target: u64,
        busy: impl Fn() -> bool,
        sync: impl Fn() -> Result<()>,
    ) -> Result<()> {
        let mut st = self.st.lock();
        let mut yielded = false;
        let mut polled = false;
        loop {
            if st.failed {
                return Err(Error::Poisoned);
            }
            if st.durable >= target {
                return Ok(());
            }
            let fast = st.typical * 2 <= POLL_LIMIT;
            if self.poll && st.in_flight && target <= st.covering && !polled && fast {
                // Once per wait: a sync that outlasts the poll is waited for asleep.
                polled = true;
                self.polls.fetch_add(1, Ordering::Relaxed);
                let until = st.started + st.typical * 2;
                drop(st);
                while self.durable.load(Ordering::Acquire) < target && Instant::now() < until {
                    std::thread::yield_now();
                }
                st = self.st.lock();
                continue;
            }
            if st.in_flight {
                self.cv.wait(&mut st);
                continue;
            }
            if busy() {
                st.deferring += 1;
                self.cv.wait(&mut st);
                st.deferring -= 1;
                continue;
            }
            if !yielded {
                // Let writers just woken by the last sync run first (once: a stream of
                // buffered writers must not keep a sync from starting): their writes are
                // microseconds away, and this sync can cover them.
                yielded = true;
                drop(st);
                std::thread::yield_now();
                st = self.st.lock();
                continue;
            }
            debug_assert!(st.written >= target, "waiting for an unwritten sequence");
            st.in_flight = true;
            let covers = st.written;
            st.covering = covers;
            let started = Instant::now();
            st.started = started;
            drop(st);
            let r = sync();
            let took = started.elapsed();
            st = self.st.lock();
            st.in_flight = false;
            st.typical = (st.typical * 7 + took) / 8;
            match r {
                Ok(()) => {
                    st.durable = st.durable.max(covers);
                    self.durable.store(st.durable, Ordering::Release);
                }
                Err(_) => st.failed = true,
            }
            self.cv.notify_all();
            r?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn one_sync_covers_everything_written_before_it() {
        let sp = SyncPoint::new(0, true);
        sp.written(5);
        let syncs = AtomicUsize::new(0);
        let sync = || {
            syncs.fetch_add(1, Ordering::Relaxed);
            Ok(())
        };
        sp.wait_durable(3, || false, sync).unwrap();
        sp.wait_durable(5, || false, sync).unwrap();
        assert_eq!(sp.durable(), 5);
        assert_eq!(syncs.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_failed_sync_fails_every_later_wait() {
        let sp = SyncPoint::new(0, true);
        sp.written(1);
        let err = sp.wait_durable(1, || false, || Err(Error::invalid("disk gone")));
        assert!(matches!(err, Err(Error::InvalidArgument(_))));
        sp.written(2);
        assert!(matches!(
            sp.wait_durable(2, || false, || Ok(())),
            Err(Error::Poisoned)
        ));
        assert!(sp.failed());
    }

    #[test]
    fn concurrent_waiters_share_syncs_and_all_return() {
        let sp = Arc::new(SyncPoint::new(0, true));
        let syncs = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (sp, syncs) = (Arc::clone(&sp), Arc::clone(&syncs));
                std::thread::spawn(move || {
                    for i in 0..200u64 {
                        let seq = i * 8 + t + 1;
                        sp.written(seq);
                        sp.wait_durable(
                            seq,
                            || false,
                            || {
                                syncs.fetch_add(1, Ordering::Relaxed);
                                std::thread::sleep(std::time::Duration::from_micros(50));
                                Ok(())
                            },
                        )
                        .unwrap();
                        assert!(sp.durable() >= seq);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = syncs.load(Ordering::Relaxed);
        assert!(n < 1600, "{n} syncs for 1600 waits: none was shared");
    }

    /// Runs 16 syncs of `warmup` each, then one more, ending with `outcome`, that a
    /// second waiter, covered by it, waits for; the sync lasts until that waiter polls,
    /// or `patience` passes. Returns whether it polled, and what the waiter and the
    /// syncer got.
    fn covered_wait(
        poll: bool,
        warmup: Duration,
        patience: Duration,
        outcome: fn() -> Result<()>,
    ) -> (bool, Result<()>, Result<()>) {
        let sp = Arc::new(SyncPoint::new(0, poll));
        for seq in 1..=16 {
            sp.written(seq);
            let sync = || {
                let t0 = Instant::now();
                while t0.elapsed() < warmup {
                    std::hint::spin_loop();
                }
                Ok(())
            };
            sp.wait_durable(seq, || false, sync).unwrap();
        }
        sp.written(20);
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let syncer = {
            let sp = Arc::clone(&sp);
            std::thread::spawn(move || {
                let sync = || {
                    started_tx.send(()).unwrap();
                    let t0 = Instant::now();
                    while sp.polls.load(Ordering::Relaxed) == 0 && t0.elapsed() < patience {
                        std::thread::yield_now();
                    }
                    outcome()
                };
                sp.wait_durable(20, || false, sync)
            })
        };
        started_rx.recv().unwrap();
        let waited = sp.wait_durable(19, || false, || Ok(()));
        let synced = syncer.join().unwrap();
        (sp.polls.load(Ordering::Relaxed) > 0, waited, synced)
    }

    /// A waiter the sync in flight covers polls for it while syncs are fast, never when
    /// polling is off, and not once syncs are slow; it returns durable either way.
    #[test]
    fn covered_waiters_poll_only_fast_syncs_and_only_when_allowed() {
        let slow = Duration::from_millis(1);
        for (poll, warmup, polls) in [
            (true, Duration::ZERO, true),
            (false, Duration::ZERO, false),
            (true, slow, false),
        ] {
            // Long enough for the waiter to begin, when it is expected to poll.
            let patience = Duration::from_millis(if polls { 5000 } else { 50 });
            let (polled, waited, synced) = covered_wait(poll, warmup, patience, || Ok(()));
            assert_eq!(polled, polls, "poll {poll}, syncs of {warmup:?}");
            assert!(waited.is_ok() && synced.is_ok(), "{waited:?} {synced:?}");
        }
    }

    /// A waiter that polls for a sync which then fails gets the failure.
    #[test]
    fn a_failed_sync_fails_the_waiters_polling_for_it() {
        let (polled, waited, synced) =
            covered_wait(true, Duration::ZERO, Duration::from_secs(5), || {
                Err(Error::invalid("disk gone"))
            });
        assert!(polled, "the waiter did not poll");
        assert!(matches!(waited, Err(Error::Poisoned)), "{waited:?}");
        assert!(
            matches!(synced, Err(Error::InvalidArgument(_))),
            "{synced:?}"
        );
    }
}
