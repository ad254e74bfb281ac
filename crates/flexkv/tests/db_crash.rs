//! Crash tests with the fault-injecting file system: several threads write `Sync` and
//! `Buffered` batches until the disk dies at a chosen operation, the machine crashes
//! into a random state, and the database is reopened. At least 1,000 crash points per
//! run, across every crash mode. After recovery:
//! - every batch acknowledged as `Sync` is present;
//! - no batch is half there;
//! - what is there is the state after some prefix of the sequence order.
//!
//! Memtables are tiny, so the committer freezes and commits many times during the
//! workload (and once more at close), and the crash points fall inside commits too:
//! before, during and after the FlexSpace syncs and the manifest update.
#![allow(clippy::unwrap_used)]

mod common;
use common::small_space;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use flexkv::io::{CrashMode, FaultVfs};
use flexkv::{Db, Durability, WriteBatch};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const DIR: &str = "/db";
const THREADS: usize = 3;
const BATCHES: usize = 40;
const CRASH_POINTS: u64 = 1000;

fn open(vfs: &FaultVfs) -> flexkv::Result<Db> {
    builder(vfs).open()
}

fn builder(vfs: &FaultVfs) -> flexkv::Builder {
    Db::builder(DIR)
        .vfs(vfs.shared())
        .value_threshold(64)
        .wal_segment_size(64 << 10)
        .vlog_segment_size(64 << 10)
        .memtable_size(4 << 10)
        // Many small intervals in a deep index: splits, merges and pivots at every
        // crash point.
        .interval_pairs(4)
        .index_fanout(4)
        .space_options(small_space())
}

fn key(t: usize, i: usize, part: &str) -> Vec<u8> {
    format!("t{t}/{i:03}/{part}").into_bytes()
}

fn value(t: usize, i: usize) -> Vec<u8> {
    // Every third value is large enough to go to the value log.
    let len = if i.is_multiple_of(3) {
        200 + i * 40
    } else {
        10 + i
    };
    vec![(t * 16 + i) as u8; len]
}

/// What a writer thread saw: for each batch it issued, its durability and the sequence
/// if it was acknowledged.
type Outcomes = Vec<(usize, Durability, Option<u64>)>;

fn writer(db: &Db, t: usize, seed: u64) -> Outcomes {
    let mut rng = SmallRng::seed_from_u64(seed);
    let ks = db.default_keyspace();
    let mut out = Vec::new();
    for i in 0..BATCHES {
        let d = if rng.random_bool(0.5) {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        let mut b = WriteBatch::new();
        b.durability(d);
        b.put(&ks, &key(t, i, "a"), &value(t, i)).unwrap();
        b.put(&ks, &key(t, i, "b"), &value(t, i)).unwrap();
        b.put(&ks, format!("last/t{t}").as_bytes(), &[i as u8])
            .unwrap();
        match db.write(b) {
            Ok(seq) => out.push((i, d, Some(seq))),
            Err(_) => {
                out.push((i, d, None));
                break;
            }
        }
    }
    out
}

/// Runs the workload, with the disk failing from its `fail_at`-th operation on; returns
/// each thread's outcomes and the number of operations issued.
fn run(vfs: &FaultVfs, seed: u64, fail_at: Option<u64>) -> (Vec<Outcomes>, u64, u64) {
    let db = Arc::new(open(vfs).unwrap());
    let start = vfs.op_count();
    if let Some(n) = fail_at {
        vfs.fail_from(n);
    }
    let results = Arc::new(Mutex::new(vec![Vec::new(); THREADS]));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (db, results) = (Arc::clone(&db), Arc::clone(&results));
            s.spawn(move || {
                let o = writer(&db, t, seed * 31 + t as u64);
                results.lock().unwrap()[t] = o;
            });
        }
    });
    let commits = db.stats().commits;
    drop(db); // closing on a dead disk fails quietly, as a crash would
    let ops = vfs.op_count() - start; // the commit at close included
    let results = Arc::try_unwrap(results).unwrap().into_inner().unwrap();
    (results, ops, commits)
}

fn check(db: &Db, outcomes: &[Outcomes], ctx: &str) {
    let ks = db.default_keyspace();
    let mut present: BTreeMap<u64, bool> = BTreeMap::new(); // acknowledged: seq -> present
    for (t, outs) in outcomes.iter().enumerate() {
        let mut prev_present = true;
        let mut last_present = None;
        for &(i, d, seq) in outs {
            let a = ks.get(&key(t, i, "a")).unwrap();
            let b = ks.get(&key(t, i, "b")).unwrap();
            assert_eq!(
                a.is_some(),
                b.is_some(),
                "{ctx}: batch t{t}/{i} is half applied"
            );
            let here = a.is_some();
            if here {
                assert_eq!(a.unwrap(), value(t, i), "{ctx}: wrong value for t{t}/{i}");
                assert!(
                    prev_present,
                    "{ctx}: t{t}/{i} present but an earlier batch is not"
                );
                last_present = Some(i);
            }
            if d == Durability::Sync && seq.is_some() {
                assert!(
                    here,
                    "{ctx}: acknowledged Sync batch t{t}/{i} (seq {seq:?}) lost"
                );
            }
            if let Some(s) = seq {
                present.insert(s, here);
            }
            prev_present = here;
        }
        let last = ks.get(format!("last/t{t}").as_bytes()).unwrap();
        assert_eq!(
            last.map(|v| v[0] as usize),
            last_present,
            "{ctx}: last/t{t} disagrees with the batches present"
        );
    }
    // A prefix of the sequence order: once an acknowledged batch is missing, every
    // acknowledged batch after it is missing too.
    let mut gap = None;
    for (&seq, &here) in &present {
        if !here {
            gap.get_or_insert(seq);
        } else if let Some(g) = gap {
            panic!("{ctx}: batch {seq} present after missing batch {g}");
        }
    }
}

#[test]
fn many_writers_crash_at_every_point_and_recover_a_prefix() {
    let mut modes = BTreeSet::new();
    let (_, total, commits) = run(&FaultVfs::new(0), 0, None);
    assert!(total > 50, "the workload issued only {total} operations");
    assert!(
        commits >= 4,
        "only {commits} commits ran during the workload"
    );
    for point in 0..CRASH_POINTS {
        let vfs = FaultVfs::new(point);
        let mut rng = SmallRng::seed_from_u64(point);
        let fail_at = rng.random_range(1..=total + 5);
        let (outcomes, _, _) = run(&vfs, point, Some(fail_at));
        let mode = vfs.crash(CrashMode::Random);
        modes.insert(format!("{mode:?}"));
        let ctx = format!("point {point} (disk dead from op {fail_at}), {mode:?}");
        // Opened read-only first: the same recovery, with nothing written.
        let changes = vfs.change_count();
        let ro = (builder(&vfs).read_only(true).open())
            .unwrap_or_else(|e| panic!("{ctx}: read-only reopen failed: {e}"));
        check(&ro, &outcomes, &format!("{ctx}, read-only"));
        ro.check()
            .unwrap_or_else(|e| panic!("{ctx}: read-only check after recovery: {e}"));
        let seen: Vec<_> = ro.iter().map(|r| r.unwrap()).collect();
        ro.close().unwrap();
        assert_eq!(
            vfs.change_count(),
            changes,
            "{ctx}: the read-only open wrote"
        );
        let db = open(&vfs).unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
        check(&db, &outcomes, &ctx);
        let recovered: Vec<_> = db.iter().map(|r| r.unwrap()).collect();
        assert!(
            recovered == seen,
            "{ctx}: the read-only open saw other pairs"
        );
        db.check()
            .unwrap_or_else(|e| panic!("{ctx}: check after recovery: {e}"));
        // The recovered database takes writes and keeps them.
        db.put(b"after", b"crash").unwrap();
        db.close().unwrap();
        let db = open(&vfs).unwrap();
        assert_eq!(db.get(b"after").unwrap(), Some(b"crash".to_vec()), "{ctx}");
        check(&db, &outcomes, &ctx);
    }
    assert_eq!(
        modes.len(),
        CrashMode::CONCRETE.len(),
        "modes drawn: {modes:?}"
    );
}

/// No crash: every writer's acknowledged batches are all there after a clean reopen,
/// and group commit gathered batches from several threads.
#[test]
fn concurrent_writers_without_a_crash_lose_nothing() {
    let vfs = FaultVfs::new(77);
    let (outcomes, _, _) = run(&vfs, 77, None);
    for o in &outcomes {
        assert_eq!(o.len(), BATCHES);
        assert!(o.iter().all(|(_, _, s)| s.is_some()));
    }
    vfs.crash(CrashMode::DropUnsynced);
    let db = open(&vfs).unwrap();
    check(&db, &outcomes, "no crash");
}
