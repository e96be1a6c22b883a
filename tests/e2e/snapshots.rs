//! Snapshot tests of what a person reads: the `report` table and `check`'s
//! output on a fixed state folder and fixed configs
//! (`tests/fixtures/report-state`, `tests/fixtures/check`). The expected
//! text lives in `tests/fixtures/snapshots/`; when the format changes on
//! purpose, rewrite it with `SLUICE_BLESS=1 cargo test --test e2e snapshots`
//! and read the diff.

use std::path::Path;
use std::process::Command;

use crate::util::bin;

/// Runs sluice from the package root (paths in the output are relative)
/// and returns (exit code, stdout, stderr).
fn sluice(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(bin())
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Compares `got` with the snapshot `name`, or writes it when blessing.
fn snapshot(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/snapshots")
        .join(name);
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (write it with SLUICE_BLESS=1)", path.display()));
    assert_eq!(
        got, want,
        "{name} changed; if on purpose, SLUICE_BLESS=1 and read the diff"
    );
}

#[test]
fn report_table() {
    let (code, out, err) = sluice(&["report", "--state", "tests/fixtures/report-state"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err, "sluice: report of tests/fixtures/report-state\n");
    snapshot("report.txt", &out);
}

#[test]
fn report_json_counts_each_request_once() {
    let (code, out, err) = sluice(&[
        "report",
        "--state",
        "tests/fixtures/report-state",
        "--json",
        "--task",
        "build",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let dest = |h: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|d| d["host"] == h)
            .unwrap_or_else(|| panic!("{h} in {v:#}"))
            .clone()
    };
    // One intercepted tunnel with two GETs inside: two requests, and the
    // tunnel's TLS bytes are not counted on top of theirs.
    let reg = dest("registry.npmjs.org");
    assert_eq!(
        (reg["requests"].as_u64(), reg["tunnels"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(reg["bytes_down"], 2048 + 30_000_873);
    assert_eq!(reg["bytes_up"], 0);
    // A refused CONNECT carried nothing; a refused POST sent nothing up.
    let gist = dest("gist.example");
    assert_eq!(
        (gist["refused"].as_u64(), gist["body"].as_bool()),
        (Some(1), Some(false))
    );
    let paste = dest("paste.example");
    assert_eq!(
        (paste["refused"].as_u64(), paste["bytes_up"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(paste["tainted"], true);
    // A DNS failure is a failure, not a refusal.
    let mirror = dest("mirror.example");
    assert_eq!(
        (mirror["failed"].as_u64(), mirror["refused"].as_u64()),
        (Some(1), Some(0))
    );
    assert!(
        !out.contains("would_refuse"),
        "the log's word is would_deny"
    );
}

#[test]
fn check_problems() {
    let (code, out, err) = sluice(&["check", "--config", "tests/fixtures/check/problems.toml"]);
    assert_eq!(code, Some(1));
    assert_eq!(out, "");
    snapshot("check-problems.txt", &err);
}

#[test]
fn check_wide_config() {
    let (code, out, err) = sluice(&["check", "--config", "tests/fixtures/check/wide.toml"]);
    assert_eq!(code, Some(0), "{err}");
    snapshot("check-wide.txt", &out);
}

/// A reader that has gone (`sluice report --rows | head -1`): every
/// command that prints ends quietly with status 0, no panic.
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let cases: &[&[&str]] = &[
        &["report", "--rows", "--state", "tests/fixtures/report-state"],
        &["report", "--state", "tests/fixtures/report-state"],
        &["report", "--json", "--state", "tests/fixtures/report-state"],
        &["check"],
    ];
    for args in cases {
        let mut child = Command::new(bin())
            .args(*args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader is gone before the first byte is written.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
    }
}
