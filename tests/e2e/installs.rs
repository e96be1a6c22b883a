//! Real package clients through sluice against loopback copies of real
//! registry data (the corpus fixtures): the install works, and the taint
//! set it leaves holds only names a person could reach — no single labels,
//! no prefixes cut at chunk boundaries, no base64 fragments, nothing from
//! compressed bytes (issue 11, "Precision").

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;

use crate::util::*;

/// The tainted hosts a run left, checked for plausibility.
fn plausible_taint(s: &Sluice) -> Vec<String> {
    let rows = s.taint_log("t", 1);
    let hosts: Vec<String> = rows
        .iter()
        .filter_map(|r| r["host"].as_str().map(String::from))
        .collect();
    for h in &hosts {
        assert!(
            h.contains('.'),
            "single label tainted: {h} (all: {hosts:?})"
        );
        let suffix = psl::suffix(h.as_bytes()).expect("a suffix");
        assert!(suffix.is_known(), "no public suffix: {h}");
        assert!(h.split('.').all(|l| !l.is_empty() && l.len() <= 63), "{h}");
    }
    for a in &hosts {
        for b in &hosts {
            assert!(
                a == b || !b.starts_with(a.as_str()) || b.as_bytes()[a.len()] == b'.',
                "{a} is a prefix of {b} cut mid-label"
            );
        }
    }
    hosts
}

/// The run's taint set as keys (`host`, or `host/owner` on a forge),
/// measured against the reviewed lists of the fixtures served: at least
/// 95 % of it on them (issue 26: precision held to the labels, on what
/// real clients fetched).
fn reviewed_only(s: &Sluice, fixtures: &[&str]) -> Vec<String> {
    let reviewed: Vec<String> = fixtures
        .iter()
        .flat_map(|f| {
            String::from_utf8(fixture(&format!("{f}.hosts")))
                .unwrap()
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    let keys: Vec<String> = s
        .taint_log("t", 1)
        .iter()
        .filter_map(|r| {
            let host = r["host"].as_str()?;
            Some(match r["owner"].as_str() {
                Some(o) => format!("{host}/{o}"),
                None => host.to_string(),
            })
        })
        .collect();
    let extra: Vec<&String> = keys.iter().filter(|k| !reviewed.contains(k)).collect();
    assert!(
        extra.len() * 20 <= keys.len(),
        "not hosts: {extra:?} (all: {keys:?})"
    );
    keys
}

/// sluice allowing only the loopback registry `host:port`.
fn registry_sluice(dns: &FakeDns, host: &str, port: u16) -> Sluice {
    SluiceBuilder::new(dns)
        .host(host, &["127.0.0.1"])
        .allow(&[format!("{host}:{port}")])
        .start()
}

#[test]
fn npm_install_of_a_real_package_taints_only_real_names() {
    let port = Arc::new(std::sync::atomic::AtomicU16::new(0));
    let p2 = port.clone();
    let packument = String::from_utf8(fixture("ms.packument.json")).unwrap();
    let tgz = Bytes::from(fixture("ms-2.1.3.tgz"));
    let up = Upstream::start_with(Arc::new(move |req: &Seen| {
        let p = p2.load(std::sync::atomic::Ordering::SeqCst);
        let body = match req.uri.as_str() {
            "/ms" => Bytes::from(packument.replace(
                "https://registry.npmjs.org/ms/-/",
                &format!("http://registry.example.com:{p}/ms/-/"),
            )),
            "/ms/-/ms-2.1.3.tgz" => tgz.clone(),
            _ => return None,
        };
        Some(Response::new(Full::new(body)))
    }));
    port.store(up.port(), std::sync::atomic::Ordering::SeqCst);
    let p = up.port();
    let dns = FakeDns::start();
    let s = registry_sluice(&dns, "registry.example.com", p);
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("package.json"),
        r#"{"name":"proj","version":"1.0.0"}"#,
    )
    .unwrap();
    let out = npm_install(
        work.path(),
        "ms@2.1.3",
        &format!("http://registry.example.com:{p}/"),
        &s.proxy(0),
        &work.path().join("cache"),
    );
    assert!(
        out.status.success(),
        "npm failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(work.path().join("node_modules/ms/index.js").exists());
    let keys = reviewed_only(&s, &["ms.packument.json", "ms-2.1.3.tgz"]);
    assert!(keys.contains(&"github.com/vercel".to_string()), "{keys:?}");
    let hosts = plausible_taint(&s);
    assert!(hosts.contains(&"github.com".to_string()), "{hosts:?}");
    assert!(
        !hosts.contains(&"registry.example.com".to_string()),
        "a registry does not taint itself: {hosts:?}"
    );
}

#[test]
fn pip_install_of_a_real_wheel_taints_only_real_names() {
    let wheel_name = "requests-2.34.2-py3-none-any.whl";
    let wheel = Bytes::from(fixture(wheel_name));
    let sha = {
        let out = Command::new("sha256sum")
            .arg(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/fixtures/corpus")
                    .join(wheel_name),
            )
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    let index = format!(
        "<!DOCTYPE html><html><body><a href=\"/packages/{wheel_name}#sha256={sha}\">{wheel_name}</a></body></html>"
    );
    let up = Upstream::start_with(Arc::new(move |req: &Seen| {
        let (body, kind) = match req.uri.as_str() {
            "/simple/requests/" => (Bytes::from(index.clone()), "text/html"),
            u if u == format!("/packages/{wheel_name}") => {
                (wheel.clone(), "application/octet-stream")
            }
            _ => return None,
        };
        let mut r = Response::new(Full::new(body));
        r.headers_mut()
            .insert("content-type", kind.parse().unwrap());
        Some(r)
    }));
    let p = up.port();
    let dns = FakeDns::start();
    let s = registry_sluice(&dns, "pypi.example.com", p);
    let work = tempfile::tempdir().unwrap();
    let out = without_proxy_env(&mut Command::new("python3"))
        .args([
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-cache-dir",
            "--disable-pip-version-check",
        ])
        .arg("--target")
        .arg(work.path().join("site"))
        .arg("--index-url")
        .arg(format!("http://pypi.example.com:{p}/simple/"))
        .args(["--trusted-host", "pypi.example.com", "--proxy"])
        .arg(s.proxy(0))
        .arg("requests==2.34.2")
        .env_remove("PIP_FIND_LINKS")
        .env_remove("PIP_CERT")
        .output()
        .expect("python3 -m pip runs");
    assert!(
        out.status.success(),
        "pip failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(work.path().join("site/requests/__init__.py").exists());
    let keys = reviewed_only(&s, &["requests-2.34.2-py3-none-any.whl"]);
    assert!(
        keys.contains(&"requests.readthedocs.io".to_string()),
        "{keys:?}"
    );
    let hosts = plausible_taint(&s);
    assert!(
        hosts.contains(&"github.com".to_string()),
        "names inside the wheel are found: {hosts:?}"
    );
}
