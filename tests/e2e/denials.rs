//! Every refusal rule of the core: status, Sluice-Rule, a sentence, an
//! access-log row, and nothing at the upstream.

use crate::util::*;

fn setup() -> (FakeDns, Upstream, Sluice) {
    let dns = FakeDns::start();
    let up = Upstream::start();
    let allow = vec![
        format!("pkgs.example.com:{}", up.port()),
        format!("metadata.example.com:{}", up.port()),
        format!("mixed.example.com:{}", up.port()),
        format!("nxdomain.example.com:{}", up.port()),
    ];
    let s = SluiceBuilder::new(&dns).allow(&allow).start();
    (dns, up, s)
}

#[test]
fn not_allowed_hosts_are_refused() {
    let (_dns, up, s) = setup();
    let p = up.port();
    let cases = [
        ("other host", format!("http://other.example.com:{p}/")),
        (
            "suffix attack",
            format!("http://pkgs.example.com.evil.example.com:{p}/"),
        ),
        ("prefix attack", format!("http://xpkgs.example.com:{p}/")),
        ("parent domain", format!("http://example.com:{p}/")),
        ("subdomain", format!("http://a.pkgs.example.com:{p}/")),
        ("other port", "http://pkgs.example.com:1/".to_string()),
    ];
    for (what, url) in &cases {
        let a = via(&s, url, &[]);
        assert_refused(&a, 403, "not-allowed");
        let body = String::from_utf8_lossy(&a.body);
        assert!(
            body.contains("not on the task's allow-list"),
            "case {what}: {body}"
        );
    }
    let rows = s.access_log("t", cases.len());
    assert_eq!(rows.len(), cases.len());
    assert!(rows
        .iter()
        .all(|r| r["decision"] == "deny" && r["rule"] == "not-allowed" && r["status"] == 403));
    assert_eq!(up.conns(), 0, "nothing reached the upstream");
}

#[test]
fn ip_literals_in_every_spelling_are_refused() {
    let (_dns, up, s) = setup();
    let p = up.port();
    let spellings = [
        "127.0.0.1",
        "2130706433",
        "0177.0.0.1",
        "0x7f000001",
        "0x7f.0.0.1",
        "127.1",
        "127.0.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[64:ff9b::7f00:1]",
        "169.254.169.254",
        "[0:0:0:0:0:0:0:1]",
    ];
    let front = format!("http://pkgs.example.com:{p}/");
    for sp in spellings {
        // --request-target sends the spelling untouched (curl would
        // normalise it in a URL).
        let target = format!("http://{sp}:{p}/");
        let a = via(&s, &front, &["--request-target", &target]);
        assert_refused(&a, 403, "ip-literal");
        // And as a CONNECT authority.
        let ans = raw(
            &s.proxy_addr(),
            format!("CONNECT {sp}:{p} HTTP/1.1\r\n\r\n").as_bytes(),
        );
        assert_refused(&parse_http(&ans).unwrap(), 403, "ip-literal");
    }
    let rows = s.access_log("t", spellings.len() * 2);
    assert_eq!(rows.len(), spellings.len() * 2);
    assert!(rows.iter().all(|r| r["rule"] == "ip-literal"));
    assert_eq!(up.conns(), 0, "nothing reached the upstream");
}

#[test]
fn private_addresses_are_refused() {
    let dns = FakeDns::start();
    let up = Upstream::start();
    // No allow_private here: the pinned loopback answer is private.
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{}", up.port())])
        .allow_private(&[])
        .start();
    let a = via(&s, &format!("http://pkgs.example.com:{}/", up.port()), &[]);
    assert_refused(&a, 403, "private-address");
    // The sentence says what to add, and where.
    let said = String::from_utf8_lossy(&a.body);
    assert!(said.contains("127.0.0.1, a loopback address"), "{said}");
    assert!(
        said.contains("add \"127.0.0.1\" to allow_private in the task's [[task]] section")
            && said.contains("sluice exec: --allow-private 127.0.0.1"),
        "{said}"
    );
    let ans = connect_refusal(
        &s.proxy_addr(),
        format!("CONNECT pkgs.example.com:{} HTTP/1.1\r\n\r\n", up.port()).as_bytes(),
    );
    assert_refused(&ans, 403, "private-address");
    assert_eq!(up.conns(), 0);
    let rows = s.access_log("t", 2);
    assert!(rows.iter().all(|r| r["rule"] == "private-address"));
}

#[test]
fn metadata_address_is_refused_and_mixed_answers_dial_only_checked_ones() {
    let (_dns, up, s) = setup();
    let a = via(
        &s,
        &format!(
            "http://metadata.example.com:{}/latest/meta-data/",
            up.port()
        ),
        &[],
    );
    assert_refused(&a, 403, "private-address");
    assert!(String::from_utf8_lossy(&a.body).contains("cloud metadata"));
    assert_eq!(up.conns(), 0);
    // mixed.example.com answers 10.1.2.3 (not in allow_private) and
    // 127.0.0.1 (in it): only the checked one is dialled.
    let a = via(&s, &format!("http://mixed.example.com:{}/", up.port()), &[]);
    assert_eq!(a.status, 200);
    assert_eq!(up.conns(), 1);
}

#[test]
fn sluice_itself_is_refused() {
    let dns = FakeDns::start();
    let s0 = SluiceBuilder::new(&dns)
        .allow(&["pkgs.example.com:1"])
        .start();
    // Allow the proxy's own port: still refused, as sluice's own address.
    let port = s0.proxy_port();
    drop(s0);
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{port}")])
        .listen(&[format!("tcp:127.0.0.1:{port}")])
        .start();
    let a = via(&s, &format!("http://pkgs.example.com:{port}/"), &[]);
    assert_refused(&a, 403, "private-address");
    assert!(String::from_utf8_lossy(&a.body).contains("sluice itself"));
}

#[test]
fn host_mismatch_is_refused() {
    let (_dns, up, s) = setup();
    let p = up.port();
    let url = format!("http://pkgs.example.com:{p}/");
    for host in [
        format!("other.example.com:{p}"),
        "pkgs.example.com:1".to_string(),
        "evil.example".to_string(),
    ] {
        let a = via(&s, &url, &["-H", &format!("Host: {host}")]);
        assert_refused(&a, 403, "host-mismatch");
    }
    // Same host in another case, with a trailing dot: not a mismatch.
    let a = via(&s, &url, &["-H", &format!("Host: PKGS.example.com.:{p}")]);
    assert_eq!(a.status, 200);
    assert_eq!(up.requests().len(), 1);
    // CONNECT with a different Host header.
    let ans = connect_refusal(
        &s.proxy_addr(),
        format!("CONNECT pkgs.example.com:{p} HTTP/1.1\r\nHost: other.example.com:{p}\r\n\r\n")
            .as_bytes(),
    );
    assert_refused(&ans, 403, "host-mismatch");
    assert_eq!(up.conns(), 1, "only the matching request reached upstream");
    let rows = s.access_log("t", 5);
    assert_eq!(
        rows.iter().filter(|r| r["rule"] == "host-mismatch").count(),
        4
    );
}

#[test]
fn malformed_targets_are_bad_target() {
    let (_dns, up, s) = setup();
    let p = up.port();
    let cases: Vec<(&str, String)> = vec![
        ("origin-form", "GET /index.html HTTP/1.1\r\nHost: pkgs.example.com\r\n\r\n".into()),
        ("userinfo", format!("GET http://user:pw@pkgs.example.com:{p}/ HTTP/1.1\r\n\r\n")),
        ("https absolute-form", format!("GET https://pkgs.example.com:{p}/ HTTP/1.1\r\n\r\n")),
        ("two host headers", format!("GET http://pkgs.example.com:{p}/ HTTP/1.1\r\nHost: pkgs.example.com:{p}\r\nHost: other.example.com\r\n\r\n")),
        ("percent in host", format!("GET http://pkgs%2eexample.com:{p}/ HTTP/1.1\r\n\r\n")),
        ("bad port", "GET http://pkgs.example.com:99999/ HTTP/1.1\r\n\r\n".into()),
    ];
    for (what, req) in &cases {
        let ans = raw(&s.proxy_addr(), req.as_bytes());
        let a = parse_http(&ans).unwrap_or_else(|| panic!("case {what}: no answer"));
        assert_eq!(
            a.status,
            400,
            "case {what}: {}",
            String::from_utf8_lossy(&a.body)
        );
        if a.headers.contains_key("sluice-rule") {
            assert_refused(&a, 400, "bad-target");
            assert_eq!(
                a.headers.get("connection").map(String::as_str),
                Some("close"),
                "case {what}"
            );
        }
    }
    // A request too malformed for HTTP to parse: 400, connection closed.
    let ans = raw(&s.proxy_addr(), b"GARBAGE\x01\x02 / HTTP/9\r\n\r\n");
    assert!(
        ans.starts_with(b"HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&ans)
    );
    assert_eq!(up.conns(), 0);
    // sluice keeps serving.
    let a = via(&s, &format!("http://pkgs.example.com:{p}/"), &[]);
    assert_eq!(a.status, 200);
}

#[test]
fn dns_failure_is_502() {
    let (dns, up, s) = setup();
    let a = via(
        &s,
        &format!("http://nxdomain.example.com:{}/", up.port()),
        &[],
    );
    assert_refused(&a, 502, "dns-failed");
    assert!(String::from_utf8_lossy(&a.body).contains("does not resolve"));
    assert!(dns.queries() >= 1, "the configured resolver was asked");
    assert_eq!(up.conns(), 0);
    let row = last_row_for(&s, "t", "nxdomain.example.com");
    assert_eq!(row["rule"], "dns-failed");
    assert_eq!(
        row["decision"], "error",
        "a failure, not a refusal (SPEC §6)"
    );
}

#[test]
fn dead_upstream_is_502_and_others_still_served() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let dns = FakeDns::start();
    let up = Upstream::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[
            format!("pkgs.example.com:{port}"),
            format!("other.example.com:{}", up.port()),
        ])
        .start();
    let a = via(&s, &format!("http://pkgs.example.com:{port}/"), &[]);
    assert_refused(&a, 502, "upstream-failed");
    let a = via(&s, &format!("http://other.example.com:{}/", up.port()), &[]);
    assert_eq!(a.status, 200);
}
