//! `sluice check` and `sluice run` on valid and invalid configs.

use std::process::Command;

use crate::util::*;

fn check(config: &str) -> (i32, String, String) {
    check_with(config, &[])
}

fn check_with(config: &str, args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(bin())
        .args(["check", "--config"])
        .arg(&path)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const TWO_TASKS: &str = r#"
[[task]]
id = "build"
listen = ["tcp:127.0.0.1:3128"]
allow = ["registry.npmjs.org", "github.com:443"]

[[task]]
id = "agent"
listen = ["unix:agent.sock"]
allow = ["pypi.org"]
allow_mode = "shadow"
allow_private = ["10.0.0.0/8"]
intercept = "none"
[task.taint]
mode = "off"
"#;

#[test]
fn check_wide_prints_one_row_per_task_with_marks() {
    let (code, out, err) = check_with(TWO_TASKS, &["--wide"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains("is valid: 2 task(s)"), "{out}");
    assert!(lines[1].starts_with("TASK"), "{out}");
    let build = lines.iter().find(|l| l.starts_with("build")).unwrap();
    assert!(
        build.contains("github.com:443 registry.npmjs.org:80,443"),
        "{build}"
    );
    assert!(!build.contains('!'), "defaults carry no mark: {build}");
    let agent = lines.iter().find(|l| l.starts_with("agent")).unwrap();
    for mark in ["!shadow", "!off", "!none", "!10.0.0.0/8"] {
        assert!(agent.contains(mark), "{mark} in {agent}");
    }
}

/// Without --wide: a block per task, one host a line, each mark on the
/// line of what it marks.
#[test]
fn check_prints_a_block_per_task_one_host_a_line() {
    let (code, out, err) = check(TWO_TASKS);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let build = lines.iter().position(|l| *l == "task build").expect(&out);
    assert_eq!(
        lines[build + 1],
        "  listen      tcp:127.0.0.1:3128",
        "{out}"
    );
    assert_eq!(lines[build + 2], "  allow       github.com:443", "{out}");
    assert_eq!(
        lines[build + 3],
        "              registry.npmjs.org:80,443",
        "{out}"
    );
    let agent = lines.iter().position(|l| *l == "task agent").expect(&out);
    let block = &lines[agent..];
    for (field, mark) in [
        ("allow_mode", "!shadow"),
        ("taint", "!off"),
        ("intercept", "!none"),
        ("private", "!10.0.0.0/8"),
    ] {
        assert!(
            block
                .iter()
                .any(|l| l.trim_start().starts_with(field) && l.ends_with(mark)),
            "{field} {mark} in {out}"
        );
    }
}

/// The embedded default: narrow enough for a terminal, and the shipped
/// default's own choices (its taint exemptions) carry no mark.
#[test]
fn check_embedded_default() {
    let out = Command::new(bin()).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("task default"), "{text}");
    assert!(
        text.contains("  listen      tcp:127.0.0.1:3128\n"),
        "{text}"
    );
    assert!(
        text.contains("\n              registry.npmjs.org:80,443\n"),
        "{text}"
    );
    assert!(
        text.contains("exempt=registry.npmjs.org,registry.yarnpkg.com\n"),
        "{text}"
    );
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "too wide: {line}");
        assert!(
            !line.contains('!') || line.starts_with("! = "),
            "the default marked: {line}"
        );
    }
    // The same exemption in another config is marked: it is a choice.
    let (code, out, err) = check(
        "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow = [\"pypi.org\"]\n\
         [task.taint]\nexempt = [\"pypi.org\", \"registry.npmjs.org\"]\n",
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("  exempt=registry.npmjs.org\n"), "{out}");
    assert!(out.contains("  !exempt=pypi.org\n"), "{out}");
}

/// A mistyped key gets the nearest key of its table.
#[test]
fn a_typo_gets_a_suggestion() {
    let (code, _, err) =
        check("[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nalow = [\"pypi.org\"]\n");
    assert_eq!(code, 1);
    assert!(
        err.contains(":4: task[a].alow: unknown key; did you mean `allow`?"),
        "{err}"
    );
}

#[test]
fn invalid_configs_exit_1_naming_file_line_and_key() {
    let cases: &[(&str, &str, &str)] = &[
        ("unknown key", "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallwo = []\n", ":4: task[a].allwo: unknown key"),
        ("duplicate task id", "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\n[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:2\"]\n", ":5: task.id"),
        ("shared listener", "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\n[[task]]\nid = \"b\"\nlisten = [\"tcp:127.0.0.1:1\"]\n", ":6: task[b].listen"),
        ("bad cidr", "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow_private = [\"10.0.0.0/40\"]\n", ":4: task[a].allow_private"),
        ("bad host", "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow = [\"exa mple.com\"]\n", ":4: task[a].allow"),
    ];
    for (what, cfg, needle) in cases {
        let (code, _out, err) = check(cfg);
        assert_eq!(code, 1, "case {what}: {err}");
        assert!(
            err.contains("c.toml") && err.contains(needle),
            "case {what}: {err}"
        );
    }
    // Several problems are all listed.
    let (code, _, err) = check("[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow = [\"a b\"]\nallow_private = [\"x\"]\n");
    assert_eq!(code, 1);
    assert!(err.contains(":4: ") && err.contains(":5: "), "{err}");
}

#[test]
fn run_with_invalid_config_exits_1_and_usage_error_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[[task]]\nid = \"a\"\n").unwrap();
    let out = Command::new(bin())
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:2: task[a].listen"), "{err}");
    let out = Command::new(bin()).args(["frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn shipped_configs_are_valid() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for dir in ["config", "deploy"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "toml") {
                let out = Command::new(bin())
                    .args(["check", "--config"])
                    .arg(&path)
                    .output()
                    .unwrap();
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{}: {}",
                    path.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 4,
        "config/default.toml, config/example.toml, deploy/*.toml"
    );
}

/// `check` finds what `run` would die on: an `extra_roots` file that is
/// missing or holds no certificate, with its line.
#[test]
fn check_reads_extra_roots_like_run_does() {
    let cfg = "[upstream]\nextra_roots = [\"missing.pem\", \"c.toml\"]\n\n[[task]]\nid = \"t\"\nlisten = [\"tcp:127.0.0.1:3128\"]\nallow = [\"pypi.org\"]\n";
    let (code, _, err) = check(cfg);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("c.toml:2: upstream.extra_roots") && err.contains("cannot read"),
        "{err}"
    );
    assert!(err.contains("holds no certificate"), "{err}");
}

/// Issue 26's taint settings: `by_owner` beyond the built-in forges is
/// marked; `exempt` takes `host/owner`; a bad owner or an unknown
/// related host is an error naming the key.
#[test]
fn check_knows_the_owner_and_related_settings() {
    let cfg = r#"
[[task]]
id = "build"
listen = ["tcp:127.0.0.1:3128"]
allow = ["github.com", "git.example.org"]
[task.taint]
by_owner = ["github.com", "git.example.org"]
exempt = ["github.com/Me"]
related = [["index.example.org", "files.example.org"]]
"#;
    let (code, out, err) = check(cfg);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("!by_owner+=git.example.org"), "{out}");
    assert!(out.contains("!exempt=github.com/me"), "{out}");
    let bad = cfg.replace("github.com/Me", "github.com/a/b");
    let (code, _, err) = check(&bad);
    assert_eq!(code, 1);
    assert!(
        err.contains("task[build].taint.exempt") && err.contains("one path segment"),
        "{err}"
    );
    let bad = cfg.replace("files.example.org", "files example");
    let (code, _, err) = check(&bad);
    assert_eq!(code, 1);
    assert!(err.contains("task[build].taint.related[0]"), "{err}");
}
