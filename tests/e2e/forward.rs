//! Plain HTTP forwarding through sluice.

use crate::util::*;

#[test]
fn allowed_get_arrives_intact_and_is_logged() {
    let up = Upstream::start();
    let (_dns, s) = pkgs_sluice(&up, "", "");
    let url = format!("http://pkgs.example.com:{}/index.html?q=1", up.port());
    let out = curl(&[
        "-i",
        "-x",
        &s.proxy(0),
        &url,
        "-H",
        "Sluice-Task: other",
        "-H",
        "Proxy-Authorization: Basic eDp5",
        "-H",
        "Proxy-Foo: bar",
        "-H",
        "Connection: keep-alive, X-Hop",
        "-H",
        "X-Hop: 1",
        "-H",
        "Keep-Alive: timeout=5",
    ]);
    let a = answer(&out);
    assert_eq!(a.status, 200);
    assert_eq!(a.body, b"hello from upstream\n");
    assert!(!a.headers.contains_key("sluice-rule"));

    let seen = up.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].uri, "/index.html?q=1", "origin-form upstream");
    assert_eq!(
        seen[0].headers["host"],
        format!("pkgs.example.com:{}", up.port())
    );
    assert!(
        !seen[0].headers.contains_key("sluice-task"),
        "Sluice-* stripped"
    );
    assert!(
        !seen[0].headers.contains_key("proxy-authorization"),
        "Proxy-* stripped"
    );
    assert!(!seen[0].headers.contains_key("proxy-connection"));
    assert!(!seen[0].headers.contains_key("proxy-foo"));
    assert!(
        !seen[0].headers.contains_key("x-hop"),
        "headers named by Connection stripped"
    );
    assert!(!seen[0].headers.contains_key("keep-alive"));
    assert!(!seen[0].headers.contains_key("via"));
    assert!(!seen[0].headers.contains_key("x-forwarded-for"));

    let row = last_row_for(&s, "t", "pkgs.example.com");
    assert_eq!(row["kind"], "http");
    assert_eq!(row["decision"], "allow");
    assert_eq!(row["rule"], serde_json::Value::Null);
    assert_eq!(row["method"], "GET");
    assert_eq!(row["path"], "/index.html", "path without query");
    assert_eq!(row["port"], up.port());
    assert_eq!(row["status"], 200);
    assert_eq!(row["body"], false);
    assert_eq!(row["bytes_down"], 20);
    assert!(row["client"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(row["ts"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn ten_mib_upload_and_download_arrive_intact() {
    let up = Upstream::start();
    let (_dns, s) = pkgs_sluice(&up, "", "");
    let size = 10 * 1024 * 1024;
    let data = pattern(size);
    let file = s.dir.path().join("upload.bin");
    std::fs::write(&file, &data).unwrap();

    // Upload (curl sends Expect: 100-continue for a body this large).
    let url = format!("http://pkgs.example.com:{}/upload", up.port());
    let out = curl(&[
        "-i",
        "-x",
        &s.proxy(0),
        "--data-binary",
        &format!("@{}", file.display()),
        &url,
    ]);
    let a = answer(&out);
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(a.body, format!("received {size} bytes\n").as_bytes());
    let seen = up.requests();
    assert!(seen[0].body == data, "uploaded bytes differ");
    let row = last_row_for(&s, "t", "pkgs.example.com");
    assert_eq!(row["body"], true);
    assert_eq!(row["bytes_up"], size as u64);

    // Download.
    let out_file = s.dir.path().join("download.bin");
    let url = format!("http://pkgs.example.com:{}/big?n={size}", up.port());
    let out = curl(&[
        "-x",
        &s.proxy(0),
        "-o",
        out_file.to_str().unwrap(),
        "-w",
        "%{http_code}",
        &url,
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    let got = std::fs::read(&out_file).unwrap();
    assert_eq!(got.len(), size);
    assert!(got == data, "downloaded bytes differ");
    let rows = s.access_log("t", 2);
    assert_eq!(rows[1]["bytes_down"], size as u64);
}

#[test]
fn expect_100_continue_works() {
    let up = Upstream::start();
    let (_dns, s) = pkgs_sluice(&up, "", "");
    let url = format!("http://pkgs.example.com:{}/post", up.port());
    let out = curl(&[
        "-i",
        "-x",
        &s.proxy(0),
        "-H",
        "Expect: 100-continue",
        "--expect100-timeout",
        "20",
        "--data-binary",
        "abc",
        &url,
    ]);
    let a = answer(&out);
    assert_eq!(a.status, 200);
    assert_eq!(a.body, b"received 3 bytes\n");
    assert_eq!(up.requests()[0].body, b"abc");
    assert!(!up.requests()[0].headers.contains_key("expect"));
}

#[test]
fn keep_alive_requests_are_decided_each_on_its_own() {
    let up = Upstream::start();
    let (_dns, s) = pkgs_sluice(&up, "", "");
    // One curl, one client connection, three requests.
    let ok = format!("http://pkgs.example.com:{}/one", up.port());
    let denied = format!("http://other.example.com:{}/two", up.port());
    let ok2 = format!("http://pkgs.example.com:{}/three", up.port());
    let out = curl(&[
        "-x",
        &s.proxy(0),
        "-w",
        "%{http_code}\\n",
        "-o",
        "/dev/null",
        &ok,
        "-o",
        "/dev/null",
        &denied,
        "-o",
        "/dev/null",
        &ok2,
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200\n403\n200\n");
    let rows = s.access_log("t", 3);
    let summary: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap().to_string(),
                r["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("/one".into(), "allow".into()),
            ("/two".into(), "deny".into()),
            ("/three".into(), "allow".into())
        ]
    );
    let clients: Vec<&str> = rows.iter().map(|r| r["client"].as_str().unwrap()).collect();
    assert!(
        clients.iter().all(|c| *c == clients[0]),
        "one client connection: {clients:?}"
    );
    let paths: Vec<String> = up.requests().iter().map(|r| r.uri.clone()).collect();
    assert_eq!(
        paths,
        vec!["/one", "/three"],
        "the denied request never reached upstream"
    );
    assert_eq!(
        up.conns(),
        1,
        "the upstream connection was pooled and reused"
    );
}

#[test]
fn allowed_ip_literal_in_canonical_spelling() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("127.0.0.1:{}", up.port())])
        .start();
    let url = format!("http://127.0.0.1:{}/ip", up.port());
    let a = answer(&curl(&["-i", "-x", &s.proxy(0), &url]));
    assert_eq!(a.status, 200);
    assert_eq!(up.requests().len(), 1);
    // Another spelling of the same address is still an IP literal refusal.
    let out = curl(&[
        "-i",
        "-x",
        &s.proxy(0),
        "--request-target",
        &format!("http://2130706433:{}/ip", up.port()),
        &url,
    ]);
    assert_refused(&answer(&out), 403, "ip-literal");
    assert_eq!(up.requests().len(), 1);
    let rows = s.access_log("t", 2);
    assert_eq!(rows[0]["decision"], "allow");
    assert_eq!(rows[1]["rule"], "ip-literal");
}
