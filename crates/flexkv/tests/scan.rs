//! Scans over separated values: read-ahead in parallel batches, errors reaching the
//! caller, GC under a running scan, key-only and lazy iterators.
#![allow(clippy::unwrap_used)]

mod common;
use common::small_space;

use std::collections::BTreeMap;
use std::path::Path;

use flexkv::io::FaultVfs;
use flexkv::{Db, GcOptions, Iter};

fn key(i: usize) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn value(i: usize, version: usize) -> Vec<u8> {
    let mut v = format!("{i}:{version}:").into_bytes();
    v.resize(100 + (i * 37) % 900, b'a' + (version % 26) as u8);
    v
}

type Pair = (Vec<u8>, Vec<u8>);

/// What a borrowed step returns, copied so it outlives the step.
fn owned(item: flexkv::Result<(&[u8], &[u8])>) -> flexkv::Result<Pair> {
    item.map(|(k, v)| (k.to_vec(), v.to_vec()))
}

/// The rest of `it`'s pairs, borrowed one by one (from the back with `back`).
fn drain_borrowed(it: &mut Iter, back: bool) -> Vec<flexkv::Result<Pair>> {
    let mut out = Vec::new();
    while let Some(item) = if back {
        it.next_back_ref()
    } else {
        it.next_ref()
    } {
        out.push(owned(item));
    }
    out
}

fn open(path: &Path) -> Db {
    Db::builder(path)
        .value_threshold(64)
        .vlog_segment_size(64 << 10)
        .memtable_size(32 << 10)
        .space_options(small_space())
        .gc(GcOptions {
            background: false,
            ..GcOptions::default()
        })
        .open()
        .unwrap()
}

/// Committed values, then newer ones and deletes still in the memtable: a scan reads
/// the committed ones ahead in batches and still returns exactly the model, both ways.
#[test]
fn a_scan_reads_ahead_and_returns_exactly_the_model_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let mut model = BTreeMap::new();
    for i in 0..1000 {
        db.put(&key(i), &value(i, 0)).unwrap();
        model.insert(key(i), value(i, 0));
    }
    db.flush().unwrap();
    for i in (0..1000).step_by(7) {
        if i % 2 == 0 {
            db.delete(&key(i)).unwrap();
            model.remove(&key(i));
        } else {
            db.put(&key(i), &value(i, 1)).unwrap();
            model.insert(key(i), value(i, 1));
        }
    }
    let before = db.stats().values_read_ahead;
    let got: Vec<_> = db.iter().map(|r| r.unwrap()).collect();
    let want: Vec<_> = model.clone().into_iter().collect();
    assert_eq!(got, want);
    let ahead = db.stats().values_read_ahead - before;
    assert!(ahead > 500, "only {ahead} values were read ahead");
    let back: Vec<_> = db.iter().rev().map(|r| r.unwrap()).collect();
    let want_back: Vec<_> = model.clone().into_iter().rev().collect();
    assert_eq!(back, want_back);
    // A bounded range, mixing directions.
    let mut it = db.range(key(100)..key(300));
    let first = it.next().unwrap().unwrap();
    let last = it.next_back().unwrap().unwrap();
    let inner: Vec<_> = it.map(|r| r.unwrap()).collect();
    let want: Vec<_> = model
        .range(key(100)..key(300))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(first, want[0]);
    assert_eq!(last, want[want.len() - 1]);
    assert_eq!(inner, want[1..want.len() - 1]);
}

/// With no reader threads (the scan reads every value itself), with one, and with more
/// than cores, a scan reads ahead and returns the same pairs; too many is refused.
#[test]
fn any_number_of_reader_threads_scans_the_same_and_too_many_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let too_many = Db::builder(dir.path())
        .scan_read_threads(flexkv::MAX_SCAN_READ_THREADS + 1)
        .open();
    assert!(
        matches!(too_many, Err(flexkv::Error::InvalidArgument(_))),
        "{too_many:?}"
    );
    let mut model = BTreeMap::new();
    // With reads taken as slow, the device path runs: the window grows, threads take
    // the nearest job first, and the scan reads queued jobs while it waits.
    for (threads, slow) in [
        (0, false),
        (1, false),
        (8, false),
        (0, true),
        (1, true),
        (8, true),
    ] {
        let db = Db::builder(dir.path())
            .value_threshold(64)
            .memtable_size(32 << 10)
            .space_options(small_space())
            .scan_read_threads(threads)
            .scan_reads_slow(slow)
            .open()
            .unwrap();
        let version = threads + usize::from(slow);
        for i in (version..600).step_by(3) {
            db.put(&key(i), &value(i, version)).unwrap();
            model.insert(key(i), value(i, version));
        }
        db.flush().unwrap();
        let before = db.stats().values_read_ahead;
        let got: Vec<_> = db.iter().map(|r| r.unwrap()).collect();
        assert_eq!(
            got,
            model.clone().into_iter().collect::<Vec<_>>(),
            "{threads}"
        );
        let ahead = db.stats().values_read_ahead - before;
        assert!(
            ahead * 10 > got.len() as u64 * 9,
            "{threads} threads: {ahead} read ahead"
        );
        // Stopping part-way leaves jobs behind; the next scan is not disturbed.
        let part: Vec<_> = db.iter().take(40).map(|r| r.unwrap()).collect();
        assert_eq!(part, got[..40]);
        let back: Vec<_> = db.iter().rev().map(|r| r.unwrap()).collect();
        assert_eq!(back.len(), got.len());
        assert!(back.iter().rev().eq(got.iter()));
        db.close().unwrap();
    }
}

/// A damaged value is an error for its own item only; the scan goes on.
#[test]
fn a_damaged_value_read_ahead_is_an_error_for_its_item_and_the_scan_goes_on() {
    let vfs = FaultVfs::new(3);
    let path = Path::new("/db");
    let db = Db::builder(path)
        .vfs(vfs.shared())
        .value_threshold(64)
        .memtable_size(32 << 10)
        .space_options(small_space())
        .open()
        .unwrap();
    for i in 0..300 {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    db.flush().unwrap();
    // Flip a byte inside the value of key 150: find it by its text.
    let seg = path.join("vlog-00000001.seg");
    let mut bytes = vfs.contents(&seg).unwrap();
    let needle = b"150:0:";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    bytes[at + 10] ^= 0x55;
    vfs.set_contents(&seg, bytes).unwrap();
    // Copied out, and borrowed (checked where the value lies, in the mapping).
    let copied: Vec<_> = db.iter().collect();
    let borrowed = drain_borrowed(&mut db.iter(), false);
    for items in [copied, borrowed] {
        assert_eq!(items.len(), 300, "the scan went on past the damage");
        for (i, item) in items.iter().enumerate() {
            match item {
                Ok((k, v)) => {
                    assert_ne!(i, 150, "the damaged value was returned");
                    assert_eq!((k, v), (&key(i), &value(i, 0)));
                }
                Err(e) => {
                    assert_eq!(i, 150, "item {i}: {e}");
                    assert!(matches!(e, flexkv::Error::Corruption { .. }), "{e}");
                }
            }
        }
    }
    assert!(db.stats().values_read_ahead > 200);
}

/// On the real file system (values read ahead from mappings of the value log): pairs
/// borrowed with `next_ref` are those `next` copies out, both ways and mixed; a value
/// borrowed from a segment stays right after GC has moved it and removed the segment.
#[test]
fn borrowed_pairs_are_the_copied_ones_and_outlive_their_segment() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let mut model = BTreeMap::new();
    // Odd keys rewritten: every segment of the first round is half garbage.
    for round in 0..2 {
        for i in (round..600).step_by(round + 1) {
            db.put(&key(i), &value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
    }
    db.flush().unwrap();
    let want: Vec<Pair> = model.into_iter().collect();
    let all = |items: Vec<flexkv::Result<Pair>>| -> Vec<Pair> {
        items.into_iter().map(|r| r.unwrap()).collect()
    };
    let before = db.stats().values_read_ahead;
    assert_eq!(all(drain_borrowed(&mut db.iter(), false)), want);
    assert!(db.stats().values_read_ahead - before > 500, "read ahead");
    let back = all(drain_borrowed(&mut db.iter(), true));
    assert!(back.iter().rev().eq(want.iter()));
    // Borrowed and copied in turn, from both ends.
    let mut it = db.iter();
    let (mut front, mut rear) = (0, want.len());
    while front < rear {
        let pair = match (front + rear) % 4 {
            0 => it.next().map(|r| r.unwrap()),
            1 => it.next_ref().map(|r| owned(r).unwrap()),
            2 => it.next_back().map(|r| r.unwrap()),
            _ => it.next_back_ref().map(|r| owned(r).unwrap()),
        };
        let i = if (front + rear) % 4 < 2 {
            front += 1;
            front - 1
        } else {
            rear -= 1;
            rear
        };
        assert_eq!(pair.as_ref(), Some(&want[i]), "pair {i}");
    }
    assert!(it.next_ref().is_none());
    // GC moves the even keys' values (key 100's among them) out of the first round's
    // segments and removes those, while key 100's value is borrowed.
    let mut it = db.iter();
    for _ in 0..100 {
        it.next_ref().unwrap().unwrap();
    }
    let (k, v) = it.next_ref().unwrap().unwrap();
    let segments = |dir: &Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("vlog-"))
            .collect::<Vec<_>>()
    };
    let holds_100 = |name: &String| {
        let bytes = std::fs::read(dir.path().join(name)).unwrap();
        bytes.windows(6).any(|w| w == b"100:0:")
    };
    let holder = segments(dir.path()).into_iter().find(holds_100).unwrap();
    let r = db.gc().unwrap();
    assert!(r.segments_removed > 0, "{r:?}");
    assert!(!dir.path().join(&holder).exists(), "{holder} was removed");
    assert_eq!((k, v), (&want[100].0[..], &want[100].1[..]));
    assert_eq!(all(drain_borrowed(&mut it, false)), want[101..]);
}

/// GC moves every value and removes the segments while a scan, a snapshot scan and
/// lazy values are half-way; all of them go on reading the right values.
#[test]
fn gc_under_a_running_scan_and_lazy_values() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    // Keys below 400 keep their first version among the garbage of the others.
    for round in 0..3 {
        for i in (if round == 0 { 0 } else { 400 })..800 {
            db.put(&key(i), &value(i, round)).unwrap();
        }
    }
    db.flush().unwrap();
    let latest = |i: usize| value(i, if i < 400 { 0 } else { 2 });
    let snap = db.snapshot();
    let mut it = db.iter();
    let mut snap_it = snap.iter();
    // Keys from 400 have their values in segments GC collects (among round 1's garbage).
    let lazy: Vec<_> = db
        .range(key(400)..)
        .lazy()
        .take(50)
        .map(|r| r.unwrap())
        .collect();
    for i in 0..100 {
        assert_eq!(it.next().unwrap().unwrap(), (key(i), latest(i)));
        assert_eq!(snap_it.next().unwrap().unwrap(), (key(i), latest(i)));
    }
    // Overwrite some keys after the snapshot, commit, collect everything.
    for i in 200..300 {
        db.put(&key(i), &value(i, 9)).unwrap();
    }
    db.flush().unwrap();
    let r = db.gc().unwrap();
    assert!(r.segments_removed > 0 && r.bytes_relocated > 0, "{r:?}");
    for i in 100..800 {
        // An iterator reads at the sequence it was made at: the overwrites are after.
        assert_eq!(it.next().unwrap().unwrap(), (key(i), latest(i)), "iter {i}");
        assert_eq!(
            snap_it.next().unwrap().unwrap(),
            (key(i), latest(i)),
            "snapshot iter {i}"
        );
    }
    assert!(it.next().is_none() && snap_it.next().is_none());
    for (i, item) in db.iter().enumerate() {
        let want = if (200..300).contains(&i) {
            value(i, 9)
        } else {
            latest(i)
        };
        assert_eq!(item.unwrap(), (key(i), want), "new iter {i}");
    }
    for (i, (k, v)) in (400..).zip(&lazy) {
        assert_eq!(k, &key(i));
        assert_eq!(v.len(), latest(i).len());
        assert!(v.is_separated());
        assert_eq!(v.load().unwrap(), latest(i), "lazy {i} after GC");
    }
    db.check().unwrap();
}

#[test]
fn keys_only_and_lazy_iterators_match_the_full_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    for i in 0..500 {
        // Inline and separated values mixed.
        let v = if i % 3 == 0 {
            b"small".to_vec()
        } else {
            value(i, 0)
        };
        db.put(&key(i), &v).unwrap();
    }
    db.flush().unwrap();
    db.delete(&key(10)).unwrap();
    let full: Vec<_> = db.iter().map(|r| r.unwrap()).collect();
    let keys: Vec<_> = db.iter().keys().map(|r| r.unwrap()).collect();
    assert_eq!(
        keys,
        full.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>()
    );
    let back: Vec<_> = db.iter().keys().rev().map(|r| r.unwrap()).collect();
    assert_eq!(back, keys.iter().rev().cloned().collect::<Vec<_>>());
    let before = db.stats().values_read_ahead;
    let lazy: Vec<_> = db.iter().lazy().map(|r| r.unwrap()).collect();
    assert_eq!(db.stats().values_read_ahead, before, "nothing read yet");
    assert_eq!(lazy.len(), full.len());
    for ((k, lv), (fk, fv)) in lazy.iter().zip(&full) {
        assert_eq!(k, fk);
        assert_eq!(lv.len(), fv.len());
        assert_eq!(&lv.load().unwrap(), fv);
    }
}

/// `Iter::expecting` sizes the iterator's reads of the store to the pairs the caller
/// means to take: a scan of 17 pairs from an interval's first key visits fewer of the
/// 16-pair intervals a key-order load leaves (the stats' cache hits: 3 against 4 when
/// written) than the doubling window (16, then 32 records) does. It is a hint only: an
/// iterator told to expect fewer pairs than there are, in either direction, with newer
/// values and deletes still in a memtable, returns what the iterator without it does.
#[test]
fn an_iterator_expecting_n_pairs_reads_no_further_and_still_returns_everything() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::builder(dir.path()).open().unwrap();
    for i in 0..320 {
        db.put(&key(i), &value(i, 0)[..40]).unwrap();
    }
    db.flush().unwrap();
    // Each scan runs twice: the first finds the intervals (and links them), the second
    // is the one counted.
    let intervals_read = |expect: Option<usize>| {
        let mut hits = 0;
        for _ in 0..2 {
            let before = db.stats().cache_hits;
            let it = db.range(key(0)..);
            let it = match expect {
                Some(n) => it.expecting(n),
                None => it,
            };
            let got: Vec<_> = it.take(17).collect::<flexkv::Result<_>>().unwrap();
            assert_eq!(got.len(), 17);
            assert_eq!(got[16].0, key(16));
            hits = db.stats().cache_hits - before;
        }
        hits
    };
    let (plain, hinted) = (intervals_read(None), intervals_read(Some(17)));
    // Untold, the reads take 16 records and then 32: the intervals holding 48
    // records and the part-intervals at each read's two ends (16-pair intervals).
    assert!(
        plain <= 48 / 16 + 2,
        "17 pairs without expecting read {plain} intervals"
    );
    assert!(
        hinted < plain,
        "expecting 17 pairs read {hinted} intervals, without it {plain}"
    );
    for i in (0..320).step_by(7) {
        db.put(&key(i), &value(i, 1)).unwrap();
    }
    for i in (3..320).step_by(11) {
        db.delete(&key(i)).unwrap();
    }
    let all = |it: Iter, back: bool| -> Vec<Pair> {
        let items: Vec<_> = if back {
            it.rev().collect()
        } else {
            it.collect()
        };
        items.into_iter().collect::<flexkv::Result<_>>().unwrap()
    };
    for back in [false, true] {
        let want = all(db.range(key(40)..key(300)), back);
        assert!(want.len() > 200);
        for n in [0, 1, 5, 17, 100, 10_000] {
            let got = all(db.range(key(40)..key(300)).expecting(n), back);
            assert_eq!(got, want, "expecting {n}, from the back: {back}");
        }
    }
}
