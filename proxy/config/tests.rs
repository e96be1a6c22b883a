use super::*;
use crate::policy::Host;

fn check(text: &str) -> Result<Snapshot, Vec<Problem>> {
    validate(text, Source::File("t.toml".into()), Path::new("/cfg"), 1).map_err(|e| match e {
        ConfigError::Invalid { problems, .. } => problems,
        other => panic!("unexpected {other}"),
    })
}

const OK: &str = r#"
[[task]]
id = "build"
listen = ["tcp:127.0.0.1:3128"]
allow = ["Registry.NPMJS.org.", "github.com:443", "10.0.0.7:8080"]
allow_private = ["10.0.0.0/8"]
"#;

#[test]
fn embedded_default_is_valid() {
    let snap = load(None, 1).expect("embedded default must be valid");
    let task = snap.task("default").unwrap();
    assert_eq!(
        task.listen,
        vec![ListenAddr::Tcp("127.0.0.1:3128".parse().unwrap())]
    );
    assert_eq!(task.rules.taint_mode, TaintMode::Enforce);
    assert!(task
        .rules
        .allow
        .contains(&Host::Name("registry.npmjs.org".into()), 443));
}

#[test]
fn valid_config_is_normalised() {
    let snap = check(OK).unwrap();
    let t = snap.task("build").unwrap();
    let allow = t.rules.allow.sorted();
    assert_eq!(
        allow,
        vec![
            "github.com:443",
            "registry.npmjs.org:80",
            "registry.npmjs.org:443",
            "10.0.0.7:8080",
        ]
    );
    assert_eq!(snap.state_dir, Path::new("/cfg/sluice-state"));
    assert_eq!(snap.limits, Limits::default());
    assert_eq!(t.taint.max_hosts, 100_000);
}

/// Each invalid kind: (name, config, expected line, key fragment, message fragment).
#[test]
fn invalid_table() {
    let cases: &[(&str, &str, usize, &str, &str)] = &[
        (
            "unknown key",
            "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallwo = [\"x.example\"]\n",
            4,
            "task[a].allwo",
            "unknown key",
        ),
        (
            "duplicate task id",
            "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\n[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:2\"]\n",
            5,
            "task.id",
            "defined twice",
        ),
        (
            "shared listener",
            "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\n[[task]]\nid = \"b\"\nlisten = [\"tcp:127.0.0.1:1\"]\n",
            6,
            "task[b].listen",
            "belongs to one task",
        ),
        (
            "bad cidr",
            "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow_private = [\"10.0.0.0/33\"]\n",
            4,
            "task[a].allow_private",
            "not a CIDR",
        ),
        (
            "cidr with host bits",
            "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow_private = [\"10.0.0.1/8\"]\n",
            4,
            "task[a].allow_private",
            "host bits",
        ),
        (
            "bad host",
            "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow = [\n  \"ok.example.com\",\n  \"bad host.example.com\",\n]\n",
            6,
            "task[a].allow",
            "not a valid DNS name",
        ),
        (
            "bad port",
            "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow = [\"x.example.com:99999\"]\n",
            4,
            "task[a].allow",
            "port",
        ),
        (
            "non-canonical ip",
            "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow = [\"0x7f000001:80\"]\n",
            4,
            "task[a].allow",
            "canonical",
        ),
        (
            "bad listener",
            "[[task]]\nid = \"a\"\nlisten = [\"127.0.0.1:1\"]\n",
            3,
            "task[a].listen",
            "must start with tcp:",
        ),
        (
            "bad mode",
            "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\n[task.taint]\nmode = \"loud\"\n",
            5,
            "task[a].taint.mode",
            "\"loud\"",
        ),
        (
            "bad task id",
            "[[task]]\nid = \"../x\"\nlisten = [\"tcp:127.0.0.1:1\"]\n",
            2,
            "task.id",
            "names a folder",
        ),
        (
            "admin shares listener",
            "[admin]\nlisten = \"tcp:127.0.0.1:1\"\n[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\n",
            5,
            "task[a].listen",
            "admin",
        ),
    ];
    for (what, text, line, key, msg) in cases {
        let problems = check(text).expect_err(what);
        let p = &problems[0];
        assert_eq!(p.line, Some(*line), "case {what:?}: {p:?}");
        assert!(p.key.contains(key), "case {what:?}: key {:?}", p.key);
        assert!(
            p.message.contains(msg),
            "case {what:?}: message {:?}",
            p.message
        );
    }
}

#[test]
fn every_problem_is_reported() {
    let text = "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow = [\"bad host\", \"x.example:0\"]\nallow_private = [\"nope\"]\n";
    let problems = check(text).unwrap_err();
    assert_eq!(problems.len(), 3, "{problems:?}");
}

#[test]
fn unknown_keys_hide_nothing_and_problems_come_in_line_order() {
    let text =
        "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow_mode = \"loud\"\nalow = [1]\n\
                [task.taint]\nmode = \"x\"\nmood = 2\n[logs]\nkeep = 0\nrotate = 1\n";
    let problems = check(text).unwrap_err();
    let got: Vec<(Option<usize>, &str)> =
        problems.iter().map(|p| (p.line, p.key.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (Some(4), "task[a].allow_mode"),
            (Some(5), "task[a].alow"),
            (Some(7), "task[a].taint.mode"),
            (Some(8), "task[a].taint.mood"),
            (Some(10), "logs.keep"),
            (Some(11), "logs.rotate"),
        ]
    );
}

#[test]
fn allow_entries_of_a_known_wrong_shape_get_a_hint() {
    let entry = |e: &str| {
        let text = format!("[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow = [{e}]\n");
        check(&text)
            .unwrap_err()
            .into_iter()
            .map(|p| p.message)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let url = entry("\"https://user@pkgs.example.com:8443/simple?x=1\"");
    assert!(
        url.contains("is a URL") && url.contains("\"pkgs.example.com:8443\""),
        "{url}"
    );
    let path = entry("\"pkgs.example.com/simple\"");
    assert!(
        path.contains("has a path") && path.contains("\"pkgs.example.com\""),
        "{path}"
    );
    let wild = entry("\"*.example.com\"");
    assert!(
        wild.contains("wildcards are not supported") && wild.contains("\"www.example.com\""),
        "{wild}"
    );
    let twice = entry("\"A.Example.com.\", \"a.example.com:443\"");
    assert_eq!(
        twice,
        "\"a.example.com:443\" repeats a.example.com:443, already listed as \"A.Example.com.\"; list it once"
    );
    let same = entry("\"a.example.com\", \"a.example.com\"");
    assert_eq!(
        same,
        "\"a.example.com\" is listed twice (a.example.com:80,443)"
    );
}

#[test]
fn a_single_label_name_is_valid_with_a_warning() {
    let text = "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow = [\"pkgs.example.com\", \"cache\"]\n";
    let s = validate(text, Source::Embedded, Path::new("."), 1).unwrap();
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0].starts_with(
            "<embedded default.toml>:4: task[a].allow: \"cache\" is a single-label name"
        ),
        "{:?}",
        s.warnings
    );
}

#[test]
fn error_text_names_file_line_and_key() {
    let text = "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow_private = [\"nope\"]\n";
    let err = validate(
        text,
        Source::File("conf/t.toml".into()),
        Path::new("conf"),
        1,
    )
    .unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.contains("conf/t.toml:4: task[a].allow_private"),
        "{shown}"
    );
}

/// Every top-level section is read into the snapshot as written.
#[test]
fn every_section_is_read() {
    let text = r#"
unix_mode = "0640"
[admin]
listen = "tcp:127.0.0.1:9901"
metrics_listen = "tcp:0.0.0.0:9090"
[resolver]
nameservers = ["192.0.2.53:53", "[2001:db8::53]:5353"]
[limits]
max_connections_per_task = 7
header_timeout_secs = 3
max_header_bytes = 4096
connect_timeout_secs = 4
first_byte_timeout_secs = 5
tunnel_idle_timeout_secs = 6
drain_secs = 2
[logs]
rotate_bytes = 1000
keep = 2
[[task]]
id = "t"
listen = ["tcp:127.0.0.1:3128"]
allow = ["pypi.org"]
"#;
    let s = check(text).unwrap();
    assert_eq!(s.unix_mode, 0o640);
    assert_eq!(
        s.admin,
        Some(ListenAddr::Tcp("127.0.0.1:9901".parse().unwrap()))
    );
    assert_eq!(
        s.metrics_listen,
        Some(ListenAddr::Tcp("0.0.0.0:9090".parse().unwrap()))
    );
    assert_eq!(
        s.resolver.nameservers,
        Nameservers::List(vec![
            "192.0.2.53:53".parse().unwrap(),
            "[2001:db8::53]:5353".parse().unwrap()
        ])
    );
    let l = &s.limits;
    assert_eq!(l.max_connections_per_task, 7);
    assert_eq!(l.header_timeout, Duration::from_secs(3));
    assert_eq!(l.max_header_bytes, 4096);
    assert_eq!(l.connect_timeout, Duration::from_secs(4));
    assert_eq!(l.first_byte_timeout, Duration::from_secs(5));
    assert_eq!(l.tunnel_idle_timeout, Duration::from_secs(6));
    assert_eq!(l.drain, Duration::from_secs(2));
    assert_eq!((s.logs.rotate_bytes, s.logs.keep), (1000, 2));
    let sys = check(&text.replace(
        r#"nameservers = ["192.0.2.53:53", "[2001:db8::53]:5353"]"#,
        r#"nameservers = "system""#,
    ))
    .unwrap();
    assert_eq!(sys.resolver.nameservers, Nameservers::System);
}

#[test]
fn bad_unix_modes_and_metrics_listeners_are_problems() {
    let base = "[[task]]\nid = \"t\"\nlisten = [\"tcp:127.0.0.1:3128\"]\nallow = [\"pypi.org\"]\n";
    for (top, key) in [
        ("unix_mode = \"1000\"\n", "unix_mode"),
        ("unix_mode = \"0x1ff\"\n", "unix_mode"),
        (
            "[admin]\nmetrics_listen = \"unix:m.sock\"\n",
            "admin.metrics_listen",
        ),
        (
            "[resolver]\nnameservers = \"dhcp\"\n",
            "resolver.nameservers",
        ),
    ] {
        let problems = check(&format!("{top}{base}")).unwrap_err();
        assert!(problems.iter().any(|p| p.key == key), "{top}: {problems:?}");
    }
    assert_eq!(
        check(&format!("unix_mode = \"0777\"\n{base}"))
            .unwrap()
            .unix_mode,
        0o777
    );
}

#[test]
fn fingerprint_tells_contents_apart() {
    assert_eq!(fingerprint(b"a = 1"), fingerprint(b"a = 1"));
    assert_ne!(fingerprint(b"a = 1"), fingerprint(b"a = 2"));
    assert_ne!(fingerprint(b""), 0);
}

#[test]
fn task_ids_name_folders() {
    let cfg = |id: &str| {
        format!(
            "[[task]]\nid = {id:?}\nlisten = [\"tcp:127.0.0.1:3128\"]\nallow = [\"pypi.org\"]\n"
        )
    };
    let long = "a".repeat(64);
    for ok in ["build", "a-b_c.d", long.as_str()] {
        assert!(check(&cfg(ok)).is_ok(), "{ok}");
    }
    let too_long = "a".repeat(65);
    for bad in ["", too_long.as_str(), "a/b", ".hidden", "-odd", "a b", "ü"] {
        let problems = check(&cfg(bad)).unwrap_err();
        assert!(
            problems.iter().any(|p| p.key == "task.id"),
            "{bad:?}: {problems:?}"
        );
    }
}

#[test]
fn pinned_hosts_are_read_and_checked() {
    let base = "[[task]]\nid = \"t\"\nlisten = [\"tcp:127.0.0.1:3128\"]\nallow = [\"pypi.org\"]\n";
    let s = check(&format!(
        "[resolver.hosts]\n\"Pkgs.Example.com.\" = [\"192.0.2.1\", \"2001:db8::1\"]\n{base}"
    ))
    .unwrap();
    assert_eq!(
        s.resolver.hosts.get("pkgs.example.com"),
        Some(&vec![
            "192.0.2.1".parse().unwrap(),
            "2001:db8::1".parse().unwrap()
        ])
    );
    for bad in [
        "\"pkgs.example.com\" = [\"not-an-ip\"]",
        "\"10.0.0.1\" = [\"10.0.0.1\"]",
        "\"pkgs.example.com\" = []",
    ] {
        let problems = check(&format!("[resolver.hosts]\n{bad}\n{base}")).unwrap_err();
        assert!(
            problems.iter().any(|p| p.key.starts_with("resolver.hosts")),
            "{bad}: {problems:?}"
        );
    }
}

#[test]
fn task_lists_and_defaults_are_read() {
    let text = "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\npassthrough = [\"Pinned.Example.com\"]\n\
                [task.taint]\nexempt = [\"cdn.example.com.\"]\n";
    let s = check(text).unwrap();
    let t = &s.tasks[0];
    assert_eq!(
        t.passthrough,
        HashSet::from(["pinned.example.com".to_string()])
    );
    assert_eq!(
        t.taint.exempt,
        HashSet::from(["cdn.example.com".to_string()])
    );
    assert_eq!(t.taint.max_scan_bytes, 64 * 1024 * 1024);
    assert_eq!(t.taint.max_hosts, 100_000);
}

#[test]
fn extra_roots_are_kept_as_paths_beside_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let ca = rcgen::generate_simple_self_signed(vec!["ca.example".into()]).unwrap();
    std::fs::write(dir.path().join("roots.pem"), ca.cert.pem()).unwrap();
    let text = "[upstream]\nextra_roots = [\"roots.pem\"]\n[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\n";
    let s = validate(text, Source::Embedded, dir.path(), 1).unwrap();
    assert_eq!(s.extra_roots, vec![dir.path().join("roots.pem")]);
}

#[test]
fn zero_is_not_a_positive_number() {
    for key in ["keep = 0", "keep = -1"] {
        let text = format!("[logs]\n{key}\n[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\n");
        let p = check(&text).unwrap_err();
        assert_eq!(p[0].key, "logs.keep", "{key}");
    }
    let s =
        check("[logs]\nkeep = 1\n[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\n").unwrap();
    assert_eq!(s.logs.keep, 1);
}

#[test]
fn a_value_of_the_wrong_type_names_its_key() {
    let p =
        check("[logs]\nkeep = \"five\"\n[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\n")
            .unwrap_err();
    assert_eq!(
        (p[0].line, p[0].key.as_str()),
        (Some(2), "logs.keep"),
        "{p:?}"
    );
    let p = check("[[task]]\nid = \"a\"\nlisten = \"tcp:127.0.0.1:1\"\n").unwrap_err();
    assert_eq!(
        (p[0].line, p[0].key.as_str()),
        (Some(3), "task[0].listen"),
        "{p:?}"
    );
    let p = check("x = [\n").unwrap_err();
    assert_eq!(p[0].key, "toml", "a syntax error names no key");
}

/// A task with one `[[task.secret]]` whose lines are `secret`.
fn with_secret(task_extra: &str, secret: &str) -> String {
    format!(
        "[[task]]\nid = \"a\"\nlisten = [\"tcp:127.0.0.1:1\"]\nallow = [\"api.example.com\", \"other.example.com\"]\n{task_extra}\n[[task.secret]]\n{secret}\n"
    )
}

#[test]
fn a_secret_is_read_with_its_defaults() {
    let text = with_secret(
        "",
        "name = \"TOKEN\"\nfrom_env = \"GH_TOKEN\"\nhosts = [\"api.example.com\"]",
    );
    let snap = check(&text).unwrap();
    let s = &snap.task("a").unwrap().secrets[0];
    assert_eq!(s.name, "TOKEN");
    assert_eq!(s.source, SecretSource::Env("GH_TOKEN".into()));
    assert_eq!(s.headers, vec!["authorization".to_string()]);
    assert!(s.hosts.contains(&Host::Name("api.example.com".into()), 443));
    assert!(s.hosts.contains(&Host::Name("api.example.com".into()), 80));
    assert!((!s.query, !s.body, s.on_violation) == (true, true, OnViolation::Refuse));
    let file = with_secret("", "name = \"T\"\nfrom_file = \"tok\"\nhosts = [\"api.example.com:443\"]\nheaders = [\"X-Api-Key\"]\non_violation = \"quarantine\"\nbody = true");
    let s = check(&file).unwrap().task("a").unwrap().secrets[0].clone();
    assert_eq!(s.source, SecretSource::File("/cfg/tok".into()));
    assert_eq!(s.headers, vec!["x-api-key".to_string()]);
    assert_eq!(s.on_violation, OnViolation::Quarantine);
    assert!(s.body && !s.hosts.contains(&Host::Name("api.example.com".into()), 80));
}

#[test]
fn bad_secrets_are_refused_and_a_written_value_is_never_repeated() {
    let value = "ghp_ThisMustNeverBePrinted0123456789";
    let cases = [
        (with_secret("", &format!("name = \"T\"\nvalue = \"{value}\"\nhosts = [\"api.example.com\"]")), "task[a].secret[T].value", "never written in the config"),
        (with_secret("", "name = \"T\"\nfrom_env = \"X\"\nhosts = [\"nope.example.com\"]"), "task[a].secret[T].hosts", "not in the task's allow"),
        (with_secret("intercept = \"none\"", "name = \"T\"\nfrom_env = \"X\"\nhosts = [\"api.example.com\"]"), "task[a].secret[T].hosts", "intercept = \"all\""),
        (with_secret("passthrough = [\"api.example.com\"]", "name = \"T\"\nfrom_env = \"X\"\nhosts = [\"api.example.com\"]"), "task[a].secret[T].hosts", "passthrough"),
        (with_secret("", "name = \"T\"\nfrom_env = \"X\"\nhosts = [\"1.2.3.4\"]"), "task[a].secret[T].hosts", "host names"),
        (with_secret("", "name = \"T\"\nfrom_env = \"X\""), "task[a].secret[T].hosts", "list the hosts"),
        (with_secret("", "name = \"T\"\nhosts = [\"api.example.com\"]"), "task[a].secret[T].from_env", "from_env"),
        (with_secret("", "name = \"1T\"\nfrom_env = \"X\"\nhosts = [\"api.example.com\"]"), "task[a].secret.name", "variable name"),
        (with_secret("", "name = \"T\"\nfrom_env = \"X\"\nhosts = [\"api.example.com\"]\non_violation = \"shrug\""), "task[a].secret[T].on_violation", "quarantine"),
    ];
    for (text, key, says) in cases {
        let problems = check(&text).unwrap_err();
        assert!(
            problems
                .iter()
                .any(|p| p.key == key && p.message.contains(says)),
            "{key}: {problems:?}"
        );
        let shown = format!("{problems:?}");
        assert!(!shown.contains(value), "a value is never repeated: {shown}");
    }
}
