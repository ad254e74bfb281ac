//! The side-by-side harness on flexkv: every workload runs and measures what it says, and
//! `flexkv-bench compare` runs engines in child processes and writes its three outputs.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use flexkv_bench::compare::{
    run_suite, EngineConfig, EngineKind, PhaseResult, Progress, Spec, Workload,
};

struct Quiet;

impl Progress for Quiet {
    fn start(&self, _: &str, _: u64) {}
    fn advance(&self, _: u64) {}
    fn finish(&self, _: &PhaseResult) {}
}

fn spec(threads: usize) -> Spec {
    Spec {
        pairs: 3000,
        ops: 600,
        key_len: 27,
        value_len: 127,
        threads,
        batch: 100,
        workloads: Workload::ALL.to_vec(),
        config: EngineConfig {
            cache_bytes: 8 << 20,
            write_buffer_bytes: 4 << 20,
            flexkv_pace_writes: false,
            flexkv_idle_sweep: true,
        },
        seed: 7,
        counters: true,
    }
}

#[test]
fn every_workload_runs_and_is_measured() {
    for threads in [1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let s = spec(threads);
        let phases = run_suite(EngineKind::Flexkv, &s, dir.path(), &Quiet).unwrap();
        let names: Vec<&str> = phases.iter().map(|p| p.workload.as_str()).collect();
        let want: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
        assert_eq!(names, want);
        let get = |n: &str| phases.iter().find(|p| p.workload == n).unwrap();
        let pair = 27 + 127;
        for fill in ["fillseq", "fillrandom", "ycsb-load"] {
            let p = get(fill);
            assert_eq!(p.ops, 3000, "{fill}");
            assert_eq!(p.user_bytes, 3000 * pair, "{fill}");
            assert_eq!(p.latency_unit, "batch");
            assert!(p.write_amp.is_some());
            assert!(p.disk_bytes >= p.user_bytes / 2, "{fill}: {p:?}");
        }
        assert_eq!(get("readrandom").found, 600, "every record is there");
        assert_eq!(get("readmissing").found, 0, "no missing key is there");
        let seek = get("seekrandom");
        assert!(seek.found > 600 * 40 && seek.found <= 600 * 50, "{seek:?}");
        let del = get("deleterandom");
        assert_eq!((del.ops, del.live_bytes), (600, 2400 * pair));
        assert_eq!(get("ycsb-c").found, 600);
        // D and E insert 5% of their operations: the live bytes grow by about that.
        let e = get("ycsb-e");
        let inserted = e.live_bytes / pair - 3000;
        assert!(
            (20..=120).contains(&inserted),
            "{inserted} inserts of 1,200 ops"
        );
        for p in &phases {
            assert!(p.ops > 0 && p.ops_per_sec > 0.0, "{p:?}");
            assert!(p.p50_us > 0.0 && p.p50_us <= p.p99_us && p.p99_us <= p.p999_us);
            assert!(p.peak_rss_mib > 1.0, "{p:?}");
            let counters = p.counters.as_deref().unwrap_or_default();
            assert!(counters.starts_with("Stats { user_bytes: "), "{p:?}");
            // The executable's own pages are file pages, and part of the resident set.
            assert!(
                p.file_rss_mib > 0.0 && p.file_rss_mib <= p.peak_rss_mib,
                "{p:?}"
            );
        }
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "databases removed"
        );
    }
}

#[test]
fn a_bad_spec_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = spec(1);
    s.key_len = 8;
    let err = run_suite(EngineKind::Flexkv, &s, dir.path(), &Quiet).unwrap_err();
    assert!(err.contains("at least 16 bytes"), "{err}");
    s.key_len = 16;
    s.threads = 0;
    assert!(run_suite(EngineKind::Flexkv, &s, dir.path(), &Quiet).is_err());
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[test]
fn compare_runs_each_engine_in_a_child_and_writes_its_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let status = Command::new(env!("CARGO_BIN_EXE_flexkv-bench"))
        .args([
            "compare",
            "--engines",
            "flexkv",
            "--pairs",
            "2000",
            "--ops",
            "300",
            "--sizes",
            "16+100,zippydb",
            "--workloads",
            "fillrandom,readrandom,ycsb-a",
            "--counters",
        ])
        .arg("--dir")
        .arg(dir.path())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let stdout = String::from_utf8(status.stdout).unwrap();
    assert!(
        stdout.contains("### 16+100 bytes, 1 thread, 2,000 pairs"),
        "{stdout}"
    );
    assert!(
        stdout.contains("### 48+43 bytes, 1 thread, 2,000 pairs"),
        "{stdout}"
    );
    assert!(stdout.contains("- flexkv: Buffered batches"), "{stdout}");
    // `--counters`: the engine's counters after every phase of both runs.
    let stderr = String::from_utf8(status.stderr).unwrap();
    let counted = stderr.matches("counters: Stats {").count();
    assert_eq!(counted, 8, "{stderr}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap();
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for run in runs {
        assert!(run["error"].is_null(), "{run}");
        let names: Vec<&str> = run["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["workload"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["fillrandom", "readrandom", "ycsb-load", "ycsb-a"]);
        for p in run["phases"].as_array().unwrap() {
            let counters = p["counters"].as_str().unwrap();
            assert!(counters.contains("pairs_committed: "), "{counters}");
        }
    }
    assert!(std::fs::read_to_string(out.join("compare.svg"))
        .unwrap()
        .starts_with("<svg"));
    assert!(std::fs::read_to_string(out.join("compare.md"))
        .unwrap()
        .contains("| readrandom |"));
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["out"], "data directories removed");
}

/// `--repeat 3` runs each engine three times and reports each phase's median run, with
/// every run's ops/s in the JSON; `--repeat 0` is refused.
#[test]
fn compare_repeats_runs_and_reports_medians() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let run = |repeat: &str| {
        Command::new(env!("CARGO_BIN_EXE_flexkv-bench"))
            .args(["compare", "--engines", "flexkv", "--pairs", "1000", "--ops"])
            .args([
                "100",
                "--workloads",
                "fillrandom,seekrandom",
                "--repeat",
                repeat,
            ])
            .arg("--dir")
            .arg(dir.path())
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap()
    };
    let o = run("3");
    assert!(o.status.success(), "{o:?}");
    let stderr = String::from_utf8(o.stderr).unwrap();
    assert_eq!(stderr.matches("flexkv   fillrandom").count(), 3, "{stderr}");
    assert!(String::from_utf8(o.stdout)
        .unwrap()
        .contains("Each engine ran 3 times"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap();
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "one run per engine and setting");
    for p in runs[0]["phases"].as_array().unwrap() {
        let mut rates: Vec<f64> = (p["runs_ops_per_sec"].as_array().unwrap().iter())
            .map(|r| r.as_f64().unwrap())
            .collect();
        rates.sort_by(f64::total_cmp);
        assert_eq!(rates.len(), 3, "{p}");
        assert_eq!(p["ops_per_sec"].as_f64().unwrap(), rates[1], "{p}");
    }
    let o = run("0");
    assert!(!o.status.success());
    assert!(String::from_utf8(o.stderr).unwrap().contains("--repeat"));
}

#[test]
fn compare_refuses_engines_it_was_not_built_with() {
    if cfg!(feature = "rocksdb") {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_flexkv-bench"))
        .args(["compare", "--engines", "flexkv,rocksdb"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("rocksdb is not in this build"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_flexkv-bench"))
        .args(["compare", "--engines", "leveldb"])
        .output()
        .unwrap();
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("unknown engine \"leveldb\""));
}
