//! The sorted keyspace through the `Db`: commits, version history for snapshots,
//! tombstone removal, crash points inside commits, the write lock held in slices, and
//! recovery of the index.
#![allow(clippy::unwrap_used)]

mod common;
use common::{named_value, open_churning, small_space};

use std::time::Instant;

use flexkv::io::{CrashMode, FaultVfs};
use flexkv::{Db, Durability};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const DIR: &str = "/db";

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn val(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("{i}:{round}:").into_bytes();
    v.resize(if i.is_multiple_of(7) { 300 } else { 40 }, b'.');
    v
}

/// Writes `key(i)` = `val(i, round)` for each of `keys` as one `Buffered` batch.
fn put_buffered(db: &Db, keys: &[u32], round: u32) {
    let ks = db.default_keyspace();
    let mut b = flexkv::WriteBatch::new();
    b.durability(Durability::Buffered);
    for &i in keys {
        b.put(&ks, &key(i), &val(i, round)).unwrap();
    }
    db.write(b).unwrap();
}

/// A database at `/db` on `vfs` with small segments that caches no interval: every
/// read of one goes to the space.
fn open_uncached(vfs: &FaultVfs) -> Db {
    uncached(vfs).open().unwrap()
}

/// The builder [`open_uncached`] opens with.
fn uncached(vfs: &FaultVfs) -> flexkv::Builder {
    Db::builder(DIR)
        .vfs(vfs.shared())
        .cache_bytes(0)
        .space_options(small_space())
}

/// [`open_uncached`] with the committer's idle sweep off: the tests of its rewrites
/// for the reads need the layout the writes left, which the sweep would tidy while
/// they read.
fn open_unswept(vfs: &FaultVfs) -> Db {
    uncached(vfs).idle_sweep(false).open().unwrap()
}

/// Regression for the bug found in the authors' code: after a crash during a commit,
/// the WALs of two memtables were replayed in the wrong order and a read returned an
/// older acknowledged value. Every put here fills a memtable, so each one freezes the
/// last and the committer is always busy; the disk dies at every operation in turn.
#[test]
fn two_wals_replay_in_order_after_a_crash_during_a_commit() {
    let open = |vfs: &FaultVfs| {
        Db::builder(DIR)
            .vfs(vfs.shared())
            .value_threshold(8 << 10)
            .memtable_size(4 << 10)
            .space_options(small_space())
            .open()
    };
    let big = |n: u8| vec![n; 4200]; // inline, and over the memtable size by itself
    let run = |vfs: &FaultVfs, fail_at: Option<u64>| -> (Option<u8>, u64) {
        let db = open(vfs).unwrap();
        let start = vfs.op_count();
        if let Some(n) = fail_at {
            vfs.fail_from(start + n);
        }
        let mut acked = None;
        for n in 1..=6u8 {
            if db.put(b"k", &big(n)).is_err() {
                break;
            }
            acked = Some(n);
        }
        drop(db);
        (acked, vfs.op_count() - start)
    };
    let (acked, total) = run(&FaultVfs::new(0), None);
    assert_eq!(acked, Some(6));
    for point in 1..=total + 2 {
        let vfs = FaultVfs::new(point);
        let (acked, _) = run(&vfs, Some(point));
        let mode = vfs.crash(CrashMode::DropUnsynced);
        vfs.clear_faults();
        let db = open(&vfs).unwrap_or_else(|e| panic!("point {point} {mode:?}: {e}"));
        let got = db.get(b"k").unwrap().map(|v| v[0]);
        assert!(
            got >= acked,
            "point {point} {mode:?}: read {got:?}, but {acked:?} was acknowledged"
        );
        if let Some(n) = got {
            assert_eq!(db.get(b"k").unwrap().unwrap(), big(n), "point {point}");
        }
        db.check().unwrap();
    }
}

/// A fragmented interval is rewritten whole: its unchanged records are collapsed and
/// inserted again. Their only copy is the space's (their WAL is gone), so the two must
/// become durable together; a FlexSpace GC pass between them syncs, and a crash after
/// it lost those records. Here the first rounds add a key to each interval and the
/// later ones overwrite a quarter of the keys, so intervals fragment and are rewritten
/// at every commit, and the garbage makes the space collect in the middle of commits.
/// The disk dies at every fourth operation of the last commit, and the crash keeps
/// only what was synced.
#[test]
fn a_crash_inside_a_commit_that_rewrites_intervals_loses_no_committed_record() {
    const INTERVALS: u32 = 300;
    const ROUNDS: u32 = 10;
    // No cache: a commit reads each interval from the space, which is where an
    // interval is found fragmented. Nor a sweep between the rounds, which would leave
    // nothing fragmented.
    let open = |vfs: &FaultVfs| uncached(vfs).idle_sweep(false).open();
    // Round `r` writes the keys `i * 16 + r % 4`; from round 4 on, over older ones.
    let k = |i: u32, r: u32| key(i * 16 + r % 4);
    let v = |i: u32, r: u32| {
        let mut v = val(i, r);
        v.resize(200, b'-');
        v
    };
    // Every round but the last committed, and the last one's puts made durable.
    let build = |vfs: &FaultVfs| {
        let db = open(vfs).unwrap();
        for r in 0..=ROUNDS {
            let mut b = flexkv::WriteBatch::new();
            b.durability(Durability::Buffered);
            let ks = db.default_keyspace();
            for i in 0..INTERVALS {
                b.put(&ks, &k(i, r), &v(i, r)).unwrap();
            }
            db.write(b).unwrap();
            if r < ROUNDS {
                db.flush().unwrap();
            }
        }
        db.sync().unwrap();
        db
    };
    let vfs = FaultVfs::new(0);
    let db = build(&vfs);
    let defrags = db.stats().defrags;
    assert!(defrags >= 100, "intervals were rewritten: {defrags}");
    let start = vfs.op_count();
    db.flush().unwrap();
    let total = vfs.op_count() - start;
    drop(db);
    for point in (1..=total).step_by(4) {
        let vfs = FaultVfs::new(point);
        let db = build(&vfs);
        vfs.fail_from(point);
        let _ = db.flush();
        drop(db);
        vfs.crash(CrashMode::DropUnsynced);
        vfs.clear_faults();
        let db = open(&vfs).unwrap_or_else(|e| panic!("point {point}: {e}"));
        for r in ROUNDS - 3..=ROUNDS {
            for i in 0..INTERVALS {
                assert_eq!(
                    db.get(&k(i, r)).unwrap(),
                    Some(v(i, r)),
                    "point {point} of {total}: key {i} of round {r}"
                );
            }
        }
        db.check().unwrap();
    }
}

/// Commits whose slices read every interval from the space: nothing is cached, and
/// each round overwrites keys with values of the same length (an interval changed but
/// not resized), deletes some (intervals shrink and merge) and adds some (they split),
/// all across the slices' boundaries. The keyspace must equal the model after every
/// commit and after a reopen.
#[test]
fn commits_over_uncached_intervals_keep_the_keyspace_as_the_model() {
    let vfs = FaultVfs::new(23);
    let open = || open_uncached(&vfs);
    let v = |i: u32, round: u32| {
        let mut v = format!("{i}:{round}:").into_bytes();
        v.resize(64, b'=');
        v
    };
    let db = open();
    let mut rng = SmallRng::seed_from_u64(23);
    let mut model = std::collections::BTreeMap::new();
    for i in 0..8_000u32 {
        db.put(&key(i * 4), &v(i, 0)).unwrap();
        model.insert(key(i * 4), v(i, 0));
    }
    db.flush().unwrap();
    let expect = |db: &Db, model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>, when: &str| {
        let got: Vec<(Vec<u8>, Vec<u8>)> = db.iter().map(|r| r.unwrap()).collect();
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(got.len(), want.len(), "{when}");
        assert!(got == want, "{when}: the keyspace differs from the model");
    };
    for round in 1..=8u32 {
        let mut b = flexkv::WriteBatch::new();
        let ks = db.default_keyspace();
        for _ in 0..3_000 {
            let i = rng.random_range(0..32_000u32);
            match rng.random_range(0..4) {
                0 => {
                    b.delete(&ks, &key(i)).unwrap();
                    model.remove(&key(i));
                }
                1 => {
                    b.put(&ks, &key(i), &v(i, round)).unwrap();
                    model.insert(key(i), v(i, round));
                }
                _ => {
                    // Over a key that is there, with a value of the same length.
                    let k = key(i - i % 4);
                    b.put(&ks, &k, &v(i - i % 4, round)).unwrap();
                    model.insert(k, v(i - i % 4, round));
                }
            }
        }
        db.write(b).unwrap();
        db.flush().unwrap();
        expect(&db, &model, &format!("round {round}"));
    }
    db.check().unwrap();
    drop(db);
    let db = open();
    expect(&db, &model, "after reopening");
    db.check().unwrap();
}

/// A point read the cache will not keep reads its interval only up to the record it
/// looks for. Intervals here are spread over many extents (keys written in shuffled
/// rounds, small segments, records of up to 700 bytes, some across a segment's end),
/// and every read misses the cache (it holds nothing): each key present or absent is
/// found as the model says, on a first miss (the partial read) and a second (which
/// reads the whole interval).
#[test]
fn point_reads_that_miss_find_what_the_model_holds() {
    let vfs = FaultVfs::new(17);
    let open = || open_uncached(&vfs);
    let db = open();
    let model = write_scattered(&db, 17);
    drop(db);
    let db = open();
    for pass in 0..2 {
        read_all_as_modelled(&db, &model, &format!("pass {pass}"));
    }
    assert!(db.stats().cache_misses > 20_000);
    db.check().unwrap();
}

/// Every key of `model` read back, point by point and by a forward and a backward scan.
fn read_back(db: &Db, model: &std::collections::BTreeMap<u32, u32>, when: &str) {
    for (&i, &round) in model {
        assert_eq!(
            db.get(&key(i)).unwrap(),
            Some(val(i, round)),
            "{when}: key {i}"
        );
    }
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(&i, &r)| (key(i), val(i, r))).collect();
    let got: Vec<_> = db.iter().map(|r| r.unwrap()).collect();
    assert!(got == want, "{when}: a forward scan differs");
    let back: Vec<_> = db.iter().rev().map(|r| r.unwrap()).collect();
    assert!(
        back.into_iter().rev().eq(want),
        "{when}: a backward scan differs"
    );
}

/// Reads of intervals from the space start at the spots the index keeps for them
/// (with no search of the FlexTree), or for intervals in pieces at the tree leaf their
/// hints name, and see every change to them: the shortcuts are taken after large
/// commits (and at open) and by reads, and forgotten for each interval a commit
/// changes. Overwrites with values of the same length change an interval's bytes but
/// not its size, so a spot kept by mistake would read the old values. Small commits
/// (below the size that takes every shortcut afresh) and large ones alternate; `check`
/// compares every shortcut with the space.
#[test]
fn reads_at_spots_and_hints_see_every_change_to_their_intervals() {
    let vfs = FaultVfs::new(41);
    let (db, mut model) = loaded_uncached(&vfs);
    read_back(&db, &model, "loaded");
    let mut spots = db.stats().spot_reads;
    assert!(spots > 3_000, "{spots} reads at spots");
    let mut hints = db.stats().hint_reads;
    let mut rng = SmallRng::seed_from_u64(41);
    for round in 1..=8 {
        commit_round(&db, &mut model, &mut rng, round);
        read_back(&db, &model, &format!("round {round}"));
        db.check().unwrap();
        let now = db.stats().spot_reads;
        assert!(now > spots, "round {round}: no read at a spot");
        spots = now;
        // The intervals the rounds changed in place lie in pieces: hints reach those.
        let now = db.stats().hint_reads;
        assert!(now > hints, "round {round}: no read by a hint");
        hints = now;
    }
    drop(db);
    read_back(&open_uncached(&vfs), &model, "reopened at the end");
}

/// A commit reads the intervals it changes that the cache does not hold by the
/// shortcuts their slots keep, as point reads do, with no search of the FlexTree for
/// each. No reads come between the commits here, so every read by a shortcut is a
/// commit's; afterwards every key reads as the model says. (That a commit forgets the
/// shortcuts of the intervals it changes is the test above's.)
#[test]
fn commits_read_the_intervals_they_change_by_their_shortcuts() {
    let vfs = FaultVfs::new(43);
    let (db, mut model) = loaded_uncached(&vfs);
    let by_shortcut = |db: &Db| {
        let s = db.stats();
        s.spot_reads + s.hint_reads
    };
    let mut rng = SmallRng::seed_from_u64(43);
    for round in 1..=6 {
        let before = by_shortcut(&db);
        let n = commit_round(&db, &mut model, &mut rng, round);
        let read = by_shortcut(&db) - before;
        assert!(
            read >= (n as u64).min(100) / 2,
            "round {round}: the commit read {read} intervals by a shortcut"
        );
    }
    read_back(&db, &model, "after the commits");
    db.check().unwrap();
}

/// A database on `vfs` as `open_uncached` opens it, holding keys 0..6,000 at round 0
/// (committed), and its model: key → round.
fn loaded_uncached(vfs: &FaultVfs) -> (Db, std::collections::BTreeMap<u32, u32>) {
    let db = open_uncached(vfs);
    let all: Vec<u32> = (0..6_000).collect();
    put_buffered(&db, &all, 0);
    db.flush().unwrap();
    (db, all.iter().map(|&i| (i, 0)).collect())
}

/// Writes `round`'s values of random keys below 6,000 in one batch and commits them,
/// in `model` too: odd rounds change 12 keys (a commit below the size that takes every
/// shortcut afresh), even ones 2,000. Returns how many keys it wrote.
fn commit_round(
    db: &Db,
    model: &mut std::collections::BTreeMap<u32, u32>,
    rng: &mut SmallRng,
    round: u32,
) -> usize {
    let n = if round % 2 == 1 { 12 } else { 2_000 };
    let keys: Vec<u32> = (0..n).map(|_| rng.random_range(0..6_000)).collect();
    put_buffered(db, &keys, round);
    model.extend(keys.iter().map(|&i| (i, round)));
    db.flush().unwrap();
    n
}

/// Writes keys 0..12,000 (every other one) to `db` in four shuffled rounds with
/// commits every 500 puts and values of up to 700 bytes, so that intervals are spread
/// over many extents; returns the model.
fn write_scattered(db: &Db, seed: u64) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = std::collections::BTreeMap::new();
    for round in 0..4u32 {
        let mut keys: Vec<u32> = (0..1_500).map(|i| i * 8 + round * 2).collect();
        for i in (1..keys.len()).rev() {
            keys.swap(i, rng.random_range(0..=i));
        }
        for (n, &i) in keys.iter().enumerate() {
            let mut v = val(i, round);
            v.resize(rng.random_range(1..700), b'~');
            db.put(&key(i), &v).unwrap();
            model.insert(key(i), v);
            if n % 500 == 499 {
                db.flush().unwrap();
            }
        }
    }
    db.flush().unwrap();
    model
}

/// Point reads of keys 0..=12,000 and two outside them, each as `model` says.
fn read_all_as_modelled(db: &Db, model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>, when: &str) {
    for i in 0..12_001u32 {
        assert_eq!(
            db.get(&key(i)).unwrap().as_deref(),
            model.get(&key(i)).map(|v| v.as_slice()),
            "{when}, key {i}"
        );
    }
    assert_eq!(db.get(b"").unwrap(), None);
    assert_eq!(db.get(b"zzz").unwrap(), None);
}

/// [`read_all_as_modelled`], each point read costing about one file operation (1.25
/// at most on average): its interval lies in one piece of the data file.
fn read_all_in_about_one_file_op(
    db: &Db,
    vfs: &FaultVfs,
    model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    when: &str,
) {
    let ops = vfs.op_count();
    read_all_as_modelled(db, model, when);
    let per_read = (vfs.op_count() - ops) as f64 / 12_003.0;
    assert!(
        per_read <= 1.25,
        "{when}: {per_read:.2} file operations per point read"
    );
}

/// Reads every key as modelled in passes until the committer's rewrites for the reads
/// settle: a pass and the pause after it rewrote nothing, after at least one rewrite.
/// The committer looks for work at least every 250 ms while it has nothing to commit.
fn read_until_rewrites_settle(db: &Db, model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>) {
    let started = Instant::now();
    for pass in 0.. {
        let before = db.stats().read_defrags;
        read_all_as_modelled(db, model, &format!("pass {pass}"));
        std::thread::sleep(std::time::Duration::from_millis(600));
        let after = db.stats().read_defrags;
        if after > 0 && after == before {
            break;
        }
        assert!(
            started.elapsed().as_secs() < 30,
            "still rewriting after {pass} passes ({after} rewritten)"
        );
    }
}

/// Intervals that point reads keep fetching from the space in scattered extents (the
/// cache holds nothing, so it refuses every miss, and each interval is missed again
/// within a pass) are rewritten contiguous by the committer while it has nothing to
/// commit. Once it has no more to do, every interval lies in at most two extents (one
/// may cross a segment's end), a point read costs about one read of the file where it
/// cost one per extent up to its record, and the keyspace reads as the model, before
/// and after reopening.
#[test]
fn intervals_reads_keep_fetching_in_pieces_are_rewritten_contiguous() {
    let vfs = FaultVfs::new(29);
    let open = || open_unswept(&vfs);
    let db = open();
    let model = write_scattered(&db, 29);
    let s = db.stats();
    assert!(
        s.space_extents >= 3 * s.intervals,
        "scattered to begin with: {} extents for {} intervals",
        s.space_extents,
        s.intervals
    );
    assert_eq!(s.read_defrags, 0);
    read_until_rewrites_settle(&db, &model);
    let s = db.stats();
    assert!(
        s.space_extents <= 2 * s.intervals,
        "{} extents for {} intervals after {} rewrites",
        s.space_extents,
        s.intervals,
        s.read_defrags
    );
    read_all_in_about_one_file_op(&db, &vfs, &model, "after the rewrites");
    assert_eq!(db.stats().read_defrags, s.read_defrags);
    db.check().unwrap();
    drop(db);
    let db = open();
    read_all_as_modelled(&db, &model, "after reopening");
    db.check().unwrap();
}

/// Once writes stop and everything is committed, the committer sweeps a keyspace a
/// random load left scattered (three extents or more per interval): every interval
/// ends in about one extent, a point read costs about one read of the file, and the
/// keyspace reads as the model, before and after reopening. With the sweep off, the
/// same load stays scattered.
#[test]
fn a_keyspace_left_scattered_is_swept_contiguous_once_writes_stop() {
    let open = |vfs: &FaultVfs, sweep: bool| uncached(vfs).idle_sweep(sweep).open().unwrap();
    let vfs = FaultVfs::new(41);
    let db = open(&vfs, false);
    write_scattered(&db, 41);
    let s = db.stats();
    assert!(
        s.space_extents >= 3 * s.intervals && s.swept_bytes == 0,
        "scattered without the sweep: {} extents for {} intervals, {} bytes swept",
        s.space_extents,
        s.intervals,
        s.swept_bytes
    );
    drop(db);
    let vfs = FaultVfs::new(43);
    let db = open(&vfs, true);
    let model = write_scattered(&db, 41);
    let started = Instant::now();
    // Small segments and extents cut even a contiguous run every 16 KiB.
    let s = loop {
        let s = db.stats();
        if s.space_extents < 2 * s.intervals {
            break s;
        }
        assert!(
            started.elapsed().as_secs() < 30,
            "still {} extents for {} intervals after {} bytes swept",
            s.space_extents,
            s.intervals,
            s.swept_bytes
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(s.swept_bytes > 0);
    // The pass's end (a sync, the spots put back) is done once nothing more is swept.
    let mut swept = s.swept_bytes;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let now = db.stats().swept_bytes;
        if now == swept {
            break;
        }
        swept = now;
    }
    read_all_in_about_one_file_op(&db, &vfs, &model, "after the sweep");
    db.check().unwrap();
    drop(db);
    let db = open(&vfs, true);
    read_all_as_modelled(&db, &model, "after reopening");
    db.check().unwrap();
}

/// A load followed at once by a trickle of writes (YCSB E after its load) is swept
/// beside the trickle: the load changed more keys than the keyspace has intervals. With
/// commits only every 10 minutes the trickle keeps the active memtable from ever being
/// empty, so a sweep that waited for writes to stop would never finish the pass.
#[test]
fn a_load_is_swept_beside_a_trickle_of_writes() {
    let vfs = FaultVfs::new(47);
    let db = open_unswept(&vfs);
    let mut model = write_scattered(&db, 47);
    drop(db);
    let db = uncached(&vfs)
        .commit_interval(std::time::Duration::from_secs(600))
        .open()
        .unwrap();
    // Counted before any commit: the pass may begin as soon as the flush below ends.
    let (intervals, scattered) = {
        let s = db.stats();
        (s.intervals as u32, s.space_extents)
    };
    for i in 0..2 * intervals {
        let (k, v) = (key(100_000 + i), val(i, 9));
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    db.flush().unwrap();
    let trickled = std::sync::atomic::AtomicU32::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let n = trickled.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                db.put(&key(200_000 + n), b"trickle").unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        let started = Instant::now();
        loop {
            // About 15 KiB intervals in extents of at most 16 KiB: the sweep leaves
            // about a quarter of the extents (2,547 to 696 in the test's first run).
            let s = db.stats();
            if 3 * s.space_extents <= scattered {
                break;
            }
            if started.elapsed().as_secs() >= 10 {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                panic!(
                    "{} extents of the {scattered} the load left, after {} bytes swept",
                    s.space_extents, s.swept_bytes
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let unflushed = db.stats().memtable_entries;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(unflushed > 0, "the trickle was still in the memtable");
    });
    for n in 0..trickled.into_inner() {
        model.insert(key(200_000 + n), b"trickle".to_vec());
    }
    db.flush().unwrap();
    read_all_as_modelled(&db, &model, "after the sweep beside the trickle");
    for (k, v) in model.range(key(100_000)..) {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()));
    }
    db.check().unwrap();
    drop(db);
    let db = open_unswept(&vfs);
    read_all_as_modelled(&db, &model, "after reopening");
    db.check().unwrap();
}

/// Rewriting scattered intervals for the reads leaves the FlexTree fewer extents to
/// hold, and the cache gets the memory they gave back: with no write to bring a
/// commit, the cache's share is refitted when the rewrites are synced.
#[test]
fn rewrites_for_the_reads_give_the_cache_what_the_tree_gave_back() {
    const BUDGET: usize = 256 << 10;
    let vfs = FaultVfs::new(31);
    let db = Db::builder(DIR)
        .vfs(vfs.shared())
        .cache_bytes(BUDGET)
        // The interval cache alone (the record cache would answer point reads).
        .record_cache_share(0.0)
        .space_options(small_space())
        // The reads' rewrites alone give the tree's memory back here.
        .idle_sweep(false)
        .open()
        .unwrap();
    let model = write_scattered(&db, 31);
    let indexes = |s: &flexkv::Stats| s.index_bytes + s.space_tree_memory_bytes;
    let fitted = |s: &flexkv::Stats| {
        (BUDGET as u64)
            .saturating_sub(indexes(s))
            .max(BUDGET as u64 / 8)
    };
    let before = db.stats();
    assert_eq!(before.cache_capacity_bytes, fitted(&before), "{before:?}");
    read_until_rewrites_settle(&db, &model);
    let after = db.stats();
    assert_eq!(after.commits, before.commits, "{after:?}");
    assert!(
        after.space_tree_memory_bytes < before.space_tree_memory_bytes,
        "{before:?}\n{after:?}"
    );
    assert!(
        after.cache_capacity_bytes > before.cache_capacity_bytes,
        "{after:?}"
    );
    assert_eq!(after.cache_capacity_bytes, fitted(&after), "{after:?}");
    assert!(after.cache_bytes <= after.cache_capacity_bytes, "{after:?}");
    db.check().unwrap();
}

/// The committer's rewrites for the reads make space GC passes due (each rewrite
/// leaves its interval's old extents garbage); those passes run before a slice's
/// writes, in short write sections of their own, never inside a rewrite, where the
/// space's own pass would hold the write lock for its whole walk of the extents
/// (108 ms at 10M pairs, docs/benchmarks.md, fifty-second session).
#[test]
fn gc_passes_that_rewrites_for_the_reads_make_due_run_outside_their_writes() {
    let vfs = FaultVfs::new(37);
    let db = open_unswept(&vfs);
    let model = write_scattered(&db, 37);
    let before = db.stats();
    read_until_rewrites_settle(&db, &model);
    let after = db.stats();
    assert_eq!(after.commits, before.commits, "no commit ran: {after:?}");
    assert!(after.read_defrags > 100, "{after:?}");
    assert!(
        after.space_gc_passes > before.space_gc_passes,
        "the rewrites made passes due: {before:?}\n{after:?}"
    );
    assert_eq!(
        after.space_gc_passes_in_writes, before.space_gc_passes_in_writes,
        "{before:?}\n{after:?}"
    );
    read_all_as_modelled(&db, &model, "after the rewrites");
    db.check().unwrap();
    drop(db);
    let db = open_unswept(&vfs);
    read_all_as_modelled(&db, &model, "after reopening");
}

/// The disk dies, then the machine crashes, at points spread over the committer's
/// rewrites of scattered intervals for the reads. A pass of point reads (each interval
/// missed again and again) asks for the rewrites, which the committer makes while the
/// reads go on, in an order against them that varies from run to run; so the disk
/// dies at the `k`-th operation that changes it (segments written, the space synced),
/// and reads go on after that. The reads that succeed read as the model says. Each
/// crash mode is drawn at random; after reopening, every key reads as the model says
/// and the keyspace checks.
#[test]
fn a_crash_while_intervals_are_rewritten_for_reads_loses_nothing() {
    const POINTS: u64 = 16;
    // Longer than the committer's idle wait (250 ms) and its rewrites here.
    let settle = || std::thread::sleep(std::time::Duration::from_millis(600));
    let read_once = |db: &Db, model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>| {
        for i in 0..12_000u32 {
            // Once the committer has failed, reads fail too.
            if let Ok(v) = db.get(&key(i)) {
                assert_eq!(
                    v.as_deref(),
                    model.get(&key(i)).map(|v| v.as_slice()),
                    "key {i}"
                );
            }
        }
    };
    let vfs = FaultVfs::new(0);
    let db = open_unswept(&vfs);
    let model = write_scattered(&db, 31);
    let start = vfs.change_count();
    read_once(&db, &model);
    settle();
    let work = vfs.change_count() - start;
    let rewritten = db.stats().read_defrags;
    assert!(rewritten > 100, "{rewritten} intervals rewritten");
    assert!(work >= POINTS, "{work} changes for {rewritten} rewrites");
    drop(db);
    let mut died = 0;
    for n in 0..POINTS {
        let point = 1 + work * n / POINTS;
        let vfs = FaultVfs::new(n);
        let db = open_unswept(&vfs);
        write_scattered(&db, 31);
        let start = vfs.change_count();
        vfs.fail_changes_from(point);
        read_once(&db, &model);
        settle();
        // The committer's rewrites vary a little from run to run, so a late point
        // may come after the last of them.
        died += u64::from(vfs.change_count() - start >= point);
        drop(db);
        let mode = vfs.crash(CrashMode::Random);
        let db = open_unswept(&vfs);
        read_all_as_modelled(&db, &model, &format!("change {point} of {work}, {mode:?}"));
        db.check().unwrap();
    }
    assert!(
        died >= POINTS * 3 / 4,
        "the disk died during the rewrites in {died} of {POINTS} runs"
    );
}

/// A snapshot taken before overwrites and deletes reads every old value through many
/// commits; history is written only while it lives.
#[test]
fn snapshots_read_old_versions_through_many_commits() {
    let vfs = FaultVfs::new(5);
    let db = Db::builder(DIR)
        .vfs(vfs.shared())
        .value_threshold(200)
        .memtable_size(8 << 10)
        .space_options(small_space())
        .open()
        .unwrap();
    const N: u32 = 400;
    for i in 0..N {
        db.put(&key(i), &val(i, 0)).unwrap();
    }
    db.flush().unwrap();
    let snap = db.snapshot();
    for round in 1..=3 {
        for i in 0..N {
            let k = key(i);
            if i % 5 == round {
                db.delete(&k).unwrap();
            } else {
                db.put(&k, &val(i, round)).unwrap();
            }
        }
        db.flush().unwrap();
    }
    let s = db.stats();
    assert!(s.commits >= 6 && s.history_records > 0, "{s:?}");
    for i in 0..N {
        assert_eq!(snap.get(&key(i)).unwrap(), Some(val(i, 0)), "key {i}");
    }
    let seen: Vec<_> = snap.iter().map(|r| r.unwrap()).collect();
    assert_eq!(seen.len(), N as usize);
    assert!(seen.iter().all(|(k, v)| {
        let i: u32 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
        *v == val(i, 0)
    }));
    assert_eq!(snap.iter().rev().count(), N as usize);
    // The current state: the last round's values, and its deletes.
    for i in 0..N {
        let want = (i % 5 != 3).then(|| val(i, 3));
        assert_eq!(db.get(&key(i)).unwrap(), want, "key {i}");
    }
    drop(snap);
    let before = db.stats().history_records;
    for i in 0..N {
        db.put(&key(i), &val(i, 9)).unwrap();
    }
    db.flush().unwrap();
    assert_eq!(
        db.stats().history_records,
        before,
        "history written with no snapshot open"
    );
    db.check().unwrap();
    db.close().unwrap();
    let db = Db::builder(DIR).vfs(vfs.shared()).open().unwrap();
    for i in 0..N {
        assert_eq!(db.get(&key(i)).unwrap(), Some(val(i, 9)));
    }
}

/// Tombstones kept for a snapshot are removed once it is released: the space ends up
/// holding nothing when every key is deleted.
#[test]
fn tombstones_kept_for_a_snapshot_go_when_it_is_released() {
    let vfs = FaultVfs::new(6);
    let db = Db::builder(DIR)
        .vfs(vfs.shared())
        .memtable_size(8 << 10)
        .space_options(small_space())
        .open()
        .unwrap();
    for i in 0..300 {
        db.put(&key(i), &val(i, 0)).unwrap();
    }
    db.flush().unwrap();
    let snap = db.snapshot();
    for i in 0..300 {
        db.delete(&key(i)).unwrap();
    }
    db.flush().unwrap();
    assert!(db.stats().space_live_bytes > 0, "tombstones are kept");
    assert_eq!(db.iter().count(), 0);
    assert_eq!(snap.iter().count(), 300);
    drop(snap);
    db.put(b"zz", b"one more commit").unwrap();
    db.flush().unwrap();
    let s = db.stats();
    let only = "zz".len() + "one more commit".len();
    assert!(
        s.space_live_bytes < only as u64 + 32,
        "tombstones left behind: {s:?}"
    );
    db.check().unwrap();
}

/// The committer holds the write lock in slices: a commit of many pairs takes many
/// holds, and the longest is a small part of the whole commit.
#[test]
fn the_write_lock_is_held_in_slices_during_a_large_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::builder(dir.path()).open().unwrap();
    let ks = db.default_keyspace();
    let mut rng = SmallRng::seed_from_u64(7);
    const N: u32 = 60_000;
    for _ in 0..N / 1000 {
        let mut b = flexkv::WriteBatch::new();
        b.durability(Durability::Buffered);
        for _ in 0..1000 {
            b.put(&ks, &key(rng.random_range(0..10 * N)), &[7u8; 40])
                .unwrap();
        }
        db.write(b).unwrap();
    }
    let t0 = Instant::now();
    db.flush().unwrap();
    let whole = t0.elapsed().as_micros() as u64;
    let s = db.stats();
    assert!(s.pairs_committed > 50_000, "{s:?}");
    assert!(
        s.lock_hold_max_micros * 4 < whole,
        "a {whole} µs commit held the lock for {} µs at once",
        s.lock_hold_max_micros
    );
    assert!(s.intervals > 50_000 / 16, "{s:?}");
}

/// A commit caches the intervals it changes only where the cache held them or has room
/// to spare: writes all over a keyspace larger than the cache leave the intervals
/// readers use in it, and readers of the changed keys still find the new values.
/// The commit reads most of its intervals from the space, on two threads.
#[test]
fn a_commit_leaves_the_intervals_readers_use_in_a_full_cache() {
    let vfs = FaultVfs::new(5);
    const N: u32 = 40_000;
    let open = || {
        Db::builder(DIR)
            .vfs(vfs.shared())
            .cache_bytes(512 << 10)
            .idle_commit(std::time::Duration::ZERO)
            .recovery_step(0) // every interval as it was, not merged by sampling
            .open()
            .unwrap()
    };
    let write = |db: &Db, keys: std::ops::Range<u32>, round: u32| {
        for chunk in keys.collect::<Vec<_>>().chunks(1000) {
            put_buffered(db, chunk, round);
        }
        db.flush().unwrap();
    };
    let db = open();
    write(&db, 0..N, 0);
    db.close().unwrap();

    // An empty cache; the readers' intervals go in, then a commit changes four times
    // as many bytes of other intervals as the cache holds.
    let db = open();
    let hot = || {
        for i in 0..300 {
            assert_eq!(db.get(&key(i)).unwrap(), Some(val(i, 0)));
        }
    };
    hot();
    let warm = db.stats();
    assert!(warm.cache_misses > 0, "{warm:?}");
    write(&db, N / 2..N, 1);
    let after = db.stats();
    assert!(after.cache_bytes <= 512 << 10, "{after:?}");
    hot();
    let again = db.stats();
    assert_eq!(
        again.cache_misses, after.cache_misses,
        "the readers' intervals were evicted by the commit"
    );
    // The commit read most of its intervals from the space (on two threads, many at a
    // time): every pair is right.
    for i in 0..N {
        let round = u32::from(i >= N / 2);
        assert_eq!(db.get(&key(i)).unwrap(), Some(val(i, round)), "key {i}");
    }
    db.check().unwrap();
}

/// A commit fills a cache's spare room with the intervals it changed only when the
/// whole keyspace fits in the cache: then readers find everything cached after a load.
/// Otherwise the cache keeps, of what it holds, only the intervals readers used, and
/// a load that outgrew it leaves it empty for what readers ask for.
#[test]
fn a_commit_fills_the_cache_only_if_the_whole_keyspace_fits() {
    const N: u32 = 4_000;
    let write = |db: &Db, round: u32| {
        let ks = db.default_keyspace();
        let mut b = flexkv::WriteBatch::new();
        for i in 0..N {
            b.put(&ks, &key(i), &val(i, round)).unwrap();
        }
        db.write(b).unwrap();
        db.flush().unwrap();
    };
    let open = |cache: usize| {
        Db::builder(DIR)
            .vfs(FaultVfs::new(6).shared())
            .cache_bytes(cache)
            // The interval cache alone (the record cache would answer point reads).
            .record_cache_share(0.0)
            .idle_commit(std::time::Duration::ZERO)
            .open()
            .unwrap()
    };
    // The records take about 380 KB: they fit in 4 MiB, not in 256 KiB.
    let db = open(4 << 20);
    write(&db, 0);
    write(&db, 1);
    let s = db.stats();
    for i in 0..N {
        assert_eq!(db.get(&key(i)).unwrap(), Some(val(i, 1)));
    }
    assert_eq!(db.stats().cache_misses, s.cache_misses, "every read hit");

    let db = open(256 << 10);
    write(&db, 0);
    // Keys readers use, until their intervals are cached and marked used (an interval
    // goes in on its first miss while there is room; in a full cache, on a repeated
    // miss one time in 64).
    let hot = [17, 1_500, 3_900];
    let mut rounds = 0;
    loop {
        let before = db.stats().cache_misses;
        for i in hot {
            assert_eq!(db.get(&key(i)).unwrap(), Some(val(i, 0)));
        }
        rounds += 1;
        if db.stats().cache_misses == before {
            break;
        }
        assert!(rounds < 500, "the readers' intervals never got in");
    }
    write(&db, 1);
    // What the first load put in while there was room, and no reader used, is gone;
    // the readers' intervals stay.
    let s = db.stats();
    assert!(s.cache_bytes > 0 && s.cache_bytes < 16 << 10, "{s:?}");
    for i in hot {
        assert_eq!(db.get(&key(i)).unwrap(), Some(val(i, 1)));
    }
    assert_eq!(
        db.stats().cache_misses,
        s.cache_misses,
        "the readers' intervals stay"
    );
    for i in 0..N {
        assert_eq!(db.get(&key(i)).unwrap(), Some(val(i, 1)));
    }
    db.check().unwrap();
}

/// A load in key order makes intervals no reader has asked for. Where the whole
/// keyspace fits, each commit that appends past the last interval caches only the
/// last of the pieces it splits that interval into (the next commit appends there),
/// unless a reader used that interval since the last commit: then every piece. Every
/// key reads back either way.
#[test]
fn a_load_in_key_order_caches_only_its_last_interval_unless_it_was_read() {
    const SLICE: u32 = 1_000;
    const SLICES: u32 = 6;
    let append = |db: &Db, from: u32| {
        let ks = db.default_keyspace();
        let mut b = flexkv::WriteBatch::new();
        for i in from..from + SLICE {
            b.put(&ks, &key(i), &val(i, 0)).unwrap();
        }
        db.write(b).unwrap();
        db.flush().unwrap();
    };
    let load = |read_tail: bool| {
        let db = Db::builder(DIR)
            .vfs(FaultVfs::new(7).shared())
            .cache_bytes(4 << 20)
            .record_cache_share(0.0)
            .idle_commit(std::time::Duration::ZERO)
            .open()
            .unwrap();
        // The first commit fills an empty keyspace: all of it is cached.
        append(&db, 0);
        let first = db.stats().cache_bytes;
        for s in 1..SLICES {
            if read_tail {
                assert_eq!(
                    db.get(&key(s * SLICE - 1)).unwrap(),
                    Some(val(s * SLICE - 1, 0))
                );
            }
            append(&db, s * SLICE);
        }
        let s = db.stats();
        for i in 0..SLICES * SLICE {
            assert_eq!(db.get(&key(i)).unwrap(), Some(val(i, 0)), "key {i}");
        }
        db.check().unwrap();
        (first, s.cache_bytes)
    };
    let (first, unread) = load(false);
    assert!(first > 50 << 10, "the first slice's records: {first} bytes");
    // The first slice's intervals, and the last one at most: a piece of 16 records.
    assert!(
        unread < first + (16 << 10),
        "{unread} bytes cached after {first}"
    );
    let (first, read) = load(true);
    assert!(
        read > first * u64::from(SLICES - 1),
        "{read} bytes cached after {first}"
    );
}

/// The interval cache and the in-memory indexes (the sparse index and the FlexTree)
/// share one budget: as a keyspace grows, its indexes take more of the budget and the
/// cache gets what they leave, evicting what no longer fits; once the indexes take more
/// than seven eighths, the cache keeps an eighth. Intervals of at most four pairs make
/// the indexes outgrow the budget at 120K keys; the keys are written in order, so each
/// interval lies in one extent and no read asks the committer to rewrite one (which
/// would shrink the tree while the statistics are taken).
#[test]
fn the_cache_gets_what_the_indexes_leave_of_the_budget() {
    const BUDGET: usize = 1 << 20;
    let vfs = FaultVfs::new(7);
    let db = Db::builder(DIR)
        .vfs(vfs.shared())
        .cache_bytes(BUDGET)
        // The interval cache alone (the record cache would answer point reads).
        .record_cache_share(0.0)
        .interval_pairs(4)
        .idle_commit(std::time::Duration::ZERO)
        .open()
        .unwrap();
    let mut written = 0u32;
    // Writes `n` more keys, commits them, then reads every key twice, which fills the
    // cache as far as it may go.
    let mut grow = |n: u32| {
        let keys: Vec<u32> = (written..written + n).collect();
        for chunk in keys.chunks(2000) {
            put_buffered(&db, chunk, 0);
            db.flush().unwrap();
        }
        written += n;
        for _ in 0..2 {
            for i in 0..written {
                assert_eq!(db.get(&key(i)).unwrap(), Some(val(i, 0)), "key {i}");
            }
        }
        let s = db.stats();
        assert_eq!(s.read_defrags, 0, "{s:?}");
        assert_eq!(s.space_extents, s.intervals, "{s:?}");
        s
    };
    let small = grow(2_000);
    let indexes = |s: &flexkv::Stats| s.index_bytes + s.space_tree_memory_bytes;
    assert!(indexes(&small) < BUDGET as u64 / 4, "{small:?}");
    assert_eq!(small.cache_capacity_bytes, BUDGET as u64 - indexes(&small));
    assert!(small.cache_bytes <= small.cache_capacity_bytes, "{small:?}");

    let large = grow(18_000);
    assert!(indexes(&large) > 2 * indexes(&small), "{large:?}");
    assert_eq!(
        large.cache_capacity_bytes,
        (BUDGET as u64 - indexes(&large)).max(BUDGET as u64 / 8)
    );
    // The records take about 1.7 MB: the cache is full, and the cache and the indexes
    // stay within the budget.
    assert!(
        large.cache_bytes > large.cache_capacity_bytes * 3 / 4,
        "{large:?}"
    );
    assert!(
        large.cache_bytes + indexes(&large) <= BUDGET as u64,
        "{large:?}"
    );

    let huge = grow(100_000);
    assert!(indexes(&huge) > BUDGET as u64, "{huge:?}");
    assert_eq!(huge.cache_capacity_bytes, BUDGET as u64 / 8);
    assert!(huge.cache_bytes <= BUDGET as u64 / 8, "{huge:?}");
    db.check().unwrap();
}

/// A scan's misses go through the cache's admission as a point read's do: one pass over
/// a keyspace larger than the cache reads each interval once, and leaves the intervals
/// point readers use in the cache, instead of putting every interval it read in and
/// evicting theirs.
#[test]
fn a_scan_of_a_keyspace_larger_than_the_cache_leaves_the_readers_intervals_in_it() {
    const N: u32 = 40_000;
    let vfs = FaultVfs::new(8);
    let open = || {
        Db::builder(DIR)
            .vfs(vfs.shared())
            // The indexes take about 160 KB of it, the cache the rest.
            .cache_bytes(416 << 10)
            // The interval cache alone (the record cache would answer point reads).
            .record_cache_share(0.0)
            .idle_commit(std::time::Duration::ZERO)
            .recovery_step(0) // intervals of at most 16 pairs after the reopen too
            .open()
            .unwrap()
    };
    let db = open();
    for chunk in (0..N).collect::<Vec<_>>().chunks(1000) {
        put_buffered(&db, chunk, 0);
    }
    db.close().unwrap();
    // An empty cache. Keys 200 apart, each in an interval of its own; the records take
    // about 3.6 MB, the readers' intervals about 170 KB of the cache's 270 KB.
    let db = open();
    let ks = db.default_keyspace();
    let hot: Vec<u32> = (0..80).map(|i| i * 200).collect();
    let read_hot = || {
        for &i in &hot {
            assert_eq!(db.get(&key(i)).unwrap(), Some(val(i, 0)));
        }
    };
    read_hot();
    read_hot();
    let warm = db.stats();
    read_hot();
    assert_eq!(
        db.stats().cache_misses,
        warm.cache_misses,
        "all cached: {warm:?}"
    );

    let before = db.stats();
    let mut seen = 0;
    for item in ks.iter() {
        let (k, v) = item.unwrap();
        let i: u32 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
        assert_eq!((k, v), (key(i), val(i, 0)));
        seen += 1;
    }
    assert_eq!(seen, N);
    let scanned = db.stats();
    assert!(
        scanned.cache_misses - before.cache_misses > u64::from(N) / 16 / 2,
        "the scan read most intervals from the space: {scanned:?}"
    );
    read_hot();
    // The few intervals admitted once the cache is full (a doorkeeper's false "seen",
    // then one repeat in 64) each evict the next entries the clock's hand passes: 10
    // of the 80 here. Caching every interval the scan reads evicted all 80.
    let missed = db.stats().cache_misses - scanned.cache_misses;
    assert!(
        missed <= hot.len() as u64 / 4,
        "{missed} of the {} readers' intervals were evicted by the scan: {warm:?} {scanned:?}",
        hot.len()
    );
    db.check().unwrap();
}

/// Recovery rebuilds the index from the interval heads, every head or sampled, and
/// both give the same contents; writes after it split the merged intervals again.
#[test]
fn the_index_is_rebuilt_from_head_tags_with_or_without_sampling() {
    let vfs = FaultVfs::new(9);
    let open = |step: u64| {
        Db::builder(DIR)
            .vfs(vfs.shared())
            .memtable_size(16 << 10)
            .space_options(small_space())
            .recovery_step(step)
            .open()
            .unwrap()
    };
    let db = open(0);
    let mut rng = SmallRng::seed_from_u64(9);
    let mut model = std::collections::BTreeMap::new();
    for n in 0..3000u32 {
        let i = rng.random_range(0..2000);
        if n % 9 == 0 {
            db.delete(&key(i)).unwrap();
            model.remove(&key(i));
        } else {
            db.put(&key(i), &val(i, n)).unwrap();
            model.insert(key(i), val(i, n));
        }
    }
    db.close().unwrap();
    let mut intervals = Vec::new();
    for step in [0, 4 << 10, 16 << 10, 0] {
        let db = open(step);
        intervals.push(db.stats().intervals);
        let got: Vec<_> = db.iter().map(|r| r.unwrap()).collect();
        assert!(got.iter().cloned().eq(model.clone()), "step {step}");
        for (k, v) in model.iter().step_by(17) {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
        }
        db.check().unwrap();
        // Writing everywhere splits what sampling merged.
        for (k, v) in model.iter().step_by(3) {
            db.put(k, v).unwrap();
        }
        db.close().unwrap();
    }
    assert!(
        intervals[0] > intervals[2] * 4,
        "sampling every 16 KiB reads fewer heads: {intervals:?}"
    );
    assert!(
        intervals[3] > intervals[2] * 2,
        "writes split the sampled intervals again: {intervals:?}"
    );
}

/// Regression: when a merge took away the first interval of an index leaf, the pivot
/// above still named it, so a key between that pivot and the leaf's new first key was
/// routed into the leaf and found the interval *after* it. The committer then wrote
/// such keys into the wrong interval: records out of order on disk, and keys lost.
/// Two streams of writes are interleaved at random: one rewrites every third lasting
/// key with a value of a new size, round after round; the other fills the gaps between
/// lasting keys with large values and deletes them again. That is more intervals than
/// an index leaf holds (64), and merges keep emptying leaves' first intervals. Every
/// 500 writes the store is committed and checked, and every key read back.
#[test]
fn merges_at_the_start_of_an_index_leaf_keep_lookups_right() {
    for seed in 0..6 {
        leaf_start_merges(seed);
    }
}

fn leaf_start_merges(seed: u64) {
    const KEYS: u32 = 600;
    let key = |i: u32, gap: bool| format!("k{i:05}{}", u8::from(gap)).into_bytes();
    let value = named_value;
    let vfs = FaultVfs::new(5);
    let db = open_churning(&vfs);
    let mut model = std::collections::BTreeMap::new();
    for i in 0..KEYS {
        let (k, v) = (key(i, false), value(&key(i, false), i));
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    let rewrites: Vec<_> = (1..=3)
        .flat_map(|n| {
            (0..KEYS)
                .step_by(3)
                .map(move |i| (key(i, false), Some(n * 7 + i)))
        })
        .collect();
    let gaps: Vec<_> = (0..3)
        .flat_map(|n| {
            let fill = (0..KEYS).map(move |i| (key(i, true), Some(n + i)));
            fill.chain((0..KEYS).map(|i| (key(i, true), None)))
        })
        .collect();
    let (mut a, mut b) = (rewrites.iter().peekable(), gaps.iter().peekable());
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut ops = 0;
    while a.peek().is_some() || b.peek().is_some() {
        let from_a = b.peek().is_none() || (a.peek().is_some() && rng.random_range(0..3) == 0);
        let (k, n) = if from_a { a.next() } else { b.next() }.unwrap();
        match n {
            Some(n) => {
                let v = value(k, *n);
                db.put(k, &v).unwrap();
                model.insert(k.clone(), v);
            }
            None => {
                db.delete(k).unwrap();
                model.remove(k);
            }
        }
        ops += 1;
        if ops % 500 == 0 {
            db.flush().unwrap();
            db.check()
                .unwrap_or_else(|e| panic!("seed {seed}, after {ops} writes: {e}"));
            for (k, v) in &model {
                assert_eq!(
                    db.get(k).unwrap().as_ref(),
                    Some(v),
                    "seed {seed}, after {ops} writes"
                );
            }
        }
    }
    assert!(
        db.stats().intervals > 64,
        "the index never grew past one leaf"
    );
}

/// The record cache's share grows with how far the keyspace outgrows its budget: none
/// while it fits, a little just past it (the interval cache keeps nearly everything,
/// which scans need), and the whole share once it is far past. The database is
/// reopened with budgets shrinking by a tenth each time (an open fits the caches to
/// the budget as a commit does).
#[test]
fn the_record_cache_takes_its_share_as_the_keyspace_outgrows_the_budget() {
    const N: u32 = 20_000;
    let vfs = FaultVfs::new(43);
    let open = |budget: usize| {
        Db::builder(DIR)
            .vfs(vfs.shared())
            .cache_bytes(budget)
            .idle_commit(std::time::Duration::ZERO)
            .open()
            .unwrap()
    };
    let db = open(64 << 20);
    for chunk in (0..N).collect::<Vec<_>>().chunks(2000) {
        put_buffered(&db, chunk, 0);
    }
    db.flush().unwrap();
    db.close().unwrap();
    // (what the indexes leave, the record cache's part of it), budget by budget.
    let mut seen = Vec::new();
    let mut budget = 8usize << 20;
    while budget >= 128 << 10 {
        let db = open(budget);
        let s = db.stats();
        seen.push((
            s.cache_capacity_bytes + s.record_cache_capacity_bytes,
            s.record_cache_capacity_bytes,
        ));
        db.close().unwrap();
        budget = budget / 10 * 9;
    }
    let share = |&(left, rows): &(u64, u64)| rows as f64 / left as f64;
    assert_eq!(
        seen[0].1, 0,
        "the keyspace fits the largest budget: {seen:?}"
    );
    let (left, rows) = *seen.last().unwrap();
    assert_eq!(rows, left / 2, "far past the smallest: {seen:?}");
    assert!(
        // (Up to a byte's rounding.)
        seen.windows(2).all(|w| share(&w[1]) + 1e-5 >= share(&w[0])),
        "the share shrank as the budget did: {seen:?}"
    );
    let first = seen.iter().find(|s| s.1 > 0).unwrap();
    assert!(
        share(first) < 0.2,
        "just past the budget the record cache took {:.2} of it: {seen:?}",
        share(first)
    );
    assert!(
        seen.iter().any(|s| share(s) > 0.2 && share(s) < 0.45),
        "no budget between: {seen:?}"
    );
}

/// A keyspace larger than its budget gives half of what the indexes leave to the
/// record cache, which then answers repeated point reads without the interval cache;
/// a commit that overwrites or deletes a cached record, and a snapshot taken before
/// it, read what they should; and the check compares every cached record with the
/// space.
#[test]
fn point_reads_of_a_keyspace_larger_than_its_budget_come_from_single_records() {
    const BUDGET: usize = 256 << 10;
    const N: u32 = 20_000;
    let vfs = FaultVfs::new(41);
    let open = |share: f64| {
        Db::builder(DIR)
            .vfs(vfs.shared())
            .cache_bytes(BUDGET)
            .record_cache_share(share)
            .idle_commit(std::time::Duration::ZERO)
            .open()
    };
    let db = open(0.5).unwrap();
    for chunk in (0..N).collect::<Vec<_>>().chunks(2000) {
        put_buffered(&db, chunk, 0);
    }
    db.flush().unwrap();
    let s = db.stats();
    let indexes = s.index_bytes + s.space_tree_memory_bytes;
    let left = (BUDGET as u64)
        .saturating_sub(indexes)
        .max(BUDGET as u64 / 8);
    assert_eq!(s.record_cache_capacity_bytes, left / 2, "{s:?}");
    assert_eq!(s.cache_capacity_bytes, left - left / 2, "{s:?}");

    // Keys 400 apart, each in an interval of its own.
    let hot: Vec<u32> = (0..50).map(|i| i * 400 + 3).collect();
    for _ in 0..2 {
        for &i in &hot {
            assert_eq!(db.get(&key(i)).unwrap(), Some(val(i, 0)));
        }
    }
    let warm = db.stats();
    for &i in &hot {
        assert_eq!(db.get(&key(i)).unwrap(), Some(val(i, 0)));
    }
    // None goes to the space; most come from the record cache (the rest from
    // intervals the cache took while it had room).
    let s = db.stats();
    let records = s.record_cache_hits - warm.record_cache_hits;
    assert_eq!(s.cache_misses, warm.cache_misses, "{s:?}");
    assert_eq!(
        records + s.cache_hits - warm.cache_hits,
        hot.len() as u64,
        "{s:?}"
    );
    assert!(
        records >= 40,
        "{records} of {} from the record cache: {s:?}",
        hot.len()
    );
    assert!(s.record_cache_bytes > 0 && s.record_cache_bytes <= s.record_cache_capacity_bytes);
    db.check().unwrap();

    // Every other hot key overwritten, the rest deleted, behind a snapshot.
    let snap = db.snapshot();
    let ks = db.default_keyspace();
    let mut b = flexkv::WriteBatch::new();
    for (j, &i) in hot.iter().enumerate() {
        if j % 2 == 0 {
            b.put(&ks, &key(i), &val(i, 1)).unwrap();
        } else {
            b.delete(&ks, &key(i)).unwrap();
        }
    }
    db.write(b).unwrap();
    db.flush().unwrap();
    assert_eq!(db.stats().frozen_memtables, 0);
    for _ in 0..2 {
        for (j, &i) in hot.iter().enumerate() {
            let want = (j % 2 == 0).then(|| val(i, 1));
            assert_eq!(db.get(&key(i)).unwrap(), want, "key {i}");
            assert_eq!(
                snap.get(&key(i)).unwrap(),
                Some(val(i, 0)),
                "key {i} at the snapshot"
            );
        }
    }
    assert!(db.stats().record_cache_hits > s.record_cache_hits);
    db.check().unwrap();
    drop((snap, ks));
    db.close().unwrap();

    // Share 0: the interval cache gets it all; out of range: refused.
    let db = open(0.0).unwrap();
    for &i in hot.iter().chain(&hot) {
        db.get(&key(i)).unwrap();
    }
    let s = db.stats();
    assert_eq!(
        (s.record_cache_capacity_bytes, s.record_cache_hits),
        (0, 0),
        "{s:?}"
    );
    db.close().unwrap();
    let e = open(1.5).unwrap_err();
    assert!(e.to_string().contains("record_cache_share"), "{e}");
}
