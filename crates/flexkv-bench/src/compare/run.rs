//! Runs the workloads against one engine and measures each phase: throughput, latency
//! percentiles, bytes the process wrote (`/proc/self/io`), disk bytes, peak RSS.
//!
//! Phases, in order, each optional:
//! - `fillseq` on a database of its own, removed afterwards;
//! - `fillrandom`, then `overwrite`, `readrandom`, `readmissing`, `seekrandom` (50-pair
//!   scans) and `deleterandom` on a second database (`fillrandom` runs whenever any of
//!   them is asked for, since they need its data);
//! - `ycsb-load`, then YCSB A, B, C, F, D, E (YCSB's recommended order: the inserts of D
//!   and E come last) on a third.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::engines::{Engine, EngineConfig, EngineKind, EngineResult, Op};
use super::gen::{record_key, sequential_key, Chooser, Histogram, Values, Zipf, MIN_KEY_LEN};
use super::probe;

/// The pairs a `seekrandom` operation reads after its seek.
pub const SEEK_SCAN: usize = 50;
/// The longest YCSB E scan (lengths are uniform in 1..=this).
pub const YCSB_MAX_SCAN: usize = 100;

/// One workload of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Workload {
    /// Load the records in key order into an empty database.
    FillSeq,
    /// Load the records in random key order into an empty database.
    FillRandom,
    /// Overwrite random records (uniform, with repeats).
    Overwrite,
    /// Read random records, all present.
    ReadRandom,
    /// Read random keys, all missing.
    ReadMissing,
    /// Seek to a random key and read the next 50 pairs.
    SeekRandom,
    /// Delete half of the records (at most `ops`), in random key order.
    DeleteRandom,
    /// YCSB's load phase: the records in random key order (its hashed insert order).
    YcsbLoad,
    /// YCSB A: 50% reads, 50% updates; scrambled Zipfian.
    YcsbA,
    /// YCSB B: 95% reads, 5% updates; scrambled Zipfian.
    YcsbB,
    /// YCSB C: reads only; scrambled Zipfian.
    YcsbC,
    /// YCSB D: 95% reads, 5% inserts; the newest records most popular.
    YcsbD,
    /// YCSB E: 95% scans of 1–100 pairs, 5% inserts; scrambled Zipfian scan starts.
    YcsbE,
    /// YCSB F: 50% reads, 50% read-modify-writes; scrambled Zipfian.
    YcsbF,
}

impl Workload {
    /// Every workload, in the order a run takes them.
    pub const ALL: [Workload; 14] = [
        Workload::FillSeq,
        Workload::FillRandom,
        Workload::Overwrite,
        Workload::ReadRandom,
        Workload::ReadMissing,
        Workload::SeekRandom,
        Workload::DeleteRandom,
        Workload::YcsbLoad,
        Workload::YcsbA,
        Workload::YcsbB,
        Workload::YcsbC,
        Workload::YcsbF,
        Workload::YcsbD,
        Workload::YcsbE,
    ];

    /// The db_bench / YCSB name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::FillSeq => "fillseq",
            Workload::FillRandom => "fillrandom",
            Workload::Overwrite => "overwrite",
            Workload::ReadRandom => "readrandom",
            Workload::ReadMissing => "readmissing",
            Workload::SeekRandom => "seekrandom",
            Workload::DeleteRandom => "deleterandom",
            Workload::YcsbLoad => "ycsb-load",
            Workload::YcsbA => "ycsb-a",
            Workload::YcsbB => "ycsb-b",
            Workload::YcsbC => "ycsb-c",
            Workload::YcsbD => "ycsb-d",
            Workload::YcsbE => "ycsb-e",
            Workload::YcsbF => "ycsb-f",
        }
    }

    /// Parses a comma-separated list of names, or `all`, `dbbench`, `ycsb`.
    pub fn parse_list(s: &str) -> Result<Vec<Workload>, String> {
        let mut out = Vec::new();
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "all" => out.extend(Self::ALL),
                "dbbench" => out.extend(&Self::ALL[..7]),
                "ycsb" => out.extend(&Self::ALL[7..]),
                _ => out.push(
                    Self::ALL
                        .into_iter()
                        .find(|w| w.name() == name)
                        .ok_or_else(|| format!("unknown workload {name:?}"))?,
                ),
            }
        }
        if out.is_empty() {
            return Err("no workloads given".into());
        }
        Ok(Self::ALL.into_iter().filter(|w| out.contains(w)).collect())
    }

    /// Whether the phase writes (and so ends with a sync).
    fn writes(self) -> bool {
        self.batched()
            || !matches!(
                self,
                Workload::ReadRandom
                    | Workload::ReadMissing
                    | Workload::SeekRandom
                    | Workload::YcsbC
            )
    }

    /// Whether the phase writes in batches (its latency samples are batches).
    fn batched(self) -> bool {
        matches!(
            self,
            Workload::FillSeq
                | Workload::FillRandom
                | Workload::Overwrite
                | Workload::DeleteRandom
                | Workload::YcsbLoad
        )
    }

    fn is_ycsb(self) -> bool {
        Workload::ALL[7..].contains(&self)
    }
}

/// What to run against one engine.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Spec {
    /// Records loaded.
    pub pairs: u64,
    /// Operations of each workload that does not load.
    pub ops: u64,
    /// Key bytes (at least 16).
    pub key_len: usize,
    /// Value bytes.
    pub value_len: usize,
    /// Threads issuing operations.
    pub threads: usize,
    /// Writes per batch in the loading, overwrite and delete phases.
    pub batch: usize,
    /// The workloads.
    pub workloads: Vec<Workload>,
    /// Settings shared by every engine.
    pub config: EngineConfig,
    /// Seed of every random choice.
    pub seed: u64,
    /// Read the engine's own counters after each phase (untimed).
    #[serde(default)]
    pub counters: bool,
}

impl Spec {
    /// Checks the spec before anything runs.
    pub fn validate(&self) -> Result<(), String> {
        if self.key_len < MIN_KEY_LEN {
            return Err(format!("keys must be at least {MIN_KEY_LEN} bytes"));
        }
        if self.pairs < 2 || self.pairs >= 1 << 48 {
            return Err("pairs must be in 2..2^48".into());
        }
        if self.threads == 0 || self.batch == 0 || self.ops == 0 {
            return Err("threads, batch and ops must be at least 1".into());
        }
        Ok(())
    }
}

/// What one phase measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PhaseResult {
    /// The workload's name.
    pub workload: String,
    /// Operations done (pairs written, for the batched phases).
    pub ops: u64,
    /// Seconds, including the sync at the end of a writing phase.
    pub secs: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// What one latency sample is: `op`, or `batch` in the batched phases.
    pub latency_unit: String,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// 99.9th percentile latency, µs.
    pub p999_us: f64,
    /// Key and value bytes written by the phase.
    pub user_bytes: u64,
    /// Bytes the process caused to be written to storage (`write_bytes` of `/proc/self/io`).
    pub device_bytes: u64,
    /// `device_bytes / user_bytes`, for phases that write.
    pub write_amp: Option<f64>,
    /// Bytes the engine's files take on disk after the phase (allocated blocks).
    pub disk_bytes: u64,
    /// Key and value bytes of the live records after the phase.
    pub live_bytes: u64,
    /// `disk_bytes / live_bytes`.
    pub space_amp: Option<f64>,
    /// Peak resident memory during the phase, MiB.
    pub peak_rss_mib: f64,
    /// Peak of the resident memory the process holds itself during the phase, the
    /// mapped file pages left out ([`probe::held_rss_kib`], sampled every 10 ms by
    /// [`probe::HeldPeak`]), MiB.
    #[serde(default)]
    pub held_peak_mib: f64,
    /// Of the resident memory at the phase's end, the file pages mapped into the
    /// process (`RssFile`; see [`probe::file_rss_kib`]), MiB.
    #[serde(default)]
    pub file_rss_mib: f64,
    /// Reads that found their key (a check on the harness and the engine).
    pub found: u64,
    /// The engine's own counters after the phase ([`Engine::counters`]), if the
    /// spec asked for them and the engine has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<String>,
    /// With `compare --repeat`, the ops/s of every run of this phase in run order;
    /// the other fields are those of the run with the median ops/s
    /// ([`median_run`](super::report::median_run)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs_ops_per_sec: Vec<f64>,
}

/// Told of a run's progress (a progress bar, or lines on stderr).
pub trait Progress: Sync {
    /// A phase of `total` operations starts.
    fn start(&self, workload: &str, total: u64);
    /// `n` more operations are done.
    fn advance(&self, n: u64);
    /// The phase ended.
    fn finish(&self, result: &PhaseResult);
}

/// What a thread's share of a phase did.
#[derive(Default)]
struct Tally {
    ops: u64,
    user_bytes: u64,
    found: u64,
    hist: Histogram,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.ops += other.ops;
        self.user_bytes += other.user_bytes;
        self.found += other.found;
        self.hist.merge(&other.hist);
    }
}

const PROGRESS_EVERY: u64 = 1024;

/// Thread `t`'s share of `total` operations split over `threads`.
fn share(total: u64, threads: u64, t: usize) -> u64 {
    total / threads + u64::from((t as u64) < total % threads)
}

/// Writes one batch, timing it as one latency sample.
fn write_batch(
    engine: &dyn Engine,
    ops: &[Op<'_>],
    user_bytes: u64,
    tally: &mut Tally,
    progress: &dyn Progress,
) -> EngineResult {
    let t0 = Instant::now();
    engine.write(ops)?;
    tally.hist.record(t0.elapsed().as_nanos() as u64);
    tally.ops += ops.len() as u64;
    tally.user_bytes += user_bytes;
    progress.advance(ops.len() as u64);
    Ok(())
}

/// Runs `op` `count` times, timing each as one latency sample.
fn timed_ops(
    count: u64,
    tally: &mut Tally,
    progress: &dyn Progress,
    mut op: impl FnMut(&mut Tally) -> EngineResult,
) -> EngineResult {
    for i in 0..count {
        let t0 = Instant::now();
        op(tally)?;
        tally.hist.record(t0.elapsed().as_nanos() as u64);
        tally.ops += 1;
        if i % PROGRESS_EVERY == PROGRESS_EVERY - 1 {
            progress.advance(PROGRESS_EVERY);
        }
    }
    progress.advance(count % PROGRESS_EVERY);
    Ok(())
}

struct Runner<'a> {
    spec: &'a Spec,
    values: Values,
    progress: &'a dyn Progress,
    results: Vec<PhaseResult>,
}

/// Runs `spec` against `kind` in the empty directory `dir`.
pub fn run_suite(
    kind: EngineKind,
    spec: &Spec,
    dir: &Path,
    progress: &dyn Progress,
) -> EngineResult<Vec<PhaseResult>> {
    spec.validate()?;
    let mut rng = SmallRng::seed_from_u64(spec.seed);
    let mut r = Runner {
        spec,
        values: Values::new(spec.value_len, &mut rng),
        progress,
        results: Vec::new(),
    };
    let wants = |w: Workload| spec.workloads.contains(&w);
    // Each group of phases gets a database of its own, removed afterwards.
    let database =
        |name: &str,
         r: &mut Runner<'_>,
         f: &dyn Fn(&mut Runner<'_>, &dyn Engine, &Path) -> EngineResult| {
            let sub = dir.join(name);
            let engine = kind.open(&sub, &spec.config)?;
            f(r, &*engine, &sub)?;
            engine.close()?;
            std::fs::remove_dir_all(&sub).map_err(|e| e.to_string())
        };
    if wants(Workload::FillSeq) {
        database("fillseq", &mut r, &|r, engine, sub| {
            r.fill(engine, sub, Workload::FillSeq)
        })?;
    }
    let dbbench = &Workload::ALL[1..7];
    if dbbench.iter().any(|&w| wants(w)) {
        database("dbbench", &mut r, &|r, engine, sub| {
            r.fill(engine, sub, Workload::FillRandom)?;
            for &w in dbbench[1..].iter().filter(|&&w| wants(w)) {
                r.phase(engine, sub, w)?;
            }
            Ok(())
        })?;
    }
    if Workload::ALL.iter().any(|&w| w.is_ycsb() && wants(w)) {
        // Zipf's constants take a pass over every record: computed once for all six.
        let zipf = Zipf::new(spec.pairs, Zipf::THETA);
        database("ycsb", &mut r, &|r, engine, sub| {
            r.fill(engine, sub, Workload::YcsbLoad)?;
            let records = AtomicU64::new(spec.pairs);
            for &w in Workload::ALL[8..].iter().filter(|&&w| wants(w)) {
                r.ycsb(engine, sub, w, &records, &zipf)?;
            }
            // D and E insert: their first and last records must be there (unmeasured).
            let end = records.load(Ordering::Relaxed);
            let (mut key, mut out) = (Vec::new(), Vec::new());
            for j in [spec.pairs, end - 1]
                .into_iter()
                .filter(|&j| j >= spec.pairs && j < end)
            {
                record_key(&mut key, j, spec.key_len);
                if !engine.get(&key, &mut out)? {
                    return Err(format!("YCSB inserted record {j} is missing"));
                }
            }
            Ok(())
        })?;
    }
    Ok(r.results)
}

impl Runner<'_> {
    /// Runs `work(thread)` on every thread and measures the phase; `live_pairs` tells how
    /// many records are live once it is done.
    fn measure<F>(
        &self,
        engine: &dyn Engine,
        dir: &Path,
        workload: Workload,
        total: u64,
        live_pairs: &dyn Fn() -> u64,
        work: F,
    ) -> EngineResult<(Tally, PhaseResult)>
    where
        F: Fn(usize) -> EngineResult<Tally> + Sync,
    {
        self.progress.start(workload.name(), total);
        probe::reset_peak_rss();
        let held_peak = probe::HeldPeak::start(Duration::from_millis(10));
        let written_before = probe::bytes_written();
        let start = Instant::now();
        let tallies: Vec<EngineResult<Tally>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.spec.threads)
                .map(|t| {
                    let work = &work;
                    s.spawn(move || work(t))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a worker panicked".into())))
                .collect()
        });
        let mut tally = Tally::default();
        for t in tallies {
            tally.add(t?);
        }
        if workload.writes() {
            engine.sync()?;
        }
        let secs = start.elapsed().as_secs_f64();
        let held_peak_kib = held_peak.finish();
        let device_bytes = probe::bytes_written().saturating_sub(written_before);
        let disk_bytes = probe::disk_bytes(dir);
        let live_bytes = live_pairs() * (self.spec.key_len + self.spec.value_len) as u64;
        let ratio = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
        let result = PhaseResult {
            workload: workload.name().to_string(),
            ops: tally.ops,
            secs,
            ops_per_sec: tally.ops as f64 / secs.max(1e-9),
            latency_unit: if workload.batched() { "batch" } else { "op" }.to_string(),
            p50_us: tally.hist.quantile_us(0.50),
            p99_us: tally.hist.quantile_us(0.99),
            p999_us: tally.hist.quantile_us(0.999),
            user_bytes: tally.user_bytes,
            device_bytes,
            write_amp: ratio(device_bytes, tally.user_bytes),
            disk_bytes,
            live_bytes,
            space_amp: ratio(disk_bytes, live_bytes),
            peak_rss_mib: probe::peak_rss_kib() as f64 / 1024.0,
            held_peak_mib: held_peak_kib as f64 / 1024.0,
            file_rss_mib: probe::file_rss_kib() as f64 / 1024.0,
            found: tally.found,
            counters: self.spec.counters.then(|| engine.counters()).flatten(),
            runs_ops_per_sec: Vec::new(),
        };
        self.progress.finish(&result);
        Ok((tally, result))
    }

    fn fill(&mut self, engine: &dyn Engine, dir: &Path, workload: Workload) -> EngineResult {
        let spec = self.spec;
        let n = spec.pairs;
        let (progress, values) = (self.progress, &self.values);
        let pair = (spec.key_len + spec.value_len) as u64;
        let work = |t: usize| -> EngineResult<Tally> {
            let mut tally = Tally::default();
            let mut keys: Vec<Vec<u8>> = Vec::with_capacity(spec.batch);
            let batches = n.div_ceil(spec.batch as u64);
            for b in (t as u64..batches).step_by(spec.threads) {
                let (from, to) = (b * spec.batch as u64, ((b + 1) * spec.batch as u64).min(n));
                keys.resize_with((to - from) as usize, Vec::new);
                for (slot, j) in keys.iter_mut().zip(from..to) {
                    if workload == Workload::FillSeq {
                        sequential_key(slot, j, spec.key_len);
                    } else {
                        record_key(slot, j, spec.key_len);
                    }
                }
                let ops: Vec<Op<'_>> = keys
                    .iter()
                    .zip(from..to)
                    .map(|(k, j)| Op::Put(k, values.get(j, 0)))
                    .collect();
                write_batch(engine, &ops, (to - from) * pair, &mut tally, progress)?;
            }
            Ok(tally)
        };
        let (_, result) = self.measure(engine, dir, workload, n, &|| n, work)?;
        self.results.push(result);
        Ok(())
    }

    fn phase(&mut self, engine: &dyn Engine, dir: &Path, workload: Workload) -> EngineResult {
        let spec = self.spec;
        let n = spec.pairs;
        let threads = spec.threads as u64;
        let (progress, values) = (self.progress, &self.values);
        let pair = (spec.key_len + spec.value_len) as u64;
        let total = match workload {
            Workload::DeleteRandom => spec.ops.min(n / 2),
            _ => spec.ops,
        };
        let seed = spec.seed ^ (workload as u64).rotate_left(32);
        let work = |t: usize| -> EngineResult<Tally> {
            let mut rng = SmallRng::seed_from_u64(seed ^ t as u64);
            let mut tally = Tally::default();
            let mut key = Vec::new();
            let mut out = Vec::new();
            let mine = share(total, threads, t);
            match workload {
                Workload::Overwrite | Workload::DeleteRandom => {
                    let overwrite = workload == Workload::Overwrite;
                    // Deletes take records t, t + threads, …: distinct, in random key order.
                    let mut deletes = (t as u64..).step_by(spec.threads);
                    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(spec.batch);
                    let mut js = Vec::with_capacity(spec.batch);
                    let mut done = 0;
                    while done < mine {
                        let len = (mine - done).min(spec.batch as u64);
                        keys.resize_with(len as usize, Vec::new);
                        js.clear();
                        for slot in keys.iter_mut() {
                            let j = if overwrite {
                                rng.random_range(0..n)
                            } else {
                                deletes.next().unwrap_or_else(|| unreachable!("endless"))
                            };
                            record_key(slot, j, spec.key_len);
                            js.push(j);
                        }
                        let ops: Vec<Op<'_>> = keys
                            .iter()
                            .zip(&js)
                            .map(|(k, &j)| {
                                if overwrite {
                                    Op::Put(k, values.get(j, 1))
                                } else {
                                    Op::Delete(k)
                                }
                            })
                            .collect();
                        let bytes = len * if overwrite { pair } else { spec.key_len as u64 };
                        write_batch(engine, &ops, bytes, &mut tally, progress)?;
                        done += len;
                    }
                }
                Workload::ReadRandom | Workload::ReadMissing => {
                    // Records n..2n were never written.
                    let base = if workload == Workload::ReadMissing {
                        n
                    } else {
                        0
                    };
                    timed_ops(mine, &mut tally, progress, |tally| {
                        record_key(&mut key, base + rng.random_range(0..n), spec.key_len);
                        tally.found += u64::from(engine.get(&key, &mut out)?);
                        Ok(())
                    })?;
                }
                _ => timed_ops(mine, &mut tally, progress, |tally| {
                    record_key(&mut key, rng.random_range(0..n), spec.key_len);
                    tally.found += engine.scan(&key, SEEK_SCAN)? as u64;
                    Ok(())
                })?,
            }
            Ok(tally)
        };
        let live = if workload == Workload::DeleteRandom {
            n - total
        } else {
            n
        };
        let (tally, result) = self.measure(engine, dir, workload, total, &|| live, work)?;
        self.results.push(result);
        // The key set is known, so a wrong answer is a bug in the engine or the harness.
        let expect_found = match workload {
            Workload::ReadRandom => Some(tally.ops),
            Workload::ReadMissing => Some(0),
            _ => None,
        };
        if let Some(want) = expect_found.filter(|&w| w != tally.found) {
            return Err(format!(
                "{}: {} of {} reads found their key, expected {want}",
                workload.name(),
                tally.found,
                tally.ops
            ));
        }
        Ok(())
    }

    fn ycsb(
        &mut self,
        engine: &dyn Engine,
        dir: &Path,
        workload: Workload,
        records: &AtomicU64,
        zipf: &Zipf,
    ) -> EngineResult {
        let spec = self.spec;
        let threads = spec.threads as u64;
        let (progress, values) = (self.progress, &self.values);
        let pair = (spec.key_len + spec.value_len) as u64;
        let total = spec.ops;
        let chooser = match workload {
            Workload::YcsbD => Chooser::Latest(zipf),
            _ => Chooser::ScrambledZipfian(zipf),
        };
        // (read, update, insert, scan, read-modify-write) shares in percent.
        let mix: [u32; 5] = match workload {
            Workload::YcsbA => [50, 50, 0, 0, 0],
            Workload::YcsbB => [95, 5, 0, 0, 0],
            Workload::YcsbC => [100, 0, 0, 0, 0],
            Workload::YcsbD => [95, 0, 5, 0, 0],
            Workload::YcsbE => [0, 0, 5, 95, 0],
            _ => [50, 0, 0, 0, 50],
        };
        let seed = spec.seed ^ (workload as u64).rotate_left(32);
        let round = workload as u64 + 2;
        let work = |t: usize| -> EngineResult<Tally> {
            let mut rng = SmallRng::seed_from_u64(seed ^ t as u64);
            let mut tally = Tally::default();
            let (mut key, mut out) = (Vec::new(), Vec::new());
            timed_ops(share(total, threads, t), &mut tally, progress, |tally| {
                let mut dice = rng.random_range(0..100u32);
                let op = mix.iter().position(|&p| {
                    let hit = dice < p;
                    dice = dice.saturating_sub(p);
                    hit
                });
                let j = if op == Some(2) {
                    records.fetch_add(1, Ordering::Relaxed)
                } else {
                    chooser.pick(&mut rng, records.load(Ordering::Relaxed))
                };
                record_key(&mut key, j, spec.key_len);
                let value = values.get(j, round);
                match op {
                    Some(0) => tally.found += u64::from(engine.get(&key, &mut out)?),
                    Some(1 | 2) => engine.write(&[Op::Put(&key, value)])?,
                    Some(3) => {
                        let len = rng.random_range(1..=YCSB_MAX_SCAN);
                        tally.found += engine.scan(&key, len)? as u64;
                    }
                    _ => {
                        tally.found += u64::from(engine.get(&key, &mut out)?);
                        engine.write(&[Op::Put(&key, value)])?;
                    }
                }
                if op != Some(0) && op != Some(3) {
                    tally.user_bytes += pair;
                }
                Ok(())
            })?;
            Ok(tally)
        };
        let live = || records.load(Ordering::Relaxed);
        let (tally, result) = self.measure(engine, dir, workload, total, &live, work)?;
        self.results.push(result);
        if workload == Workload::YcsbC && tally.found != tally.ops {
            return Err(format!(
                "ycsb-c: {} of {} reads found their key",
                tally.found, tally.ops
            ));
        }
        Ok(())
    }
}
