use super::format::{encode_batch, encode_group_header, OpRef};
use super::*;
use crate::io::{assert_writeback_steps, CrashMode, FaultVfs};

const DIR: &str = "/db";

fn dir() -> &'static Path {
    Path::new(DIR)
}

fn recover(vfs: &FaultVfs, applied: u64, accept_prefix: bool) -> Result<(Wal, Recovered)> {
    vfs.create_dir_all(dir()).unwrap();
    Wal::recover(vfs.shared(), dir(), 1 << 20, applied, accept_prefix, |_| {
        Ok(true)
    })
}

/// A group of `n` one-put batches starting at `first`, stamped `durable`.
fn group(durable: u64, first: u64, n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_group_header(&mut out, durable, first, n as u32);
    for s in first..first + n {
        let key = format!("k{s}");
        let value = vec![s as u8; 40];
        let op = OpRef::Put {
            ks: 0,
            key: key.as_bytes(),
            value: &value,
        };
        encode_batch(&mut out, [op].into_iter());
    }
    out
}

fn seqs(r: &Recovered) -> Vec<u64> {
    r.groups.iter().flat_map(|g| g.first..=g.last()).collect()
}

#[test]
fn groups_survive_a_reopen_and_the_applied_prefix_is_skipped() {
    let vfs = FaultVfs::new(1);
    let (wal, r) = recover(&vfs, 0, false).unwrap();
    assert!(r.groups.is_empty());
    wal.append(&group(0, 1, 3)).unwrap();
    wal.append(&group(3, 4, 2)).unwrap();
    wal.sync().unwrap();
    drop(wal);
    let (_, r) = recover(&vfs, 0, false).unwrap();
    assert_eq!(seqs(&r), vec![1, 2, 3, 4, 5]);
    assert_eq!(r.last_seq, 5);
    let (_, r) = recover(&vfs, 2, false).unwrap();
    assert_eq!(
        seqs(&r),
        vec![3, 4, 5],
        "a group straddling the applied sequence"
    );
    assert!(!r.cut_tail);
}

#[test]
fn a_crash_loses_at_most_the_unsynced_tail() {
    for seed in 0..200 {
        let vfs = FaultVfs::new(seed);
        let (wal, _) = recover(&vfs, 0, false).unwrap();
        let mut durable = 0;
        let mut next = 1;
        for round in 0..6 {
            let n = 1 + (seed + round) % 4;
            wal.append(&group(durable, next, n)).unwrap();
            next += n;
            if (seed >> round) & 1 == 1 {
                wal.sync().unwrap();
                durable = next - 1;
            }
        }
        drop(wal);
        let mode = vfs.crash(CrashMode::Random);
        let (wal, r) =
            recover(&vfs, 0, false).unwrap_or_else(|e| panic!("seed {seed} {mode:?}: {e}"));
        let got = seqs(&r);
        assert_eq!(
            got,
            (1..=got.len() as u64).collect::<Vec<_>>(),
            "not a prefix"
        );
        assert!(
            got.len() as u64 >= durable,
            "seed {seed} {mode:?}: lost synced batches"
        );
        // The log goes on after the cut, and a second recovery sees the same prefix
        // plus the new group.
        let last = r.last_seq;
        wal.append(&group(last, last + 1, 1)).unwrap();
        wal.sync().unwrap();
        drop(wal);
        let (_, r2) = recover(&vfs, 0, false).unwrap();
        assert_eq!(seqs(&r2), (1..=last + 1).collect::<Vec<_>>());
    }
}

fn only_segment(vfs: &FaultVfs) -> PathBuf {
    let names = vfs.list(dir()).unwrap();
    let wal: Vec<_> = names.iter().filter(|n| n.starts_with("wal-")).collect();
    dir().join(wal[0])
}

/// Damage in a record that a later record proves was durable is corruption, not a tail.
#[test]
fn damage_before_durable_records_is_corruption_unless_a_prefix_is_accepted() {
    let vfs = FaultVfs::new(3);
    let (wal, _) = recover(&vfs, 0, false).unwrap();
    wal.append(&group(0, 1, 1)).unwrap();
    wal.append(&group(0, 2, 1)).unwrap();
    wal.sync().unwrap();
    wal.append(&group(2, 3, 1)).unwrap(); // says 1..=2 were durable
    wal.sync().unwrap();
    drop(wal);
    let path = only_segment(&vfs);
    let mut bytes = vfs.contents(&path).unwrap();
    let header = format::FRAG_HEADER + format::segment_header(VERSION, 1).len();
    let record = format::FRAG_HEADER + group(0, 1, 1).len();
    bytes[header + record + 12] ^= 0xff; // inside record 2
    assert_eq!(bytes.len(), header + 3 * record);
    vfs.set_contents(&path, bytes).unwrap();
    let err = recover(&vfs, 0, false).expect_err("must fail");
    assert!(matches!(err, Error::Corruption { .. }), "{err}");
    assert!(err.to_string().contains("made durable"), "{err}");
    // Nothing was cut by the refused recovery.
    let (_, r) = recover(&vfs, 0, true).unwrap();
    assert_eq!(seqs(&r), vec![1]);
    assert!(r.cut_tail);
}

#[test]
fn an_entry_pointing_past_the_value_log_ends_the_log() {
    let vfs = FaultVfs::new(4);
    let (wal, _) = recover(&vfs, 0, false).unwrap();
    wal.append(&group(0, 1, 2)).unwrap();
    wal.append(&group(0, 3, 1)).unwrap();
    wal.sync().unwrap();
    drop(wal);
    let mut calls = 0;
    let (_, r) = Wal::recover(vfs.shared(), dir(), 1 << 20, 0, false, |_| {
        calls += 1;
        Ok(calls <= 2) // the third op "dangles"
    })
    .unwrap();
    assert_eq!(seqs(&r), vec![1, 2]);
    assert!(r.cut_tail);
}

#[test]
fn a_newer_segment_version_is_refused() {
    let vfs = FaultVfs::new(5);
    vfs.create_dir_all(dir()).unwrap();
    let path = dir().join(segment_name(1));
    vfs.open(&path, OpenMode::CreateNew).unwrap();
    let mut buf = Vec::new();
    format::frame(&mut buf, 0, &format::segment_header(VERSION + 1, 1));
    vfs.set_contents(&path, buf).unwrap();
    let err = recover(&vfs, 0, false).expect_err("must fail");
    assert!(
        matches!(err, Error::UnsupportedVersion { found: 2, .. }),
        "{err}"
    );
}

#[test]
fn segments_roll_and_recover_in_order() {
    let vfs = FaultVfs::new(6);
    vfs.create_dir_all(dir()).unwrap();
    let (wal, _) = Wal::recover(vfs.shared(), dir(), 300, 0, false, |_| Ok(true)).unwrap();
    for s in 1..=20 {
        wal.append(&group(s - 1, s, 1)).unwrap();
    }
    wal.sync().unwrap();
    drop(wal);
    let segments = vfs.list(dir()).unwrap().len();
    assert!(segments > 3, "only {segments} segments");
    let (_, r) = recover(&vfs, 0, false).unwrap();
    assert_eq!(seqs(&r), (1..=20).collect::<Vec<_>>());
}

#[test]
fn a_reused_buffer_is_emptied_and_a_huge_one_freed() {
    let mut buf = Vec::with_capacity(1 << 20);
    buf.extend_from_slice(b"record");
    keep_reusable(&mut buf);
    assert!(buf.is_empty());
    assert!(buf.capacity() >= 1 << 20, "a group-sized buffer is kept");
    let mut huge = vec![0u8; REUSED_BUFFER_MAX + 1];
    keep_reusable(&mut huge);
    assert_eq!(huge.capacity(), 0, "an outgrown buffer is freed");
}

#[test]
fn write_back_of_a_segment_starts_every_few_mebibytes_of_log() {
    let vfs = FaultVfs::new(7);
    vfs.create_dir_all(dir()).unwrap();
    let (wal, _) = Wal::recover(vfs.shared(), dir(), 64 << 20, 0, false, |_| Ok(true)).unwrap();
    let first = dir().join(segment_name(1));
    // Where the segment ended each time a write-back was started.
    let mut ends = Vec::new();
    let mut s = 1;
    while wal.writer.lock().len < 10 << 20 {
        wal.append(&group(s - 1, s, 400)).unwrap();
        s += 400;
        if vfs.writebacks(&first).len() > ends.len() {
            ends.push(wal.writer.lock().len);
        }
    }
    // Each start covers what was appended since the last one, from the segment's
    // start on, as soon as that reached WRITEBACK_EVERY (a group is about 25 KiB).
    let starts = vfs.writebacks(&first);
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert_writeback_steps(&starts, &ends, 32 << 10);
    // The next segment counts from its own start.
    assert_eq!(wal.rotate().unwrap(), 1);
    let second = dir().join(segment_name(2));
    while vfs.writebacks(&second).is_empty() {
        wal.append(&group(s - 1, s, 400)).unwrap();
        s += 400;
    }
    assert_eq!(vfs.writebacks(&second)[0].0, 0);
}
