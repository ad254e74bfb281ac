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
