//! The `Db` API: reads and writes, keyspaces, batches, limits and bad input, snapshots,
//! iterators, value separation, reopening, locking and refusing foreign directories.
#![allow(clippy::unwrap_used)]

mod common;
use common::open_quiet as open;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flexkv::io::{FaultVfs, OpenMode, Vfs};
use flexkv::{Db, Durability, Error, WriteBatch, MAX_KEY_LEN, MAX_VALUE_LEN};

const DIR: &str = "/db";

fn open_small_values(vfs: &FaultVfs) -> Db {
    Db::builder(DIR)
        .vfs(vfs.shared())
        .value_threshold(16)
        .idle_commit(Duration::ZERO)
        .open()
        .unwrap()
}

/// A database whose memtables are committed when idle for `idle` (and never for age).
fn open_committing_when_idle(vfs: &FaultVfs, idle: Duration) -> Db {
    Db::builder(DIR)
        .vfs(vfs.shared())
        .commit_interval(Duration::from_secs(3600))
        .idle_commit(idle)
        .open()
        .unwrap()
}

/// A memtable that stops taking writes is committed after the idle time, with no
/// further write, flush or close; with idle commits off it stays.
#[test]
fn an_idle_memtable_is_committed() {
    let vfs = FaultVfs::new(9);
    let db = open_committing_when_idle(&vfs, Duration::from_millis(20));
    db.put(b"k", b"v").unwrap();
    let t0 = std::time::Instant::now();
    while db.stats().commits == 0 {
        assert!(t0.elapsed() < Duration::from_secs(20), "never committed");
        std::thread::sleep(Duration::from_millis(5));
    }
    let s = db.stats();
    assert_eq!((s.memtable_entries, s.pairs_committed), (0, 1), "{s:?}");
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    db.close().unwrap();

    let db = open_committing_when_idle(&vfs, Duration::ZERO);
    db.put(b"k2", b"v").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let s = db.stats();
    assert_eq!((s.commits, s.memtable_entries), (0, 1), "{s:?}");
}

/// The idle time counts from the last write, not from when the committer, which looks
/// at the memtable once an idle time while it is empty, first saw it written: a write
/// halfway between two looks is committed one idle time after it (plus the committer's
/// wake-up), not one and a half.
#[test]
fn the_idle_time_counts_from_the_last_write() {
    let vfs = FaultVfs::new(11);
    let idle = Duration::from_secs(2);
    let db = open_committing_when_idle(&vfs, idle);
    // The committer looked at the empty memtable as the database opened, and looks
    // again an idle time later.
    std::thread::sleep(idle / 2);
    db.put(b"k", b"v").unwrap();
    let written = std::time::Instant::now();
    while db.stats().commits == 0 {
        assert!(
            written.elapsed() < Duration::from_secs(20),
            "never committed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = written.elapsed();
    assert!(took >= idle, "committed before the idle time: {took:?}");
    assert!(
        took < idle + idle / 4,
        "committed {took:?} after the write: the idle time counted from a later look"
    );
}

/// The idle rule waits for the writes to stop: a memtable written every few
/// milliseconds for several idle times is not committed by it.
#[test]
fn a_memtable_still_taking_writes_is_not_idle() {
    let vfs = FaultVfs::new(10);
    let db = open_committing_when_idle(&vfs, Duration::from_millis(400));
    let t0 = std::time::Instant::now();
    let mut i = 0u32;
    while t0.elapsed() < Duration::from_millis(1600) {
        db.default_keyspace()
            .put_with(&i.to_be_bytes(), b"v", Durability::Buffered)
            .unwrap();
        i += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = db.stats();
    assert_eq!(s.commits, 0, "{s:?}");
    let t1 = std::time::Instant::now();
    while db.stats().commits == 0 {
        assert!(t1.elapsed() < Duration::from_secs(20), "never committed");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(db.stats().pairs_committed, u64::from(i));
}

/// After a burst, a trickle of writes (each idle time, under 1/64 of what the
/// memtable holds) no longer keeps a memtable from counting as idle: it is committed
/// while the trickle goes on, and every pair stays readable.
#[test]
fn a_memtable_taking_a_trickle_after_a_burst_is_committed() {
    let vfs = FaultVfs::new(12);
    let db = open_committing_when_idle(&vfs, Duration::from_millis(100));
    let ks = db.default_keyspace();
    let mut batch = WriteBatch::new();
    for i in 0..5_000u32 {
        batch.put(&ks, &i.to_be_bytes(), &[7; 100]).unwrap();
    }
    db.write(batch).unwrap();
    let t0 = std::time::Instant::now();
    let mut i = 5_000u32;
    while db.stats().commits == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "not committed under a trickle: {:?}",
            db.stats()
        );
        ks.put_with(&i.to_be_bytes(), b"v", Durability::Buffered)
            .unwrap();
        i += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = db.stats();
    assert!(s.pairs_committed >= 5_000, "{s:?}");
    for j in [0, 4_999, i - 1] {
        assert!(ks.get(&j.to_be_bytes()).unwrap().is_some(), "key {j}");
    }
}

/// A memtable still taking writes, which the idle rule leaves alone, is committed once
/// scans have searched it four times per version it holds; without the scans it stays.
/// Writes at a steady rate count as a trickle only once the memtable holds 64 idle
/// times' worth (25.6 s here), so the commit must come well before that.
#[test]
fn a_memtable_scans_keep_searching_is_committed_under_writes() {
    let vfs = FaultVfs::new(13);
    let db = open_committing_when_idle(&vfs, Duration::from_millis(400));
    let ks = db.default_keyspace();
    let mut i = 0u32;
    let mut write = || {
        ks.put_with(&i.to_be_bytes(), b"v", Durability::Buffered)
            .unwrap();
        i += 1;
        std::thread::sleep(Duration::from_millis(5));
    };
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_millis(1600) {
        write();
    }
    assert_eq!(db.stats().commits, 0, "{:?}", db.stats());
    while db.stats().commits == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(12),
            "not committed under scans: {:?}",
            db.stats()
        );
        write();
        for _ in 0..50 {
            assert!(ks.iter().next().is_some());
        }
    }
    let s = db.stats();
    assert!(s.pairs_committed >= 100, "{s:?}");
    assert_eq!(ks.iter().count(), i as usize);
    for j in [0, 99, i - 1] {
        assert!(ks.get(&j.to_be_bytes()).unwrap().is_some(), "key {j}");
    }
}

fn all(it: flexkv::Iter) -> Vec<(Vec<u8>, Vec<u8>)> {
    it.map(|r| r.unwrap()).collect()
}

fn kv(k: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
    (k.as_bytes().to_vec(), v.as_bytes().to_vec())
}

#[test]
fn puts_gets_deletes_and_empty_values() {
    let vfs = FaultVfs::new(1);
    let db = open(&vfs);
    assert_eq!(db.get(b"a").unwrap(), None);
    db.put(b"a", b"1").unwrap();
    db.put(b"empty", b"").unwrap();
    assert_eq!(db.get(b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(
        db.get(b"empty").unwrap(),
        Some(vec![]),
        "an empty value is a value"
    );
    assert!(db.contains(b"empty").unwrap());
    db.delete(b"empty").unwrap();
    assert!(!db.contains(b"empty").unwrap());
    assert_eq!(db.get(b"empty").unwrap(), None);
    db.delete(b"never-there").unwrap();
    db.put(b"", b"empty key").unwrap();
    assert_eq!(db.get(b"").unwrap(), Some(b"empty key".to_vec()));
}

#[test]
fn keyspaces_are_separate_and_survive_a_reopen() {
    let vfs = FaultVfs::new(2);
    let db = open(&vfs);
    let users = db.keyspace("users").unwrap();
    let items = db.keyspace("items.v2").unwrap();
    users.put(b"k", b"user").unwrap();
    items.put(b"k", b"item").unwrap();
    assert_eq!(db.get(b"k").unwrap(), None);
    assert_eq!(users.get(b"k").unwrap(), Some(b"user".to_vec()));
    assert_eq!(items.get(b"k").unwrap(), Some(b"item".to_vec()));
    assert_eq!(
        db.keyspace("users").unwrap().get(b"k").unwrap(),
        Some(b"user".to_vec())
    );
    db.close().unwrap();
    let db = open(&vfs);
    let names: Vec<_> = db.keyspaces().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["default", "items.v2", "users"]);
    assert_eq!(
        db.keyspace("items.v2").unwrap().get(b"k").unwrap(),
        Some(b"item".to_vec())
    );
    assert_eq!(
        db.keyspace("users").unwrap().get(b"k").unwrap(),
        Some(b"user".to_vec())
    );
}

#[test]
fn a_batch_across_keyspaces_is_one_sequence() {
    let vfs = FaultVfs::new(3);
    let db = open(&vfs);
    let a = db.keyspace("a").unwrap();
    let mut b = WriteBatch::new();
    b.put(&a, b"x", b"1").unwrap();
    b.put(&db.default_keyspace(), b"y", b"2").unwrap();
    b.put(&a, b"x", b"3").unwrap(); // later op on the same key wins
    b.delete(&a, b"z").unwrap();
    assert_eq!(b.len(), 4);
    let before = db.snapshot();
    let seq = db.write(b).unwrap();
    assert_eq!(seq, before.seq() + 1);
    assert_eq!(a.get(b"x").unwrap(), Some(b"3".to_vec()));
    assert_eq!(db.get(b"y").unwrap(), Some(b"2".to_vec()));
    assert_eq!(before.get(b"y").unwrap(), None);
    assert_eq!(
        db.write(WriteBatch::new()).unwrap(),
        seq,
        "an empty batch writes nothing"
    );
}

/// Every limit and bad input gets `InvalidArgument` naming the limit, and leaves the
/// database unchanged.
#[test]
fn limits_and_bad_input_are_refused_before_anything_is_written() {
    let vfs = FaultVfs::new(4);
    let db = open(&vfs);
    db.put(b"keep", b"me").unwrap();
    let before = db.stats();
    let long_key = vec![b'k'; MAX_KEY_LEN + 1];
    let huge_value = vec![0u8; MAX_VALUE_LEN + 1];
    let expect = |r: flexkv::Result<()>, what: &str| match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(what), "{m:?} lacks {what}"),
        other => panic!("expected InvalidArgument naming {what}, got {other:?}"),
    };
    expect(db.put(&long_key, b"v"), "MAX_KEY_LEN");
    expect(db.delete(&long_key), "MAX_KEY_LEN");
    expect(db.get(&long_key).map(drop), "MAX_KEY_LEN");
    expect(db.put(b"k", &huge_value), "MAX_VALUE_LEN");
    let mut b = WriteBatch::new();
    expect(
        b.put(&db.default_keyspace(), &long_key, b"").map(drop),
        "MAX_KEY_LEN",
    );
    for _ in 0..4 {
        b.put(&db.default_keyspace(), b"k", &vec![0u8; 60 << 20])
            .unwrap();
    }
    expect(
        b.put(&db.default_keyspace(), b"k", &vec![0u8; 60 << 20])
            .map(drop),
        "MAX_BATCH_BYTES",
    );
    assert_eq!(b.len(), 4, "a refused op is not added");
    drop(b);
    for name in ["", "has space", "slash/no", &"n".repeat(65), "ünï"] {
        expect(db.keyspace(name).map(drop), "MAX_KEYSPACE_NAME_LEN");
    }
    assert!(db.keyspace(&"n".repeat(64)).is_ok());
    let other = Db::builder("/other").vfs(vfs.shared()).open().unwrap();
    let mut mixed = WriteBatch::new();
    mixed.put(&db.default_keyspace(), b"a", b"1").unwrap();
    expect(
        mixed.put(&other.default_keyspace(), b"b", b"2").map(drop),
        "another",
    );
    let mut foreign = WriteBatch::new();
    foreign.put(&other.default_keyspace(), b"b", b"2").unwrap();
    expect(db.write(foreign).map(drop), "another database");
    let after = db.stats();
    assert_eq!(after.batches, before.batches, "nothing was written");
    assert_eq!(after.wal_bytes, before.wal_bytes);
    assert_eq!(all(db.iter()), vec![kv("keep", "me")]);
}

#[test]
fn batch_op_count_is_limited() {
    let vfs = FaultVfs::new(5);
    let db = open(&vfs);
    let ks = db.default_keyspace();
    let mut b = WriteBatch::new();
    for _ in 0..flexkv::MAX_BATCH_OPS {
        b.delete(&ks, b"").unwrap();
    }
    match b.delete(&ks, b"") {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("MAX_BATCH_OPS"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn large_values_go_to_the_value_log_once_and_read_back_after_reopen() {
    let vfs = FaultVfs::new(6);
    let db = open_small_values(&vfs);
    let big: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    db.put(b"big", &big).unwrap();
    db.put(b"small", b"tiny").unwrap();
    db.put(b"edge", &[9u8; 16]).unwrap(); // exactly the threshold: separated
    let s = db.stats();
    assert!(s.vlog_bytes >= 100_016 && s.vlog_bytes < 100_200, "{s:?}");
    assert!(
        s.wal_bytes < 1000,
        "the WAL holds pointers, not values: {s:?}"
    );
    assert_eq!(s.vlog_live_bytes, s.vlog_bytes);
    assert_eq!(db.get(b"big").unwrap(), Some(big.clone()));
    db.close().unwrap();
    let db = open_small_values(&vfs);
    assert_eq!(db.get(b"big").unwrap(), Some(big.clone()));
    assert_eq!(db.get(b"edge").unwrap(), Some(vec![9u8; 16]));
    assert_eq!(db.get(b"small").unwrap(), Some(b"tiny".to_vec()));
    assert_eq!(
        db.stats().wal_bytes,
        0,
        "a clean close committed everything"
    );
    let snap = db.snapshot();
    db.put(b"big", b"replaced").unwrap();
    assert_eq!(snap.get(b"big").unwrap(), Some(big));
}

#[test]
fn an_iterator_turning_round_merges_memtables_and_the_store_afresh() {
    // Keys a, b, e committed to the store; c, d and a newer b in the memtable. An
    // iterator keeps the next entry it found in each memtable; turning round must
    // look again, or it returns the forward-looking entry going backward.
    let vfs = FaultVfs::new(8);
    let db = open(&vfs);
    for k in ["a", "b", "e"] {
        db.put(k.as_bytes(), b"stored").unwrap();
    }
    db.flush().unwrap();
    db.put(b"c", b"older memtable").unwrap();
    db.put(b"b", b"older memtable").unwrap();
    db.put(b"d", b"memtable").unwrap();
    let key = |r: Option<flexkv::Result<(Vec<u8>, Vec<u8>)>>| {
        let (k, v) = r.unwrap().unwrap();
        (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap())
    };
    let mut it = db.iter();
    assert_eq!(key(it.next()), ("a".into(), "stored".into()));
    assert_eq!(key(it.next_back()), ("e".into(), "stored".into()));
    assert_eq!(key(it.next_back()), ("d".into(), "memtable".into()));
    assert_eq!(key(it.next_back()), ("c".into(), "older memtable".into()));
    assert_eq!(key(it.next()), ("b".into(), "older memtable".into()));
    assert!(it.next().is_none() && it.next_back().is_none());
}

/// A scan takes the store's records that come before every memtable's next entry
/// and the bound ahead without comparing keys again (`Iter::count_clear`). Runs of
/// committed keys with memtable entries (new keys, newer versions, deletions) falling
/// between them at every spacing, under bounds that end inside intervals, both ways,
/// turning round, and at a snapshot older than some records: every scan returns what
/// a sorted map does.
#[test]
fn scans_through_runs_of_stored_records_stop_at_every_memtable_entry_and_bound() {
    let vfs = FaultVfs::new(11);
    let db = open(&vfs);
    let key = |i: usize| format!("k{i:04}").into_bytes();
    let mut model = std::collections::BTreeMap::new();
    for i in (0..600).step_by(2) {
        db.put(&key(i), b"stored").unwrap();
        model.insert(key(i), b"stored".to_vec());
    }
    db.flush().unwrap();
    // The snapshot sees the stored versions of keys overwritten and deleted below,
    // which then come from the history chain in the middle of runs.
    let snap = db.snapshot();
    let old = model.clone();
    // Memtable entries at spacings from 1 to 40 keys: a new key, a newer version
    // or a deletion, so runs end at each kind, at every place in an interval.
    let (mut i, mut gap) = (1, 1);
    while i < 600 {
        match i % 3 {
            0 => {
                db.put(&key(i), b"new key").unwrap();
                model.insert(key(i), b"new key".to_vec());
            }
            1 => {
                db.put(&key(i - 1), b"newer").unwrap();
                model.insert(key(i - 1), b"newer".to_vec());
            }
            _ => {
                db.delete(&key(i - 1)).unwrap();
                model.remove(&key(i - 1));
            }
        }
        i += gap;
        gap = gap % 40 + 1;
    }
    fn pairs(
        it: impl Iterator<Item = flexkv::Result<(Vec<u8>, Vec<u8>)>>,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        it.map(|r| r.unwrap()).collect()
    }
    for (lo, hi) in [(0, 600), (3, 117), (250, 251), (101, 480), (590, 600)] {
        let (l, h) = (key(lo), key(hi));
        let want: Vec<_> = model
            .range(l.clone()..h.clone())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(
            pairs(db.range(l.as_slice()..h.as_slice())),
            want,
            "forward {lo}..{hi}"
        );
        let mut back = want.clone();
        back.reverse();
        assert_eq!(
            pairs(db.range(l.as_slice()..h.as_slice()).rev()),
            back,
            "backward {lo}..{hi}"
        );
        let then: Vec<_> = old
            .range(l.clone()..=h.clone())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(
            pairs(snap.range(l.as_slice()..=h.as_slice())),
            then,
            "snapshot {lo}..={hi}"
        );
        // Turning round every few steps: the two ends meet with nothing skipped.
        let mut it = db.range(l.as_slice()..h.as_slice());
        let (mut front, mut rear) = (Vec::new(), Vec::new());
        for step in 0.. {
            let next = if step / 5 % 2 == 0 {
                it.next()
            } else {
                it.next_back()
            };
            match next {
                Some(r) if step / 5 % 2 == 0 => front.push(r.unwrap()),
                Some(r) => rear.push(r.unwrap()),
                None => break,
            }
        }
        rear.reverse();
        front.extend(rear);
        assert_eq!(front, want, "both ways {lo}..{hi}");
    }
    // A commit halfway through a scan: the rest is still as of the scan's start.
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut it = db.iter();
    let mut got: Vec<_> = it.by_ref().take(50).map(|r| r.unwrap()).collect();
    for i in (0..600).step_by(5) {
        db.put(&key(i), b"after the scan began").unwrap();
    }
    db.flush().unwrap();
    got.extend(it.map(|r| r.unwrap()));
    assert_eq!(got, want, "a scan across a commit");
}

/// A scan at a snapshot takes a record newer than the snapshot from the history chain;
/// a damaged history record is an error for its own item, once, and the scan goes on
/// past it, both ways. (A step that failed so left the bound behind short of the
/// record: where it then read the store again it found the record again, twice in the
/// middle of a backward scan and forever at its end.) Some damaged records begin an
/// interval, so a step may reach one from the interval before it; after the error,
/// turning round reads back to just past it, wherever it lies.
#[test]
fn a_damaged_history_record_is_one_error_and_the_scan_goes_on_past_it_both_ways() {
    let vfs = FaultVfs::new(12);
    let db = open(&vfs);
    let key = |i: usize| format!("k{i:04}").into_bytes();
    let n = 120;
    for i in 0..n {
        db.put(&key(i), b"old").unwrap();
    }
    db.flush().unwrap();
    let snap = db.snapshot();
    // Every fifth key overwritten, its history record then damaged (found by its
    // key's text); the keys between keep the records the snapshot sees, whose keys
    // a borrowing step leaves where they lie in their interval. The intervals here
    // hold 15 records each, so every third damaged record begins one.
    let damaged = |i: usize| i.is_multiple_of(5);
    for i in (0..n).filter(|&i| damaged(i)) {
        db.put(&key(i), b"new").unwrap();
    }
    db.flush().unwrap();
    let mut hit = 0;
    for seg in 1..=4 {
        let path = Path::new(DIR).join(format!("vlog-{seg:08}.seg"));
        let Some(mut bytes) = vfs.contents(&path) else {
            continue;
        };
        for i in (0..n).filter(|&i| damaged(i)) {
            let k = key(i);
            if let Some(at) = bytes.windows(k.len()).position(|w| w == k.as_slice()) {
                bytes[at + k.len() - 1] ^= 0x55;
                hit += 1;
            }
        }
        vfs.set_contents(&path, bytes).unwrap();
    }
    assert_eq!(hit, (0..n).filter(|&i| damaged(i)).count());
    let check = |i: usize, item: &flexkv::Result<(Vec<u8>, Vec<u8>)>| match item {
        Ok((k, v)) => {
            assert!(!damaged(i), "item {i}: the damaged version was returned");
            assert_eq!((k, v.as_slice()), (&key(i), &b"old"[..]), "item {i}");
        }
        Err(e) => {
            assert!(damaged(i), "item {i}: {e}");
            assert!(matches!(e, Error::Corruption { .. }), "item {i}: {e}");
        }
    };
    // At most one item more than there are keys: a scan that repeats an error stops
    // the test, not the test run.
    let forward: Vec<_> = snap.iter().take(n + 1).collect();
    assert_eq!(forward.len(), n, "forward: every key once");
    forward
        .iter()
        .enumerate()
        .for_each(|(i, item)| check(i, item));
    let backward: Vec<_> = snap.iter().rev().take(n + 1).collect();
    assert_eq!(backward.len(), n, "backward: every key once");
    backward
        .iter()
        .enumerate()
        .for_each(|(b, item)| check(n - 1 - b, item));
    // Forward to each damaged record (borrowing, so the bound behind is left to be
    // set), then back from the far end: every item from the last to the one after
    // the damaged one, and nothing before it.
    for j in (0..n).filter(|&j| damaged(j)) {
        let mut it = snap.iter();
        for i in 0..=j {
            let item = it.next_ref().unwrap();
            check(i, &item.map(|(k, v)| (k.to_vec(), v.to_vec())));
        }
        let back: Vec<_> = std::iter::from_fn(|| it.next_back()).take(n).collect();
        assert_eq!(
            back.len(),
            n - 1 - j,
            "back from the end after the error at {j}"
        );
        for (b, item) in back.iter().enumerate() {
            check(n - 1 - b, item);
        }
    }
}

#[test]
fn iterators_go_both_ways_within_bounds() {
    let vfs = FaultVfs::new(7);
    let db = open_small_values(&vfs);
    for k in ["a", "ab", "abc", "b", "ba", "c"] {
        db.put(
            k.as_bytes(),
            format!("v-{k}-{}", "x".repeat(k.len() * 8)).as_bytes(),
        )
        .unwrap();
    }
    db.delete(b"ba").unwrap();
    fn keys(it: impl Iterator<Item = flexkv::Result<(Vec<u8>, Vec<u8>)>>) -> Vec<String> {
        it.map(|r| String::from_utf8(r.unwrap().0).unwrap())
            .collect()
    }
    assert_eq!(keys(db.iter()), ["a", "ab", "abc", "b", "c"]);
    assert_eq!(keys(db.iter().rev()), ["c", "b", "abc", "ab", "a"]);
    assert_eq!(keys(db.prefix(b"ab")), ["ab", "abc"]);
    assert_eq!(keys(db.prefix(b"b")), ["b"]);
    assert_eq!(keys(db.range(&b"ab"[..]..&b"b"[..])), ["ab", "abc"]);
    assert_eq!(keys(db.range(&b"ab"[..]..=&b"b"[..])), ["ab", "abc", "b"]);
    assert_eq!(keys(db.range(&b"b"[..]..)), ["b", "c"]);
    assert_eq!(keys(db.range(..&b"ab"[..]).rev()), ["a"]);
    let mut it = db.iter();
    assert_eq!(it.next().unwrap().unwrap().0, b"a");
    assert_eq!(it.next_back().unwrap().unwrap().0, b"c");
    assert_eq!(it.next_back().unwrap().unwrap().0, b"b");
    assert_eq!(it.next().unwrap().unwrap().0, b"ab");
    assert_eq!(it.next().unwrap().unwrap().0, b"abc");
    assert!(
        it.next().is_none() && it.next_back().is_none(),
        "the ends met"
    );
    let mut it = db.iter();
    assert_eq!(it.next().unwrap().unwrap().0, b"a");
    assert_eq!(it.next_ref().unwrap().unwrap().0, b"ab");
    assert_eq!(it.next_back_ref().unwrap().unwrap().0, b"c");
    assert_eq!(it.next_back().unwrap().unwrap().0, b"b");
    assert_eq!(it.next_back_ref().unwrap().unwrap().0, b"abc");
    assert!(
        it.next_back().is_none() && it.next().is_none(),
        "the ends met going back"
    );
    let (k, v) = db.prefix(b"abc").next().unwrap().unwrap();
    assert_eq!((k, v), kv("abc", &format!("v-abc-{}", "x".repeat(24))));
}

/// An interval split off another is keyed by the shortest key above the records before
/// it ("key-01" for one starting at "key-010" after "key-000"), so a key can fall
/// between an interval's index key and its first record. Gets, forward and backward
/// scans from every such key (and every other prefix of a key) find what a sorted map
/// finds, before and after a reopen (which keys the intervals by their first records).
#[test]
fn lookups_between_an_index_key_and_its_first_record_find_the_right_pairs() {
    let vfs = FaultVfs::new(10);
    let open = || {
        Db::builder(DIR)
            .vfs(vfs.shared())
            .interval_pairs(2)
            .idle_commit(Duration::ZERO)
            .open()
            .unwrap()
    };
    let mut db = open();
    let mut model = std::collections::BTreeMap::new();
    for i in (0..400).step_by(10) {
        let k = format!("key-{i:03}").into_bytes();
        db.put(&k, &k).unwrap();
        model.insert(k.clone(), k);
    }
    db.flush().unwrap();
    let probes: std::collections::BTreeSet<Vec<u8>> = model
        .keys()
        .flat_map(|k| (0..=k.len()).map(|n| k[..n].to_vec()))
        .chain(model.keys().map(|k| [k.as_slice(), b"\0"].concat()))
        .collect();
    for round in 0..2 {
        let first = |mut it: flexkv::Iter| it.next().map(|r| r.unwrap().0);
        let last = |mut it: flexkv::Iter| it.next_back().map(|r| r.unwrap().0);
        for p in &probes {
            let at = |want: Option<&Vec<u8>>, got: Option<Vec<u8>>, what: &str| {
                let p = String::from_utf8_lossy(p);
                assert_eq!(got.as_ref(), want, "round {round}: {what} from {p:?}");
            };
            at(model.get(p), db.get(p).unwrap(), "get");
            at(
                model.range(p.clone()..).next().map(|e| e.0),
                first(db.range(p.as_slice()..)),
                "first at or above",
            );
            at(
                model.range(..=p.clone()).next_back().map(|e| e.0),
                last(db.range(..=p.as_slice())),
                "last at or below",
            );
            // Everything below, backward (its first step is the last key below).
            let below: Vec<Vec<u8>> = db
                .range(..p.as_slice())
                .rev()
                .map(|r| r.unwrap().0)
                .collect();
            let want: Vec<&Vec<u8>> = model.range(..p.clone()).rev().map(|e| e.0).collect();
            assert!(
                below.iter().eq(want.iter().copied()),
                "round {round}: all below {p:?}"
            );
        }
        db.check().unwrap();
        db.close().unwrap();
        db = open();
    }
}

/// An iterator whose memtable is committed while it runs finds that memtable's pairs
/// in the store afterwards, never in the form of an interval it held from before the
/// commit: the commit changed that interval, though not the intervals after it (whose
/// links still hold). For each of many places a key goes in just after a key the
/// iterator has returned, so the place falls within the interval its last read of the
/// store ended in wherever the intervals happen to begin.
#[test]
fn an_iterator_past_a_commit_reads_the_pairs_it_committed() {
    let vfs = FaultVfs::new(9);
    let db = Db::builder(DIR)
        .vfs(vfs.shared())
        .idle_commit(Duration::ZERO)
        .interval_pairs(4)
        .open()
        .unwrap();
    let ks = db.default_keyspace();
    let key = |i: usize| format!("k{i:04}0").into_bytes();
    let mut b = WriteBatch::new();
    for i in 0..400 {
        b.put(&ks, &key(i), b"lasting").unwrap();
    }
    db.write(b).unwrap();
    db.flush().unwrap();
    // Cache the intervals and link them.
    for _ in 0..2 {
        assert_eq!(ks.iter().count(), 400);
    }
    for p in 0..120 {
        let new = format!("k{p:04}1").into_bytes();
        ks.put(&new, b"new").unwrap();
        let mut it = ks.iter();
        for i in 0..=p {
            assert_eq!(it.next_ref().unwrap().unwrap().0, key(i));
        }
        db.flush().unwrap();
        let (k, v) = it.next().unwrap().unwrap();
        assert_eq!((k, &v[..]), (new.clone(), &b"new"[..]), "after key {p}");
        let rest: Vec<Vec<u8>> = it.keys().map(|k| k.unwrap()).collect();
        assert_eq!(rest, (p + 1..400).map(key).collect::<Vec<_>>());
        ks.delete(&new).unwrap();
    }
    db.check().unwrap();
}

#[test]
fn an_iterator_reads_one_sequence_and_holds_it_as_a_snapshot() {
    let vfs = FaultVfs::new(8);
    let db = open(&vfs);
    for i in 0..10u8 {
        db.put(&[i], &[i]).unwrap();
    }
    let mut it = db.iter();
    assert_eq!(db.stats().live_snapshots, 1);
    assert_eq!(it.next().unwrap().unwrap().0, vec![0]);
    db.delete(&[5]).unwrap();
    db.put(&[20], b"late").unwrap();
    db.put(&[3], b"changed").unwrap();
    let rest: Vec<_> = it.map(|r| r.unwrap()).collect();
    assert_eq!(rest.len(), 9);
    assert!(
        rest.iter().all(|(k, v)| k == v),
        "saw a later write: {rest:?}"
    );
    assert_eq!(db.stats().live_snapshots, 0, "released on drop");
    assert_eq!(db.stats().oldest_snapshot, None);
}

#[test]
fn a_snapshot_sees_exactly_what_came_before_it_in_every_keyspace() {
    let vfs = FaultVfs::new(9);
    let db = open(&vfs);
    let other = db.keyspace("other").unwrap();
    db.put(b"k", b"old").unwrap();
    other.put(b"k", b"old-other").unwrap();
    let snap = db.snapshot();
    db.put(b"k", b"new").unwrap();
    other.delete(b"k").unwrap();
    db.put(b"n", b"new").unwrap();
    assert_eq!(snap.get(b"k").unwrap(), Some(b"old".to_vec()));
    assert!(!snap.contains(b"n").unwrap());
    let snap_other = snap.keyspace(&other).unwrap();
    assert_eq!(snap_other.get(b"k").unwrap(), Some(b"old-other".to_vec()));
    assert_eq!(all(snap.iter()), vec![kv("k", "old")]);
    assert_eq!(all(snap_other.prefix(b"k")), vec![kv("k", "old-other")]);
    assert_eq!(db.stats().oldest_snapshot, Some(snap.seq()));
    drop(snap);
    assert_eq!(
        db.stats().live_snapshots,
        1,
        "the keyspace view shares the guard"
    );
    drop(snap_other);
    assert_eq!(db.stats().live_snapshots, 0);
}

#[test]
fn buffered_writes_are_acknowledged_without_a_sync_and_made_durable_by_db_sync() {
    let vfs = FaultVfs::new(10);
    let db = open(&vfs);
    db.put(b"synced", b"1").unwrap();
    let syncs = db.stats().wal_syncs;
    let ks = db.default_keyspace();
    for i in 0..10u8 {
        ks.put_with(&[i], b"b", Durability::Buffered).unwrap();
    }
    assert_eq!(db.stats().wal_syncs, syncs, "buffered writes do not sync");
    assert_eq!(
        ks.get(&[3]).unwrap(),
        Some(b"b".to_vec()),
        "visible at once"
    );
    db.sync().unwrap();
    assert_eq!(db.stats().durable_seq, db.stats().visible_seq);
    std::mem::forget(db); // no clean close: only what sync made durable counts
    vfs.crash(flexkv::io::CrashMode::DropUnsynced);
    let db = open(&vfs);
    assert_eq!(all(db.iter()).len(), 11);
}

#[test]
fn close_makes_buffered_writes_durable_and_later_use_is_refused() {
    let vfs = FaultVfs::new(11);
    let db = open(&vfs);
    let ks = db.default_keyspace();
    ks.put_with(b"b", b"1", Durability::Buffered).unwrap();
    let snap = db.snapshot();
    db.close().unwrap();
    assert!(matches!(ks.put(b"x", b"y"), Err(Error::Closed)));
    assert!(matches!(ks.get(b"b"), Err(Error::Closed)));
    assert!(matches!(snap.iter().next(), Some(Err(Error::Closed))));
    vfs.crash(flexkv::io::CrashMode::DropUnsynced);
    // The lock was released by close, although handles are alive.
    let db = open(&vfs);
    assert_eq!(db.get(b"b").unwrap(), Some(b"1".to_vec()));
}

/// An iterator that has read the store keeps it past the database's close: the store
/// is closed all the same (synced and checkpointed), the iterator's next step is
/// refused, and dropping it afterwards writes nothing, since another process may have
/// the database open by then.
#[test]
fn a_store_an_iterator_holds_at_close_is_closed_and_written_no_more() {
    let vfs = FaultVfs::new(19);
    let db = open(&vfs);
    for i in 0..50u8 {
        db.put(&[i], &[i; 40]).unwrap();
    }
    db.flush().unwrap(); // in the sorted store, so the iterator reads it
    let mut it = db.iter();
    assert_eq!(it.next().unwrap().unwrap().0, vec![0u8]);
    db.close().unwrap();
    assert!(matches!(it.next(), Some(Err(Error::Closed))));
    let changes = vfs.change_count();
    drop(it);
    assert_eq!(
        vfs.change_count(),
        changes,
        "the store wrote after the close"
    );
    vfs.crash(flexkv::io::CrashMode::DropUnsynced);
    let db = open(&vfs);
    assert_eq!(all(db.iter()).len(), 50);
    assert_eq!(db.get(&[49]).unwrap(), Some(vec![49u8; 40]));
}

#[test]
fn a_second_open_is_locked_out_until_the_first_closes() {
    let vfs = FaultVfs::new(12);
    let db = open(&vfs);
    let second = Db::builder(DIR).vfs(vfs.shared()).open();
    assert!(matches!(second, Err(Error::Locked(_))), "{second:?}");
    let ks = db.default_keyspace();
    drop(db);
    assert!(matches!(
        Db::builder(DIR).vfs(vfs.shared()).open(),
        Err(Error::Locked(_))
    ));
    drop(ks); // the last handle: closes
    open(&vfs);
}

#[test]
fn a_foreign_directory_is_refused_and_left_untouched() {
    let vfs = FaultVfs::new(13);
    vfs.create_dir_all(Path::new("/photos")).unwrap();
    let put_file = |path: &str, bytes: &[u8]| {
        let f = vfs.open(Path::new(path), OpenMode::CreateNew).unwrap();
        f.write_at(bytes, 0).unwrap();
    };
    put_file("/photos/cat.jpg", b"jpeg");
    let r = Db::builder("/photos").vfs(vfs.shared()).open();
    assert!(matches!(r, Err(Error::NotADatabase { .. })), "{r:?}");
    assert_eq!(vfs.list(Path::new("/photos")).unwrap(), vec!["cat.jpg"]);
    let r = Db::builder("/missing")
        .vfs(vfs.shared())
        .create_if_missing(false)
        .open();
    assert!(matches!(r, Err(Error::NotADatabase { .. })), "{r:?}");
    assert!(!vfs.exists(Path::new("/missing")).unwrap());
    // A MANIFEST that is not ours.
    vfs.create_dir_all(Path::new("/fake")).unwrap();
    put_file("/fake/MANIFEST", b"not a manifest at all, no");
    let r = Db::builder("/fake").vfs(vfs.shared()).open();
    assert!(matches!(r, Err(Error::NotADatabase { .. })), "{r:?}");
    assert_eq!(vfs.list(Path::new("/fake")).unwrap(), vec!["MANIFEST"]);
}

#[test]
fn a_database_from_a_newer_version_is_refused_and_left_untouched() {
    let vfs = FaultVfs::new(14);
    open(&vfs).close().unwrap();
    let path = Path::new(DIR).join("MANIFEST");
    let mut m = vfs.contents(&path).unwrap();
    m[8] = 9; // the version field
    vfs.set_contents(&path, m).unwrap();
    let names = vfs.list(Path::new(DIR)).unwrap();
    let r = Db::builder(DIR).vfs(vfs.shared()).open();
    assert!(
        matches!(r, Err(Error::UnsupportedVersion { found: 9, .. })),
        "{r:?}"
    );
    assert_eq!(vfs.list(Path::new(DIR)).unwrap(), names);
}

#[test]
fn bad_options_are_refused() {
    let vfs = FaultVfs::new(15);
    let r = Db::builder(DIR)
        .vfs(vfs.shared())
        .wal_segment_size(100)
        .open();
    assert!(matches!(r, Err(Error::InvalidArgument(m)) if m.contains("wal_segment_size")));
    assert!(!vfs.exists(Path::new(DIR)).unwrap());
}

#[test]
fn a_failed_sync_poisons_writes_until_reopen() {
    let vfs = FaultVfs::new(16);
    let db = open(&vfs);
    db.put(b"a", b"1").unwrap();
    vfs.fail_after(1); // the next operation: the WAL write
    assert!(matches!(db.put(b"b", b"2"), Err(Error::Io { .. })));
    assert!(matches!(db.put(b"c", b"3"), Err(Error::Poisoned)));
    assert!(matches!(db.sync(), Err(Error::Poisoned)));
    assert_eq!(
        db.get(b"a").unwrap(),
        Some(b"1".to_vec()),
        "reads still work"
    );
    drop(db);
    let db = open(&vfs);
    db.put(b"c", b"3").unwrap();
    assert_eq!(all(db.iter()), vec![kv("a", "1"), kv("c", "3")]);
    // And a failing sync (not write) poisons too. The operations are counted, so the
    // committer must be idle first: the reopen left it committing the replayed WAL.
    db.flush().unwrap();
    let ops = vfs.op_count();
    db.put(b"d", b"4").unwrap();
    let per_put = vfs.op_count() - ops;
    vfs.fail_after(per_put); // the last op of a put: its sync
    assert!(db.put(b"e", b"5").is_err());
    assert!(matches!(db.put(b"f", b"6"), Err(Error::Poisoned)));
}

#[test]
fn the_real_file_system_works_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::builder(dir.path()).value_threshold(100).open().unwrap();
    db.put(b"k", &[7u8; 5000]).unwrap();
    db.put(b"s", b"small").unwrap();
    assert!(matches!(Db::open(dir.path()), Err(Error::Locked(_))));
    db.close().unwrap();
    let db = Db::open(dir.path()).unwrap();
    assert_eq!(db.get(b"k").unwrap(), Some(vec![7u8; 5000]));
    assert_eq!(db.get(b"s").unwrap(), Some(b"small".to_vec()));
    let db = Arc::new(db);
    assert_eq!(db.stats().visible_seq, 2);
}

/// Damage in the WAL before records that prove it was durable refuses the open; the
/// accept-prefix option opens with what comes before it.
#[test]
fn wal_damage_before_the_tail_is_corruption_unless_a_prefix_is_accepted() {
    let vfs = FaultVfs::new(17);
    let db = open(&vfs);
    for i in 0..20u8 {
        db.put(&[i], &[i; 30]).unwrap();
    }
    std::mem::forget(db);
    vfs.crash(flexkv::io::CrashMode::DropUnsynced);
    let wal = Path::new(DIR).join("wal-00000001.log");
    let mut bytes = vfs.contents(&wal).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    vfs.set_contents(&wal, bytes).unwrap();
    let r = Db::builder(DIR).vfs(vfs.shared()).open();
    assert!(matches!(r, Err(Error::Corruption { .. })), "{r:?}");
    let db = Db::builder(DIR)
        .vfs(vfs.shared())
        .wal_recovery(flexkv::WalRecovery::AcceptPrefix)
        .open()
        .unwrap();
    let got = all(db.iter());
    assert!(!got.is_empty() && got.len() < 20, "{} pairs", got.len());
    for (i, (k, v)) in got.iter().enumerate() {
        assert_eq!(
            (k.as_slice(), v.as_slice()),
            (&[i as u8][..], &[i as u8; 30][..])
        );
    }
    assert!(db.stats().wal_tail_cut);
}

/// The WAL segments in the database's directory.
fn wal_segments(vfs: &FaultVfs) -> Vec<String> {
    let mut names: Vec<String> = (vfs.list(Path::new(DIR)).unwrap().into_iter())
        .filter(|n| n.starts_with("wal-"))
        .collect();
    names.sort();
    names
}

/// Opening a database that has nothing to replay removes the segments before the one
/// it starts: each open makes a segment, and with no writes no commit comes to remove
/// the last one, so a database opened only to read gained a file each time. With
/// something to replay they stay until its commit; the pairs are there either way.
#[test]
fn opens_without_writes_leave_one_wal_segment() {
    let vfs = FaultVfs::new(23);
    let db = open(&vfs);
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    for _ in 0..5 {
        let db = open(&vfs);
        assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
        db.close().unwrap();
        assert_eq!(wal_segments(&vfs).len(), 1, "{:?}", wal_segments(&vfs));
    }
    // A synced write replayed after a crash: the segment holding it stays until the
    // replay's commit, and that commit removes it.
    let db = open(&vfs);
    db.put(b"k2", b"v2").unwrap();
    db.sync().unwrap();
    std::mem::forget(db);
    vfs.crash(flexkv::io::CrashMode::DropUnsynced);
    let db = open(&vfs);
    assert_eq!(db.get(b"k2").unwrap().as_deref(), Some(&b"v2"[..]));
    // A crash right after the replay, most likely before its commit ends: the
    // segment holding `k2` is still there to replay again.
    std::mem::forget(db);
    vfs.crash(flexkv::io::CrashMode::DropUnsynced);
    let db = open(&vfs);
    assert_eq!(db.get(b"k2").unwrap().as_deref(), Some(&b"v2"[..]));
    db.flush().unwrap();
    db.close().unwrap();
    let db = open(&vfs);
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(db.get(b"k2").unwrap().as_deref(), Some(&b"v2"[..]));
    db.close().unwrap();
    assert_eq!(wal_segments(&vfs).len(), 1, "{:?}", wal_segments(&vfs));
}

/// Puts keys `0..n` (big-endian u32), key `i` with `len(i)` bytes of `i % 251`, one
/// batch each; returns what was put.
fn put_numbered(
    db: &Db,
    n: u32,
    len: impl Fn(u32) -> usize,
) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    let mut want = std::collections::BTreeMap::new();
    for i in 0..n {
        let v = vec![(i % 251) as u8; len(i)];
        db.put(&i.to_be_bytes(), &v).unwrap();
        want.insert(i.to_be_bytes().to_vec(), v);
    }
    want
}

/// Flip or truncate bytes of every file kind: opening and reading give `Corruption` (or
/// another clean error) or correct data, never a panic and never a wrong value.
#[test]
fn damaged_files_give_errors_or_correct_data_never_wrong_data() {
    use rand::{Rng, SeedableRng};
    let base = FaultVfs::new(18);
    let db = open_small_values(&base);
    let want = put_numbered(&db, 60, |i| if i % 3 == 0 { 100 } else { 5 });
    db.close().unwrap();
    // The database directory's files and the default keyspace's FlexSpace files.
    let ks = Path::new(DIR).join("ks-00000000");
    let files: Vec<_> = [Path::new(DIR), ks.as_path()]
        .into_iter()
        .flat_map(|dir| {
            let names = base.list(dir).unwrap();
            names.into_iter().map(move |n| dir.join(n))
        })
        .filter(|p| !p.ends_with("LOCK") && !p.ends_with("flexspace.lock"))
        .collect();
    assert!(
        files.iter().any(|p| p.ends_with("flexspace.data")),
        "{files:?}"
    );
    let mut rng = rand::rngs::SmallRng::seed_from_u64(18);
    let (mut refused, mut opened) = (0, 0);
    for trial in 0..150 {
        let vfs = FaultVfs::new(trial);
        // Copy the database into a fresh file system.
        vfs.create_dir_all(&ks).unwrap();
        for path in &files {
            vfs.open(path, OpenMode::CreateNew).unwrap();
            vfs.set_contents(path, base.contents(path).unwrap())
                .unwrap();
        }
        let victim = files[trial as usize % files.len()].clone();
        let mut bytes = vfs.contents(&victim).unwrap();
        if bytes.is_empty() {
            continue;
        }
        if rng.random_bool(0.3) {
            bytes.truncate(rng.random_range(0..bytes.len()));
        } else {
            let at = rng.random_range(0..bytes.len());
            bytes[at] ^= 1 << rng.random_range(0..8);
        }
        vfs.set_contents(&victim, bytes).unwrap();
        let db = match Db::builder(DIR)
            .vfs(vfs.shared())
            .value_threshold(16)
            .open()
        {
            Ok(db) => db,
            Err(
                Error::Corruption { .. }
                | Error::NotADatabase { .. }
                | Error::UnsupportedVersion { .. },
            ) => {
                refused += 1;
                continue;
            }
            Err(e) => panic!("trial {trial} ({victim:?}): unexpected error {e}"),
        };
        opened += 1;
        // Keys were written one batch each, in order: what is missing is a suffix.
        let mut missing_from = None;
        for (k, v) in &want {
            match db.get(k) {
                Ok(Some(got)) => {
                    assert_eq!(&got, v, "trial {trial} ({victim:?}): wrong value");
                    assert!(
                        missing_from.is_none(),
                        "trial {trial}: a hole in the history"
                    );
                }
                Ok(None) => {
                    missing_from.get_or_insert(k.clone());
                }
                Err(Error::Corruption { .. }) => {}
                Err(e) => panic!("trial {trial} ({victim:?}): unexpected error {e}"),
            }
        }
    }
    assert!(
        refused > 0 && opened > 0,
        "refused {refused}, opened {opened}"
    );
}

/// The sorted keyspace reads its intervals without the data file's block checksums and
/// relies on each record's own: a bit flipped anywhere in the data file after the open
/// (which verifies the blocks holding interval heads) must give `Corruption` on reading
/// the damaged interval, or the right value where the bit lies outside every record,
/// never a wrong value or a panic.
#[test]
fn a_flipped_bit_in_the_keyspace_data_file_is_caught_by_the_records_checksums() {
    let base = FaultVfs::new(19);
    let db = open(&base);
    let want = put_numbered(&db, 60, |i| 1 + (i as usize * 7) % 120);
    db.close().unwrap();
    let ks = Path::new(DIR).join("ks-00000000");
    let data = ks.join("flexspace.data");
    let len = base.contents(&data).unwrap().len();
    let (mut caught, mut trials) = (0, 0);
    for at in (0..len).step_by(7) {
        let vfs = FaultVfs::new(at as u64);
        for dir in [Path::new(DIR), ks.as_path()] {
            vfs.create_dir_all(dir).unwrap();
            for name in base.list(dir).unwrap().into_iter().filter(|n| n != "LOCK") {
                let path = dir.join(name);
                vfs.open(&path, OpenMode::CreateNew).unwrap();
                vfs.set_contents(&path, base.contents(&path).unwrap())
                    .unwrap();
            }
        }
        let db = open(&vfs);
        let mut bytes = vfs.contents(&data).unwrap();
        bytes[at] ^= 1 << (at % 8);
        vfs.set_contents(&data, bytes).unwrap();
        trials += 1;
        let mut seen_error = false;
        for (k, v) in &want {
            match db.get(k) {
                Ok(got) => assert_eq!(got.as_ref(), Some(v), "offset {at}: wrong value"),
                Err(Error::Corruption { .. }) => seen_error = true,
                Err(e) => panic!("offset {at}: unexpected error {e}"),
            }
        }
        caught += usize::from(seen_error);
    }
    // Records fill the file's written bytes but for a little padding: nearly every
    // flip must be caught.
    assert!(caught * 10 >= trials * 9, "caught {caught} of {trials}");
}

#[test]
fn check_reads_every_record_and_names_the_damaged_file() {
    let vfs = FaultVfs::new(19);
    let db = open_small_values(&vfs);
    for i in 0..10u8 {
        db.put(&[i], &[i; 40]).unwrap();
    }
    let r = db.check().unwrap();
    assert_eq!((r.wal_records, r.vlog_records, r.values_read), (10, 10, 10));
    let vlog = Path::new(DIR).join("vlog-00000001.seg");
    let mut bytes = vfs.contents(&vlog).unwrap();
    bytes[100] ^= 1;
    vfs.set_contents(&vlog, bytes).unwrap();
    match db.check() {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, vlog),
        other => panic!("{other:?}"),
    }
    drop(db);
    let vfs = FaultVfs::new(20);
    let db = open(&vfs);
    for i in 0..10u8 {
        db.put(&[i], b"v").unwrap();
    }
    let wal = Path::new(DIR).join("wal-00000001.log");
    let mut bytes = vfs.contents(&wal).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 1;
    vfs.set_contents(&wal, bytes).unwrap();
    match db.check() {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, wal),
        other => panic!("{other:?}"),
    }
}

/// Handles cross threads: the database, keyspaces, snapshots, iterators and batches.
#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Db>();
    send_sync::<flexkv::Keyspace>();
    send_sync::<flexkv::Snapshot>();
    send_sync::<flexkv::Iter>();
    send_sync::<WriteBatch>();
    let vfs = FaultVfs::new(21);
    let db = Arc::new(open(&vfs));
    db.put(b"k", b"v").unwrap();
    let snap = db.snapshot();
    let it = db.iter();
    let got = std::thread::spawn(move || (snap.get(b"k").unwrap(), it.count()))
        .join()
        .unwrap();
    assert_eq!(got, (Some(b"v".to_vec()), 1));
}

/// A file system that calls `hook` with the path before every sync of a keyspace's
/// FlexSpace files (a planted bug, or a sync held up).
struct SyncHookVfs {
    inner: Arc<dyn Vfs>,
    hook: SyncHook,
}

type SyncHook = Arc<dyn Fn(&Path) + Send + Sync>;

impl std::fmt::Debug for SyncHookVfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncHookVfs").finish_non_exhaustive()
    }
}

struct SyncHookFile {
    inner: Arc<dyn flexkv::io::VfsFile>,
    hook: SyncHook,
}

impl std::fmt::Debug for SyncHookFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncHookFile")
            .field("path", &self.inner.path())
            .finish_non_exhaustive()
    }
}

impl Vfs for SyncHookVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> flexkv::Result<Arc<dyn flexkv::io::VfsFile>> {
        let inner = self.inner.open(path, mode)?;
        Ok(Arc::new(SyncHookFile {
            inner,
            hook: Arc::clone(&self.hook),
        }))
    }
    fn exists(&self, path: &Path) -> flexkv::Result<bool> {
        self.inner.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> flexkv::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> flexkv::Result<()> {
        self.inner.remove(path)
    }
    fn list(&self, dir: &Path) -> flexkv::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> flexkv::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> flexkv::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn lock(&self, path: &Path) -> flexkv::Result<flexkv::io::FileLock> {
        self.inner.lock(path)
    }
}

impl flexkv::io::VfsFile for SyncHookFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> flexkv::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> flexkv::Result<()> {
        self.inner.write_at(data, offset)
    }
    fn append(&self, data: &[u8]) -> flexkv::Result<u64> {
        self.inner.append(data)
    }
    fn len(&self) -> flexkv::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> flexkv::Result<()> {
        self.inner.set_len(len)
    }
    fn punch_hole(&self, offset: u64, len: u64) -> flexkv::Result<()> {
        self.inner.punch_hole(offset, len)
    }
    fn sync(&self) -> flexkv::Result<()> {
        let name = self.path().file_name().and_then(|n| n.to_str());
        if name.is_some_and(|n| n.starts_with("flexspace.")) {
            (self.hook)(self.path());
        }
        self.inner.sync()
    }
}

/// A point read that misses the caches does not wait while a commit syncs the
/// space's data file (tens of milliseconds at 10M pairs, which reads used to spend
/// blocked on the keyspace's lock): the sync is held up here until the read is done.
#[test]
fn a_read_from_the_space_does_not_wait_for_the_data_file_sync() {
    let vfs = FaultVfs::new(23);
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let gate = std::sync::Mutex::new((entered_tx, release_rx));
    let hook: SyncHook = {
        let armed = Arc::clone(&armed);
        Arc::new(move |path: &Path| {
            if path.ends_with("flexspace.data")
                && armed.swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                let gate = gate.lock().unwrap();
                gate.0.send(()).unwrap();
                gate.1.recv().unwrap();
            }
        })
    };
    // A cache far smaller than the index: every read goes to the space.
    let db = Arc::new(
        Db::builder(DIR)
            .vfs(Arc::new(SyncHookVfs {
                inner: vfs.shared(),
                hook,
            }))
            .cache_bytes(1)
            .open()
            .unwrap(),
    );
    for i in 0..2000 {
        db.put(format!("k{i:05}").as_bytes(), b"committed").unwrap();
    }
    db.flush().unwrap();
    let hits = db.stats().cache_hits;
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    db.put(b"k99999", b"new").unwrap();
    let committer = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || db.flush())
    };
    entered_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the commit never synced the data file");
    let (read_tx, read_rx) = std::sync::mpsc::channel();
    let reader = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || read_tx.send(db.get(b"k01234").unwrap()).unwrap())
    };
    let read = read_rx.recv_timeout(Duration::from_secs(5));
    release_tx.send(()).unwrap();
    committer.join().unwrap().unwrap();
    reader.join().unwrap();
    assert_eq!(
        read.expect("the read waited for the data file's sync"),
        Some(b"committed".to_vec())
    );
    assert_eq!(
        db.stats().cache_hits,
        hits,
        "the read was answered by a cache"
    );
    assert_eq!(db.get(b"k99999").unwrap(), Some(b"new".to_vec()));
}

/// A panic in the committer fails the database as an error does: writers waiting for
/// room get `Poisoned` instead of waiting for ever, the store it may have left half
/// edited refuses reads, `close` reports the panic and writes nothing more to that
/// store, and a reopen finds every acknowledged write.
#[test]
fn a_panic_in_the_committer_poisons_the_database_and_loses_no_acknowledged_write() {
    let vfs = FaultVfs::new(22);
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let db = Db::builder(DIR)
        .vfs(Arc::new(SyncHookVfs {
            inner: vfs.shared(),
            hook: {
                let armed = Arc::clone(&armed);
                Arc::new(move |path: &Path| {
                    if armed.load(std::sync::atomic::Ordering::SeqCst) {
                        panic!("planted: a sync of {}", path.display());
                    }
                })
            },
        }))
        .memtable_size(64 << 10)
        .idle_commit(Duration::ZERO)
        .open()
        .unwrap();
    for i in 0..1000 {
        db.put(format!("k{i:05}").as_bytes(), b"committed").unwrap();
    }
    db.flush().unwrap();
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    // Buffered batches, far more than the memtables hold: the writer must come to
    // wait for the committer, which has panicked by then.
    let db = Arc::new(db);
    let writer = Arc::clone(&db);
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let ks = writer.default_keyspace();
        let mut acked = 0u32;
        let err = loop {
            if acked >= 200_000 {
                break None;
            }
            let mut b = WriteBatch::new();
            b.durability(Durability::Buffered);
            for i in acked..acked + 100 {
                b.put(&ks, format!("n{i:06}").as_bytes(), &[7u8; 100])
                    .unwrap();
            }
            match writer.write(b) {
                Ok(_) => acked += 100,
                Err(e) => break Some(e),
            }
        };
        tx.send((acked, err)).unwrap();
    });
    let (acked, err) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the writer hung after the committer panicked");
    handle.join().unwrap();
    assert!(
        matches!(err, Some(Error::Poisoned)),
        "after {acked} pairs: {err:?}"
    );
    assert!(acked > 0, "no write was acknowledged before the refusal");
    assert!(matches!(db.get(b"k00000"), Err(Error::Poisoned)));
    assert!(matches!(db.flush(), Err(Error::Poisoned)));
    let db = Arc::into_inner(db).unwrap();
    // Still armed: a close that synced the broken store would panic here.
    match db.close() {
        Err(Error::Panicked { thread, message }) => {
            assert_eq!(thread, "committer");
            assert!(message.contains("planted"), "{message}");
        }
        other => panic!("close after the panic: {other:?}"),
    }
    let db = open(&vfs);
    for i in 0..1000 {
        let key = format!("k{i:05}");
        assert_eq!(db.get(key.as_bytes()).unwrap(), Some(b"committed".to_vec()));
    }
    for i in 0..acked {
        let key = format!("n{i:06}");
        assert_eq!(
            db.get(key.as_bytes()).unwrap(),
            Some(vec![7u8; 100]),
            "{key}"
        );
    }
    db.check().unwrap();
}
