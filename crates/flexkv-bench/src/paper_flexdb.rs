//! `paper-flexdb`: the sorted keyspace (FlexDB §6.3) alone: `fillrandom`, `overwrite`,
//! `readrandom` and `seekrandom` with 50-pair scans, in batches of 1,000 `Buffered`
//! writes with one sync at the end of each write phase (the durability the side-by-side
//! harness will use). Reported: ops/s, write amplification (bytes written to the WAL,
//! value log and FlexSpace files / key and value bytes), index bytes per pair, peak
//! RSS, and recovery time after a clean close (every head, and sampled every 16 KiB)
//! and after a kill.
//!
//! The baseline, measured in the same run on the same keys, is the least any durable
//! sorted store must do: a `BTreeMap` in memory plus one append-only log of every pair,
//! synced at the same points. Ratios are flexkv / baseline (higher is better for ops/s).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use flexkv::{Db, Durability, WriteBatch};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Options of the `paper-flexdb` command.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Pairs to load.
    #[arg(long, default_value_t = 1_000_000)]
    pairs: u64,
    /// Key and value sizes: `16+100`, or the paper's UDB `27+127`.
    #[arg(long, default_value = "16+100")]
    sizes: String,
    /// Operations of each read workload.
    #[arg(long, default_value_t = 1_000_000)]
    reads: u64,
    /// Where the files go (a directory on the file system to measure).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Internal: the child process killed during the kill-recovery measurement.
    #[arg(long, hide = true)]
    child_load: Option<PathBuf>,
}

const BATCH: u64 = 1000;

fn key(i: u64, len: usize) -> Vec<u8> {
    // Scrambled so that the order of insertion is random, fixed width so it sorts.
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    let mut k = format!("{h:016x}{i:016x}").into_bytes();
    k.resize(len, b'k');
    if len < 32 {
        k = format!("{:0w$x}", h ^ i, w = len).into_bytes();
        k.truncate(len);
    }
    k
}

fn value(i: u64, round: u64, len: usize) -> Vec<u8> {
    let mut v = vec![(i ^ round) as u8; len];
    v[..8.min(len)].copy_from_slice(&(i ^ (round << 48)).to_le_bytes()[..8.min(len)]);
    v
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn written(db: &Db) -> u64 {
    let s = db.stats();
    s.wal_bytes + s.vlog_bytes + s.space_bytes
}

/// The baseline: a BTreeMap plus an append-only log.
struct Baseline {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    log: std::io::BufWriter<File>,
}

impl Baseline {
    fn put(&mut self, k: &[u8], v: &[u8]) {
        self.log
            .write_all(&(k.len() as u32).to_le_bytes())
            .expect("paper-flexdb: an engine or file operation failed");
        self.log
            .write_all(k)
            .expect("paper-flexdb: an engine or file operation failed");
        self.log
            .write_all(&(v.len() as u32).to_le_bytes())
            .expect("paper-flexdb: an engine or file operation failed");
        self.log
            .write_all(v)
            .expect("paper-flexdb: an engine or file operation failed");
        self.map.insert(k.to_vec(), v.to_vec());
    }
    fn sync(&mut self) {
        self.log
            .flush()
            .expect("paper-flexdb: an engine or file operation failed");
        self.log
            .get_ref()
            .sync_data()
            .expect("paper-flexdb: an engine or file operation failed");
    }
}

struct Row {
    name: &'static str,
    flexkv: f64,
    baseline: f64,
    extra: String,
}

fn write_phase(
    db: &Db,
    base: &mut Baseline,
    n: u64,
    round: u64,
    ks: usize,
    vs: usize,
) -> (f64, f64, u64) {
    let ksp = db.default_keyspace();
    let before = written(db);
    let t0 = Instant::now();
    let mut i = 0;
    while i < n {
        let mut b = WriteBatch::new();
        b.durability(Durability::Buffered);
        for j in i..(i + BATCH).min(n) {
            let idx = if round == 0 { j } else { (j * 7919) % n };
            b.put(&ksp, &key(idx, ks), &value(idx, round, vs))
                .expect("paper-flexdb: an engine or file operation failed");
        }
        db.write(b)
            .expect("paper-flexdb: an engine or file operation failed");
        i += BATCH;
    }
    db.flush()
        .expect("paper-flexdb: an engine or file operation failed");
    db.sync()
        .expect("paper-flexdb: an engine or file operation failed");
    let fx = n as f64 / t0.elapsed().as_secs_f64();
    let bytes = written(db) - before;
    let t0 = Instant::now();
    for j in 0..n {
        let idx = if round == 0 { j } else { (j * 7919) % n };
        base.put(&key(idx, ks), &value(idx, round, vs));
    }
    base.sync();
    let bx = n as f64 / t0.elapsed().as_secs_f64();
    (fx, bx, bytes)
}

/// Loads `pairs` pairs into `dir` and is then killed (aborts) without closing.
fn child_load(dir: &Path, pairs: u64, ks: usize, vs: usize) {
    let db = Db::open(dir).expect("paper-flexdb: an engine or file operation failed");
    let ksp = db.default_keyspace();
    let mut i = 0;
    while i < pairs {
        let mut b = WriteBatch::new();
        b.durability(Durability::Buffered);
        for j in i..(i + BATCH).min(pairs) {
            b.put(&ksp, &key(j + (1 << 40), ks), &value(j, 7, vs))
                .expect("paper-flexdb: an engine or file operation failed");
        }
        db.write(b)
            .expect("paper-flexdb: an engine or file operation failed");
        i += BATCH;
    }
    db.sync()
        .expect("paper-flexdb: an engine or file operation failed");
    std::process::abort();
}

fn parse_sizes(s: &str) -> (usize, usize) {
    let (k, v) = s
        .split_once('+')
        .expect("--sizes is KEY+VALUE, e.g. 16+100");
    (k.parse().expect("key size"), v.parse().expect("value size"))
}

pub fn run(args: &Args) {
    let (ks, vs) = parse_sizes(&args.sizes);
    let tmp = match &args.dir {
        Some(d) => d.join(format!("paper-flexdb-{}", std::process::id())),
        None => std::env::temp_dir().join(format!("paper-flexdb-{}", std::process::id())),
    };
    if let Some(dir) = &args.child_load {
        child_load(dir, args.pairs, ks, vs);
        return;
    }
    std::fs::create_dir_all(&tmp).expect("paper-flexdb: an engine or file operation failed");
    let dbdir = tmp.join("db");
    let n = args.pairs;
    let user = n * (ks + vs) as u64;
    println!(
        "# paper-flexdb: {n} pairs, {ks}-byte keys, {vs}-byte values, batches of {BATCH} Buffered, one sync per phase"
    );
    let db = Db::open(&dbdir).expect("paper-flexdb: an engine or file operation failed");
    let mut base = Baseline {
        map: BTreeMap::new(),
        log: std::io::BufWriter::new(
            File::create(tmp.join("baseline.log"))
                .expect("paper-flexdb: an engine or file operation failed"),
        ),
    };
    let mut rows = Vec::new();
    let (fx, bx, bytes) = write_phase(&db, &mut base, n, 0, ks, vs);
    let wa_fill = bytes as f64 / user as f64;
    let s = db.stats();
    let part = |b: u64| b as f64 / user as f64;
    println!(
        "fillrandom write amplification by file: WAL {:.2}, value log {:.2}, FlexSpace data {:.2}, log {:.2}, tree {:.2}; {} intervals rewritten whole (defrag)",
        part(s.wal_bytes),
        part(s.vlog_bytes),
        part(s.space_data_bytes),
        part(s.space_log_bytes),
        part(s.space_bytes - s.space_data_bytes - s.space_log_bytes),
        s.defrags
    );
    rows.push(Row {
        name: "fillrandom",
        flexkv: fx,
        baseline: bx,
        extra: format!("write amp {wa_fill:.2}"),
    });
    let (fx, bx, bytes) = write_phase(&db, &mut base, n, 1, ks, vs);
    rows.push(Row {
        name: "overwrite",
        flexkv: fx,
        baseline: bx,
        extra: format!("write amp {:.2}", bytes as f64 / user as f64),
    });
    let mut rng = SmallRng::seed_from_u64(1);
    let idx: Vec<u64> = (0..args.reads).map(|_| rng.random_range(0..n)).collect();
    let t0 = Instant::now();
    for &i in &idx {
        assert!(db
            .get(&key(i, ks))
            .expect("paper-flexdb: an engine or file operation failed")
            .is_some());
    }
    let fx = args.reads as f64 / t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    for &i in &idx {
        assert!(base.map.contains_key(&key(i, ks)));
    }
    let bx = args.reads as f64 / t0.elapsed().as_secs_f64();
    let s = db.stats();
    rows.push(Row {
        name: "readrandom",
        flexkv: fx,
        baseline: bx,
        extra: format!(
            "cache hits {:.0}%",
            100.0 * s.cache_hits as f64 / (s.cache_hits + s.cache_misses).max(1) as f64
        ),
    });
    let seeks = args.reads / 10;
    let t0 = Instant::now();
    for &i in idx.iter().take(seeks as usize) {
        let got = db.range(key(i, ks)..).take(50).count();
        assert!(got > 0);
    }
    let fx = seeks as f64 / t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    for &i in idx.iter().take(seeks as usize) {
        let got = base.map.range(key(i, ks)..).take(50).count();
        assert!(got > 0);
    }
    let bx = seeks as f64 / t0.elapsed().as_secs_f64();
    rows.push(Row {
        name: "seekrandom+50",
        flexkv: fx,
        baseline: bx,
        extra: String::new(),
    });
    let s = db.stats();
    let index_per_pair = s.index_bytes as f64 / n as f64;
    println!("| workload | flexkv ops/s | baseline ops/s | flexkv / baseline | |");
    println!("|---|---:|---:|---:|---|");
    for r in &rows {
        println!(
            "| {} | {:.0} | {:.0} | {:.2} | {} |",
            r.name,
            r.flexkv,
            r.baseline,
            r.flexkv / r.baseline,
            r.extra
        );
    }
    println!(
        "intervals {}, index {} bytes = {index_per_pair:.2} bytes/pair (paper Table 3: 3.6), peak RSS {} MiB",
        s.intervals,
        s.index_bytes,
        peak_rss_kib() / 1024
    );
    println!(
        "write amplification on fillrandom: {wa_fill:.2} (goal <= 2); lock hold max {} us, p99 <= {} us; commits {}",
        s.lock_hold_max_micros, s.lock_hold_p99_micros, s.commits
    );
    drop(base);
    db.close()
        .expect("paper-flexdb: an engine or file operation failed");
    for (label, step) in [("every head", 0u64), ("sampled every 16 KiB", 16 << 10)] {
        let t0 = Instant::now();
        let db = Db::builder(&dbdir)
            .recovery_step(step)
            .open()
            .expect("paper-flexdb: an engine or file operation failed");
        let secs = t0.elapsed().as_secs_f64();
        let iv = db.stats().intervals;
        assert!(db
            .get(&key(n / 2, ks))
            .expect("paper-flexdb: an engine or file operation failed")
            .is_some());
        drop(db);
        println!("recovery after a clean close, {label}: {secs:.3} s ({iv} intervals; goal < 1 s at 10M pairs)");
    }
    // Kill: a child loads 10% more pairs, syncs and aborts; the reopen replays its WAL.
    let status = std::process::Command::new(
        std::env::current_exe().expect("paper-flexdb: an engine or file operation failed"),
    )
    .args(["paper-flexdb", "--pairs", &(n / 10).to_string(), "--sizes"])
    .arg(&args.sizes)
    .arg("--child-load")
    .arg(&dbdir)
    .status()
    .expect("paper-flexdb: an engine or file operation failed");
    assert!(!status.success(), "the child was to be killed");
    let t0 = Instant::now();
    let db = Db::open(&dbdir).expect("paper-flexdb: an engine or file operation failed");
    let secs = t0.elapsed().as_secs_f64();
    let replayed = db.stats().memtable_entries;
    drop(db);
    println!("recovery after a kill: {secs:.3} s ({replayed} pairs replayed from the WAL)");
    std::fs::remove_dir_all(&tmp).expect("paper-flexdb: an engine or file operation failed");
}
