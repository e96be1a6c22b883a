//! Secrets with real clients (needs git and npm): `git clone` and `git
//! push` through a smart-HTTP server that requires the real token as the
//! Basic password, and `npm install` from a registry that requires it as
//! `_authToken`, each with only the placeholder in the client's hands.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use data_encoding::BASE64;
use http_body_util::Full;
use hyper::Response;

use crate::util::*;

const VALUE: &str = "ghp_RealSecretValue0123456789abcdefABCD";

fn unauthorized() -> Response<Full<Bytes>> {
    Response::builder()
        .status(401)
        .header("www-authenticate", "Basic realm=\"forge\"")
        .body(Full::new(Bytes::from_static(b"token needed\n")))
        .unwrap()
}

/// sluice with task `t` allowing `host:port`, holding secret TOKEN for it.
fn sluice(dns: &FakeDns, ca: &TestCa, host: &str, port: u16) -> Sluice {
    SluiceBuilder::new(dns)
        .host(host, &["127.0.0.1"])
        .allow(&[format!("{host}:{port}")])
        .task_extra(&format!(
            "[[task.secret]]\nname = \"TOKEN\"\nfrom_file = \"token.txt\"\nhosts = [\"{host}:{port}\"]"
        ))
        .file("token.txt", VALUE)
        .file("upstream-ca.pem", ca.pem.as_str())
        .top("[upstream]\nextra_roots = [\"upstream-ca.pem\"]")
        .start()
}

fn placeholder(s: &Sluice) -> String {
    let kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.task_file("t", "placeholders.json")).unwrap())
            .unwrap();
    kept["TOKEN"].as_str().unwrap().to_string()
}

fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    without_proxy_env(&mut Command::new("git"))
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        // The machine may point git at its own bundle; http.sslCAInfo is used.
        .env_remove("GIT_SSL_CAINFO")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git runs (the CI script installs it)")
}

#[track_caller]
fn ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn git_clone_and_push_with_only_the_placeholder() {
    let root = tempfile::tempdir().unwrap();
    let bare = root.path().join("me/repo.git");
    std::fs::create_dir_all(&bare).unwrap();
    ok(&git(&bare, &["init", "--bare", "-b", "main"]));
    let seed = tempfile::tempdir().unwrap();
    ok(&git(seed.path(), &["init", "-b", "main"]));
    std::fs::write(seed.path().join("README"), "hello\n").unwrap();
    ok(&git(seed.path(), &["add", "README"]));
    ok(&git(seed.path(), &["commit", "-m", "seed"]));
    ok(&git(seed.path(), &["push", bare.to_str().unwrap(), "main"]));
    let want = format!(
        "Basic {}",
        BASE64.encode(format!("x-access-token:{VALUE}").as_bytes())
    );
    let served = root.path().to_path_buf();
    let ca = test_ca();
    let up = Upstream::start_tls(
        Arc::new(move |req: &Seen| {
            if req.headers.get("authorization") != Some(&want) {
                return Some(unauthorized());
            }
            crate::owners::git_cgi(&served, req)
        }),
        server_config(&ca, &["github.com"]),
    );
    let p = up.port();
    let dns = FakeDns::start();
    let s = sluice(&dns, &ca, "github.com", p);
    let ph = placeholder(&s);
    let sluice_ca = s.state().join("ca.pem");
    let work = tempfile::tempdir().unwrap();
    let url = format!("https://x-access-token:{ph}@github.com:{p}/me/repo.git");
    let proxy = format!("http.proxy={}", s.proxy(0));
    let cainfo = format!("http.sslCAInfo={}", sluice_ca.display());
    let base = ["-c", proxy.as_str(), "-c", cainfo.as_str()];
    ok(&git(
        work.path(),
        &[&base[..], &["clone", &url, "repo"]].concat(),
    ));
    let repo = work.path().join("repo");
    assert_eq!(
        std::fs::read_to_string(repo.join("README")).unwrap(),
        "hello\n"
    );
    std::fs::write(repo.join("CHANGE"), "from the task\n").unwrap();
    ok(&git(&repo, &["add", "CHANGE"]));
    ok(&git(&repo, &["commit", "-m", "pushed through sluice"]));
    ok(&git(
        &repo,
        &[&base[..], &["push", "origin", "main"]].concat(),
    ));
    let log = git(&bare, &["log", "--format=%s", "main"]);
    assert!(String::from_utf8_lossy(&log.stdout).contains("pushed through sluice"));
    // The task's side never held the value.
    let config = std::fs::read_to_string(repo.join(".git/config")).unwrap();
    assert!(config.contains(&ph) && !config.contains(VALUE));
    let swapped: Vec<_> = read_rows(&s.task_file("t", "access.jsonl"))
        .into_iter()
        .filter(|r| r["secrets"] == serde_json::json!(["TOKEN"]))
        .collect();
    assert!(swapped.len() >= 2, "clone and push rows name the secret");
}

#[test]
fn npm_install_with_an_auth_token_placeholder() {
    let ca = test_ca();
    let port = Arc::new(std::sync::atomic::AtomicU16::new(0));
    let p2 = port.clone();
    let packument = String::from_utf8(fixture("ms.packument.json")).unwrap();
    let tgz = Bytes::from(fixture("ms-2.1.3.tgz"));
    let want = format!("Bearer {VALUE}");
    let up = Upstream::start_tls(
        Arc::new(move |req: &Seen| {
            if req.headers.get("authorization") != Some(&want) {
                return Some(unauthorized());
            }
            let p = p2.load(std::sync::atomic::Ordering::SeqCst);
            let body = match req.uri.as_str() {
                "/ms" => Bytes::from(packument.replace(
                    "https://registry.npmjs.org/ms/-/",
                    &format!("https://registry.example.com:{p}/ms/-/"),
                )),
                "/ms/-/ms-2.1.3.tgz" => tgz.clone(),
                _ => return None,
            };
            Some(Response::new(Full::new(body)))
        }),
        server_config(&ca, &["registry.example.com"]),
    );
    port.store(up.port(), std::sync::atomic::Ordering::SeqCst);
    let p = up.port();
    let dns = FakeDns::start();
    let s = sluice(&dns, &ca, "registry.example.com", p);
    let ph = placeholder(&s);
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("package.json"),
        r#"{"name":"proj","version":"1.0.0"}"#,
    )
    .unwrap();
    std::fs::write(
        work.path().join(".npmrc"),
        format!("//registry.example.com:{p}/:_authToken={ph}\n"),
    )
    .unwrap();
    let out = without_proxy_env(&mut Command::new("npm"))
        .args([
            "install",
            "ms@2.1.3",
            "--no-audit",
            "--no-fund",
            "--no-update-notifier",
        ])
        .arg(format!("--registry=https://registry.example.com:{p}/"))
        .arg(format!("--https-proxy={}", s.proxy(0)))
        .arg(format!("--cafile={}", s.state().join("ca.pem").display()))
        .arg(format!("--cache={}", work.path().join("cache").display()))
        .current_dir(work.path())
        .output()
        .expect("npm runs (the CI script installs it)");
    ok(&out);
    assert!(work.path().join("node_modules/ms/index.js").exists());
    assert!(up
        .requests()
        .iter()
        .all(|r| r.headers.get("authorization").map(String::as_str)
            == Some(format!("Bearer {VALUE}").as_str())));
}
