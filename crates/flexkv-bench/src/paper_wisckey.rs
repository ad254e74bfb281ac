//! `paper-wisckey`: the WiscKey paper's load, query, scan and GC figures (§4.1, Figures
//! 9–13), scaled to this machine, on flexkv alone.
//!
//! - For value sizes 64 B … 64 KiB: `fillrandom` (batches of `Buffered` writes, one
//!   sync and a commit at the end) and `readrandom`, with the separation threshold at
//!   its default and with separation off (the threshold above every value; values over
//!   8 KiB are always separated, so those rows have no "off" figure). Reported: ops/s,
//!   MB/s of user data, write amplification (WAL + value log + keyspace files written /
//!   key and value bytes) and space amplification (database directory bytes / key and
//!   value bytes).
//! - `seekrandom` + 50-pair scans over 16 KiB values, in MB/s of values returned, once
//!   with the pairs copied out (`Iterator::next`) and once borrowed (`Iter::next_ref`),
//!   each against the sequential read bandwidth of the same file system measured in the
//!   same run just before and just after it (reading the value-log files start to end
//!   with 1 MiB reads); then the same
//!   from the device, the value log dropped from the page cache before each scan,
//!   with the default reader threads, 8 and 32.
//! - `overwrite` of 4 KiB values with background GC running, against the same with GC
//!   off, on a database loaded and then overwritten once (so half the value log is
//!   garbage as the timed phase starts). Both use 1 MiB memtables and 16 MiB value-log
//!   segments, so commits (which make garbage) and GC happen during the phase.

use std::path::{Path, PathBuf};
use std::time::Instant;

use flexkv::{Db, Durability, GcOptions, WriteBatch};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Options of the `paper-wisckey` command.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// User bytes (keys and values) loaded per value size.
    #[arg(long, default_value_t = 256 << 20)]
    bytes: u64,
    /// Random reads and seeks per measurement (at most the pairs loaded).
    #[arg(long, default_value_t = 100_000)]
    reads: u64,
    /// Where the files go (a directory on the file system to measure).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Which parts to run, comma-separated: `loads` (fillrandom and readrandom per
    /// value size), `scans`, `gc`.
    #[arg(long, value_delimiter = ',', default_value = "loads,scans,gc")]
    parts: Vec<Part>,
}

/// A part of the `paper-wisckey` command.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// fillrandom and readrandom per value size, separation on and off.
    Loads,
    /// seekrandom + 50-pair scans over 16 KiB values against sequential reads.
    Scans,
    /// overwrite with background GC on and off.
    Gc,
}

const KEY: usize = 16;
const SIZES: [usize; 6] = [64, 256, 1024, 4096, 16384, 65536];
/// flexkv's default separation threshold.
const DEFAULT_THRESHOLD: usize = 4096;

fn fail<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("paper-wisckey: an engine or file operation failed: {e}"))
}

fn key(i: u64) -> Vec<u8> {
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ i;
    format!("{h:016x}").into_bytes()
}

fn value(i: u64, round: u64, len: usize) -> Vec<u8> {
    let mut v = vec![(i ^ round) as u8; len];
    let tag = (i ^ (round << 48)).to_le_bytes();
    v[..8.min(len)].copy_from_slice(&tag[..8.min(len)]);
    v
}

fn dir_bytes(p: &Path) -> u64 {
    let mut total = 0;
    for e in fail(std::fs::read_dir(p)) {
        let e = fail(e);
        let m = fail(e.metadata());
        total += if m.is_dir() {
            dir_bytes(&e.path())
        } else {
            m.len()
        };
    }
    total
}

fn open(path: &Path, threshold: Option<usize>, gc_on: bool) -> Db {
    let mut b = Db::builder(path).gc(GcOptions {
        background: gc_on,
        ..GcOptions::default()
    });
    if gc_on {
        // Commits (which turn overwritten values into garbage) and GC passes often
        // enough that GC works during a phase of a few seconds.
        b = b
            .memtable_size(1 << 20)
            .vlog_segment_size(16 << 20)
            .gc(GcOptions {
                interval: std::time::Duration::from_millis(100),
                ..GcOptions::default()
            });
    }
    if let Some(t) = threshold {
        b = b.value_threshold(t);
    }
    fail(b.open())
}

fn written(db: &Db) -> u64 {
    let s = db.stats();
    s.wal_bytes + s.vlog_bytes + s.space_bytes
}

/// Writes `pairs` pairs in a random order (each key once per round) in batches of at
/// most 1,000 pairs or 4 MiB, syncs and commits; returns the seconds taken.
fn load(db: &Db, pairs: u64, round: u64, vlen: usize, seed: u64) -> f64 {
    let mut order: Vec<u64> = (0..pairs).collect();
    let mut rng = SmallRng::seed_from_u64(seed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let per_batch = (4usize << 20).div_ceil(vlen + KEY).clamp(1, 1000);
    let t0 = Instant::now();
    for chunk in order.chunks(per_batch) {
        let mut b = WriteBatch::new();
        b.durability(Durability::Buffered);
        for &i in chunk {
            fail(b.put(&db.default_keyspace(), &key(i), &value(i, round, vlen)));
        }
        fail(db.write(b));
    }
    fail(db.sync());
    fail(db.flush());
    t0.elapsed().as_secs_f64()
}

fn read_random(db: &Db, pairs: u64, reads: u64, vlen: usize) -> f64 {
    let mut rng = SmallRng::seed_from_u64(9);
    let t0 = Instant::now();
    for _ in 0..reads {
        let i = rng.random_range(0..pairs);
        let v = fail(db.get(&key(i))).unwrap_or_else(|| panic!("paper-wisckey: key {i} missing"));
        assert_eq!(v.len(), vlen, "paper-wisckey: wrong value length");
    }
    t0.elapsed().as_secs_f64()
}

struct Load {
    ops: f64,
    mbs: f64,
    wa: f64,
    sa: f64,
    reads: f64,
}

fn measure(base: &Path, vlen: usize, pairs: u64, reads: u64, threshold: Option<usize>) -> Load {
    let path = base.join(format!("v{vlen}-{}", threshold.map_or("sep", |_| "off")));
    let db = open(&path, threshold, false);
    let secs = load(&db, pairs, 0, vlen, 1);
    let user = pairs * (KEY + vlen) as u64;
    let wa = written(&db) as f64 / user as f64;
    let rsecs = read_random(&db, pairs, reads, vlen);
    fail(db.close());
    let sa = dir_bytes(&path) as f64 / user as f64;
    fail(std::fs::remove_dir_all(&path));
    Load {
        ops: pairs as f64 / secs,
        mbs: user as f64 / secs / 1e6,
        wa,
        sa,
        reads: reads as f64 / rsecs,
    }
}

/// Sequential read bandwidth of the files under `path` whose names start with
/// `prefix`, in MB/s (1 MiB reads).
fn sequential_read(path: &Path, prefix: &str) -> f64 {
    use std::io::Read;
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    let t0 = Instant::now();
    for e in fail(std::fs::read_dir(path)) {
        let e = fail(e);
        if !e.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        let mut f = fail(std::fs::File::open(e.path()));
        loop {
            let n = fail(f.read(&mut buf));
            if n == 0 {
                break;
            }
            bytes += n as u64;
        }
    }
    bytes as f64 / t0.elapsed().as_secs_f64() / 1e6
}

/// Drops the files under `path` whose names start with `prefix` from the page cache
/// (their pages are clean: the database synced them), so the next reads go to the
/// device. No root needed, unlike dropping every cache.
fn evict(path: &Path, prefix: &str) {
    for e in fail(std::fs::read_dir(path)) {
        let e = fail(e);
        if e.file_name().to_string_lossy().starts_with(prefix) {
            let f = fail(std::fs::File::open(e.path()));
            fail(rustix::fs::fadvise(
                &f,
                0,
                None,
                rustix::fs::Advice::DontNeed,
            ));
        }
    }
}

/// How a scan hands out its pairs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Take {
    /// `Iterator::next`: each key and value copied into `Vec`s of the caller's.
    Owned,
    /// `Iter::next_ref`: borrowed from the iterator until its next step (a value in
    /// the value log's mapping is checked where it lies, not copied).
    Borrowed,
}

/// `seeks` scans of 50 pairs from random keys; returns MB/s of values. With `cold`,
/// the value log is dropped from the page cache before each scan (outside the time
/// taken).
fn scan_mbs(db: &Db, path: &Path, pairs: u64, seeks: u64, cold: bool, take: Take) -> f64 {
    let mut rng = SmallRng::seed_from_u64(5);
    let mut got = 0u64;
    let mut secs = 0.0;
    for _ in 0..seeks {
        if cold {
            evict(path, "vlog-");
        }
        let from = key(rng.random_range(0..pairs));
        let t0 = Instant::now();
        let mut it = db.range(from..);
        for _ in 0..50 {
            let n = match take {
                Take::Owned => it.next().map(|item| fail(item).1.len()),
                Take::Borrowed => it.next_ref().map(|item| fail(item).1.len()),
            };
            let Some(n) = n else { break };
            got += n as u64;
        }
        secs += t0.elapsed().as_secs_f64();
    }
    got as f64 / secs / 1e6
}

fn scans(base: &Path, bytes: u64, reads: u64) {
    let vlen = 16384;
    let pairs = (bytes / (KEY + vlen) as u64).max(100);
    let path = base.join("scan");
    let db = open(&path, None, false);
    load(&db, pairs, 0, vlen, 2);
    let seeks = (reads / 10).clamp(100, pairs);
    // Sequential reads between the two kinds of scan and after them: the figure each
    // is held against is the mean of the one before and the one after.
    let seq_before = sequential_read(&path, "vlog-");
    let owned = scan_mbs(&db, &path, pairs, seeks, false, Take::Owned);
    let seq_mid = sequential_read(&path, "vlog-");
    let borrowed = scan_mbs(&db, &path, pairs, seeks, false, Take::Borrowed);
    let seq_after = sequential_read(&path, "vlog-");
    let ahead = db.stats().values_read_ahead;
    fail(db.close());
    // From the device: each scan starts with the value log out of the page cache.
    evict(&path, "vlog-");
    let seq_cold = sequential_read(&path, "vlog-");
    let cold_seeks = (seeks / 20).max(20);
    let mut cold = Vec::new();
    for threads in [None, Some(8), Some(32)] {
        let mut b = Db::builder(&path);
        if let Some(t) = threads {
            b = b.scan_read_threads(t);
        }
        let db = fail(b.open());
        cold.push((
            threads,
            scan_mbs(&db, &path, pairs, cold_seeks, true, Take::Owned),
        ));
        fail(db.close());
    }
    fail(std::fs::remove_dir_all(&path));
    println!("\n## seekrandom + 50-pair scans, 16 KiB values ({pairs} pairs, {seeks} seeks)\n");
    println!("| | MB/s | sequential read around it, MB/s | ratio |");
    println!("|---|---:|---:|---:|");
    for (what, mbs, base) in [
        (
            "flexkv scans, pairs copied out (`next`)",
            owned,
            (seq_before + seq_mid) / 2.0,
        ),
        (
            "flexkv scans, pairs borrowed (`next_ref`)",
            borrowed,
            (seq_mid + seq_after) / 2.0,
        ),
    ] {
        println!("| {what} | {mbs:.0} | {base:.0} | {:.2} |", mbs / base);
    }
    println!(
        "\nSequential reads of the value-log files (1 MiB `read`s), before, between and \
         after the two: {seq_before:.0}, {seq_mid:.0}, {seq_after:.0} MB/s. Values read \
         ahead: {ahead}."
    );
    println!(
        "\nFrom the device ({cold_seeks} seeks, the value log dropped from the page cache \
         before each; `posix_fadvise` `DONTNEED`):\n"
    );
    println!("| | MB/s | ratio |");
    println!("|---|---:|---:|");
    println!("| sequential read of the value-log files, cold | {seq_cold:.0} | 1.00 |");
    for (threads, mbs) in cold {
        let threads = threads.map_or("the default (cores − 1)".into(), |t| t.to_string());
        println!(
            "| flexkv scans, {threads} reader threads | {mbs:.0} | {:.2} |",
            mbs / seq_cold
        );
    }
}

fn gc_effect(base: &Path, bytes: u64) {
    let vlen = 4096;
    let pairs = (bytes / (KEY + vlen) as u64).max(100);
    let mut rows = Vec::new();
    for gc_on in [false, true] {
        let path = base.join(format!("gc-{gc_on}"));
        let db = if gc_on {
            open(&path, None, true)
        } else {
            // The same settings, with the background thread off.
            fail(
                Db::builder(&path)
                    .memtable_size(1 << 20)
                    .vlog_segment_size(16 << 20)
                    .gc(GcOptions {
                        background: false,
                        ..GcOptions::default()
                    })
                    .open(),
            )
        };
        // Half the value log is garbage before the timed phase (the paper deletes a
        // share of the keys first), and the phase makes more as it commits.
        load(&db, pairs, 0, vlen, 3);
        load(&db, pairs, 1, vlen, 5);
        let before = db.stats();
        let secs = load(&db, pairs, 2, vlen, 4);
        let s = db.stats();
        rows.push((
            gc_on,
            pairs as f64 / secs,
            s.gc_bytes_reclaimed - before.gc_bytes_reclaimed,
            s.vlog_space_amplification(),
        ));
        fail(db.close());
        fail(std::fs::remove_dir_all(&path));
    }
    println!("\n## overwrite, 4 KiB values, with and without background GC ({pairs} pairs)\n");
    println!("| background GC | ops/s | ratio | bytes reclaimed meanwhile | value-log space amp. after |");
    println!("|---|---:|---:|---:|---:|");
    let off = rows[0].1;
    for (on, ops, reclaimed, sa) in rows {
        println!(
            "| {} | {ops:.0} | {:.2} | {reclaimed} | {sa:.2} |",
            if on { "on" } else { "off" },
            ops / off
        );
    }
}

/// Runs the benchmark and prints markdown tables.
pub fn run(args: &Args) {
    let tmp = match &args.dir {
        Some(d) => fail(tempfile::tempdir_in(d)),
        None => fail(tempfile::tempdir()),
    };
    let base = tmp.path();
    println!(
        "# paper-wisckey: {} MiB of user data per value size, keys of {KEY} bytes\n",
        args.bytes >> 20
    );
    if args.parts.contains(&Part::Loads) {
        loads(base, args);
    }
    if args.parts.contains(&Part::Scans) {
        scans(base, args.bytes, args.reads);
    }
    if args.parts.contains(&Part::Gc) {
        gc_effect(base, args.bytes);
    }
}

/// The load and read table: every value size, separation on and off.
fn loads(base: &Path, args: &Args) {
    println!("| value | separation | fillrandom ops/s | MB/s | write amp. | space amp. | readrandom ops/s | fill ratio separated/inline |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for vlen in SIZES {
        let pairs = (args.bytes / (KEY + vlen) as u64).max(100);
        let reads = args.reads.min(pairs);
        let default = measure(base, vlen, pairs, reads, None);
        let row = |name: &str, l: &Load, ratio: &str| {
            println!(
                "| {vlen} | {name} | {:.0} | {:.1} | {:.2} | {:.2} | {:.0} | {ratio} |",
                l.ops, l.mbs, l.wa, l.sa, l.reads
            );
        };
        if vlen < DEFAULT_THRESHOLD {
            // Inline by default; WiscKey separates every value: show that too.
            let sep = measure(base, vlen, pairs, reads, Some(1));
            row("default (inline)", &default, "");
            row(
                "all separated",
                &sep,
                &format!("{:.2}", sep.ops / default.ops),
            );
        } else if vlen <= flexkv::MAX_INLINE_VALUE {
            let off = measure(base, vlen, pairs, reads, Some(usize::MAX));
            row(
                "default (separated)",
                &default,
                &format!("{:.2}", default.ops / off.ops),
            );
            row("off", &off, "");
        } else {
            row("always separated", &default, "n/a");
        }
    }
}
