//! The results of a side-by-side run, and how they are shown: a markdown table, JSON, and
//! an SVG chart of throughput relative to the best engine of each workload.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::engines::EngineConfig;
use super::run::PhaseResult;

/// One engine's run of the suite under one setting.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EngineRun {
    /// The engine's name.
    pub engine: String,
    /// Key bytes.
    pub key_len: usize,
    /// Value bytes.
    pub value_len: usize,
    /// Threads issuing operations.
    pub threads: usize,
    /// Records loaded.
    pub pairs: u64,
    /// Operations of each non-loading workload.
    pub ops: u64,
    /// The engine's settings, in words.
    pub configuration: String,
    /// The phases measured.
    pub phases: Vec<PhaseResult>,
    /// Why the run stopped early, if it did.
    pub error: Option<String>,
}

impl EngineRun {
    fn setting(&self) -> Setting {
        (self.key_len, self.value_len, self.threads, self.pairs)
    }
}

/// Key bytes, value bytes, threads, pairs.
type Setting = (usize, usize, usize, u64);

/// A whole run: what was asked and what each engine did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// The command line that produced it.
    pub command: String,
    /// Settings shared by every engine.
    pub config: EngineConfig,
    /// Each engine's runs.
    pub runs: Vec<EngineRun>,
}

fn group(runs: &[EngineRun]) -> BTreeMap<Setting, Vec<&EngineRun>> {
    let mut groups: BTreeMap<Setting, Vec<&EngineRun>> = BTreeMap::new();
    for r in runs {
        groups.entry(r.setting()).or_default().push(r);
    }
    groups
}

/// Workload names in the order first seen.
fn workloads(runs: &[&EngineRun]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in runs.iter().flat_map(|r| &r.phases) {
        if !names.contains(&p.workload) {
            names.push(p.workload.clone());
        }
    }
    names
}

fn phase<'a>(run: &'a EngineRun, workload: &str) -> Option<&'a PhaseResult> {
    run.phases.iter().find(|p| p.workload == workload)
}

/// flexkv's throughput over the best other engine's on `workload`, if both ran it.
pub fn flexkv_ratio(runs: &[&EngineRun], workload: &str) -> Option<(f64, String)> {
    let ours = runs
        .iter()
        .find(|r| r.engine == "flexkv")
        .and_then(|r| phase(r, workload))?;
    let (best, name) = runs
        .iter()
        .filter(|r| r.engine != "flexkv")
        .filter_map(|r| phase(r, workload).map(|p| (p.ops_per_sec, r.engine.clone())))
        .max_by(|a, b| a.0.total_cmp(&b.0))?;
    Some((ours.ops_per_sec / best, name))
}

/// Thousands separators for a count.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{v:.digits$}"))
}

/// One engine's repeated runs of the same spec as one run: each phase is the one with
/// the median ops/s among the runs (the lower of the two middle ones for an even
/// count), with every run's ops/s in `runs_ops_per_sec`. A run that stopped early is
/// returned as it is, so its error is reported. `runs` must not be empty.
pub fn median_run(mut runs: Vec<EngineRun>) -> EngineRun {
    if let Some(i) = runs.iter().position(|r| r.error.is_some()) {
        return runs.swap_remove(i);
    }
    if runs.len() == 1 {
        return runs.swap_remove(0);
    }
    let mut out = runs[0].clone();
    for phase in &mut out.phases {
        let mut all: Vec<&PhaseResult> = (runs.iter())
            .filter_map(|r| r.phases.iter().find(|p| p.workload == phase.workload))
            .collect();
        let rates: Vec<f64> = all.iter().map(|p| p.ops_per_sec).collect();
        all.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
        *phase = PhaseResult {
            runs_ops_per_sec: rates,
            ..all[(all.len() - 1) / 2].clone()
        };
    }
    out
}

fn heading(s: &Setting) -> String {
    let (k, v, t, n) = *s;
    format!(
        "{k}+{v} bytes, {t} thread{}, {} pairs",
        if t == 1 { "" } else { "s" },
        thousands(n)
    )
}

/// The markdown tables: per setting, ops/s of every engine with flexkv's ratio to the best
/// other engine; then each engine's latencies, amplification and memory.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    for (setting, runs) in group(&report.runs) {
        let names = workloads(&runs);
        let _ = writeln!(out, "### {}\n", heading(&setting));
        let repeats = (runs.iter().flat_map(|r| &r.phases))
            .map(|p| p.runs_ops_per_sec.len())
            .max()
            .unwrap_or(0);
        if repeats > 1 {
            let _ = writeln!(
                out,
                "Each engine ran {repeats} times, the engines' order rotating; every figure \
                 is from the run with the median ops/s of its phase (compare.json has every \
                 run's ops/s).\n"
            );
        }
        let _ = write!(out, "| workload |");
        for r in &runs {
            let _ = write!(out, " {} ops/s |", r.engine);
        }
        let others = runs.iter().any(|r| r.engine != "flexkv");
        let _ = writeln!(
            out,
            "{}",
            if others { " flexkv / best other |" } else { "" }
        );
        let _ = writeln!(
            out,
            "|---|{}{}",
            "---:|".repeat(runs.len()),
            if others { "---|" } else { "" }
        );
        for w in &names {
            let _ = write!(out, "| {w} |");
            for r in &runs {
                let cell =
                    phase(r, w).map_or("–".to_string(), |p| thousands(p.ops_per_sec as u64));
                let _ = write!(out, " {cell} |");
            }
            if others {
                let cell = flexkv_ratio(&runs, w)
                    .map_or("–".to_string(), |(x, best)| format!("{x:.2}× ({best})"));
                let _ = write!(out, " {cell} |");
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(
            out,
            "\n| workload | engine | p50 µs | p99 µs | p99.9 µs | latency of | write amp | MB written | space amp | peak RSS MiB | peak RSS less mapped file pages, MiB | mapped file pages at end, MiB |"
        );
        let _ = writeln!(
            out,
            "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"
        );
        for w in &names {
            for r in &runs {
                if let Some(p) = phase(r, w) {
                    let _ = writeln!(
                        out,
                        "| {w} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} |",
                        r.engine,
                        p.p50_us,
                        p.p99_us,
                        p.p999_us,
                        p.latency_unit,
                        opt(p.write_amp, 2),
                        thousands(p.device_bytes / 1_000_000),
                        opt(p.space_amp, 2),
                        p.peak_rss_mib,
                        p.held_peak_mib,
                        p.file_rss_mib
                    );
                }
            }
        }
        for r in runs.iter().filter(|r| r.error.is_some()) {
            let _ = writeln!(
                out,
                "\n**{} stopped early:** {}",
                r.engine,
                r.error.as_deref().unwrap_or_default()
            );
        }
        let _ = writeln!(out);
    }
    out
}

/// The engines' settings, one line each.
pub fn configurations(report: &Report) -> String {
    let mut seen = BTreeMap::new();
    for r in &report.runs {
        seen.entry(r.engine.clone())
            .or_insert_with(|| r.configuration.clone());
    }
    seen.iter().map(|(e, c)| format!("- {e}: {c}\n")).collect()
}

const COLORS: [(&str, &str); 6] = [
    ("flexkv", "#d62728"),
    ("rocksdb", "#1f77b4"),
    ("lmdb", "#2ca02c"),
    ("redb", "#9467bd"),
    ("fjall", "#ff7f0e"),
    ("sled", "#8c564b"),
];

fn color(engine: &str) -> &'static str {
    COLORS
        .iter()
        .find(|(e, _)| *e == engine)
        .map_or("#7f7f7f", |(_, c)| c)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An SVG chart: one panel per setting, one group of bars per workload, each bar an
/// engine's throughput as a share of the best engine's on that workload, labelled with
/// its ops/s.
pub fn svg(report: &Report) -> String {
    const WIDTH: f64 = 900.0;
    const LABEL: f64 = 120.0;
    const BAR: f64 = 13.0;
    const GAP: f64 = 8.0;
    let plot = WIDTH - LABEL - 130.0;
    let groups = group(&report.runs);
    let mut body = String::new();
    let mut y = 62.0;
    for (setting, runs) in &groups {
        let _ = writeln!(
            body,
            r#"<text x="10" y="{y}" font-size="15" font-weight="bold">{}</text>"#,
            escape(&heading(setting))
        );
        y += 14.0;
        for w in workloads(runs) {
            let best = runs
                .iter()
                .filter_map(|r| phase(r, &w))
                .map(|p| p.ops_per_sec)
                .fold(0.0, f64::max);
            let rows = runs.iter().filter(|r| phase(r, &w).is_some()).count() as f64;
            let _ = writeln!(
                body,
                r#"<text x="10" y="{:.1}" font-size="12">{}</text>"#,
                y + rows * BAR / 2.0 + 4.0,
                escape(&w)
            );
            for r in runs.iter() {
                let Some(p) = phase(r, &w) else { continue };
                let share = if best > 0.0 {
                    p.ops_per_sec / best
                } else {
                    0.0
                };
                let len = (share * plot).max(1.0);
                let _ = writeln!(
                    body,
                    r#"<rect x="{LABEL}" y="{y:.1}" width="{len:.1}" height="{:.1}" fill="{}"><title>{} {}: {} ops/s</title></rect>"#,
                    BAR - 2.0,
                    color(&r.engine),
                    escape(&r.engine),
                    escape(&w),
                    thousands(p.ops_per_sec as u64)
                );
                let _ = writeln!(
                    body,
                    r#"<text x="{:.1}" y="{:.1}" font-size="10">{} {}</text>"#,
                    LABEL + len + 4.0,
                    y + BAR - 4.0,
                    escape(&r.engine),
                    thousands(p.ops_per_sec as u64)
                );
                y += BAR;
            }
            y += GAP;
        }
        y += 16.0;
    }
    let mut legend = String::new();
    let engines: Vec<&str> = {
        let mut e: Vec<&str> = Vec::new();
        for r in &report.runs {
            if !e.contains(&r.engine.as_str()) {
                e.push(&r.engine);
            }
        }
        e
    };
    for (i, e) in engines.iter().enumerate() {
        let x = 10.0 + i as f64 * 100.0;
        let _ = writeln!(
            legend,
            r#"<rect x="{x}" y="28" width="12" height="12" fill="{}"/><text x="{:.0}" y="39" font-size="12">{}</text>"#,
            color(e),
            x + 16.0,
            escape(e)
        );
    }
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{:.0}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
<text x="10" y="19" font-size="12">ops/s, bar = share of the best engine</text>
{legend}{body}</svg>
"#,
        y + 10.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(workload: &str, ops_per_sec: f64) -> PhaseResult {
        PhaseResult {
            workload: workload.into(),
            ops: 1000,
            secs: 1000.0 / ops_per_sec,
            ops_per_sec,
            latency_unit: "op".into(),
            p50_us: 1.0,
            p99_us: 2.0,
            p999_us: 3.0,
            user_bytes: 116_000,
            device_bytes: 232_000,
            write_amp: Some(2.0),
            disk_bytes: 200_000,
            live_bytes: 116_000,
            space_amp: Some(1.72),
            peak_rss_mib: 50.0,
            held_peak_mib: 30.0,
            file_rss_mib: 20.0,
            found: 1000,
            counters: None,
            runs_ops_per_sec: Vec::new(),
        }
    }

    fn run(engine: &str, phases: Vec<PhaseResult>) -> EngineRun {
        EngineRun {
            engine: engine.into(),
            key_len: 16,
            value_len: 100,
            threads: 1,
            pairs: 1_000_000,
            ops: 1000,
            configuration: format!("{engine} settings"),
            phases,
            error: None,
        }
    }

    /// Repeated runs become one: each phase is the run with the median ops/s, whole
    /// (its other figures too), with every run's ops/s kept in run order; of two, the
    /// slower; a run that stopped early is the one reported.
    #[test]
    fn repeated_runs_report_each_phases_median_run() {
        let with_p50 = |w: &str, rate: f64, p50: f64| PhaseResult {
            p50_us: p50,
            ..phase(w, rate)
        };
        let runs = vec![
            run(
                "flexkv",
                vec![with_p50("a", 10.0, 1.0), with_p50("b", 7.0, 1.0)],
            ),
            run(
                "flexkv",
                vec![with_p50("a", 30.0, 3.0), with_p50("b", 5.0, 3.0)],
            ),
            run(
                "flexkv",
                vec![with_p50("a", 20.0, 2.0), with_p50("b", 6.0, 2.0)],
            ),
        ];
        let m = median_run(runs.clone());
        let got: Vec<_> = (m.phases.iter())
            .map(|p| (p.ops_per_sec, p.p50_us, p.runs_ops_per_sec.clone()))
            .collect();
        assert_eq!(
            got,
            [
                (20.0, 2.0, vec![10.0, 30.0, 20.0]),
                (6.0, 2.0, vec![7.0, 5.0, 6.0])
            ]
        );
        let two = median_run(runs[..2].to_vec());
        assert_eq!(
            (two.phases[0].ops_per_sec, two.phases[1].ops_per_sec),
            (10.0, 5.0)
        );
        let one = median_run(runs[..1].to_vec());
        assert!(one.phases[0].runs_ops_per_sec.is_empty());
        let mut failed = runs;
        failed[1].error = Some("disk full".into());
        assert_eq!(median_run(failed).error.as_deref(), Some("disk full"));
    }

    fn report() -> Report {
        Report {
            command: "compare".into(),
            config: EngineConfig {
                cache_bytes: 1 << 20,
                write_buffer_bytes: 1 << 20,
                flexkv_pace_writes: false,
                flexkv_idle_sweep: false,
            },
            runs: vec![
                run(
                    "flexkv",
                    vec![
                        phase("fillrandom", 600_000.0),
                        PhaseResult {
                            device_bytes: 1_250_000_000,
                            write_amp: None,
                            ..phase("readrandom", 900_000.0)
                        },
                    ],
                ),
                run(
                    "rocksdb",
                    vec![
                        phase("fillrandom", 400_000.0),
                        phase("readrandom", 1_200_000.0),
                    ],
                ),
                run("lmdb", vec![phase("fillrandom", 500_000.0)]),
            ],
        }
    }

    #[test]
    fn ratios_are_against_the_best_other_engine() {
        let r = report();
        let runs: Vec<&EngineRun> = r.runs.iter().collect();
        let (x, best) = flexkv_ratio(&runs, "fillrandom").unwrap();
        assert_eq!(best, "lmdb");
        assert!((x - 1.2).abs() < 1e-9);
        let (x, best) = flexkv_ratio(&runs, "readrandom").unwrap();
        assert_eq!(best, "rocksdb");
        assert!((x - 0.75).abs() < 1e-9);
        assert!(flexkv_ratio(&runs, "seekrandom").is_none());
    }

    #[test]
    fn the_table_shows_every_engine_and_the_ratio() {
        let md = markdown(&report());
        assert!(
            md.contains("### 16+100 bytes, 1 thread, 1,000,000 pairs"),
            "{md}"
        );
        assert!(
            md.contains("| fillrandom | 600,000 | 400,000 | 500,000 | 1.20× (lmdb) |"),
            "{md}"
        );
        assert!(
            md.contains("| readrandom | 900,000 | 1,200,000 | – | 0.75× (rocksdb) |"),
            "{md}"
        );
        // The memory columns in order: peak RSS, its peak less mapped file pages, and
        // the mapped file pages at the end.
        assert!(
            md.contains(
                "| fillrandom | rocksdb | 1.0 | 2.0 | 3.0 | op | 2.00 | 0 | 1.72 | 50 | 30 | 20 |"
            ),
            "{md}"
        );
        // A phase that writes nothing of its own still shows what the engine wrote in it.
        assert!(
            md.contains("| readrandom | flexkv | 1.0 | 2.0 | 3.0 | op | – | 1,250 | 1.72 | 50 |"),
            "{md}"
        );
        let alone = Report {
            runs: vec![run("flexkv", vec![phase("fillrandom", 1.0)])],
            ..report()
        };
        assert!(!markdown(&alone).contains("best other"));
    }

    #[test]
    fn the_chart_scales_bars_to_the_best_engine() {
        let svg = svg(&report());
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        // readrandom: rocksdb is best (full width 650), flexkv gets 0.75 of it.
        assert!(
            svg.contains(
                r##"width="650.0" height="11.0" fill="#1f77b4"><title>rocksdb readrandom"##
            ),
            "{svg}"
        );
        assert!(
            svg.contains(
                r##"width="487.5" height="11.0" fill="#d62728"><title>flexkv readrandom"##
            ),
            "{svg}"
        );
        assert_eq!(
            svg.matches("<title>").count(),
            5,
            "one bar per engine and workload run"
        );
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(12_345_678), "12,345,678");
    }
}
