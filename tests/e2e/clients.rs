//! Real clients set up with nothing but `eval "$(sluice env)"` (issue
//! "Clients: one line sets up any tool"): curl, git, pip, npm, cargo and
//! Python requests fetch over HTTPS through an intercepting sluice from a
//! loopback registry whose certificate chains to a test CA that sluice
//! trusts through `extra_roots`. Each runs in a HOME whose tool configs
//! already point at the system bundle (npm's `cafile`, pip's `cert`, git's
//! `http.sslCAInfo`) and with a stray `NO_PROXY=*`, as on a typical
//! machine: `sluice env` must override all of it. Each test then checks
//! what sluice recorded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;

use crate::util::*;

const HOST: &str = "pkgs.example.com";
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// A loopback HTTPS registry, sluice in front of it, and a HOME as a
/// typical machine has it.
struct Registry {
    _dns: FakeDns,
    up: Upstream,
    s: Sluice,
    home: tempfile::TempDir,
    /// The upstream's test CA, as a PEM file.
    upstream_ca: PathBuf,
}

/// Serves `files` (path → body; `{PORT}` in a body becomes the port) over
/// TLS for pkgs.example.com, and 404 for anything else.
fn registry(files: Vec<(String, Vec<u8>)>, task_extra: &str) -> Registry {
    let ca = test_ca();
    let port = Arc::new(std::sync::atomic::AtomicU16::new(0));
    let p2 = port.clone();
    let files: HashMap<String, Vec<u8>> = files.into_iter().collect();
    let up = Upstream::start_tls(
        Arc::new(move |req: &Seen| {
            let path = req.uri.split('?').next().unwrap_or("/");
            let p = p2.load(std::sync::atomic::Ordering::SeqCst).to_string();
            let mut r = match files.get(path) {
                Some(b) => Response::new(Full::new(Bytes::from(
                    String::from_utf8(b.clone())
                        .map(|t| t.replace("{PORT}", &p).into_bytes())
                        .unwrap_or_else(std::string::FromUtf8Error::into_bytes),
                ))),
                None => {
                    let mut r = Response::new(Full::new(Bytes::from_static(b"not here\n")));
                    *r.status_mut() = hyper::StatusCode::NOT_FOUND;
                    r
                }
            };
            if path.ends_with(".html") || path.ends_with('/') {
                r.headers_mut()
                    .insert("content-type", "text/html".parse().unwrap());
            }
            Some(r)
        }),
        server_config(&ca, &[HOST, "other.example.com"]),
    );
    port.store(up.port(), std::sync::atomic::Ordering::SeqCst);
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .listen(&[format!("tcp:127.0.0.1:{}", free_port())])
        .allow(&[
            format!("{HOST}:{}", up.port()),
            format!("other.example.com:{}", up.port()),
        ])
        .task_extra(task_extra)
        .file("upstream-ca.pem", ca.pem.as_str())
        .top("[upstream]\nextra_roots = [\"upstream-ca.pem\"]")
        .start();
    let upstream_ca = s.dir.path().join("upstream-ca.pem");
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    // What a typical machine already has: every tool told to trust the
    // system bundle, which silently wins over generic variables.
    std::fs::write(h.join(".npmrc"), format!("cafile={SYSTEM_BUNDLE}\n")).unwrap();
    std::fs::create_dir_all(h.join(".config/pip")).unwrap();
    std::fs::write(
        h.join(".config/pip/pip.conf"),
        format!("[global]\ncert = {SYSTEM_BUNDLE}\n"),
    )
    .unwrap();
    std::fs::write(
        h.join(".gitconfig"),
        format!("[http]\n\tsslCAInfo = {SYSTEM_BUNDLE}\n"),
    )
    .unwrap();
    Registry {
        _dns: dns,
        up,
        s,
        home,
        upstream_ca,
    }
}

impl Registry {
    fn url(&self, path: &str) -> String {
        format!("https://{HOST}:{}{path}", self.up.port())
    }

    /// Runs `script` in sh after `eval "$(sluice env --config …)"`, in the
    /// prepared HOME, with `dir` as the working folder. `env` adds to the
    /// environment the tool starts from.
    fn run(&self, dir: &Path, script: &str, env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new("sh");
        without_proxy_env(&mut cmd);
        cmd.arg("-c")
            .arg(format!(
                "eval \"$('{}' env --config '{}')\" && {script}",
                bin(),
                self.s.config.display()
            ))
            .current_dir(dir)
            .env("HOME", self.home.path())
            // A stray NO_PROXY, as on many machines: sluice env clears it.
            .env("NO_PROXY", "*")
            .env("no_proxy", "*");
        for v in [
            "SSL_CERT_FILE",
            "PIP_CERT",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "NODE_EXTRA_CA_CERTS",
            "GIT_SSL_CAINFO",
            "CARGO_HTTP_CAINFO",
            "PIP_FIND_LINKS",
            "PIP_INDEX_URL",
            // A machine set to work offline (as the bare-machine check
            // is): the client must still fetch, through sluice.
            "CARGO_NET_OFFLINE",
        ] {
            cmd.env_remove(v);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("sh runs")
    }

    /// Asserts a run succeeded, showing its output otherwise.
    #[track_caller]
    fn ok(&self, what: &str, out: &Output) {
        assert!(
            out.status.success(),
            "{what} failed through sluice:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// What sluice recorded: an intercepted row for each path, the taint
    /// the metadata left, and the report's line for the registry.
    fn recorded(&self, paths: &[&str], tainted: &str) {
        for p in paths {
            let row = row_where(&self.s, "t", HOST, |r| {
                r["kind"] == "intercepted" && r["path"] == *p
            });
            assert_eq!(row["decision"], "allow", "{p}: {row}");
            assert_eq!(row["status"], 200, "{p}: {row}");
        }
        let hosts: Vec<String> = self
            .s
            .taint_log("t", 1)
            .iter()
            .filter_map(|r| r["host"].as_str().map(String::from))
            .collect();
        assert!(
            hosts.iter().any(|h| h == tainted),
            "{tainted} tainted: {hosts:?}"
        );
        let out = self.s.report(&[]);
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.contains(&format!("{HOST}:{}", self.up.port())))
            .unwrap_or_else(|| panic!("no report line for the registry:\n{text}"));
        let c = crate::ops::counts(line);
        assert_eq!(c[2..], [0, 0, 0], "nothing refused or failed: {line}");
    }
}

fn sha256(data: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x");
    std::fs::write(&f, data).unwrap();
    let out = Command::new("sha256sum").arg(&f).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

const PAGE: &str = "<p>mirror at https://docs.example.com/mirror</p>\n";

#[cfg(feature = "system-tests")] // python3 with requests
#[test]
fn env_output_sets_up_curl_and_python_requests() {
    let r = registry(vec![("/page.html".into(), PAGE.into())], "");
    let work = tempfile::tempdir().unwrap();
    let url = r.url("/page.html");
    let out = r.run(work.path(), &format!("curl -sSf '{url}'"), &[]);
    r.ok("curl", &out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), PAGE, "bytes intact");
    let out = r.run(
        work.path(),
        &format!(
            "python3 -c 'import requests,sys; r = requests.get(\"{url}\"); sys.stdout.write(r.text); r.raise_for_status()'"
        ),
        &[],
    );
    r.ok("python requests", &out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), PAGE);
    r.recorded(&["/page.html"], "docs.example.com");
    // The precondition: without sluice env, the same curl does not get
    // through (NO_PROXY=* and no CA), so the test above proves sluice env.
    let bare = Command::new("sh")
        .arg("-c")
        .arg(format!("curl -sSf -m 5 '{url}'"))
        .env("NO_PROXY", "*")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .output()
        .unwrap();
    assert!(!bare.status.success(), "curl without sluice env must fail");
}

#[cfg(feature = "system-tests")] // git
#[test]
fn env_output_sets_up_git_clone_over_dumb_http() {
    let src = tempfile::tempdir().unwrap();
    let git = |dir: &Path, args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("HOME", src.path())
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let work = src.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("README"), "see https://docs.example.com/guide\n").unwrap();
    git(&work, &["add", "README"]);
    git(&work, &["commit", "-q", "-m", "first"]);
    // Git objects are zlib streams, which the scanner does not decode:
    // the name it can read is in the refs (info/refs), as a tag.
    git(&work, &["tag", "docs.example.com"]);
    git(src.path(), &["clone", "-q", "--bare", "work", "repo.git"]);
    let bare = src.path().join("repo.git");
    git(&bare, &["update-server-info"]);
    // Every file of the bare repository, served as it is (dumb HTTP).
    let mut files = Vec::new();
    for entry in walk(&bare) {
        let rel = entry.strip_prefix(&bare).unwrap().display().to_string();
        files.push((format!("/repo.git/{rel}"), std::fs::read(&entry).unwrap()));
    }
    let r = registry(files, "");
    let dest = tempfile::tempdir().unwrap();
    let out = r.run(
        dest.path(),
        &format!("git clone -q '{}' clone", r.url("/repo.git")),
        &[],
    );
    r.ok("git clone", &out);
    assert_eq!(
        std::fs::read_to_string(dest.path().join("clone/README")).unwrap(),
        "see https://docs.example.com/guide\n"
    );
    r.recorded(&["/repo.git/info/refs"], "docs.example.com");

    // A host not on the allow-list: the CONNECT is answered inside TLS, so
    // git shows the refusal's status (and nothing reached the upstream).
    let before = r.up.request_count();
    let refused = format!("https://refused.example.com:{}/repo.git", r.up.port());
    let out = r.run(dest.path(), &format!("git ls-remote '{refused}'"), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("The requested URL returned error: 403"),
        "git says why: {stderr}"
    );
    assert_eq!(r.up.request_count(), before, "nothing went upstream");
    let row = row_where(&r.s, "t", "refused.example.com", |r| r["kind"] == "connect");
    assert_eq!(row["note"], "refused-inside-tls", "{row}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[cfg(feature = "system-tests")] // python3 with pip
#[test]
fn env_output_sets_up_pip_install_from_a_simple_index() {
    let wheel_name = "requests-2.34.2-py3-none-any.whl";
    let wheel = fixture(wheel_name);
    let index = format!(
        "<!DOCTYPE html><html><body><a href=\"/packages/{wheel_name}#sha256={}\">{wheel_name}</a></body></html>",
        sha256(&wheel)
    );
    let r = registry(
        vec![
            ("/simple/requests/".into(), index.into_bytes()),
            (format!("/packages/{wheel_name}"), wheel),
        ],
        "",
    );
    let work = tempfile::tempdir().unwrap();
    let out = r.run(
        work.path(),
        &format!(
            "python3 -m pip install --no-deps --no-cache-dir --disable-pip-version-check --target site --index-url '{}' requests==2.34.2",
            r.url("/simple/")
        ),
        &[],
    );
    r.ok("pip install", &out);
    assert!(work.path().join("site/requests/__init__.py").exists());
    r.recorded(
        &["/simple/requests/", &format!("/packages/{wheel_name}")],
        "github.com",
    );
}

#[cfg(feature = "system-tests")] // npm
#[test]
fn env_output_sets_up_npm_install_from_a_registry() {
    let packument = String::from_utf8(fixture("ms.packument.json"))
        .unwrap()
        .replace(
            "https://registry.npmjs.org/ms/-/",
            &format!("https://{HOST}:{{PORT}}/ms/-/"),
        );
    let r = registry(
        vec![
            ("/ms".into(), packument.into_bytes()),
            ("/ms/-/ms-2.1.3.tgz".into(), fixture("ms-2.1.3.tgz")),
        ],
        "",
    );
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("package.json"),
        r#"{"name":"proj","version":"1.0.0"}"#,
    )
    .unwrap();
    let out = r.run(
        work.path(),
        &format!(
            "npm install ms@2.1.3 --no-audit --no-fund --no-update-notifier --registry '{}' --cache ./cache",
            r.url("/")
        ),
        &[],
    );
    r.ok("npm install", &out);
    assert!(work.path().join("node_modules/ms/index.js").exists());
    r.recorded(&["/ms", "/ms/-/ms-2.1.3.tgz"], "github.com");
}

#[test]
fn env_output_sets_up_cargo_fetch_from_a_sparse_registry() {
    // A one-file crate, packaged by cargo itself.
    let src = tempfile::tempdir().unwrap();
    let krate = src.path().join("demo");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\ndescription = \"d\"\nlicense = \"MIT\"\nhomepage = \"https://docs.example.com/demo\"\n",
    )
    .unwrap();
    std::fs::write(krate.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    let out = Command::new("cargo")
        .args(["package", "--no-verify", "--allow-dirty", "--offline", "-q"])
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", src.path().join("target"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo package: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crate_file = std::fs::read(src.path().join("target/package/demo-0.1.0.crate")).unwrap();
    let entry = format!(
        "{{\"name\":\"demo\",\"vers\":\"0.1.0\",\"deps\":[],\"cksum\":\"{}\",\"features\":{{}},\"yanked\":false}}\n",
        sha256(&crate_file)
    );
    let r = registry(
        vec![
            (
                "/index/config.json".into(),
                format!("{{\"dl\":\"https://{HOST}:{{PORT}}/dl\"}}").into_bytes(),
            ),
            ("/index/de/mo/demo".into(), entry.into_bytes()),
            ("/dl/demo/0.1.0/download".into(), crate_file),
        ],
        "",
    );
    let proj = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(proj.path().join("src")).unwrap();
    std::fs::create_dir_all(proj.path().join(".cargo")).unwrap();
    std::fs::write(
        proj.path().join("Cargo.toml"),
        "[package]\nname = \"proj\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\ndemo = { version = \"0.1\", registry = \"loop\" }\n",
    )
    .unwrap();
    std::fs::write(proj.path().join("src/lib.rs"), "").unwrap();
    std::fs::write(
        proj.path().join(".cargo/config.toml"),
        format!(
            "[registries.loop]\nindex = \"sparse+{}\"\n",
            r.url("/index/")
        ),
    )
    .unwrap();
    let cargo_home = proj.path().join("cargo-home");
    let out = r.run(
        proj.path(),
        "cargo fetch -q",
        &[("CARGO_HOME", cargo_home.to_str().unwrap())],
    );
    r.ok("cargo fetch", &out);
    let fetched = walk(&cargo_home.join("registry"))
        .into_iter()
        .any(|p| p.file_name().is_some_and(|n| n == "demo-0.1.0.crate"));
    assert!(fetched, "the crate was downloaded");
    r.recorded(
        &["/index/config.json", "/dl/demo/0.1.0/download"],
        "docs.example.com",
    );
}

/// A passthrough host is not intercepted: its certificate must verify
/// against the system roots in the bundle. The test CA stands in for a
/// system root (the bundle reads `SSL_CERT_FILE` as the system store).
#[test]
fn passthrough_hosts_still_verify_with_the_bundle() {
    let r = registry(
        vec![("/page.html".into(), PAGE.into())],
        "passthrough = [\"other.example.com\"]",
    );
    let system = r.home.path().join("system-roots.pem");
    let mut roots = std::fs::read_to_string(SYSTEM_BUNDLE).unwrap_or_default();
    roots.push_str(&std::fs::read_to_string(&r.upstream_ca).unwrap());
    std::fs::write(&system, roots).unwrap();
    // `sluice env` writes the bundle when there is none (sluice run wrote
    // one from the real system store at start).
    std::fs::remove_file(r.s.state().join("ca-bundle.pem")).unwrap();
    let work = tempfile::tempdir().unwrap();
    let url = format!("https://other.example.com:{}/page.html", r.up.port());
    let out = r.run(
        work.path(),
        &format!("curl -sSf '{url}' && curl -sSf '{}'", r.url("/page.html")),
        &[("SSL_CERT_FILE", system.to_str().unwrap())],
    );
    r.ok("curl to a passthrough and an intercepted host", &out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{PAGE}{PAGE}")
    );
    let row = last_row_for(&r.s, "t", "other.example.com");
    assert_eq!(
        (row["kind"].as_str(), row["decision"].as_str()),
        (Some("connect"), Some("allow"))
    );
}

/// A client that does not trust sluice's CA fails its handshake; sluice
/// says which host and what to do, in stderr and in the CONNECT's row.
#[test]
fn a_client_without_the_bundle_is_told_what_to_do() {
    let r = registry(vec![("/page.html".into(), PAGE.into())], "");
    let out = curl(&["-sS", "-x", &r.s.proxy(0), &r.url("/page.html")]);
    assert!(!out.status.success(), "curl without the CA must fail");
    let line =
        r.s.wait_line(|l| l.contains("refused sluice's certificate") && l.contains(HOST));
    assert!(
        line.contains("sluice env") && line.contains("passthrough"),
        "{line}"
    );
    let row = row_where(&r.s, "t", HOST, |row| row["kind"] == "connect");
    assert_eq!(row["note"], "client-tls-failed", "{row}");
}

#[test]
#[ignore = "needs Node 24 or later (NODE_USE_ENV_PROXY); run with --ignored where it is installed"]
fn env_output_sets_up_node_fetch() {
    let r = registry(vec![("/page.html".into(), PAGE.into())], "");
    let work = tempfile::tempdir().unwrap();
    let out = r.run(
        work.path(),
        &format!(
            "node -e 'fetch(\"{}\").then(r => r.text()).then(t => process.stdout.write(t))'",
            r.url("/page.html")
        ),
        &[],
    );
    r.ok("node fetch", &out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), PAGE);
    r.recorded(&["/page.html"], "docs.example.com");
}
