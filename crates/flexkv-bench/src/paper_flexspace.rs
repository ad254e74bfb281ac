//! `paper-flexspace`: the paper's Table 2 (FlexSpace §6.2) on this machine.
//!
//! Three write patterns of fixed-size blocks, each starting from an empty space:
//! - random insert: each block is inserted at a random block-aligned offset within the
//!   existing space, shifting everything after it;
//! - random write: every block of the final space written once, in random order;
//! - sequential write: the blocks in order.
//!
//! Then one I/O barrier and two read passes (sequential and random order, warm page
//! cache). Systems: FlexSpace; a plain file with `pwrite` (the two write patterns); for
//! inserts, a plain file with `fallocate(FALLOC_FL_INSERT_RANGE)` + `pwrite`, and one that
//! inserts by rewriting the tail. The two insert baselines cost O(N) per insert; each
//! runs at most its budget (`--budget` for insert-range, `--tail-budget` for rewriting
//! the tail) and reports the rate it reached, which (as their rate only falls as the
//! file grows) flatters them. `--full` runs insert-range whole unless `--budget` is
//! given, as the paper did (about 12 minutes for 1 GiB in 4 KiB blocks here); rewriting
//! the tail whole would take hours, so it keeps its budget.
//!
//! The report also gives the ceiling this disk puts on the insert ratio: the rate of
//! writing the same number of bytes to a plain file in 4 MiB `pwrite`s and one `fsync`
//! (measured in the same run), over the insert-range file's rate. No system that makes
//! the bytes durable inserts them faster than the disk takes them in large sequential
//! writes, so where that ceiling is under 100×, the insert goal cannot be shown
//! at that size on this disk.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flexkv::io::{RealVfs, Vfs};
use flexkv::space::{FlexSpace, SpaceOptions};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rustix::fs::{fallocate, FallocateFlags};

/// Options of the `paper-flexspace` command.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The paper's sizes: 1 GiB with 4 KiB blocks, then 1 GiB with 64 KiB blocks.
    #[arg(long)]
    full: bool,
    /// Size of the space in MiB (default run).
    #[arg(long, default_value_t = 256)]
    size_mib: u64,
    /// Block size in KiB (default run): a multiple of 4, since the insert-range baseline
    /// (`fallocate`) works in whole file-system blocks.
    #[arg(long, default_value_t = 4, value_parser = block_kib)]
    block_kib: usize,
    /// Where the files go (a directory on the file system to measure).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seconds the insert-range baseline may run (default: 15, or the whole run with
    /// `--full`).
    #[arg(long)]
    budget: Option<f64>,
    /// Seconds the rewrite-the-tail baseline may run (it is O(N) in bytes moved per
    /// insert, hours for a whole 1 GiB run).
    #[arg(long, default_value_t = 15.0)]
    tail_budget: f64,
    /// Seed for the random orders.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pattern {
    RandInsert,
    RandWrite,
    SeqWrite,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::RandInsert => "random insert",
            Pattern::RandWrite => "random write",
            Pattern::SeqWrite => "sequential write",
        }
    }
}

struct Outcome {
    system: &'static str,
    pattern: Pattern,
    user_bytes: u64,
    secs: f64,
    /// MB/s over the last fifth of the blocks written (before the barrier): the rate the
    /// system had reached by the end, which for the O(N) baselines is far below the mean.
    final_rate: f64,
    complete: bool,
    /// Bytes the system wrote to its files / user bytes (`None`: not counted by it).
    file_wa: Option<f64>,
    /// Bytes this process sent to storage (`/proc/self/io`) / user bytes.
    device_wa: f64,
    seq_read: f64,
    rand_read: f64,
}

fn mbs(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / secs / (1 << 20) as f64
}

/// `write_bytes` of `/proc/self/io`: bytes this process caused to be sent to storage.
fn device_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| {
                    l.strip_prefix("write_bytes:")
                        .map(|v| v.trim().parse().ok())
                })
                .flatten()
        })
        .unwrap_or(0)
}

fn block_data(i: u64, block: usize) -> Vec<u8> {
    let mut v = vec![0u8; block];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

/// The order of operations of a pattern: the offset (in blocks) of each block.
fn offsets(pattern: Pattern, blocks: u64, seed: u64) -> Vec<u64> {
    let mut rng = SmallRng::seed_from_u64(seed);
    match pattern {
        Pattern::RandInsert => (0..blocks).map(|i| rng.random_range(0..=i)).collect(),
        Pattern::RandWrite => {
            let mut v: Vec<u64> = (0..blocks).collect();
            v.shuffle(&mut rng);
            v
        }
        Pattern::SeqWrite => (0..blocks).collect(),
    }
}

/// Reads every block once in order and once shuffled; returns MB/s of each.
fn read_passes(
    blocks: u64,
    block: usize,
    seed: u64,
    mut read: impl FnMut(u64, &mut [u8]),
) -> (f64, f64) {
    let mut buf = vec![0u8; block];
    let start = Instant::now();
    for b in 0..blocks {
        read(b * block as u64, &mut buf);
    }
    let seq = mbs(blocks * block as u64, start.elapsed().as_secs_f64());
    let mut order: Vec<u64> = (0..blocks).collect();
    order.shuffle(&mut SmallRng::seed_from_u64(seed ^ 0xAB));
    let start = Instant::now();
    for b in order {
        read(b * block as u64, &mut buf);
    }
    (
        seq,
        mbs(blocks * block as u64, start.elapsed().as_secs_f64()),
    )
}

fn run_flexspace(dir: &Path, pattern: Pattern, blocks: u64, block: usize, seed: u64) -> Outcome {
    let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
    let mut s = FlexSpace::open(vfs, dir, SpaceOptions::default()).expect("open FlexSpace");
    let order = offsets(pattern, blocks, seed);
    let dev0 = device_bytes();
    let start = Instant::now();
    if pattern == Pattern::RandWrite {
        s.resize(blocks * block as u64).expect("resize");
    }
    let mark = blocks - blocks / 5;
    let mut mark_time = Duration::ZERO;
    for (i, &b) in order.iter().enumerate() {
        if i as u64 == mark {
            mark_time = start.elapsed();
        }
        let data = block_data(i as u64, block);
        let off = b * block as u64;
        match pattern {
            Pattern::RandInsert => s.insert(off, &data),
            _ => s.write(off, &data),
        }
        .expect("FlexSpace write");
    }
    let final_rate = mbs(
        (blocks - mark) * block as u64,
        (start.elapsed() - mark_time).as_secs_f64(),
    );
    s.checkpoint().expect("FlexSpace barrier");
    let secs = start.elapsed().as_secs_f64();
    let dev = device_bytes() - dev0;
    let st = s.stats();
    let user = blocks * block as u64;
    let (seq_read, rand_read) = read_passes(blocks, block, seed, |off, buf| {
        s.read(off, buf).expect("FlexSpace read")
    });
    Outcome {
        system: "FlexSpace",
        pattern,
        user_bytes: user,
        secs,
        final_rate,
        complete: true,
        file_wa: Some(
            (st.data_bytes_written + st.log_bytes_written + st.tree_bytes_written) as f64
                / user as f64,
        ),
        device_wa: dev as f64 / user as f64,
        seq_read,
        rand_read,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Plain {
    Pwrite,
    InsertRange,
    Rewrite,
}

fn run_plain(
    path: &Path,
    how: Plain,
    pattern: Pattern,
    blocks: u64,
    block: usize,
    seed: u64,
    budget: Duration,
) -> Outcome {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .expect("create file");
    let order = offsets(pattern, blocks, seed);
    let bs = block as u64;
    let dev0 = device_bytes();
    let start = Instant::now();
    let (mut done, mut size, mut app_bytes) = (0u64, 0u64, 0u64);
    let mut tail = Vec::new();
    // Times at which each block was done, to measure the rate over the last fifth.
    let mut times = Vec::with_capacity(order.len());
    for (i, &b) in order.iter().enumerate() {
        let data = block_data(i as u64, block);
        let off = b * bs;
        match how {
            Plain::Pwrite => f.write_all_at(&data, off).expect("pwrite"),
            Plain::InsertRange if off < size => {
                fallocate(&f, FallocateFlags::INSERT_RANGE, off, bs)
                    .expect("fallocate INSERT_RANGE");
                f.write_all_at(&data, off).expect("pwrite");
            }
            Plain::Rewrite if off < size => {
                tail.resize((size - off) as usize, 0);
                f.read_exact_at(&mut tail, off).expect("read tail");
                f.write_all_at(&data, off).expect("pwrite");
                f.write_all_at(&tail, off + bs).expect("rewrite tail");
                app_bytes += tail.len() as u64;
            }
            _ => f.write_all_at(&data, off).expect("append"),
        }
        app_bytes += bs;
        size += bs;
        done += 1;
        times.push(start.elapsed());
        if how != Plain::Pwrite && done % 64 == 0 && start.elapsed() > budget {
            break;
        }
    }
    let mark = (done - done / 5) as usize;
    let final_rate = mbs(
        (done - mark as u64) * bs,
        (times[times.len() - 1] - times[mark.saturating_sub(1)]).as_secs_f64(),
    );
    f.sync_all().expect("fsync");
    let secs = start.elapsed().as_secs_f64();
    let dev = device_bytes() - dev0;
    let user = done * bs;
    let (seq_read, rand_read) = read_passes(done, block, seed, |off, buf| {
        read_file(&f, off, buf);
    });
    Outcome {
        system: match how {
            Plain::Pwrite => "file: pwrite",
            Plain::InsertRange => "file: insert-range",
            Plain::Rewrite => "file: rewrite tail",
        },
        pattern,
        user_bytes: user,
        secs,
        final_rate,
        complete: done == blocks,
        file_wa: Some(app_bytes as f64 / user as f64),
        device_wa: dev as f64 / user as f64,
        seq_read,
        rand_read,
    }
}

fn read_file(f: &File, off: u64, buf: &mut [u8]) {
    f.read_exact_at(buf, off).expect("read");
}

/// `--block-kib`: a positive multiple of 4 KiB, refused before anything runs.
fn block_kib(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(k) if k > 0 && k % 4 == 0 => Ok(k),
        Ok(_) => Err("must be a positive multiple of 4 (fallocate's insert-range moves whole 4 KiB file-system blocks)".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs the benchmark and prints the report.
pub fn run(args: &Args) {
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let runs: Vec<(u64, usize)> = if args.full {
        vec![(1 << 30, 4096), (1 << 30, 64 << 10)]
    } else {
        vec![(args.size_mib << 20, args.block_kib << 10)]
    };
    for (size, block) in runs {
        let blocks = size / block as u64;
        let work = base.join(format!("flexkv-paper-flexspace-{}", std::process::id()));
        std::fs::create_dir_all(&work).expect("work dir");
        eprintln!(
            "paper-flexspace: {} MiB in {} KiB blocks under {}…",
            size >> 20,
            block >> 10,
            work.display()
        );
        let mut outcomes = Vec::new();
        for pattern in [Pattern::RandInsert, Pattern::RandWrite, Pattern::SeqWrite] {
            let dir = work.join("flex");
            outcomes.push(run_flexspace(&dir, pattern, blocks, block, args.seed));
            std::fs::remove_dir_all(&dir).expect("clean up");
            let systems: &[Plain] = match pattern {
                Pattern::RandInsert => &[Plain::InsertRange, Plain::Rewrite],
                _ => &[Plain::Pwrite],
            };
            for &how in systems {
                let file = work.join("plain");
                let budget = match (how, args.budget) {
                    (Plain::Rewrite, _) => Duration::from_secs_f64(args.tail_budget),
                    (_, Some(secs)) => Duration::from_secs_f64(secs),
                    (_, None) if args.full => Duration::MAX,
                    (_, None) => Duration::from_secs(15),
                };
                outcomes.push(run_plain(
                    &file, how, pattern, blocks, block, args.seed, budget,
                ));
                std::fs::remove_file(&file).expect("clean up");
            }
            for o in &outcomes[outcomes.len() - 1 - systems.len()..] {
                eprintln!(
                    "  {:<17} {:<19} {:>9.1} MB/s",
                    o.pattern.name(),
                    o.system,
                    mbs(o.user_bytes, o.secs)
                );
            }
        }
        let bulk = bulk_write_mbs(&work.join("bulk"), size);
        std::fs::remove_dir_all(&work).ok();
        report(&outcomes, size, block, bulk);
    }
}

/// MB/s of writing `size` bytes to a new file in 4 MiB `pwrite`s and one `fsync`, the
/// best of three tries: what the disk takes at best (its rate moves by up to 2× from
/// one write to the next here, and a ceiling must not be caught low).
fn bulk_write_mbs(path: &Path, size: u64) -> f64 {
    let chunk = vec![0x5Au8; 4 << 20];
    let mut best = 0f64;
    for _ in 0..3 {
        let f = File::create(path).expect("create file");
        let start = Instant::now();
        let mut off = 0;
        while off < size {
            let n = chunk.len().min((size - off) as usize);
            f.write_all_at(&chunk[..n], off).expect("pwrite");
            off += n as u64;
        }
        f.sync_all().expect("fsync");
        best = best.max(mbs(size, start.elapsed().as_secs_f64()));
        drop(f);
        std::fs::remove_file(path).expect("clean up");
    }
    best
}

fn report(outcomes: &[Outcome], size: u64, block: usize, bulk: f64) {
    println!("## paper-flexspace: Table 2 of the FlexSpace paper on this machine\n");
    println!(
        "{} MiB written in {} KiB blocks; one barrier at the end; reads with a warm page cache.\n",
        size >> 20,
        block >> 10
    );
    println!("| pattern | system | write MB/s | MB/s, last fifth | done | write amp (files) | write amp (device) | seq read MB/s | rand read MB/s |");
    println!("|---|---|---:|---:|---|---:|---:|---:|---:|");
    for o in outcomes {
        println!(
            "| {} | {} | {:.1} | {:.1} | {} | {} | {:.3} | {:.0} | {:.0} |",
            o.pattern.name(),
            o.system,
            mbs(o.user_bytes, o.secs),
            o.final_rate,
            if o.complete {
                "all".to_string()
            } else {
                format!("{} MiB in {:.0} s", o.user_bytes >> 20, o.secs)
            },
            o.file_wa.map_or("-".into(), |w| format!("{w:.3}")),
            o.device_wa,
            o.seq_read,
            o.rand_read,
        );
    }
    let rate = |system: &str, p: Pattern| {
        outcomes
            .iter()
            .find(|o| o.system == system && o.pattern == p)
            .map(|o| mbs(o.user_bytes, o.secs))
            .unwrap_or(f64::NAN)
    };
    println!("\nGoals (issue 3), from the figures above:");
    let ins =
        rate("FlexSpace", Pattern::RandInsert) / rate("file: insert-range", Pattern::RandInsert);
    let last = |system: &str| {
        outcomes
            .iter()
            .find(|o| o.system == system && o.pattern == Pattern::RandInsert)
            .map_or(f64::NAN, |o| o.final_rate)
    };
    let whole = (outcomes.iter()).any(|o| {
        o.system == "file: insert-range" && o.pattern == Pattern::RandInsert && o.complete
    });
    println!(
        "- random insert: FlexSpace / insert-range file = {ins:.0}× on mean rates ({}), {:.0}× \
         on the rates of the last fifth; goal ≥ 100×: {}",
        if whole {
            "both whole runs"
        } else {
            "the file's only over what it did in its budget"
        },
        last("FlexSpace") / last("file: insert-range"),
        verdict(ins >= 100.0)
    );
    let ceiling = bulk / rate("file: insert-range", Pattern::RandInsert);
    println!(
        "  (the ceiling on this disk: the same bytes written in 4 MiB pwrites and one fsync \
         ran at {bulk:.0} MB/s, {ceiling:.0}× the insert-range file; no system inserts \
         durably faster than that)"
    );
    for p in [Pattern::RandWrite, Pattern::SeqWrite] {
        let r = rate("FlexSpace", p) / rate("file: pwrite", p);
        println!(
            "- {}: FlexSpace / pwrite = {r:.2}×, goal ≥ 0.8×: {}",
            p.name(),
            verdict(r >= 0.8)
        );
    }
    for o in outcomes.iter().filter(|o| o.system == "FlexSpace") {
        let wa = o.file_wa.unwrap_or(f64::NAN);
        println!(
            "- {} write amplification (files) = {wa:.3}, goal ≤ 1.1: {}",
            o.pattern.name(),
            verdict(wa <= 1.1)
        );
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}
