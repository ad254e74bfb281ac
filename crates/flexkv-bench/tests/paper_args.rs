//! The paper benchmarks refuse settings they cannot run, before anything runs.
#![allow(clippy::unwrap_used)]

use std::process::Command;

#[test]
fn paper_flexspace_refuses_a_block_that_is_not_whole_file_system_blocks() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["1", "6", "0", "x"] {
        let out = Command::new(env!("CARGO_BIN_EXE_flexkv-bench"))
            .args([
                "paper-flexspace",
                "--size-mib",
                "1",
                "--block-kib",
                bad,
                "--dir",
            ])
            .arg(dir.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--block-kib {bad}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("--block-kib"), "{err}");
        if bad != "x" {
            assert!(err.contains("multiple of 4"), "{err}");
        }
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing ran"
    );
}

/// Each insert baseline keeps to a budget of its own: one long enough measures the
/// insert-range file whole (the paper's way) while the rewrite-the-tail file stops at
/// its own; and the report gives the disk's ceiling on the insert ratio.
#[test]
fn paper_flexspace_budgets_each_baseline_and_prints_the_disk_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_flexkv-bench"))
        .args([
            "paper-flexspace",
            "--size-mib",
            "2",
            "--budget",
            "600",
            "--tail-budget",
            "0",
            "--dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    let row = |system: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("| random insert | {system} |")))
            .unwrap_or_else(|| panic!("no row for {system}: {text}"))
            .split('|')
            .map(str::trim)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("file: insert-range")[5], "all", "{text}");
    let tail = row("file: rewrite tail");
    assert!(tail[5].starts_with("0 MiB in "), "{text}");
    let ceiling = text
        .lines()
        .find(|l| l.contains("the ceiling on this disk"))
        .unwrap_or_else(|| panic!("no ceiling: {text}"));
    let times: f64 = ceiling
        .split(" MB/s, ")
        .nth(1)
        .and_then(|r| r.split('×').next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no ratio in {ceiling}"));
    assert!(times > 0.0, "{ceiling}");
}
