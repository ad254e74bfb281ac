//! Writers paced by the commit (see the design's "Writers paced by the commit").
//!
//! While a memtable is frozen and the committer applies it, writers fill the active
//! one. Unpaced, a writer faster than the commit fills it in part of the commit's time
//! and then waits for all the rest: at 10M pairs up to a second per memtable, the
//! longest write latency by far. Paced, a writer waits a little whenever the active
//! memtable runs ahead of the commit ([`CommitPace::limit`]), so it fills up about when
//! the commit ends, and many writes wait a millisecond where one waited a second. It
//! is on by default ([`Builder::pace_writes`](crate::Builder::pace_writes) turns it
//! off): measured, a paced load of 10M pairs ran at the same rate, with a sixth of the
//! unpaced p99.9 latency and about twice its median.
//!
//! Pacing starts only once writers have had to wait during a commit (they outrun the
//! committer), and stops after a commit during which none waited: a burst of writes
//! that the two memtables can hold (a load of 1M pairs) is taken at full speed.
//!
//! The commit's progress is the share of the frozen memtable's versions applied, slice
//! by slice (running on a little between slices, [`PACE_COAST`]), and then, for what
//! follows the last slice (the syncs, the manifest, the WAL's removal: 40–230 ms at 10M
//! pairs), the time since as a share of what that part took in the last commits. Both
//! are weighed by how the last commits' time divided between them.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How far the active memtable may run ahead of the commit at the commit's start: a
/// writer waits while the active one is fuller (as a share of its budget) than the
/// commit's progress plus this share of what is left of it, so the lead closes as the
/// commit ends and the active memtable fills up about when the commit is done.
pub(crate) const PACE_LEAD: f64 = 0.125;

/// How long a paced writer waits before it looks at the commit's progress again (a
/// slice of the commit takes about 1–3 ms at 10M pairs).
pub(crate) const PACE_POLL: Duration = Duration::from_millis(1);

/// How far past the versions applied so far a commit's progress may run between two of
/// its steps (as a share of its versions). Some steps take long: a slice that runs a
/// GC pass of the space took 70–150 ms at 10M pairs (a walk of every extent, the
/// relocation and a sync of the data file), and a writer paced by the versions applied
/// waited for all of it at once, the load's longest waits after its stalls. The
/// progress a writer is paced by now goes on at [`PACE_RATE`] times the commit's rate
/// so far meanwhile, up to this far ahead, and never goes back: a writer keeps writing
/// through such a step at about the rate the commit goes, and waits in short steps.
pub(crate) const PACE_COAST: f64 = 0.1;

/// How much faster than the commit's average rate so far its progress runs on between
/// steps ([`PACE_COAST`]): the steps between GC passes run faster than the average,
/// which counts the passes, and the writer should not fall behind them.
pub(crate) const PACE_RATE: f64 = 1.2;

/// The fill (share of its budget, 0 to 1) the active memtable may have while the
/// commit it waits on has made `progress` (0 to 1).
pub(crate) fn limit(progress: f64) -> f64 {
    let progress = progress.clamp(0.0, 1.0);
    progress + PACE_LEAD * (1.0 - progress)
}

/// The progress of the commit running now, and what the last commits took.
#[derive(Debug, Default)]
pub(crate) struct CommitPace(Mutex<State>);

#[derive(Debug, Default)]
struct State {
    /// The commit running now: when it began and how many versions it applies.
    running: Option<(Instant, u64)>,
    /// Whether writers waited (for room, or paced) during the running commit...
    held: bool,
    /// ...and during the last one: if so, writers are paced.
    held_last: bool,
    /// Versions it has applied so far, and when it last applied some (or began).
    done: u64,
    stepped: Option<Instant>,
    /// The share of its versions writers are paced by, and when that was last worked
    /// out ([`PACE_COAST`]).
    paced: f64,
    paced_at: Option<Instant>,
    /// When its last version was applied.
    applied_at: Option<Instant>,
    /// Of the last commits (smoothed): the share of a commit's time spent before its
    /// last version was applied, and how long the rest took. `None` before the first.
    last: Option<(f64, Duration)>,
}

impl CommitPace {
    /// A commit of `total` versions begins.
    pub(crate) fn begin(&self, total: u64, now: Instant) {
        let mut s = self.0.lock();
        s.running = Some((now, total));
        s.done = 0;
        s.stepped = Some(now);
        (s.paced, s.paced_at) = (0.0, Some(now));
        s.applied_at = None;
    }

    /// The commit applied `versions` more; at the last of them, what follows begins.
    pub(crate) fn applied(&self, versions: u64, now: Instant) {
        let mut s = self.0.lock();
        s.done += versions;
        s.stepped = Some(now);
        if s.running.is_some_and(|(_, total)| s.done >= total) {
            s.mark_applied(now);
        }
    }

    /// Every version is applied (if `applied` has not seen the last of them: equal
    /// versions of a key are applied as one).
    pub(crate) fn all_applied(&self, now: Instant) {
        self.0.lock().mark_applied(now);
    }

    /// A writer waited for the commit (for room, or paced).
    pub(crate) fn held(&self) {
        self.0.lock().held = true;
    }

    /// The commit is done: what its parts took is remembered for the next, and
    /// whether writers had to wait.
    pub(crate) fn end(&self, now: Instant) {
        let mut s = self.0.lock();
        s.held_last = std::mem::take(&mut s.held);
        let Some((began, _)) = s.running.take() else {
            return;
        };
        let applied_at = s.applied_at.unwrap_or(now);
        let whole = now.saturating_duration_since(began).as_secs_f64();
        let rest = now.saturating_duration_since(applied_at);
        let share = if whole > 0.0 {
            1.0 - rest.as_secs_f64() / whole
        } else {
            1.0
        };
        // Halfway between the last estimate and this commit: one slow sync does not
        // make the next commit's writers run ahead or wait long.
        s.last = Some(match s.last {
            Some((sh, r)) => ((sh + share) / 2.0, (r + rest) / 2),
            None => (share, rest),
        });
    }

    /// The fill (share of its budget) the active memtable may have at `now` while a
    /// memtable is frozen: [`limit`] of the commit's progress if writers are paced,
    /// else 1.
    pub(crate) fn limit(&self, now: Instant) -> f64 {
        let mut s = self.0.lock();
        if !s.held_last {
            return 1.0;
        }
        limit(s.progress(now))
    }

    #[cfg(test)]
    fn progress(&self, now: Instant) -> f64 {
        self.0.lock().progress(now)
    }
}

impl State {
    /// The share of the running commit's versions (which began at `began`, `total` of
    /// them) that writers are paced by at `now`: from the share applied or the last
    /// value, whichever is more, on (since the last step) at [`PACE_RATE`] times the
    /// rate of the steps so far, up to [`PACE_COAST`] ahead of the share applied; never
    /// less than before ([`PACE_COAST`] says why).
    fn paced(&mut self, began: Instant, total: u64, now: Instant) -> f64 {
        let done = (self.done as f64 / total as f64).min(1.0);
        let rate = match self.stepped {
            Some(at) if at > began && done > 0.0 => {
                PACE_RATE * done / at.duration_since(began).as_secs_f64()
            }
            _ => 0.0,
        };
        // It runs on only since the last step (the rate is that step's).
        let since = match self.paced_at.max(self.stepped) {
            Some(at) => now.saturating_duration_since(at).as_secs_f64(),
            None => 0.0,
        };
        let on = (self.paced.max(done) + rate * since).min(done + PACE_COAST);
        self.paced = on.min(1.0).max(self.paced);
        self.paced_at = Some(now);
        self.paced
    }

    /// The running commit's last version is applied now, unless marked before.
    fn mark_applied(&mut self, now: Instant) {
        if self.running.is_some() && self.applied_at.is_none() {
            self.applied_at = Some(now);
        }
    }

    /// The running commit's progress at `now`, from 0 to 1 (0 if none has begun).
    fn progress(&mut self, now: Instant) -> f64 {
        let Some((began, total)) = self.running else {
            return 0.0;
        };
        let applied = if total == 0 || self.applied_at.is_some() {
            1.0
        } else {
            self.paced(began, total, now)
        };
        let Some((share, rest)) = self.last else {
            // No commit measured yet: the versions alone.
            return applied;
        };
        let after = match self.applied_at {
            Some(at) if !rest.is_zero() => {
                let since = now.saturating_duration_since(at).as_secs_f64();
                (since / rest.as_secs_f64()).min(1.0)
            }
            Some(_) => 1.0,
            None => 0.0,
        };
        share * applied + (1.0 - share) * after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMTABLE: usize = 64 << 10;

    /// The active memtable's fill and the number of frozen ones.
    fn tables(db: &crate::Db) -> (f64, usize) {
        let t = db.inner.tables.read();
        (t.active.fill(MEMTABLE), t.frozen.len())
    }

    /// Writes `batches` batches of 8 pairs (about 2% of [`MEMTABLE`] each), keys
    /// starting with `prefix`.
    fn write(db: &crate::Db, prefix: &str, batches: u32) {
        let ks = db.default_keyspace();
        for b in 0..batches {
            let mut batch = crate::WriteBatch::new();
            for i in 0..8 {
                let key = format!("{prefix}{b:05}-{i}");
                batch.put(&ks, key.as_bytes(), &[b as u8; 100]).unwrap();
            }
            db.write(batch).unwrap();
        }
    }

    /// A database of [`MEMTABLE`] memtables, pacing writers as `pace` says (`None`:
    /// the builder's default), whose writers waited during the last commit, as if they
    /// outran it.
    fn outrun(dir: &std::path::Path, pace: Option<bool>) -> crate::Db {
        let mut builder = crate::Db::builder(dir).memtable_size(MEMTABLE);
        if let Some(pace) = pace {
            builder = builder.pace_writes(pace);
        }
        let db = builder.open().unwrap();
        db.inner.pace.held();
        db.inner.pace.end(Instant::now());
        db
    }

    /// Waits up to 30 s for `cond`.
    fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let t0 = Instant::now();
        while !cond() {
            assert!(t0.elapsed() < Duration::from_secs(30), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_paced_writer_waits_for_the_commit_before_the_active_memtable_fills() {
        // Pacing is the default.
        for (pace, paced) in [(None, true), (Some(true), true), (Some(false), false)] {
            let dir = tempfile::tempdir().unwrap();
            let db = outrun(dir.path(), pace);
            // The committer cannot start the next commit: its progress stays 0.
            let holding = db.inner.applying.lock();
            std::thread::scope(|scope| {
                let w = scope.spawn(|| write(&db, "key", 400));
                wait_for("a memtable frozen", || tables(&db).1 == 1);
                wait_for("the writer at the lead", || {
                    tables(&db).0 >= PACE_LEAD - 0.05
                });
                // Time to fill the memtable many times over, were the writer not held.
                std::thread::sleep(Duration::from_millis(300));
                let (fill, frozen) = tables(&db);
                assert_eq!(frozen, 1);
                if paced {
                    // One batch may pass the lead: the check comes before the write.
                    assert!(
                        fill <= PACE_LEAD + 0.05,
                        "paced, the active memtable is {fill} full"
                    );
                } else {
                    wait_for("the unpaced writer filling the memtable", || {
                        tables(&db).0 >= 1.0
                    });
                }
                drop(holding);
                w.join().unwrap();
            });
            let s = db.stats();
            if paced {
                assert!(s.write_delays >= 1, "{s:?}");
            } else {
                assert_eq!((s.write_delays, s.write_delay_micros), (0, 0), "{s:?}");
                assert!(s.write_stalls >= 1, "{s:?}");
            }
            for b in [0u32, 199, 399] {
                let got = db.get(format!("key{b:05}-7").as_bytes()).unwrap();
                assert_eq!(got.as_deref(), Some(&[b as u8; 100][..]));
            }
            db.close().unwrap();
        }
    }

    /// Many writers, paced from the start, with the committer running freely: every
    /// write lands, and no writer waits for ever.
    #[test]
    fn paced_writers_on_several_threads_all_finish_and_every_write_lands() {
        let dir = tempfile::tempdir().unwrap();
        let db = outrun(dir.path(), Some(true));
        std::thread::scope(|scope| {
            for t in 0..4 {
                let db = &db;
                scope.spawn(move || write(db, &format!("t{t}-"), 300));
            }
        });
        db.flush().unwrap();
        let s = db.stats();
        assert!(s.commits >= 10, "{s:?}");
        for t in 0..4u8 {
            let n = db.prefix(format!("t{t}-").as_bytes()).count();
            assert_eq!(n, 300 * 8);
        }
        db.close().unwrap();
    }

    #[test]
    fn the_lead_of_the_active_memtable_closes_as_the_commit_ends() {
        assert_eq!(limit(0.0), PACE_LEAD);
        assert_eq!(limit(0.5), 0.5 + PACE_LEAD / 2.0);
        assert_eq!(limit(1.0), 1.0);
        assert_eq!(limit(1.5), 1.0, "progress past 1 counts as 1");
        assert_eq!(limit(-1.0), PACE_LEAD);
    }

    #[test]
    fn writers_are_paced_only_after_a_commit_they_waited_for() {
        let p = CommitPace::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // A first commit: nobody has waited, so a burst fills the memtable freely.
        assert_eq!(p.limit(t0), 1.0);
        p.begin(100, t0);
        assert_eq!(p.limit(t0), 1.0);
        p.held();
        assert_eq!(p.limit(t0), 1.0, "pacing starts with the next commit");
        p.end(t0 + ms(10));
        // Writers waited: the next frozen memtable paces them, before its commit
        // begins too.
        assert_eq!(p.limit(t0 + ms(10)), PACE_LEAD);
        p.begin(100, t0 + ms(20));
        assert_eq!(p.limit(t0 + ms(20)), PACE_LEAD);
        p.applied(50, t0 + ms(25));
        assert!(p.limit(t0 + ms(25)) > PACE_LEAD);
        p.held();
        p.end(t0 + ms(30));
        // Held while paced: still paced.
        p.begin(100, t0 + ms(40));
        assert_eq!(p.limit(t0 + ms(40)), PACE_LEAD);
        p.end(t0 + ms(50));
        // Nobody waited during that one: writers run free again.
        p.begin(100, t0 + ms(60));
        assert_eq!(p.limit(t0 + ms(60)), 1.0);
    }

    #[test]
    fn progress_counts_versions_then_the_time_after_them_as_the_last_commit_took() {
        let p = CommitPace::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(p.progress(t0), 0.0, "no commit running");
        // The first commit: versions alone.
        p.begin(1000, t0);
        p.applied(250, t0 + ms(10));
        assert_eq!(p.progress(t0 + ms(10)), 0.25);
        p.applied(750, t0 + ms(80));
        assert_eq!(p.progress(t0 + ms(80)), 1.0);
        // 80 ms applying, 20 ms after: 0.8 of the time, 20 ms.
        p.end(t0 + ms(100));
        assert_eq!(p.progress(t0 + ms(100)), 0.0, "no commit running");

        let t1 = t0 + ms(200);
        p.begin(400, t1);
        p.applied(200, t1 + ms(40));
        let half = p.progress(t1 + ms(40));
        assert!((half - 0.4).abs() < 1e-9, "{half}");
        p.applied(200, t1 + ms(80));
        let applied = p.progress(t1 + ms(80));
        assert!((applied - 0.8).abs() < 1e-9, "{applied}");
        // Halfway through the 20 ms the rest took last time.
        let later = p.progress(t1 + ms(90));
        assert!((later - 0.9).abs() < 1e-9, "{later}");
        assert_eq!(p.progress(t1 + ms(500)), 1.0, "the rest ran long");
        // This commit's rest took 60 ms over 140: the estimate moves halfway.
        p.end(t1 + ms(140));
        p.begin(10, t1 + ms(200));
        p.all_applied(t1 + ms(200));
        let share = (0.8 + (1.0 - 60.0 / 140.0)) / 2.0;
        let at = p.progress(t1 + ms(220));
        assert!((at - (share + (1.0 - share) * 0.5)).abs() < 1e-9, "{at}");
    }

    /// Between two steps of the commit, its progress goes on at a little more than the
    /// rate of the steps so far, up to [`PACE_COAST`] past what was applied, and never
    /// goes back.
    #[test]
    fn between_steps_progress_goes_on_at_the_commits_rate_and_never_back() {
        let p = CommitPace::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        p.begin(1000, t0);
        assert_eq!(p.progress(t0 + ms(50)), 0.0, "no rate before a first step");
        // A tenth in 100 ms: one a second, and on at 1.2 a second.
        p.applied(100, t0 + ms(100));
        assert_eq!(p.progress(t0 + ms(100)), 0.1);
        let on = p.progress(t0 + ms(120));
        assert!((on - (0.1 + 0.02 * PACE_RATE)).abs() < 1e-9, "{on}");
        let far = p.progress(t0 + ms(900));
        assert!((far - (0.1 + PACE_COAST)).abs() < 1e-9, "no further: {far}");
        // A step that applied less than it ran on to does not take it back...
        p.applied(50, t0 + ms(1_000));
        assert_eq!(p.progress(t0 + ms(1_000)), far);
        // ...one that applied more takes it there.
        p.applied(200, t0 + ms(1_010));
        assert_eq!(p.progress(t0 + ms(1_010)), 0.35);
        // Nearly done: never past the whole.
        p.applied(640, t0 + ms(1_100));
        assert_eq!(p.progress(t0 + ms(1_500)), 1.0);
    }

    #[test]
    fn equal_versions_applied_as_one_still_end_the_applying() {
        let p = CommitPace::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        p.begin(10, t0);
        p.applied(10, t0 + ms(50));
        p.end(t0 + ms(100));
        // Two versions were one: `applied` never sees the total.
        p.begin(10, t0 + ms(200));
        p.applied(9, t0 + ms(250));
        let before = p.progress(t0 + ms(250));
        p.all_applied(t0 + ms(260));
        let after = p.progress(t0 + ms(285));
        assert!(before < 0.5 && after > before, "{before} {after}");
        assert!((after - (0.5 + 0.5 * 0.5)).abs() < 1e-9, "{after}");
    }
}
