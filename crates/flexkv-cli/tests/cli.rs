//! The real `flexkv` binary, run for every command and every error case.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use assert_cmd::Command;

fn flexkv(db: &Path) -> Command {
    let mut c = Command::cargo_bin("flexkv").unwrap();
    c.arg("--db").arg(db).env_remove("FLEXKV_DB");
    c
}

fn stdout(c: &mut Command) -> String {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        c,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `c`, expects failure with exactly one line on stderr containing `what`.
fn fails(c: &mut Command, what: &str) {
    let out = c.output().unwrap();
    assert!(!out.status.success(), "{c:?} succeeded");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(
        err.starts_with("flexkv: error: ") && err.contains(what),
        "{err:?} lacks {what:?}"
    );
    assert!(!err.contains("panicked") && !err.contains("backtrace"));
}

#[test]
fn put_get_del_and_scan_in_text_hex_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    flexkv(&db)
        .args(["put", "a\\tb", "v\\x00\\\\"])
        .assert()
        .success();
    flexkv(&db).args(["put", "b", "2"]).assert().success();
    flexkv(&db)
        .args(["--hex", "put", "63", "ff00"])
        .assert()
        .success(); // "c"
    flexkv(&db).args(["put", "empty", ""]).assert().success();
    assert_eq!(stdout(flexkv(&db).args(["get", "a\\tb"])), "v\\x00\\\\\n");
    assert_eq!(stdout(flexkv(&db).args(["get", "c"])), "\\xff\\x00\n");
    assert_eq!(stdout(flexkv(&db).args(["--hex", "get", "63"])), "ff00\n");
    assert_eq!(stdout(flexkv(&db).args(["get", "empty"])), "\n");
    assert_eq!(
        stdout(flexkv(&db).args(["--json", "get", "b"])),
        "{\"key\":\"b\",\"value\":\"2\"}\n"
    );
    assert_eq!(
        stdout(flexkv(&db).arg("scan")),
        "a\\tb\tv\\x00\\\\\nb\t2\nc\t\\xff\\x00\nempty\t\n"
    );
    assert_eq!(
        stdout(flexkv(&db).args(["scan", "--reverse", "--limit", "2"])),
        "empty\t\nc\t\\xff\\x00\n"
    );
    assert_eq!(
        stdout(flexkv(&db).args(["scan", "--start", "b", "--end", "c"])),
        "b\t2\n"
    );
    assert_eq!(
        stdout(flexkv(&db).args(["scan", "--prefix", "e"])),
        "empty\t\n"
    );
    let json = stdout(flexkv(&db).args(["--json", "scan", "--prefix", "a"]));
    assert_eq!(
        json,
        "{\"key\":\"a\\\\tb\",\"value\":\"v\\\\x00\\\\\\\\\"}\n"
    );
    flexkv(&db).args(["del", "b"]).assert().success();
    fails(flexkv(&db).args(["get", "b"]), "not found");
    // Keyspaces: a put creates one; reads of an unknown one fail.
    flexkv(&db)
        .args(["--keyspace", "users", "put", "k", "v"])
        .assert()
        .success();
    assert_eq!(
        stdout(flexkv(&db).args(["--keyspace", "users", "scan"])),
        "k\tv\n"
    );
    assert!(!stdout(flexkv(&db).arg("scan")).contains("k\tv"));
}

#[test]
fn dump_and_load_round_trip_exactly_in_every_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let input = dir.path().join("in.tsv");
    let mut lines = String::new();
    for i in 0..300u32 {
        let key: String = i
            .to_be_bytes()
            .iter()
            .map(|b| format!("\\x{b:02x}"))
            .collect();
        lines.push_str(&format!("{key}\tvalue {i} \\t\\n\\\\ end\n"));
    }
    std::fs::write(&input, lines).unwrap();
    flexkv(&src).arg("load").arg(&input).assert().success();
    let scan = stdout(flexkv(&src).arg("scan"));
    assert_eq!(scan.lines().count(), 300);
    for (flags, name) in [
        (&[][..], "text"),
        (&["--hex"][..], "hex"),
        (&["--json"][..], "json"),
    ] {
        let dump = dir.path().join(format!("dump.{name}"));
        flexkv(&src)
            .args(flags)
            .arg("dump")
            .arg("-o")
            .arg(&dump)
            .assert()
            .success();
        let text = std::fs::read_to_string(&dump).unwrap();
        assert!(text.starts_with(&format!("# flexkv dump 1 keyspace=default encoding={name}")));
        // Loading needs no flags: the header names the encoding.
        let copy = dir.path().join(format!("copy-{name}"));
        flexkv(&copy).arg("load").arg(&dump).assert().success();
        assert_eq!(stdout(flexkv(&copy).arg("scan")), scan, "{name} round trip");
    }
    // A dump to stdout loads from stdin.
    let dumped = stdout(flexkv(&src).arg("dump"));
    let piped = dir.path().join("piped");
    flexkv(&piped)
        .args(["load", "-"])
        .write_stdin(dumped)
        .assert()
        .success();
    assert_eq!(stdout(flexkv(&piped).arg("scan")), scan);
}

#[test]
fn a_malformed_load_line_loads_nothing_unless_partial() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let file = dir.path().join("bad.tsv");
    std::fs::write(&file, "a\t1\nb\t2\nno tab here\nc\t3\n").unwrap();
    fails(flexkv(&db).arg("load").arg(&file), "line 3");
    assert!(!db.exists(), "a refused load created the database");
    flexkv(&db).args(["put", "x", "y"]).assert().success();
    fails(flexkv(&db).arg("load").arg(&file), "nothing was loaded");
    assert_eq!(stdout(flexkv(&db).arg("scan")), "x\ty\n");
    fails(
        flexkv(&db).arg("load").arg("--partial").arg(&file),
        "line 3",
    );
    assert_eq!(stdout(flexkv(&db).arg("scan")), "a\t1\nb\t2\nx\ty\n");
    std::fs::write(&file, "a\t\\q\n").unwrap();
    fails(flexkv(&db).arg("load").arg(&file), "line 1: bad escape");
    std::fs::write(&file, "{\"key\": \"a\"}\n").unwrap();
    fails(
        flexkv(&db).args(["--json", "load"]).arg(&file),
        "no string field \"value\"",
    );
    fails(
        flexkv(&db).arg("load").arg(dir.path().join("missing.tsv")),
        "missing.tsv",
    );
}

/// Every file under `dir` and its bytes.
fn tree(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(tree(&path));
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    out.sort();
    out
}

/// The commands that only read open the database read-only: its directory is the same,
/// byte for byte, after each of them (an open for writing starts a WAL segment, and a
/// close checkpoints), and a write after them works as before.
#[test]
fn the_reading_commands_change_nothing_in_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    for i in 0..50 {
        flexkv(&db)
            .args(["put", &format!("k{i:02}"), &format!("v{i}")])
            .assert()
            .success();
    }
    flexkv(&db)
        .args(["--keyspace", "other", "put", "o", "1"])
        .assert()
        .success();
    let before = tree(&db);
    assert_eq!(stdout(flexkv(&db).args(["get", "k07"])), "v7\n");
    assert_eq!(stdout(flexkv(&db).arg("scan")).lines().count(), 50);
    assert_eq!(stdout(flexkv(&db).arg("dump")).lines().count(), 51);
    assert!(stdout(flexkv(&db).args(["--json", "stats"])).contains("intervals"));
    assert!(stdout(flexkv(&db).arg("check")).starts_with("ok:"));
    assert_eq!(
        stdout(flexkv(&db).args(["--keyspace", "other", "get", "o"])),
        "1\n"
    );
    fails(
        flexkv(&db).args(["--keyspace", "nope", "scan"]),
        "unknown keyspace",
    );
    fails(flexkv(&db).args(["get", "missing"]), "not found");
    assert!(
        tree(&db) == before,
        "a reading command changed the directory"
    );
    flexkv(&db).args(["put", "k07", "w"]).assert().success();
    assert_eq!(stdout(flexkv(&db).args(["get", "k07"])), "w\n");
}

/// The reading commands share the database with another process's read-only handle
/// (a shared lock), and a writing command is refused beside it.
#[test]
fn reading_commands_open_beside_a_reader_and_writing_ones_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    flexkv(&db).args(["put", "k", "v"]).assert().success();
    let reader = flexkv::Db::builder(&db).read_only(true).open().unwrap();
    assert_eq!(stdout(flexkv(&db).args(["get", "k"])), "v\n");
    assert!(stdout(flexkv(&db).arg("check")).starts_with("ok:"));
    fails(flexkv(&db).args(["put", "k", "w"]), "locked");
    assert_eq!(reader.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    reader.close().unwrap();
    flexkv(&db).args(["put", "k", "w"]).assert().success();
    assert_eq!(stdout(flexkv(&db).args(["get", "k"])), "w\n");
}

/// A load that the disk stops midway (files limited to 2 MiB by `ulimit -f`, as a full
/// disk would; `SIGXFSZ` ignored, so writes past it fail with `EFBIG` instead of
/// killing the process) fails with the engine's error and says how many pairs it wrote
/// first; reopened without the limit, the database holds exactly those.
#[test]
fn a_load_the_disk_stops_says_how_many_pairs_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let file = dir.path().join("pairs.tsv");
    let total = 60_000;
    let value = "v".repeat(100);
    let lines: String = (0..total).map(|i| format!("k{i:06}\t{value}\n")).collect();
    std::fs::write(&file, lines).unwrap();
    flexkv(&db).args(["put", "before", "1"]).assert().success();
    let mut limited = Command::new("sh");
    limited
        .arg("-c")
        .arg("ulimit -f 4096 && trap '' XFSZ && exec \"$0\" \"$@\"")
        .arg(assert_cmd::cargo::cargo_bin("flexkv"))
        .arg("--db")
        .arg(&db)
        .arg("load")
        .arg(&file)
        .env_remove("FLEXKV_DB");
    let out = limited.output().unwrap();
    assert!(!out.status.success(), "the limited load succeeded");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(err.contains("File too large"), "{err:?}");
    let tail = format!(" of {total} pairs were written before it");
    let written: usize = err
        .split_once("the first ")
        .and_then(|(_, rest)| rest.split_once(&tail))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("{err:?} does not say how many pairs were written"));
    assert!(written > 0 && written < total, "{err:?}");
    let keys: Vec<String> = stdout(flexkv(&db).arg("scan"))
        .lines()
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect();
    let expected: Vec<String> = std::iter::once("before".to_string())
        .chain((0..written).map(|i| format!("k{i:06}")))
        .collect();
    assert!(
        keys == expected,
        "{} keys from {:?} to {:?}, not the {written} written and \"before\"",
        keys.len(),
        keys.first(),
        keys.last()
    );
}

#[test]
fn every_error_is_one_line_and_a_failure_status() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    fails(flexkv(&db).args(["get", "k"]), "not a flexkv database");
    fails(flexkv(&db).arg("scan"), "not a flexkv database");
    flexkv(&db).args(["put", "k", "v"]).assert().success();
    fails(flexkv(&db).args(["--hex", "get", "zz"]), "bad hex in key");
    fails(
        flexkv(&db).args(["--hex", "put", "00", "abc"]),
        "bad hex in value",
    );
    fails(flexkv(&db).args(["get", "\\x4"]), "bad escape in key");
    fails(
        flexkv(&db).args(["--keyspace", "nope", "get", "k"]),
        "unknown keyspace \"nope\"",
    );
    fails(
        flexkv(&db).args(["--keyspace", "bad name", "put", "k", "v"]),
        "keyspace name",
    );
    fails(
        flexkv(&db).args(["put", &"k".repeat(5000), "v"]),
        "MAX_KEY_LEN",
    );
    let photos = dir.path().join("photos");
    std::fs::create_dir(&photos).unwrap();
    std::fs::write(photos.join("cat.jpg"), b"jpeg").unwrap();
    fails(
        flexkv(&photos).args(["put", "k", "v"]),
        "not a flexkv database",
    );
    // A database held open by this process is locked for the tool.
    let held = flexkv::Db::open(&db).unwrap();
    fails(flexkv(&db).args(["get", "k"]), "locked");
    held.close().unwrap();
    // Another test of this process may be forking a child at the moment the lock file
    // is closed: the child holds a copy of the descriptor (and so the lock) until it
    // execs. Give that window a moment to pass.
    let mut out = flexkv(&db).args(["get", "k"]).output().unwrap();
    for _ in 0..50 {
        if out.status.success() || !String::from_utf8_lossy(&out.stderr).contains("locked") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        out = flexkv(&db).args(["get", "k"]).output().unwrap();
    }
    assert_eq!(String::from_utf8_lossy(&out.stdout), "v\n", "{out:?}");
}

#[test]
fn stats_and_check_report_and_check_finds_damage() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    flexkv(&db)
        .args(["put", "k", &"v".repeat(5000)])
        .assert()
        .success(); // separated
    flexkv(&db).args(["put", "s", "small"]).assert().success();
    let s = stdout(flexkv(&db).arg("stats"));
    // Every run of the tool closes the database, which commits the memtable.
    assert!(
        s.contains("visible_seq: 2") && s.contains("memtable_entries: 0"),
        "{s}"
    );
    let j: serde_json::Value =
        serde_json::from_str(&stdout(flexkv(&db).args(["--json", "stats"]))).unwrap();
    assert_eq!(j["visible_seq"], 2);
    let ok = stdout(flexkv(&db).arg("check"));
    assert!(
        ok.starts_with(
            "ok: 0 WAL records, 1 value-log records, 2 sorted records, 1 separated values read"
        ),
        "{ok}"
    );
    let vlog = db.join("vlog-00000001.seg");
    let mut bytes = std::fs::read(&vlog).unwrap();
    bytes[40] ^= 1; // inside the value
    std::fs::write(&vlog, bytes).unwrap();
    // Damage to the last record looks like a torn tail at open, and is cut; the sorted
    // keyspace still points at it, so the check fails, naming the value-log segment.
    fails(flexkv(&db).arg("check"), "vlog-00000001.seg");
}

#[test]
fn gc_reclaims_overwritten_values_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    // Overwritten separated values in small value-log segments (the tool's default
    // segment is 64 MiB), written with the library; then the tool collects them.
    {
        let d = flexkv::Db::builder(&db)
            .vlog_segment_size(64 << 10)
            .open()
            .unwrap();
        for round in 0..4 {
            for k in 0..20 {
                d.put(format!("k{k}").as_bytes(), &vec![round as u8; 5000])
                    .unwrap();
            }
        }
        d.close().unwrap();
    }
    let before: serde_json::Value =
        serde_json::from_str(&stdout(flexkv(&db).args(["--json", "stats"]))).unwrap();
    assert!(
        before["vlog_garbage_bytes"].as_u64().unwrap() > 200_000,
        "{before}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&stdout(flexkv(&db).args(["--json", "gc"]))).unwrap();
    assert!(r["segments_removed"].as_u64().unwrap() > 0, "{r}");
    assert!(r["bytes_reclaimed"].as_u64().unwrap() > 200_000, "{r}");
    let text = stdout(flexkv(&db).arg("gc"));
    assert!(text.contains("segments_removed: "), "{text}");
    assert_eq!(
        stdout(flexkv(&db).args(["get", "k7"])).trim(),
        "\\x03".repeat(5000)
    );
    let ok = stdout(flexkv(&db).arg("check"));
    assert!(ok.starts_with("ok: "), "{ok}");
    fails(flexkv(&dir.path().join("missing")).arg("gc"), "missing");
}

#[test]
fn version_names_the_formats() {
    let dir = tempfile::tempdir().unwrap();
    let v = stdout(flexkv(dir.path()).arg("version"));
    assert!(
        v.contains(env!("CARGO_PKG_VERSION")) && v.contains("WAL 1") && v.contains("MANIFEST 2"),
        "{v}"
    );
}

#[test]
fn bench_runs_the_suite_and_writes_the_table_chart_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let (chart, json) = (dir.path().join("c.svg"), dir.path().join("r.json"));
    let out = stdout(
        flexkv(&dir.path().join("unused"))
            .args(["bench", "--pairs", "3000", "--ops", "500", "--sizes", "udb"])
            .arg("--chart")
            .arg(&chart)
            .arg("--json-out")
            .arg(&json)
            .arg("--dir")
            .arg(dir.path()),
    );
    assert!(
        out.contains("### 27+127 bytes, 1 thread, 3,000 pairs"),
        "{out}"
    );
    for w in ["fillseq", "readmissing", "deleterandom", "ycsb-a", "ycsb-e"] {
        assert!(out.contains(&format!("| {w} | ")), "{w} missing from {out}");
    }
    assert!(std::fs::read_to_string(&chart).unwrap().starts_with("<svg"));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["runs"][0]["phases"].as_array().unwrap().len(), 14);
    assert!(!dir.path().join("unused").exists(), "bench ignores --db");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 2, "only the chart and the JSON are left");
}

#[test]
fn bench_refuses_bad_options_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    fails(
        flexkv(&db).args(["bench", "--sizes", "16x100"]),
        "bad sizes",
    );
    fails(
        flexkv(&db).args(["bench", "--workloads", "fillsomething"]),
        "unknown workload",
    );
    fails(
        flexkv(&db).args(["bench", "--sizes", "8+100"]),
        "at least 16 bytes",
    );
    fails(flexkv(&db).args(["bench", "--threads", "0"]), "at least 1");
    fails(
        flexkv(&db)
            .args(["bench", "--pairs", "100", "--dir"])
            .arg(dir.path().join("missing")),
        "cannot make a database",
    );
}
