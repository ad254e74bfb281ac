use super::*;
use crate::io::{assert_writeback_steps, CrashMode, FaultVfs};

const DIR: &str = "/db";

fn open(vfs: &FaultVfs, segment_size: u64) -> ValueLog {
    vfs.create_dir_all(Path::new(DIR)).unwrap();
    ValueLog::open(vfs.shared(), Path::new(DIR), segment_size).unwrap()
}

fn value(i: usize) -> Vec<u8> {
    vec![i as u8; 100 + i]
}

fn put(log: &ValueLog, i: usize) -> Pointer {
    let key = format!("key{i}");
    let v = value(i);
    let nv = NewValue {
        ks: 0,
        key: key.as_bytes(),
        seq: i as u64,
        value: &v,
    };
    log.append(&[nv]).unwrap()[0]
}

#[test]
fn values_read_back_through_their_pointers_across_segments() {
    let vfs = FaultVfs::new(1);
    let log = open(&vfs, 1000);
    let ptrs: Vec<_> = (0..30).map(|i| put(&log, i)).collect();
    assert!(ptrs.last().unwrap().segment > 1, "small segments must roll");
    for (i, p) in ptrs.iter().enumerate() {
        let key = format!("key{i}");
        assert_eq!(log.read(p, 0, key.as_bytes()).unwrap(), value(i));
        assert!(log.holds(p, key.len()).unwrap());
    }
    let live: u64 = log.live_bytes().values().sum();
    assert_eq!(live, log.bytes_written());
}

#[test]
fn a_read_for_the_wrong_key_keyspace_or_check_is_corruption() {
    let vfs = FaultVfs::new(2);
    let log = open(&vfs, 1 << 20);
    let p = put(&log, 3);
    let wrong_key = log.read(&p, 0, b"key4");
    assert!(
        matches!(wrong_key, Err(Error::Corruption { .. })),
        "{wrong_key:?}"
    );
    assert!(matches!(
        log.read(&p, 1, b"key3"),
        Err(Error::Corruption { .. })
    ));
    let bad_check = Pointer {
        check: p.check ^ 1,
        ..p
    };
    assert!(matches!(
        log.read(&bad_check, 0, b"key3"),
        Err(Error::Corruption { .. })
    ));
    let missing = Pointer { segment: 99, ..p };
    assert!(matches!(
        log.read(&missing, 0, b"key3"),
        Err(Error::Corruption { .. })
    ));
    // A flipped value byte on disk (in a record that is not the last, which open would
    // take for a torn tail).
    put(&log, 4);
    log.sync().unwrap();
    let path = Path::new(DIR).join(segment_name(1));
    let mut bytes = vfs.contents(&path).unwrap();
    bytes[p.record_len(4) as usize - 1] ^= 1;
    vfs.set_contents(&path, bytes).unwrap();
    let log = open(&vfs, 1 << 20);
    assert!(matches!(
        log.read(&p, 0, b"key3"),
        Err(Error::Corruption { .. })
    ));
}

#[test]
fn open_cuts_a_torn_tail_back_to_the_last_whole_record() {
    for seed in 0..40 {
        let vfs = FaultVfs::new(seed);
        let log = open(&vfs, 1 << 20);
        let synced: Vec<_> = (0..5).map(|i| put(&log, i)).collect();
        log.sync().unwrap();
        let unsynced: Vec<_> = (5..10).map(|i| put(&log, i)).collect();
        drop(log);
        vfs.crash(CrashMode::Random);
        let log = open(&vfs, 1 << 20);
        log.cut_tail().unwrap();
        for (i, p) in synced.iter().enumerate() {
            assert_eq!(
                log.read(p, 0, format!("key{i}").as_bytes()).unwrap(),
                value(i)
            );
        }
        // What survived of the unsynced records is a prefix, and nothing dangles into a
        // half record.
        let mut gone = false;
        for (j, p) in unsynced.iter().enumerate() {
            let key = format!("key{}", j + 5);
            let held = log.holds(p, key.len()).unwrap();
            assert!(
                !(gone && held),
                "seed {seed}: record {j} survived after a lost one"
            );
            gone |= !held;
            if held {
                assert_eq!(log.read(p, 0, key.as_bytes()).unwrap(), value(j + 5));
            }
        }
        // New records go after the valid prefix and read back.
        let p = put(&log, 20);
        log.sync().unwrap();
        assert_eq!(log.read(&p, 0, b"key20").unwrap(), value(20));
    }
}

/// A group written as headers from one buffer and values in place (with short values
/// copied beside their headers) is byte for byte the records `record::encode` lays out
/// one after another, on the real file system (one `pwritev` per 1,024 slices) as in
/// memory, and every value reads back through its pointer.
#[test]
fn a_group_written_from_slices_is_the_encoded_records() {
    let dir = tempfile::tempdir().unwrap();
    let real = ValueLog::open(crate::io::RealVfs::shared(), dir.path(), 64 << 20).unwrap();
    let fault = FaultVfs::new(3);
    let mem = open(&fault, 64 << 20);
    // Lengths on both sides of the copy limit, empty ones, and enough records (1,500,
    // most with a slice for the header and one for the value) to need several calls.
    let lens = [0, 1, COPY_BELOW - 1, COPY_BELOW, COPY_BELOW + 1, 4096, 9];
    let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..1_500usize)
        .map(|i| {
            let v = vec![(i % 253) as u8; lens[i % lens.len()]];
            (format!("k{i:05}").into_bytes(), v)
        })
        .collect();
    let values: Vec<NewValue<'_>> = (entries.iter().enumerate())
        .map(|(i, (k, v))| NewValue {
            ks: (i % 3) as u32,
            key: k,
            seq: 1_000 + i as u64,
            value: v,
        })
        .collect();
    let mut want = Vec::new();
    for v in &values {
        record::encode(&mut want, v.ks, v.key, v.seq, v.value);
    }
    for (log, vfs, file) in [
        (
            &real,
            crate::io::RealVfs::shared(),
            dir.path().join(segment_name(1)),
        ),
        (&mem, fault.shared(), Path::new(DIR).join(segment_name(1))),
    ] {
        let ptrs = log.append(&values).unwrap();
        assert_eq!((ptrs[0].segment, ptrs[0].offset), (1, 0));
        assert_eq!(log.bytes_written(), want.len() as u64);
        let f = vfs.open(&file, OpenMode::Existing).unwrap();
        let mut got = vec![0; want.len()];
        f.read_exact_at(&mut got, 0).unwrap();
        assert!(
            got == want,
            "the segment's bytes are not the encoded records"
        );
        assert_eq!(f.len().unwrap(), want.len() as u64);
        for (p, v) in ptrs.iter().zip(&values) {
            assert_eq!(log.read(p, v.ks, v.key).unwrap(), v.value);
        }
    }
}

/// Keys of `put`'s values.
fn key(i: usize) -> Vec<u8> {
    format!("key{i}").into_bytes()
}

/// Runs `read` and returns how many operations it made on the file system.
fn calls(vfs: &FaultVfs, read: impl FnOnce()) -> u64 {
    let before = vfs.op_count();
    read();
    vfs.op_count() - before
}

/// Sealed segments are read from their mappings (no call on the file), the active one
/// from the file; once a read has waited on the device, sealed segments are read from
/// the file as well, until [`FAST_AGAIN`] reads in a row are served fast.
#[test]
fn sealed_segments_are_read_from_their_mappings_until_a_read_waits_on_the_device() {
    let vfs = FaultVfs::new(7);
    let log = open(&vfs, 1000);
    let ptrs: Vec<_> = (0..30).map(|i| put(&log, i)).collect();
    let active = log.active_segment();
    let read = |i: usize| assert_eq!(log.read(&ptrs[i], 0, &key(i)).unwrap(), value(i));
    let sealed: Vec<usize> = (0..30).filter(|&i| ptrs[i].segment < active).collect();
    assert!(sealed.len() > 20, "small segments must roll");
    for &i in &sealed {
        // A read slower than the page cache (a busy machine) would set the flag.
        log.clear_device();
        assert_eq!(calls(&vfs, || read(i)), 0, "value {i}: from the mapping");
    }
    assert_eq!(ptrs[29].segment, active);
    assert!(
        calls(&vfs, || read(29)) > 0,
        "the active segment: from the file"
    );

    log.set_device(true);
    for n in 1..FAST_AGAIN {
        let made = calls(&vfs, || read(sealed[0]));
        assert!(made > 0, "fast read {n} after a slow one: the file");
    }
    assert!(log.device(), "one fast read short");
    // The in-memory file system answers at page-cache speed, so the next read clears
    // the flag (a busy machine may make a read slow and start the count again).
    let cleared = (0..10 * FAST_AGAIN).any(|_| {
        read(sealed[1]);
        !log.device()
    });
    assert!(cleared, "fast reads clear the flag");
    log.clear_device();
    assert_eq!(calls(&vfs, || read(sealed[2])), 0);
}

/// A damaged record in a mapped segment is corruption, whether read alone or in a run
/// with its neighbour (which still reads back), and no call on the file is made.
#[test]
fn a_damaged_record_in_a_mapped_segment_is_corruption() {
    let vfs = FaultVfs::new(8);
    let log = open(&vfs, 1000);
    let ptrs: Vec<_> = (0..30).map(|i| put(&log, i)).collect();
    log.sync().unwrap();
    let active = log.active_segment();
    // Two neighbours in one sealed segment.
    let i = (0..29)
        .find(|&i| ptrs[i].segment == ptrs[i + 1].segment && ptrs[i].segment < active)
        .unwrap();
    let p = ptrs[i];
    drop(log);
    let path = Path::new(DIR).join(segment_name(p.segment));
    let mut bytes = vfs.contents(&path).unwrap();
    bytes[(p.offset + p.record_len(key(i).len())) as usize - 1] ^= 1; // last value byte
    vfs.set_contents(&path, bytes).unwrap();
    let log = open(&vfs, 1000);
    assert!(!log.device());
    let n = calls(&vfs, || {
        let got = log.read(&p, 0, &key(i));
        assert!(matches!(got, Err(Error::Corruption { .. })), "{got:?}");
    });
    assert_eq!(n, 0, "read from the mapping");
    let want = |j: usize, order| Wanted {
        ptr: ptrs[j],
        ks: 0,
        key: key(j).into(),
        order,
    };
    // A scan that copies and one that borrows: both read in the mapping, both catch
    // the flipped byte, and only the second hands out the mapping's bytes.
    for borrow in [false, true] {
        let runs = log.plan_reads(vec![want(i, 0), want(i + 1, 1)], borrow);
        assert_eq!(runs.len(), 1, "neighbours make one run");
        let n = calls(&vfs, || {
            let got = runs[0].read();
            assert!(
                matches!(got[0], Err(Error::Corruption { .. })),
                "{:?}",
                got[0]
            );
            let good = got[1].as_ref().unwrap();
            assert_eq!(good.as_slice(), value(i + 1));
            assert_eq!(matches!(good, ValueBytes::Mapped { .. }), borrow);
        });
        assert_eq!(n, 0, "the run too (borrowing: {borrow})");
    }
}

/// The active segment is mapped up to its length once [`MAP_STEP`] bytes have been
/// appended past its last mapping: records inside the mapping are read with no call on
/// the file, records appended since through the file. Reopened, its whole records are
/// mapped, a torn tail after them is not, and cutting the tail leaves the mapping right.
#[test]
fn the_active_segment_is_mapped_as_it_grows_and_at_open() {
    let vfs = FaultVfs::new(9);
    let log = open(&vfs, 64 << 20);
    let big = |i: usize| vec![i as u8; 64 << 10];
    let append = |i: usize| {
        let (k, v) = (key(i), big(i));
        let nv = NewValue {
            ks: 0,
            key: &k,
            seq: i as u64,
            value: &v,
        };
        log.append(&[nv]).unwrap()[0]
    };
    let read = |p: &Pointer, i: usize| assert_eq!(log.read(p, 0, &key(i)).unwrap(), big(i));
    // Fifteen records of 64 KiB: under a mebibyte, not mapped yet.
    let mut ptrs: Vec<Pointer> = (0..15).map(append).collect();
    assert!(calls(&vfs, || read(&ptrs[0], 0)) > 0, "not mapped yet");
    // The sixteenth passes a mebibyte: everything so far is mapped.
    ptrs.push(append(15));
    for (i, p) in ptrs.iter().enumerate() {
        log.clear_device();
        assert_eq!(
            calls(&vfs, || read(p, i)),
            0,
            "record {i}: from the mapping"
        );
    }
    ptrs.push(append(16));
    assert!(
        calls(&vfs, || read(&ptrs[16], 16)) > 0,
        "appended since: the file"
    );
    // A run of neighbours past the mapping is one read, not one per record.
    ptrs.push(append(17));
    let want = |j: usize, order| Wanted {
        ptr: ptrs[j],
        ks: 0,
        key: key(j).into(),
        order,
    };
    let runs = log.plan_reads(vec![want(16, 0), want(17, 1)], false);
    assert_eq!(runs.len(), 1, "neighbours make one run");
    let n = calls(&vfs, || {
        let got = runs[0].read();
        assert_eq!(got[0].as_ref().unwrap().as_slice(), big(16));
        assert_eq!(got[1].as_ref().unwrap().as_slice(), big(17));
    });
    assert_eq!(n, 1, "one read for the run");
    assert_eq!(ptrs.iter().map(|p| p.segment).max(), Some(1), "one segment");
    log.sync().unwrap();
    drop(log);

    // A torn tail: half a record after the last whole one.
    let path = Path::new(DIR).join(segment_name(1));
    let mut bytes = vfs.contents(&path).unwrap();
    let whole = bytes.len();
    bytes.extend_from_within(..5_000);
    vfs.set_contents(&path, bytes).unwrap();
    let log = open(&vfs, 64 << 20);
    log.cut_tail().unwrap();
    assert_eq!(vfs.contents(&path).unwrap().len(), whole);
    for (i, p) in ptrs.iter().enumerate() {
        log.clear_device();
        let n = calls(&vfs, || {
            assert_eq!(log.read(p, 0, &key(i)).unwrap(), big(i))
        });
        assert_eq!(n, 0, "record {i} after reopening: from the mapping");
    }
}

/// On a real file system a sync extends the active segment with zeros past its last
/// record; appends then land inside that, sealing a segment cuts it back to its last
/// record (GC's scan reads sealed segments whole), and so does the next open.
#[test]
fn syncs_reserve_zeros_that_sealing_and_open_cut_away() {
    use crate::io::RealVfs;
    let dir = tempfile::tempdir().unwrap();
    let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
    let file_len = |id: u32| {
        std::fs::metadata(dir.path().join(segment_name(id)))
            .unwrap()
            .len()
    };
    let end = |p: &Pointer, i: usize| p.offset + p.record_len(format!("key{i}").len());
    let segment_size = 64 << 10;
    let log = ValueLog::open(Arc::clone(&vfs), dir.path(), segment_size).unwrap();
    let p0 = put(&log, 0);
    log.sync().unwrap();
    let reserved = file_len(1);
    assert!(reserved > end(&p0, 0), "the sync reserved nothing");
    assert!(reserved <= segment_size, "reserved past the segment size");
    let p1 = put(&log, 1);
    assert!(end(&p1, 1) < reserved);
    assert_eq!(
        file_len(1),
        reserved,
        "an append inside the reservation grew the file"
    );
    log.sync().unwrap();
    drop(log);

    let log = ValueLog::open(Arc::clone(&vfs), dir.path(), segment_size).unwrap();
    log.cut_tail().unwrap();
    assert_eq!(file_len(1), end(&p1, 1), "open kept the zeros");
    for (i, p) in [(0, p0), (1, p1)] {
        assert_eq!(
            log.read(&p, 0, format!("key{i}").as_bytes()).unwrap(),
            value(i)
        );
    }
    // A sync after an append reserves up to the segment's size; the appends after it
    // fill the segment and roll it.
    let mut ptrs = vec![put(&log, 2)];
    log.sync().unwrap();
    assert_eq!(file_len(1), segment_size);
    ptrs.extend((3..800).map(|i| put(&log, i)));
    assert!(ptrs.last().unwrap().segment > 1, "the segment did not roll");
    let scanned = log.scan_segment(1).unwrap();
    assert_eq!(
        scanned.len(),
        2 + ptrs.iter().filter(|p| p.segment == 1).count()
    );
    let records_end = (ptrs.iter().enumerate())
        .filter(|(_, p)| p.segment == 1)
        .map(|(j, p)| end(p, j + 2))
        .max()
        .unwrap();
    assert_eq!(
        file_len(1),
        records_end,
        "the sealed segment kept its zeros"
    );
    for (j, p) in ptrs.iter().enumerate() {
        let i = j + 2;
        assert_eq!(
            log.read(p, 0, format!("key{i}").as_bytes()).unwrap(),
            value(i)
        );
    }
}

#[test]
fn write_back_of_a_segment_starts_every_few_mebibytes_of_values() {
    let vfs = FaultVfs::new(11);
    let log = open(&vfs, 64 << 20);
    let path = Path::new(DIR).join(segment_name(1));
    let v = vec![5u8; 64 << 10];
    // Where the segment ended each time a write-back was started.
    let mut ends = Vec::new();
    let mut end = 0;
    for i in 0..200u64 {
        let key = format!("key{i}");
        let nv = NewValue {
            ks: 0,
            key: key.as_bytes(),
            seq: i,
            value: &v,
        };
        let p = log.append(&[nv]).unwrap()[0];
        end = p.offset + u64::from(p.len) + (HEADER_LEN + key.len()) as u64;
        if vfs.writebacks(&path).len() > ends.len() {
            ends.push(end);
        }
    }
    // Each start covers what was appended since the last one, from the segment's
    // start on, as soon as that reached WRITEBACK_EVERY (so within a record of it).
    let starts = vfs.writebacks(&path);
    assert_eq!(starts.len(), 3, "{end} bytes appended: {starts:?}");
    let from = assert_writeback_steps(&starts, &ends, 65 << 10);
    assert!(
        end - from < WRITEBACK_EVERY,
        "{end} appended, {from} started"
    );
}
