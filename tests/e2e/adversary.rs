//! Issue 11's findings, each as an attacker would try it against the real
//! binary: every variant is refused (or cut) and logged, and nothing
//! reaches the upstream that policy did not admit.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::util::*;

/// A real ClientHello naming pkgs.example.com.
const HELLO: &[u8] = include_bytes!("../../proxy/intercept/testdata_client_hello.bin");

/// sluice (no interception, `limits`) allowing pkgs.example.com on an
/// upstream that records every byte; the authority to CONNECT to.
fn recording_sluice(limits: &str) -> (RawUpstream, FakeDns, Sluice, String) {
    let up = RawUpstream::start(RawUpstream::record);
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{}", up.port)])
        .task_extra("intercept = \"none\"")
        .top(limits)
        .start();
    let authority = format!("pkgs.example.com:{}", up.port);
    (up, dns, s, authority)
}

/// Finding 1: a ClientHello sluice cannot read — an empty record before a
/// real one (OpenSSL skips it), a hello that stalls mid-record, one cut
/// off, one past 64 KiB, one naming another host — closes the tunnel with
/// `sni-mismatch`, intercepted or passthrough alike, and not one byte
/// reaches the upstream.
#[test]
fn unreadable_or_stalled_client_hellos_close_the_tunnel() {
    let up = RawUpstream::start(RawUpstream::record);
    let dns = FakeDns::start();
    let other_hello = {
        // The same hello with the SNI's first letter changed: another name.
        let mut h = HELLO.to_vec();
        let at = h
            .windows(16)
            .position(|w| w == b"pkgs.example.com")
            .unwrap();
        h[at] = b'q';
        h
    };
    let mut empty_first = vec![0x16, 0x03, 0x01, 0x00, 0x00];
    empty_first.extend_from_slice(HELLO);
    let mut huge = vec![0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0xff, 0xff, 0xff];
    huge.resize(70 * 1024, 0);
    for extra in ["", "passthrough = [\"pkgs.example.com\"]"] {
        let s = SluiceBuilder::new(&dns)
            .allow(&[format!("pkgs.example.com:{}", up.port)])
            .task_extra(extra)
            .top("[limits]\nheader_timeout_secs = 2")
            .start();
        let cases: Vec<(&str, Vec<u8>, bool)> = vec![
            ("empty record first", empty_first.clone(), false),
            ("stalls mid-record", HELLO[..40].to_vec(), false),
            ("cut off", HELLO[..40].to_vec(), true),
            ("larger than 64 KiB", huge.clone(), false),
            ("other SNI", other_hello.clone(), false),
        ];
        for (what, bytes, close_after) in cases {
            let mut c = tunnel(&s, &format!("pkgs.example.com:{}", up.port));
            let started = Instant::now();
            let _ = c.write_all(&bytes);
            if close_after {
                let _ = c.shutdown(std::net::Shutdown::Write);
            }
            let back = drain(&mut c);
            assert!(back.is_empty(), "{extra:?} {what}: nothing comes back");
            assert!(
                started.elapsed() < Duration::from_secs(8),
                "{extra:?} {what}: closed in time"
            );
            let row = row_where(&s, "t", "pkgs.example.com", |r| {
                r["kind"] == "connect" && r["rule"] == "sni-mismatch"
            });
            assert_eq!(row["decision"], "deny", "{extra:?} {what}");
        }
        let rows = s.access_log("t", 5);
        let refused = rows.iter().filter(|r| r["rule"] == "sni-mismatch").count();
        assert_eq!(refused, 5, "{extra:?}: one row per tunnel: {rows:#?}");
    }
    assert_eq!(
        up.bytes(),
        0,
        "no byte of any refused hello reached the upstream"
    );
}

/// Finding 10: requests the HTTP parser rejects get sluice's 400 with the
/// rule, the task, a sentence, and an access-log row with the raw target.
#[test]
fn malformed_requests_are_answered_and_logged() {
    let up = Upstream::start();
    let (_dns, s) = pkgs_sluice(&up, "", "");
    let cases: &[(&str, &[u8], &str)] = &[
        (
            "brackets around a name",
            b"GET http://[[pkgs.example.com]]/ HTTP/1.1\r\nHost: x\r\n\r\n",
            "http://[[pkgs.example.com]]/",
        ),
        (
            "non-ASCII in the host",
            b"GET http://pkgs.\xc3\xa9xample.com/ HTTP/1.1\r\n\r\n",
            "http://pkgs.\\xc3\\xa9xample.com/",
        ),
        (
            "CONNECT with a path",
            b"CONNECT pkgs.example.com:443/x HTTP/1.1\r\n\r\n",
            "pkgs.example.com:443/x",
        ),
        (
            "two ports",
            b"CONNECT pkgs.example.com:443:443 HTTP/1.1\r\n\r\n",
            "pkgs.example.com:443:443",
        ),
        (
            "space in the target",
            b"GET http://pkgs.example.com/a b c HTTP/1.1\r\n\r\n",
            "http://pkgs.example.com/a",
        ),
    ];
    for (what, req, target) in cases {
        let back = raw(&s.proxy_addr(), req);
        let a = parse_http(&back)
            .unwrap_or_else(|| panic!("{what}: {}", String::from_utf8_lossy(&back)));
        assert_refused(&a, 400, "bad-target");
        let body = String::from_utf8_lossy(&a.body);
        assert!(body.contains(target), "{what}: {body}");
        let row = row_where(&s, "t", target, |r| r["rule"] == "bad-target");
        assert_eq!(row["decision"], "deny", "{what}");
        assert_eq!(row["status"], 400, "{what}");
    }
    assert_eq!(up.conns(), 0, "nothing reached the upstream");
    // Everyone else is still served.
    let a = via(&s, &format!("http://pkgs.example.com:{}/", up.port()), &[]);
    assert_eq!(a.status, 200);
}

/// Finding 4: tunnels count toward `max_connections_per_task` for as long
/// as they are open, not just until their CONNECT is answered.
#[test]
fn connection_cap_counts_open_tunnels() {
    let (up, _dns, s, authority) = recording_sluice("[limits]\nmax_connections_per_task = 3\n");
    let mut held: Vec<TcpStream> = (0..3).map(|_| tunnel(&s, &authority)).collect();
    // Give every tunnel a byte so they are relaying, not peeking.
    for c in &mut held {
        c.write_all(b"\x00hello").unwrap();
    }
    for i in 0..5 {
        let a = parse_http(&raw(
            &s.proxy_addr(),
            format!("CONNECT {authority} HTTP/1.1\r\n\r\n").as_bytes(),
        ))
        .expect("an answer");
        assert_refused(&a, 503, "over-capacity");
        assert!(i < 5);
    }
    // Closing one tunnel frees one slot (polled: the close takes a moment).
    drop(held.pop());
    eventually(
        "a slot comes back when a tunnel closes",
        Duration::from_secs(5),
        || connect_status(&s, &authority) == 200,
    );
    // The upstream counts an accepted connection in its own thread: wait
    // for the fourth, then check no refused CONNECT got through.
    eventually(
        "the upstream saw the fourth tunnel",
        Duration::from_secs(5),
        || up.conns() >= 4,
    );
    assert_eq!(
        up.conns(),
        4,
        "three held tunnels and the one after the close"
    );
}

/// Finding 8: with a wide allow_private, sluice's own admin API is still
/// refused when named through an IPv4-mapped, IPv4-compatible or NAT64
/// IPv6 form of its address.
#[test]
fn own_addresses_in_ipv6_forms_are_refused() {
    let dns = FakeDns::start();
    let probe = TcpListener::bind("127.0.0.1:0").unwrap();
    let admin_port = probe.local_addr().unwrap().port();
    drop(probe);
    let names = ["mapped", "compat", "nat64", "zero", "zero6", "mapzero"];
    let allow: Vec<String> = names
        .iter()
        .map(|n| format!("{n}.example.com:{admin_port}"))
        .collect();
    let s = SluiceBuilder::new(&dns)
        .allow(&allow)
        .allow_private(&["0.0.0.0/0", "::/0"])
        .host("mapped.example.com", &["::ffff:127.0.0.1"])
        .host("compat.example.com", &["::127.0.0.1"])
        .host("nat64.example.com", &["64:ff9b::7f00:1"])
        // Round 3, finding 6: 0.0.0.0 and :: connect to the local machine.
        .host("zero.example.com", &["0.0.0.0"])
        .host("zero6.example.com", &["::"])
        .host("mapzero.example.com", &["::ffff:0.0.0.0"])
        .top(&format!("[admin]\nlisten = \"tcp:127.0.0.1:{admin_port}\""))
        .start();
    assert_eq!(s.admin(), format!("127.0.0.1:{admin_port}"));
    for n in names {
        let a = via(
            &s,
            &format!("http://{n}.example.com:{admin_port}/tasks"),
            &[],
        );
        assert_refused(&a, 403, "private-address");
        assert!(
            String::from_utf8_lossy(&a.body).contains("sluice itself"),
            "{n}"
        );
    }
}

/// Round 3, finding 7: a web page reaches a TCP admin listener by a
/// simple cross-origin POST, or by DNS rebinding under its own name. Both
/// are refused (403) and change nothing; curl's own requests still work.
#[test]
fn web_pages_cannot_use_the_tcp_admin_api() {
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&["pkgs.example.com"])
        .top(&format!(
            "[admin]\nlisten = \"tcp:127.0.0.1:{}\"",
            free_port()
        ))
        .start();
    let admin = s.admin();
    let attempts = [
        "POST /reload HTTP/1.1\r\nHost: evil.attacker.example\r\nContent-Type: text/plain\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
        format!("POST /reload HTTP/1.1\r\nHost: {admin}\r\nOrigin: http://evil.attacker.example\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        "POST /reload HTTP/1.1\r\nHost: localhost.attacker.example:80\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
        "GET /tasks HTTP/1.1\r\nHost: evil.attacker.example\r\nConnection: close\r\n\r\n".to_string(),
        format!("GET /events HTTP/1.1\r\nHost: {admin}\r\nOrigin: null\r\nConnection: close\r\n\r\n"),
    ];
    for req in &attempts {
        let a = parse_http(&raw(&admin, req.as_bytes())).expect("an answer");
        assert_eq!(a.status, 403, "{req}");
    }
    assert_eq!(s.reloads_by("admin API"), 0, "no refused request reloaded");
    // A tool's own request (curl: Host is the address) still works.
    let (code, _) = s.admin_call("POST", "/reload");
    assert_eq!(code, 200);
    s.wait_reloads_by("admin API", 1);
}

/// Request smuggling between sluice and the upstream: a request framed
/// both by Content-Length and chunked Transfer-Encoding, whose chunked body
/// hides a second request. hyper frames the body by Transfer-Encoding and
/// sluice re-frames it upstream: the upstream sees exactly one request.
#[test]
fn content_length_and_chunked_together_smuggle_nothing() {
    let up = Upstream::start();
    let (_dns, s) = pkgs_sluice(&up, "", "");
    let host = format!("pkgs.example.com:{}", up.port());
    let smuggled = format!("GET /smuggled HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let body = format!("0\r\n\r\n{smuggled}");
    let req = format!(
        "POST http://{host}/first HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{body}",
        body.len()
    );
    let back = raw(&s.proxy_addr(), req.as_bytes());
    let seen: Vec<String> = up.requests().iter().map(|r| r.uri.clone()).collect();
    assert!(
        !seen.iter().any(|u| u.contains("smuggled")),
        "smuggled: {seen:?}"
    );
    assert!(
        seen.len() <= 1,
        "{seen:?}; client got {}",
        String::from_utf8_lossy(&back)
    );
}

/// Review findings: plain HTTP that sluice did not read as HTTP (a blank
/// line first, a lower-case or unusual method, a start that stalls while it
/// could still be a request line) or TLS that did not start with a
/// handshake record was relayed opaquely — Host unchecked (plain-text
/// domain fronting) and the response unscanned. Each is now decided or
/// refused, and nothing reaches the upstream under another Host.
#[test]
fn http_or_tls_in_disguise_inside_connect_is_decided() {
    let (up, _dns, s, authority) = recording_sluice("[limits]\nheader_timeout_secs = 2\n");
    let fronted = |prefix: &str| format!("{prefix} / HTTP/1.1\r\nHost: evil.example.net\r\n\r\n");
    for (what, bytes) in [
        ("blank line first", format!("\r\n{}", fronted("GET"))),
        ("lower-case method", fronted("get")),
        ("token method", fronted("M-SEARCH")),
    ] {
        let mut c = tunnel(&s, &authority);
        c.write_all(bytes.as_bytes()).unwrap();
        let a = read_answer(&mut c).unwrap_or_else(|| panic!("{what}: no answer"));
        assert_refused(&a, 403, "host-mismatch");
    }
    // A method, then silence past the head timeout: refused, not relayed.
    let mut c = tunnel(&s, &authority);
    c.write_all(b"GET").unwrap();
    assert!(drain(&mut c).is_empty());
    let row = row_where(&s, "t", "pkgs.example.com", |r| {
        r["kind"] == "connect" && r["rule"] == "bad-target"
    });
    assert_eq!(row["decision"], "deny");
    // TLS that does not start with a handshake record: an alert, then a
    // hello naming another host.
    let mut c = tunnel(&s, &authority);
    let mut bytes = vec![0x15, 0x03, 0x03, 0x00, 0x02, 0x01, 0x00];
    bytes.extend_from_slice(HELLO);
    let _ = c.write_all(&bytes);
    assert!(drain(&mut c).is_empty());
    let row = row_where(&s, "t", "pkgs.example.com", |r| r["rule"] == "sni-mismatch");
    assert_eq!(row["decision"], "deny");
    assert_eq!(up.bytes(), 0, "nothing reached the upstream");
}

/// Review finding: a tunnel that stays silent while a reload removes its
/// host registered only after its first bytes, so the reload did not see
/// it and the relay then ran under the old decision.
#[test]
fn a_tunnel_waiting_for_its_first_bytes_meets_the_reload() {
    let up = RawUpstream::start(RawUpstream::record);
    let dns = FakeDns::start();
    let b = SluiceBuilder::new(&dns).task_extra("intercept = \"none\"");
    let authority = format!("pkgs.example.com:{}", up.port);
    let s = b.clone().allow(&[&authority]).start();
    let mut c = tunnel(&s, &authority);
    // Reload without the host (polled until a new CONNECT is refused).
    s.write_config(&s.pin(&b.allow(&["other.example.com:1"]).config()));
    s.signal("HUP");
    eventually("the reload takes effect", Duration::from_secs(5), || {
        connect_status(&s, &authority) == 403
    });
    let _ = c.write_all(b"\x00opaque bytes after the reload");
    assert!(drain(&mut c).is_empty());
    let row = row_where(&s, "t", "pkgs.example.com", |r| {
        r["kind"] == "connect"
            && r["rule"] == "not-allowed"
            && r["status"] == 403
            && r["bytes_up"].as_u64() > Some(0)
    });
    assert_eq!(row["decision"], "deny");
    assert_eq!(
        up.bytes(),
        0,
        "no byte went upstream under the old decision"
    );
}
