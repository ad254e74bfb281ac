//! Tests of the fault-injecting file system itself: each crash mode leaves exactly the
//! states it promises, and faults fail exactly the operations they name.

use super::*;

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

fn fresh(seed: u64) -> FaultVfs {
    let vfs = FaultVfs::new(seed);
    vfs.create_dir_all(&dir()).unwrap();
    vfs
}

/// A file whose name is durable and which holds `base`, durably.
fn durable_file(vfs: &FaultVfs, name: &str, base: &[u8]) -> Arc<dyn VfsFile> {
    let f = vfs.open(&dir().join(name), OpenMode::CreateNew).unwrap();
    f.append(base).unwrap();
    f.sync().unwrap();
    vfs.sync_dir(&dir()).unwrap();
    f
}

fn read_all(vfs: &FaultVfs, name: &str) -> Option<Vec<u8>> {
    vfs.contents(&dir().join(name))
}

#[test]
fn drop_unsynced_keeps_exactly_what_sync_covered() {
    let vfs = fresh(1);
    let f = durable_file(&vfs, "f", b"synced");
    f.append(b"-lost").unwrap();
    f.write_at(b"X", 0).unwrap();
    assert_eq!(read_all(&vfs, "f").unwrap(), b"Xynced-lost");
    assert_eq!(vfs.crash(CrashMode::DropUnsynced), CrashMode::DropUnsynced);
    assert_eq!(read_all(&vfs, "f").unwrap(), b"synced");
}

#[test]
fn a_synced_file_whose_name_was_never_synced_vanishes() {
    for mode in [CrashMode::DropUnsynced, CrashMode::LoseDirChanges] {
        let vfs = fresh(2);
        let f = vfs.open(&dir().join("new"), OpenMode::CreateNew).unwrap();
        f.append(b"data").unwrap();
        f.sync().unwrap();
        vfs.crash(mode);
        assert_eq!(read_all(&vfs, "new"), None, "{mode:?}");
        assert_eq!(vfs.list(&dir()).unwrap(), Vec::<String>::new());
    }
    // With the directory synced, the name survives the same crash.
    let vfs = fresh(2);
    let f = vfs.open(&dir().join("new"), OpenMode::CreateNew).unwrap();
    f.append(b"data").unwrap();
    f.sync().unwrap();
    vfs.sync_dir(&dir()).unwrap();
    vfs.crash(CrashMode::DropUnsynced);
    assert_eq!(read_all(&vfs, "new").unwrap(), b"data");
}

#[test]
fn keep_prefix_leaves_a_prefix_of_the_writes_and_every_prefix_occurs() {
    let mut seen = BTreeSet::new();
    for seed in 0..200 {
        let vfs = fresh(seed);
        let f = durable_file(&vfs, "f", b"base");
        for i in 0..10u8 {
            f.append(&[b'0' + i]).unwrap();
        }
        vfs.crash(CrashMode::KeepPrefix);
        let got = read_all(&vfs, "f").unwrap();
        assert!(got.starts_with(b"base"));
        let tail = &got[4..];
        assert!(b"0123456789".starts_with(tail), "not a prefix: {tail:?}");
        seen.insert(tail.len());
    }
    assert_eq!(
        seen.len(),
        11,
        "every prefix length 0..=10 should occur: {seen:?}"
    );
}

#[test]
fn tear_last_write_cuts_inside_a_sector_and_fills_the_rest_with_garbage() {
    let record: Vec<u8> = (0..2000u32).map(|i| (i % 251) as u8).collect();
    let mut torn_seen = 0;
    for seed in 0..100 {
        let vfs = fresh(seed);
        let f = durable_file(&vfs, "f", b"");
        f.append(&record).unwrap();
        vfs.crash(CrashMode::TearLastWrite);
        let got = read_all(&vfs, "f").unwrap();
        // The kept part is a prefix of the record up to some cut, followed by garbage that
        // reaches no further than the end of the cut's sector.
        let cut = got.iter().zip(&record).take_while(|(a, b)| a == b).count() as u64;
        let sector_end = (cut / SECTOR + 1) * SECTOR;
        assert!(
            got.len() as u64 <= sector_end.min(record.len() as u64),
            "seed {seed}: {} bytes after a cut at {cut}",
            got.len()
        );
        if got != record {
            torn_seen += 1;
        }
    }
    assert!(torn_seen > 90, "the only write is always the torn one");
}

#[test]
fn lose_dir_changes_keeps_file_data_but_undoes_renames_and_removes() {
    let vfs = fresh(3);
    let old = durable_file(&vfs, "MANIFEST", b"old");
    let gone = durable_file(&vfs, "gone", b"still here");
    old.append(b"+unsynced").unwrap();
    let tmp = vfs
        .open(&dir().join("MANIFEST.tmp"), OpenMode::CreateNew)
        .unwrap();
    tmp.append(b"new").unwrap();
    tmp.sync().unwrap();
    vfs.rename(&dir().join("MANIFEST.tmp"), &dir().join("MANIFEST"))
        .unwrap();
    vfs.remove(&dir().join("gone")).unwrap();
    drop(gone);
    assert_eq!(read_all(&vfs, "MANIFEST").unwrap(), b"new");
    vfs.crash(CrashMode::LoseDirChanges);
    // The rename never happened on disk; the unsynced append to the old file did.
    assert_eq!(read_all(&vfs, "MANIFEST").unwrap(), b"old+unsynced");
    assert_eq!(read_all(&vfs, "MANIFEST.tmp"), None);
    assert_eq!(read_all(&vfs, "gone").unwrap(), b"still here");
}

#[test]
fn sync_dir_makes_renames_and_removes_durable() {
    let vfs = fresh(4);
    durable_file(&vfs, "a", b"A");
    durable_file(&vfs, "b", b"B");
    vfs.rename(&dir().join("a"), &dir().join("c")).unwrap();
    vfs.remove(&dir().join("b")).unwrap();
    vfs.sync_dir(&dir()).unwrap();
    vfs.crash(CrashMode::DropUnsynced);
    assert_eq!(vfs.list(&dir()).unwrap(), vec!["c".to_string()]);
    assert_eq!(read_all(&vfs, "c").unwrap(), b"A");
}

#[test]
fn sync_dir_of_one_directory_leaves_the_others_unsynced() {
    let vfs = fresh(5);
    vfs.create_dir_all(Path::new("/other")).unwrap();
    vfs.open(&dir().join("x"), OpenMode::CreateNew).unwrap();
    vfs.open(Path::new("/other/y"), OpenMode::CreateNew)
        .unwrap();
    vfs.sync_dir(&dir()).unwrap();
    vfs.crash(CrashMode::DropUnsynced);
    assert!(vfs.exists(&dir().join("x")).unwrap());
    assert!(!vfs.exists(Path::new("/other/y")).unwrap());
}

#[test]
fn set_len_and_punch_hole_are_unsynced_changes_like_writes() {
    let vfs = fresh(6);
    let f = durable_file(&vfs, "f", b"abcdefgh");
    f.punch_hole(2, 3).unwrap();
    f.set_len(6).unwrap();
    assert_eq!(read_all(&vfs, "f").unwrap(), b"ab\0\0\0f");
    assert_eq!(f.len().unwrap(), 6);
    f.set_len(8).unwrap();
    assert_eq!(read_all(&vfs, "f").unwrap(), b"ab\0\0\0f\0\0");
    vfs.crash(CrashMode::DropUnsynced);
    assert_eq!(read_all(&vfs, "f").unwrap(), b"abcdefgh");
}

#[test]
fn fail_after_fails_exactly_the_nth_operation_and_changes_nothing() {
    let vfs = fresh(7);
    let f = durable_file(&vfs, "f", b"");
    vfs.fail_after(2);
    f.append(b"1").unwrap();
    let err = f.append(b"2").unwrap_err();
    assert!(matches!(err, Error::Io { op: "append", .. }), "{err}");
    f.append(b"3").unwrap();
    assert_eq!(read_all(&vfs, "f").unwrap(), b"13");
}

#[test]
fn fail_from_fails_every_later_operation_until_cleared() {
    let vfs = fresh(8);
    let f = durable_file(&vfs, "f", b"");
    let before = vfs.op_count();
    vfs.fail_from(1);
    assert!(f.sync().is_err());
    assert!(vfs.list(&dir()).is_err());
    assert!(vfs.open(&dir().join("g"), OpenMode::Create).is_err());
    assert_eq!(
        vfs.op_count(),
        before + 3,
        "failed operations are counted too"
    );
    vfs.clear_faults();
    f.sync().unwrap();
    assert!(!vfs.exists(&dir().join("g")).unwrap());
}

#[test]
fn fail_changes_from_fails_only_what_changes_the_disk_counting_from_now() {
    let vfs = fresh(10);
    let f = durable_file(&vfs, "f", b"ab");
    let g = durable_file(&vfs, "g", b"");
    let (ops, changes) = (vfs.op_count(), vfs.change_count());
    vfs.fail_changes_from(2);
    // Reads are neither counted as changes nor failed.
    let mut buf = [0u8; 2];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 2);
    assert_eq!(f.len().unwrap(), 2);
    assert!(vfs.list(&dir()).is_ok());
    // The first change from now passes; the second and every later one fail.
    g.append(b"1").unwrap();
    assert!(matches!(
        g.append(b"2"),
        Err(Error::Io { op: "append", .. })
    ));
    assert!(matches!(f.sync(), Err(Error::Io { op: "sync", .. })));
    assert!(matches!(
        f.punch_hole(0, 1),
        Err(Error::Io {
            op: "punch_hole",
            ..
        })
    ));
    assert!(matches!(
        vfs.sync_dir(&dir()),
        Err(Error::Io { op: "sync_dir", .. })
    ));
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 2);
    assert_eq!(&buf, b"ab");
    assert_eq!(
        vfs.change_count(),
        changes + 5,
        "failed changes are counted too"
    );
    assert_eq!(vfs.op_count(), ops + 9);
    vfs.clear_faults();
    g.append(b"3").unwrap();
    assert_eq!(read_all(&vfs, "g").unwrap(), b"13");
}

#[test]
fn handles_are_stale_and_locks_released_after_a_crash() {
    let vfs = fresh(9);
    let f = durable_file(&vfs, "f", b"x");
    let lock = vfs.lock(&dir().join("LOCK")).unwrap();
    assert!(matches!(
        vfs.lock(&dir().join("LOCK")),
        Err(Error::Locked(_))
    ));
    vfs.crash(CrashMode::DropUnsynced);
    assert!(
        f.append(b"y").is_err(),
        "a handle from before the crash must not write"
    );
    let relock = vfs.lock(&dir().join("LOCK")).unwrap();
    // Dropping the pre-crash guard must not release the new owner's lock.
    drop(lock);
    assert!(matches!(
        vfs.lock(&dir().join("LOCK")),
        Err(Error::Locked(_))
    ));
    drop(relock);
    vfs.lock(&dir().join("LOCK")).unwrap();
}

#[test]
fn the_same_seed_and_workload_crash_into_the_same_state() {
    let run = |seed| {
        let vfs = fresh(seed);
        let f = durable_file(&vfs, "f", b"base");
        for i in 0..50u8 {
            f.append(&[i; 37]).unwrap();
        }
        let mode = vfs.crash(CrashMode::Random);
        (mode, read_all(&vfs, "f"))
    };
    for seed in 0..20 {
        assert_eq!(run(seed), run(seed));
    }
    let modes: BTreeSet<String> = (0..40).map(|s| format!("{:?}", run(s).0)).collect();
    assert_eq!(
        modes.len(),
        4,
        "Random draws every concrete mode: {modes:?}"
    );
}

#[test]
fn open_modes_and_missing_parents_are_errors() {
    let vfs = fresh(10);
    let p = dir().join("f");
    assert!(vfs.open(&p, OpenMode::Existing).is_err());
    vfs.open(&p, OpenMode::CreateNew).unwrap();
    assert!(vfs.open(&p, OpenMode::CreateNew).is_err());
    assert!(vfs.open(Path::new("/nowhere/f"), OpenMode::Create).is_err());
    assert!(vfs.remove(&dir().join("missing")).is_err());
    assert!(vfs.list(Path::new("/nowhere")).is_err());
}

/// A view of a file is a copy of its bytes taken without an operation: no count, so no
/// crash point and no injected fault; a handle from before a crash maps nothing.
#[test]
fn a_mapping_counts_no_operation_and_dies_with_its_handle() {
    let vfs = fresh(9);
    let f = durable_file(&vfs, "m", b"mapped bytes");
    let before = vfs.op_count();
    vfs.fail_after(1); // the next operation fails: a mapping is none
    let m = f.map(6).expect("a copy of the first bytes");
    assert_eq!(&m[..], b"mapped");
    assert_eq!(vfs.op_count(), before, "no operation counted");
    assert!(
        f.len().is_err(),
        "the fault still waits for the next operation"
    );
    vfs.crash(CrashMode::DropUnsynced);
    assert!(f.map(6).is_none(), "a stale handle");
}
