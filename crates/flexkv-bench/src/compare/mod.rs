//! The side-by-side harness: the same workloads (db_bench's and YCSB A–F) against flexkv
//! and, when built with their features, RocksDB, LMDB, redb, fjall and sled.
//!
//! Each engine runs in a child process of its own (this binary, `compare-child`), so its
//! memory, its threads' writes (`/proc/self/io`) and its peak RSS are measured apart. The
//! parent collects each child's JSON, then prints a markdown table, writes a JSON file and
//! an SVG chart, with flexkv's throughput over the best other engine's on every workload.

pub mod engines;
pub mod gen;
pub mod probe;
pub mod report;
pub mod run;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub use engines::{Engine, EngineConfig, EngineKind, Op};
pub use report::{EngineRun, Report};
pub use run::{run_suite, PhaseResult, Progress, Spec, Workload};

/// Key and value sizes: `K+V`, or one of the size profiles of the RocksDB workload study
/// (Cao et al., FAST '20) that FlexDB's paper uses: `udb` 27+127, `zippydb` 48+43,
/// `sys` 28+396.
pub fn parse_sizes(s: &str) -> Result<(usize, usize), String> {
    match s.trim() {
        "udb" => Ok((27, 127)),
        "zippydb" => Ok((48, 43)),
        "sys" => Ok((28, 396)),
        other => {
            let bad =
                || format!("bad sizes {other:?}: want K+V (e.g. 16+100), udb, zippydb or sys");
            let (k, v) = other.split_once('+').ok_or_else(bad)?;
            Ok((k.parse().map_err(|_| bad())?, v.parse().map_err(|_| bad())?))
        }
    }
}

fn parse_list<T>(s: &str, f: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(f)
        .collect()
}

/// Options of `flexkv-bench compare`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Engines to run, comma-separated (default: every engine this build has).
    #[arg(long)]
    pub engines: Option<String>,
    /// Key+value sizes, comma-separated: `16+100`, `udb`, `zippydb`, `sys`.
    #[arg(long, default_value = "16+100")]
    pub sizes: String,
    /// Thread counts, comma-separated.
    #[arg(long, default_value = "1")]
    pub threads: String,
    /// Records to load, comma-separated (e.g. `1000000,10000000`).
    #[arg(long, default_value = "1000000")]
    pub pairs: String,
    /// Multiplies every `--pairs` figure.
    #[arg(long, default_value_t = 1)]
    pub scale: u64,
    /// Operations of each workload that does not load (default: min(pairs, 1,000,000)).
    #[arg(long)]
    pub ops: Option<u64>,
    /// Workloads, comma-separated: db_bench names, `ycsb-a`…`ycsb-f`, or `all`,
    /// `dbbench`, `ycsb`.
    #[arg(long, default_value = "all")]
    pub workloads: String,
    /// Writes per batch when loading, overwriting and deleting.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Cache budget of every engine, MiB.
    #[arg(long, default_value_t = 256)]
    pub cache_mib: u64,
    /// Write buffer (memtable) of every engine that has one, MiB.
    #[arg(long, default_value_t = 64)]
    pub write_buffer_mib: u64,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Where the databases go (a temporary directory under it, removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Where `compare.json`, `compare.md` and `compare.svg` are written.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Runs of each engine per setting, the engines' order rotating from one round to
    /// the next; each phase reports the run with the median ops/s.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// After each phase, read the engine's own counters (flexkv's `Db::stats`),
    /// untimed, and print them on stderr and in `compare.json`.
    #[arg(long)]
    pub counters: bool,
    /// Memory, MiB, that the harness touches and frees just before it starts each
    /// engine's process, so that no engine's first allocations pay for the host
    /// handing the guest's idle memory back (see [`warm_memory`]); 0: none.
    #[arg(long, default_value_t = 2048)]
    pub warm_mib: u64,
    /// flexkv's writers paced by its commit (`Builder::pace_writes`, on by default as
    /// in the engine): many short waits for writes that outrun the committer instead
    /// of a few long ones; `--flexkv-pace-writes false` turns it off.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub flexkv_pace_writes: bool,
    /// flexkv's committer sweeps scattered intervals contiguous while writes have
    /// stopped (`Builder::idle_sweep`, on by default as in the engine);
    /// `--flexkv-idle-sweep false` turns it off.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub flexkv_idle_sweep: bool,
}

/// Options of the hidden `compare-child` command: one engine, one spec.
#[derive(clap::Args, Debug)]
pub struct ChildArgs {
    /// The engine.
    #[arg(long)]
    pub engine: String,
    /// The spec, as JSON.
    #[arg(long)]
    pub spec: String,
    /// An empty directory for the databases.
    #[arg(long)]
    pub dir: PathBuf,
}

/// Progress as one line on stderr per phase (and one of the engine's counters, if
/// the phase read them).
pub struct LineProgress {
    /// Printed before each line.
    pub prefix: String,
}

impl Progress for LineProgress {
    fn start(&self, _workload: &str, _total: u64) {}

    fn advance(&self, _n: u64) {}

    fn finish(&self, r: &PhaseResult) {
        eprintln!(
            "{} {:<12} {:>12} ops/s  p99 {:>9.1} µs  WA {:>5}  wrote {:>6} MB  RSS {:>5.0} MiB (less file pages {:.0}; file pages at end {:.0})",
            self.prefix,
            r.workload,
            report::thousands(r.ops_per_sec as u64),
            r.p99_us,
            r.write_amp.map_or("–".into(), |w| format!("{w:.2}")),
            report::thousands(r.device_bytes / 1_000_000),
            r.peak_rss_mib,
            r.held_peak_mib,
            r.file_rss_mib
        );
        if let Some(c) = &r.counters {
            eprintln!("{}   counters: {c}", self.prefix);
        }
    }
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("flexkv-bench: error: {msg}");
    std::process::exit(1)
}

/// `compare-child`: runs the spec against one engine and prints an [`EngineRun`] as JSON.
pub fn child(args: &ChildArgs) {
    let kind = EngineKind::parse(&args.engine).unwrap_or_else(|e| fail(e));
    let spec: Spec = serde_json::from_str(&args.spec).unwrap_or_else(|e| fail(e));
    let progress = LineProgress {
        prefix: format!("  {:<8}", kind.name()),
    };
    let mut run = EngineRun::new(kind, &spec);
    match run_suite(kind, &spec, &args.dir, &progress) {
        Ok(phases) => run.phases = phases,
        Err(e) => run.error = Some(e),
    }
    println!(
        "{}",
        serde_json::to_string(&run).unwrap_or_else(|e| fail(e))
    );
}

impl EngineRun {
    /// A run of `spec` on `kind` with no phases yet.
    pub fn new(kind: EngineKind, spec: &Spec) -> EngineRun {
        EngineRun {
            engine: kind.name().into(),
            key_len: spec.key_len,
            value_len: spec.value_len,
            threads: spec.threads,
            pairs: spec.pairs,
            ops: spec.ops,
            configuration: kind.configuration(&spec.config),
            phases: Vec::new(),
            error: None,
        }
    }
}

/// Touches `mib` MiB of fresh anonymous memory (in huge pages where the kernel gives
/// them) and frees it.
///
/// On a virtual machine that reports free memory to its host (virtio-balloon's free
/// page reporting, as on this project's machine), memory left free for a few seconds
/// is handed back, and the next touch of each page waits for the host to supply it
/// again: 2 GiB took 4.7 s to touch after an idle spell and 0.1–0.3 s right after
/// another touch. An engine's process that started after an idle moment paid that in
/// its first phase, one that started after a memory-hungry engine did not: flexkv's
/// 1M `fillseq` ran at 1.7M pairs/s after LMDB or a pause and 3.8M after another
/// flexkv run (docs/benchmarks.md, fifty-third session). Memory the harness has just
/// freed goes to the next process's first allocations, so every engine starts alike.
/// Best effort: a machine that cannot map them runs the engines unwarmed.
pub fn warm_memory(mib: u64) {
    let Ok(len) = usize::try_from(mib.saturating_mul(1 << 20)) else {
        return;
    };
    if len == 0 {
        return;
    }
    let Ok(mut map) = memmap2::MmapOptions::new().len(len).map_anon() else {
        return;
    };
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    for page in map.chunks_mut(4096) {
        page[0] = 1;
    }
    std::hint::black_box(&map);
}

fn run_child(kind: EngineKind, spec: &Spec, base: &Path, warm_mib: u64) -> EngineRun {
    let failed = |error: String| EngineRun {
        error: Some(error),
        ..EngineRun::new(kind, spec)
    };
    let dir = match tempfile::Builder::new()
        .prefix(&format!("{}-", kind.name()))
        .tempdir_in(base)
    {
        Ok(d) => d,
        Err(e) => return failed(format!("cannot make a data directory: {e}")),
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return failed(format!("cannot find this program: {e}")),
    };
    let spec_json = serde_json::to_string(spec).unwrap_or_else(|e| fail(e));
    warm_memory(warm_mib);
    let output = Command::new(exe)
        .args([
            "compare-child",
            "--engine",
            kind.name(),
            "--spec",
            &spec_json,
            "--dir",
        ])
        .arg(dir.path())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output();
    match output {
        Err(e) => failed(format!("cannot start the child process: {e}")),
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            match text.lines().last().map(serde_json::from_str::<EngineRun>) {
                Some(Ok(run)) => run,
                _ => failed(format!("the child process ended with {}", out.status)),
            }
        }
    }
}

/// `compare`: runs every engine × size × threads × pairs setting and reports.
pub fn run(args: &Args) {
    let engines: Vec<EngineKind> = match &args.engines {
        Some(list) => parse_list(list, EngineKind::parse).unwrap_or_else(|e| fail(e)),
        None => EngineKind::ALL
            .into_iter()
            .filter(|k| k.available())
            .collect(),
    };
    if let Err(e) = engines.iter().try_for_each(|k| k.require()) {
        fail(e);
    }
    if args.repeat == 0 {
        fail("--repeat: at least 1");
    }
    let sizes = parse_list(&args.sizes, parse_sizes).unwrap_or_else(|e| fail(e));
    let threads = parse_list(&args.threads, |s| {
        s.parse::<usize>().map_err(|e| e.to_string())
    })
    .unwrap_or_else(|e| fail(format!("--threads: {e}")));
    let pairs = parse_list(&args.pairs, |s| s.parse::<u64>().map_err(|e| e.to_string()))
        .unwrap_or_else(|e| fail(format!("--pairs: {e}")));
    let workloads = Workload::parse_list(&args.workloads).unwrap_or_else(|e| fail(e));
    let config = EngineConfig {
        cache_bytes: args.cache_mib << 20,
        write_buffer_bytes: args.write_buffer_mib << 20,
        flexkv_pace_writes: args.flexkv_pace_writes,
        flexkv_idle_sweep: args.flexkv_idle_sweep,
    };
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    eprintln!("{command}");
    let mut report = Report {
        command,
        config,
        runs: Vec::new(),
    };
    for &n in &pairs {
        let n = n.saturating_mul(args.scale);
        for &(key_len, value_len) in &sizes {
            for &t in &threads {
                let spec = Spec {
                    pairs: n,
                    ops: args.ops.unwrap_or(n.min(1_000_000)),
                    key_len,
                    value_len,
                    threads: t,
                    batch: args.batch,
                    workloads: workloads.clone(),
                    config,
                    seed: args.seed,
                    counters: args.counters,
                };
                spec.validate().unwrap_or_else(|e| fail(e));
                eprintln!("{key_len}+{value_len} bytes, {t} threads, {n} pairs:");
                let mut runs: Vec<Vec<EngineRun>> = vec![Vec::new(); engines.len()];
                for round in 0..args.repeat {
                    if args.repeat > 1 {
                        eprintln!(" round {} of {}:", round + 1, args.repeat);
                    }
                    for i in 0..engines.len() {
                        let e = (i + round) % engines.len();
                        let run = run_child(engines[e], &spec, &base, args.warm_mib);
                        if let Some(err) = &run.error {
                            eprintln!("  {:<8} stopped: {err}", engines[e].name());
                        }
                        runs[e].push(run);
                    }
                }
                report.runs.extend(runs.into_iter().map(report::median_run));
            }
        }
    }
    let md = report::markdown(&report);
    let conf = report::configurations(&report);
    let warm = match args.warm_mib {
        0 => "no memory warmed before each engine".to_string(),
        n => format!("each engine's process started right after the harness touched {n} MiB"),
    };
    let conf = format!(
        "Configuration (compression off everywhere; same cache budget; every engine on \
         mimalloc, C and C++ allocations included; {warm}):\n\n{conf}"
    );
    println!("{md}\n{conf}");
    write_outputs(&args.out, &report, &md, &conf);
}

fn write_outputs(out: &Path, report: &Report, md: &str, conf: &str) {
    let write = |name: &str, text: &str| {
        let path = out.join(name);
        let res = std::fs::create_dir_all(out)
            .and_then(|()| std::fs::File::create(&path))
            .and_then(|mut f| f.write_all(text.as_bytes()));
        match res {
            Ok(()) => eprintln!("wrote {}", path.display()),
            Err(e) => fail(format!("cannot write {}: {e}", path.display())),
        }
    };
    let json = serde_json::to_string_pretty(report).unwrap_or_else(|e| fail(e));
    write("compare.json", &json);
    write(
        "compare.md",
        &format!("`{}`\n\n{md}\n{conf}", report.command),
    );
    write("compare.svg", &report::svg(report));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Minor page faults of the calling thread so far (`/proc/thread-self/stat`,
    /// the seventh field after the command name), so other tests' threads do not count.
    #[cfg(target_os = "linux")]
    fn thread_minor_faults() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 1..];
        after_name
            .split_whitespace()
            .nth(7)
            .unwrap()
            .parse()
            .unwrap()
    }

    /// Warming faults the memory in: at least one fault per 2 MiB huge page (512 per
    /// 2 MiB in small pages).
    #[cfg(target_os = "linux")]
    #[test]
    fn warming_faults_in_every_page_asked_for() {
        let before = thread_minor_faults();
        warm_memory(16);
        let faults = thread_minor_faults() - before;
        assert!(faults >= 8, "16 MiB warmed with {faults} page faults");
    }

    #[test]
    fn size_profiles() {
        assert_eq!(parse_sizes("16+100"), Ok((16, 100)));
        assert_eq!(parse_sizes("udb"), Ok((27, 127)));
        assert_eq!(parse_sizes("zippydb"), Ok((48, 43)));
        assert_eq!(parse_sizes("sys"), Ok((28, 396)));
        assert!(parse_sizes("16x100").is_err());
        assert!(parse_sizes("a+1").is_err());
    }

    #[test]
    fn workload_lists() {
        assert_eq!(Workload::parse_list("all").unwrap().len(), 14);
        assert_eq!(Workload::parse_list("dbbench").unwrap().len(), 7);
        assert_eq!(
            Workload::parse_list("ycsb-a, fillrandom").unwrap(),
            vec![Workload::FillRandom, Workload::YcsbA]
        );
        assert!(Workload::parse_list("fill").is_err());
        assert!(Workload::parse_list("").is_err());
    }
}
