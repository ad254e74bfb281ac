//! `flexkv bench`: flexkv alone on a temporary database, a short db_bench + YCSB suite
//! with a progress bar per phase, then the table on stdout and the chart as SVG. The
//! side-by-side run against other engines is `flexkv-bench compare`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Mutex;

use flexkv_bench::compare::{self, report, EngineConfig, EngineKind, PhaseResult, Spec, Workload};
use indicatif::{ProgressBar, ProgressStyle};

use crate::{CliResult, Failure};

/// Options of `flexkv bench`.
#[derive(clap::Args, Debug, PartialEq, Eq)]
pub struct BenchArgs {
    /// Records to load.
    #[arg(long, default_value_t = 200_000)]
    pairs: u64,
    /// Operations of each workload that does not load (default: as many as --pairs).
    #[arg(long)]
    ops: Option<u64>,
    /// Key+value sizes: `16+100`, `udb` (27+127), `zippydb` (48+43), `sys` (28+396).
    #[arg(long, default_value = "16+100")]
    sizes: String,
    /// Threads issuing operations.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Workloads, comma-separated: db_bench names, `ycsb-a`…`ycsb-f`, `all`, `dbbench`,
    /// `ycsb`.
    #[arg(long, default_value = "all")]
    workloads: String,
    /// Where the chart goes.
    #[arg(long, default_value = "flexkv-bench.svg")]
    chart: PathBuf,
    /// Also write the results as JSON here.
    #[arg(long)]
    json_out: Option<PathBuf>,
    /// Put the temporary database under this directory (default: the system's).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// A progress bar per phase on a terminal; nothing otherwise.
struct Bars {
    bar: Mutex<ProgressBar>,
    terminal: bool,
}

impl compare::Progress for Bars {
    fn start(&self, workload: &str, total: u64) {
        let bar = if self.terminal {
            ProgressBar::new(total).with_style(
                ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} {per_sec} {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            )
        } else {
            ProgressBar::hidden()
        };
        bar.set_message(workload.to_string());
        if let Ok(mut b) = self.bar.lock() {
            *b = bar;
        }
    }

    fn advance(&self, n: u64) {
        if let Ok(b) = self.bar.lock() {
            b.inc(n);
        }
    }

    fn finish(&self, r: &PhaseResult) {
        if let Ok(b) = self.bar.lock() {
            b.finish_and_clear();
        }
        eprintln!(
            "{:>12}  {} ops/s",
            r.workload,
            report::thousands(r.ops_per_sec as u64)
        );
    }
}

/// Runs the suite and reports.
pub fn run(args: &BenchArgs) -> CliResult {
    let (key_len, value_len) = compare::parse_sizes(&args.sizes)?;
    let config = EngineConfig {
        cache_bytes: 256 << 20,
        write_buffer_bytes: 64 << 20,
        flexkv_pace_writes: true,
        flexkv_idle_sweep: true,
    };
    let spec = Spec {
        pairs: args.pairs,
        ops: args.ops.unwrap_or(args.pairs),
        key_len,
        value_len,
        threads: args.threads,
        batch: 1000,
        workloads: Workload::parse_list(&args.workloads)?,
        config,
        seed: 42,
        counters: false,
    };
    spec.validate()?;
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("flexkv-bench-")
        .tempdir_in(&base)
        .map_err(|e| {
            Failure(format!(
                "cannot make a database under {}: {e}",
                base.display()
            ))
        })?;
    let bars = Bars {
        bar: Mutex::new(ProgressBar::hidden()),
        terminal: std::io::stderr().is_terminal(),
    };
    let kind = EngineKind::Flexkv;
    let phases = compare::run_suite(kind, &spec, dir.path(), &bars)?;
    let report = compare::Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        config,
        runs: vec![compare::EngineRun {
            phases,
            ..compare::EngineRun::new(kind, &spec)
        }],
    };
    println!("{}", report::markdown(&report));
    std::fs::write(&args.chart, report::svg(&report))
        .map_err(|e| Failure(format!("cannot write {}: {e}", args.chart.display())))?;
    eprintln!("chart: {}", args.chart.display());
    if let Some(path) = &args.json_out {
        let json = serde_json::to_string_pretty(&report).map_err(|e| Failure(e.to_string()))?;
        std::fs::write(path, json)
            .map_err(|e| Failure(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(())
}
