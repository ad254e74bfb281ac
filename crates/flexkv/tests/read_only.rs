//! Databases opened read-only (`Builder::read_only`): every read works, every change is
//! refused, and nothing on disk changes, not even on a disk that refuses every write
//! (the fault-injecting file system failing every change, as a full disk or a
//! read-only mount does), after a crash that left work in the WAL, or with a torn WAL.
#![allow(clippy::unwrap_used)]

mod common;
use common::open_quiet as open;

use std::collections::BTreeMap;
use std::path::Path;

use flexkv::io::{CrashMode, FaultVfs, Vfs};
use flexkv::{Db, Error};

const DIR: &str = "/db";

fn open_read_only(vfs: &FaultVfs) -> flexkv::Result<Db> {
    Db::builder(DIR).vfs(vfs.shared()).read_only(true).open()
}

/// Every file of the database and its bytes (its directory and its keyspaces').
fn files(vfs: &FaultVfs) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for dir in ["", "ks-00000000", "ks-00000001"].map(|d| Path::new(DIR).join(d)) {
        if !vfs.exists(&dir).unwrap() {
            continue;
        }
        for name in vfs.list(&dir).unwrap() {
            let path = dir.join(&name);
            out.insert(path.display().to_string(), vfs.contents(&path).unwrap());
        }
    }
    out
}

fn pairs(db: &Db) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.iter().map(|r| r.unwrap()).collect()
}

/// A database with pairs in its sorted keyspace, a separated value in its value log,
/// a second keyspace, and (after a crash) synced pairs only its WAL holds. Returns
/// what its default keyspace holds.
fn crashed_with_work_in_the_wal(vfs: &FaultVfs) -> Vec<(Vec<u8>, Vec<u8>)> {
    let db = open(vfs);
    let mut want = BTreeMap::new();
    for i in 0..200u32 {
        let (k, v) = (format!("k{i:04}").into_bytes(), vec![i as u8; 40]);
        db.put(&k, &v).unwrap();
        want.insert(k, v);
    }
    db.put(b"big", &[7; 10_000]).unwrap();
    want.insert(b"big".to_vec(), vec![7; 10_000]);
    db.keyspace("other").unwrap().put(b"o", b"1").unwrap();
    db.flush().unwrap();
    for i in 200..300u32 {
        let (k, v) = (format!("k{i:04}").into_bytes(), vec![i as u8; 40]);
        db.put(&k, &v).unwrap();
        want.insert(k, v);
    }
    db.delete(b"k0007").unwrap();
    want.remove(&b"k0007"[..]);
    db.sync().unwrap();
    std::mem::forget(db);
    vfs.crash(CrashMode::DropUnsynced);
    want.into_iter().collect()
}

#[test]
fn a_read_only_open_reads_everything_and_changes_nothing_on_a_disk_that_refuses_writes() {
    let vfs = FaultVfs::new(41);
    let want = crashed_with_work_in_the_wal(&vfs);
    let before = files(&vfs);
    let changes = vfs.change_count();
    // Every change from now on fails, as on a full disk or a read-only mount.
    vfs.fail_changes_from(1);
    let db = open_read_only(&vfs).unwrap();
    assert_eq!(pairs(&db), want);
    assert_eq!(db.get(b"k0250").unwrap(), Some(vec![250; 40]));
    assert_eq!(db.get(b"k0007").unwrap(), None);
    assert_eq!(db.get(b"big").unwrap(), Some(vec![7; 10_000]));
    let other = db.keyspace("other").unwrap();
    assert_eq!(other.get(b"o").unwrap().as_deref(), Some(&b"1"[..]));
    let snap = db.snapshot();
    assert_eq!(snap.get(b"k0001").unwrap(), Some(vec![1; 40]));
    let report = db.check().unwrap();
    assert!(
        report.wal_records > 0 && report.values_read == 1,
        "{report:?}"
    );
    assert!(db.stats().memtable_entries > 0);
    // Every change is refused, and says why.
    for r in [
        db.put(b"x", b"y"),
        db.delete(b"k0001"),
        db.sync(),
        db.flush(),
        db.gc().map(drop),
        db.keyspace("new").map(drop),
    ] {
        assert!(matches!(r, Err(Error::ReadOnly(_))), "{r:?}");
    }
    drop(snap);
    db.close().unwrap();
    assert_eq!(
        vfs.change_count(),
        changes,
        "a read-only session tried a change"
    );
    assert_eq!(files(&vfs), before);
    // Opened as usual, the database has it all, and commits what the WAL held.
    vfs.clear_faults();
    let db = open(&vfs);
    assert_eq!(pairs(&db), want);
    db.close().unwrap();
}

#[test]
fn a_torn_wal_is_read_up_to_the_tear_and_left_as_it_is() {
    let vfs = FaultVfs::new(43);
    let db = open(&vfs);
    for i in 0..20u8 {
        db.put(&[i], &[i; 30]).unwrap();
    }
    std::mem::forget(db);
    vfs.crash(CrashMode::DropUnsynced);
    // Damage the last record: a torn tail.
    let wal = vfs
        .list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("wal-"))
        .max()
        .unwrap();
    let wal = Path::new(DIR).join(wal);
    let mut bytes = vfs.contents(&wal).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0x55;
    vfs.set_contents(&wal, bytes).unwrap();
    let before = files(&vfs);
    let db = open_read_only(&vfs).unwrap();
    let got = pairs(&db);
    assert_eq!(got.len(), 19, "{got:?}");
    assert!(db.stats().wal_tail_cut);
    // The tear is not damage to report: the log ends there.
    db.check().unwrap();
    db.close().unwrap();
    assert_eq!(files(&vfs), before);
    // Opened as usual, the tail is cut and the same pairs are there.
    let db = open(&vfs);
    assert_eq!(pairs(&db), got);
    db.close().unwrap();
    assert_ne!(files(&vfs), before);
}

/// Read-only handles share the database with each other and not with a writer.
#[test]
fn a_read_only_open_creates_nothing_and_shares_only_with_readers() {
    let vfs = FaultVfs::new(47);
    let r = open_read_only(&vfs);
    assert!(matches!(r, Err(Error::NotADatabase { .. })), "{r:?}");
    assert_eq!(vfs.change_count(), 0);
    let db = open(&vfs);
    db.put(b"a", b"1").unwrap();
    let r = open_read_only(&vfs);
    assert!(matches!(r, Err(Error::Locked(_))), "{r:?}");
    db.close().unwrap();
    let first = open_read_only(&vfs).unwrap();
    let second = open_read_only(&vfs).unwrap();
    for ro in [&first, &second] {
        assert_eq!(ro.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    }
    let r = Db::builder(DIR).vfs(vfs.shared()).open();
    assert!(matches!(r, Err(Error::Locked(_))), "{r:?}");
    first.close().unwrap();
    let r = Db::builder(DIR).vfs(vfs.shared()).open();
    assert!(matches!(r, Err(Error::Locked(_))), "{r:?}");
    second.close().unwrap();
    let db = open(&vfs);
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
}
