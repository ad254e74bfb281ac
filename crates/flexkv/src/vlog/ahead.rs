//! Reader threads for scans' read-ahead (WiscKey §3.3.1).
//!
//! A scan that meets separated values one after another plans the next ones into
//! [`RunRead`]s, hands each to the reader threads as a [`Job`] and goes on without
//! waiting. When it reaches a value it takes the job's result: it reads the job itself
//! if no thread has begun it (so a scan never waits on a queue behind busy threads),
//! and waits only for a read already under way. Scan and readers so share the cores
//! when the values are in the page cache (the threads take the farthest job, the scan
//! the nearest), and keep many reads in flight when they come from the device (the
//! threads take the nearest; see [`Readers::submit`]).
//!
//! Invariants:
//! - A job is read exactly once: whoever moves it from queued to reading reads it.
//! - A job that no scan holds any more (the scan ended, or dropped what it read ahead)
//!   is skipped by the threads: its `Arc` is the queue's alone.
//! - Threads spin briefly, then block, while there is nothing to do, and end once the
//!   [`Readers`] (owned by the database) is dropped and the queue is empty.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{slow, RunRead, ValueBytes};
use crate::Result;
use smallvec::SmallVec;

/// A read handed to the reader threads.
#[derive(Debug)]
pub(crate) struct Job {
    run: RunRead,
    /// [`QUEUED`], [`READING`] or [`DONE`]; moves only forward.
    phase: AtomicU8,
    /// One result per item of the run, there once the phase is [`DONE`]; each is taken
    /// out as the scan comes to it.
    got: Mutex<SmallVec<[Option<Result<ValueBytes>>; 1]>>,
    ready: Condvar,
    /// The read took longer than the page cache would ([`slow`]).
    slow: AtomicBool,
}

const QUEUED: u8 = 0;
const READING: u8 = 1;
const DONE: u8 = 2;

/// How long a scan spins on a read under way, and a thread on an empty queue, before
/// sleeping: a read from the page cache ends, and a scan hands the next jobs, within
/// microseconds, sooner than a sleeping thread is woken (and the wake-up costs the
/// waker a system call).
const SPIN: Duration = Duration::from_micros(50);

/// Spins until `done` holds or [`SPIN`] has passed; whether it holds.
fn spin_until(done: impl Fn() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        for _ in 0..64 {
            if done() {
                return true;
            }
            std::hint::spin_loop();
        }
        if t0.elapsed() > SPIN {
            return done();
        }
    }
}

impl Job {
    fn new(run: RunRead) -> Job {
        Job {
            run,
            phase: AtomicU8::new(QUEUED),
            got: Mutex::new(SmallVec::new()),
            ready: Condvar::new(),
            slow: AtomicBool::new(false),
        }
    }

    /// The values this job reads, in file order.
    pub(crate) fn run(&self) -> &RunRead {
        &self.run
    }

    /// Whether no one has begun the job.
    pub(crate) fn queued(&self) -> bool {
        self.phase.load(Ordering::Acquire) == QUEUED
    }

    /// Whether someone is reading the job now.
    pub(crate) fn under_way(&self) -> bool {
        self.phase.load(Ordering::Acquire) == READING
    }

    /// Reads the job unless someone has begun it; whether this call read it.
    pub(crate) fn read_if_queued(&self) -> bool {
        let mine = self.claim();
        if mine {
            self.read();
        }
        mine
    }

    /// Moves the job from queued to reading: whoever succeeds must read it.
    fn claim(&self) -> bool {
        self.phase
            .compare_exchange(QUEUED, READING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Reads the claimed job and wakes whoever waits for it.
    fn read(&self) {
        let t0 = Instant::now();
        let got = self.run.read().into_iter().map(Some).collect();
        let bytes = self.run.items().iter().map(|w| u64::from(w.ptr.len)).sum();
        self.slow
            .store(slow(t0.elapsed(), bytes), Ordering::Relaxed);
        let mut g = self.got.lock();
        *g = got;
        // Under the lock, so a waiter that saw the old phase is asleep before this wakes it.
        self.phase.store(DONE, Ordering::Release);
        drop(g);
        self.ready.notify_all();
    }

    /// The value of item `i` of the run (each item is taken once): read now if no
    /// thread has begun the job, waited for if one has. With it, whether the read
    /// waited on the device (the scan then keeps more reads in flight).
    pub(crate) fn take(&self, i: usize) -> (Result<ValueBytes>, bool) {
        self.read_if_queued();
        spin_until(|| self.phase.load(Ordering::Acquire) == DONE);
        let mut g = self.got.lock();
        while self.phase.load(Ordering::Acquire) != DONE {
            self.ready.wait(&mut g);
        }
        let got = g
            .get_mut(i)
            .and_then(Option::take)
            .unwrap_or_else(|| unreachable!("item {i} of a read-ahead taken twice"));
        (got, self.slow.load(Ordering::Relaxed))
    }
}

/// Which of a scan's jobs the threads take first (see [`Readers::submit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum First {
    Farthest,
    Nearest,
}

/// The reader threads, started on first use. Dropping this ends them once they finish
/// what they are reading.
#[derive(Debug)]
pub(crate) struct Readers {
    threads: usize,
    queue: Arc<Queue>,
    started: OnceLock<bool>,
}

/// The jobs waiting for a thread, nearest first.
#[derive(Debug, Default)]
struct Queue {
    jobs: Mutex<Waiting>,
    more: Condvar,
    /// Jobs have been queued since a thread last found the queue empty (read without
    /// the lock by a thread spinning before it sleeps).
    queued: AtomicBool,
    /// A thread is spinning on `queued` (one at a time).
    spinning: AtomicBool,
}

#[derive(Debug, Default)]
struct Waiting {
    jobs: VecDeque<Arc<Job>>,
    /// Set when the [`Readers`] is dropped: the threads end.
    closed: bool,
}

impl Waiting {
    /// Queues a scan's `jobs` (nearest first) for the threads, which take from the back.
    fn push(&mut self, jobs: &[Arc<Job>], first: First) {
        match first {
            First::Farthest => self.jobs.extend(jobs.iter().cloned()),
            First::Nearest => {
                for job in jobs {
                    self.jobs.push_front(Arc::clone(job));
                }
            }
        }
    }
}

impl Readers {
    /// Readers with `threads` threads (none: every scan reads its jobs itself).
    pub(crate) fn new(threads: usize) -> Readers {
        Readers {
            threads,
            queue: Arc::default(),
            started: OnceLock::new(),
        }
    }

    /// Queues `runs` (nearest first) for the threads and returns their jobs in the same
    /// order. If no thread could be started, the scan reads each job itself.
    ///
    /// The threads take the job at the back of the queue. `Farthest` puts the runs
    /// there, farthest last, for reads from the page cache: the scan reads the nearest
    /// itself and the two meet in the middle. `Nearest` puts them at the front in
    /// reverse, behind every job queued before, for reads from the device: the scan
    /// would only wait on its own read, so the threads had better read in the order
    /// the scan needs, and what lies past where a scan stops is left for last (and
    /// skipped once the scan is gone).
    pub(crate) fn submit(&self, runs: Vec<RunRead>, first: First) -> Vec<Arc<Job>> {
        let jobs: Vec<Arc<Job>> = runs
            .into_iter()
            .map(|run| Arc::new(Job::new(run)))
            .collect();
        if self.threads > 0 && *self.started.get_or_init(|| self.start()) {
            let mut w = self.queue.jobs.lock();
            w.push(&jobs, first);
            self.queue.queued.store(true, Ordering::Release);
            drop(w);
            for _ in 0..jobs.len().min(self.threads) {
                self.queue.more.notify_one();
            }
        }
        jobs
    }

    /// Starts the threads; false if not even one could be started.
    fn start(&self) -> bool {
        let mut started = 0;
        for i in 0..self.threads {
            let queue = Arc::clone(&self.queue);
            let spawned = std::thread::Builder::new()
                .name(format!("flexkv-read-{i}"))
                .spawn(move || work(&queue));
            started += usize::from(spawned.is_ok());
        }
        started > 0
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.queue.jobs.lock().closed = true;
        self.queue.more.notify_all();
    }
}

/// A reader thread: takes jobs until the [`Readers`] is dropped and the queue is empty.
fn work(queue: &Queue) {
    loop {
        let job = {
            let mut w = queue.jobs.lock();
            let mut spun = false;
            loop {
                // The back: see `Readers::submit` for what lies there.
                if let Some(job) = w.jobs.pop_back() {
                    break job;
                }
                if w.closed {
                    return;
                }
                queue.queued.store(false, Ordering::Relaxed);
                // A scan hands the next jobs within microseconds; being woken from a
                // sleep takes longer, and costs the scan the wake-up call. One idle
                // thread at a time spins for that; more would only take the cores
                // from the scan and from the threads that are reading.
                if spun || queue.spinning.swap(true, Ordering::Acquire) {
                    queue.more.wait(&mut w);
                } else {
                    spun = true;
                    drop(w);
                    spin_until(|| queue.queued.load(Ordering::Acquire));
                    queue.spinning.store(false, Ordering::Release);
                    w = queue.jobs.lock();
                }
            }
        };
        // Held by the queue alone: the scan has moved on or ended.
        if Arc::strong_count(&job) > 1 && job.claim() {
            job.read();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{FaultVfs, Vfs};
    use crate::vlog::{NewValue, Pointer, ValueLog, Wanted};
    use std::path::Path;

    /// A value log with `n` values of 1 KiB back to back; their pointers.
    fn log(vfs: &FaultVfs, n: usize) -> (ValueLog, Vec<Pointer>) {
        let dir = Path::new("/db");
        vfs.create_dir_all(dir).unwrap();
        let log = ValueLog::open(vfs.shared(), dir, 1 << 20).unwrap();
        let keys: Vec<String> = (0..n).map(|i| format!("key{i}")).collect();
        let values: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; 1024]).collect();
        let new: Vec<NewValue> = (0..n)
            .map(|i| NewValue {
                ks: 0,
                key: keys[i].as_bytes(),
                seq: i as u64,
                value: &values[i],
            })
            .collect();
        let ptrs = log.append(&new).unwrap();
        (log, ptrs)
    }

    fn wanted(ptrs: &[Pointer], i: usize, order: u64) -> Wanted {
        Wanted {
            ptr: ptrs[i],
            ks: 0,
            key: format!("key{i}").into_bytes().into(),
            order,
        }
    }

    /// Back-to-back records become one read; reads come in the order the scan needs
    /// them; every value reads back right whoever reads it.
    #[test]
    fn planned_reads_group_neighbours_and_keep_the_scans_order() {
        let vfs = FaultVfs::new(1);
        let (log, ptrs) = log(&vfs, 8);
        // The scan needs 6, 7, then 0, 1, 2, then 4 (3 and 5 it does not want).
        let want = [(6, 0), (7, 1), (0, 2), (1, 3), (2, 4), (4, 5)]
            .into_iter()
            .map(|(i, order)| wanted(&ptrs, i, order))
            .collect();
        let runs = log.plan_reads(want, false);
        let items: Vec<Vec<u64>> = runs
            .iter()
            .map(|r| r.items().iter().map(|w| w.order).collect())
            .collect();
        assert_eq!(items, vec![vec![0, 1], vec![2, 3, 4], vec![5]]);
        // No threads: the scan reads each job itself, one read call per run of
        // neighbours (two for a lone record: its header, then its value).
        let readers = Readers::new(0);
        let before = vfs.op_count();
        for job in readers.submit(runs, First::Farthest) {
            for (i, w) in job.run().items().iter().enumerate() {
                let (got, _) = job.take(i);
                let n = ptrs.iter().position(|p| *p == w.ptr).unwrap() as u8;
                assert_eq!(got.unwrap().into_vec(), vec![n; 1024], "order {}", w.order);
            }
        }
        assert_eq!(vfs.op_count() - before, 1 + 1 + 2);
    }

    /// A thread skips a job that no scan holds any more, and reads one that a scan
    /// holds exactly once.
    #[test]
    fn a_job_no_scan_holds_is_skipped_and_a_held_one_read_once() {
        let vfs = FaultVfs::new(2);
        let (log, ptrs) = log(&vfs, 4);
        let runs = log.plan_reads(vec![wanted(&ptrs, 0, 0), wanted(&ptrs, 2, 1)], false);
        let jobs: Vec<Arc<Job>> = runs.into_iter().map(|r| Arc::new(Job::new(r))).collect();
        let queue = Queue::default();
        queue.jobs.lock().jobs.extend(jobs.iter().cloned());
        queue.jobs.lock().closed = true;
        let [held, dropped]: [Arc<Job>; 2] = jobs.try_into().unwrap();
        drop(dropped);
        let before = vfs.op_count();
        work(&queue); // drains the queue, then ends: it is closed
        assert_eq!(
            vfs.op_count() - before,
            2,
            "one lone record read, one skipped"
        );
        assert_eq!(held.phase.load(Ordering::Acquire), DONE);
        assert!(!held.claim(), "a read job is never claimed again");
        assert_eq!(held.take(0).0.unwrap().into_vec(), vec![0u8; 1024]);
        assert_eq!(
            vfs.op_count() - before,
            2,
            "taking a read job reads nothing"
        );
    }

    /// From the page cache the threads take a scan's farthest job first (the scan reads
    /// the nearest); from the device the nearest, jobs queued earlier before later ones.
    #[test]
    fn threads_take_the_farthest_or_the_nearest_job_first() {
        let vfs = FaultVfs::new(4);
        let (log, ptrs) = log(&vfs, 8);
        // Two batches of two jobs each, far apart in the file so none merge.
        let batch = |a: usize, b: usize, order: u64| -> Vec<Arc<Job>> {
            log.plan_reads(
                vec![wanted(&ptrs, a, order), wanted(&ptrs, b, order + 1)],
                false,
            )
            .into_iter()
            .map(|r| Arc::new(Job::new(r)))
            .collect()
        };
        let taken = |first: First| -> Vec<u64> {
            let mut w = Waiting::default();
            w.push(&batch(0, 2, 0), first);
            w.push(&batch(4, 6, 2), first);
            std::iter::from_fn(|| w.jobs.pop_back())
                .map(|j| j.run().items()[0].order)
                .collect()
        };
        assert_eq!(taken(First::Farthest), vec![3, 2, 1, 0]);
        assert_eq!(taken(First::Nearest), vec![0, 1, 2, 3]);
    }

    /// A scan that takes a job a thread is reading waits for that read, and both see
    /// one read.
    #[test]
    fn a_scan_waits_for_a_read_under_way() {
        let vfs = FaultVfs::new(3);
        let (log, ptrs) = log(&vfs, 2);
        let run = log.plan_reads(vec![wanted(&ptrs, 1, 0)], false).remove(0);
        let job = Arc::new(Job::new(run));
        assert!(job.claim()); // as a thread would
        let reader = {
            let job = Arc::clone(&job);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50)); // past the spin: a sleep
                job.read();
            })
        };
        let before = vfs.op_count();
        assert_eq!(job.take(0).0.unwrap().into_vec(), vec![1u8; 1024]);
        reader.join().unwrap();
        assert_eq!(vfs.op_count() - before, 2, "read once, by the thread");
    }
}
