//! HTTP answers as the client saw them: parsing `curl -i` output or raw
//! socket bytes into status, headers and body, and the assertion every
//! refusal test makes (status, `Sluice-Rule`, `Sluice-Task`, the one-line
//! sentence ending in the rule).

use std::collections::HashMap;
use std::process::Output;

/// Status, headers (lower-case names) and body of an answer.
pub struct Answer {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as text (lossy), for messages and `contains` checks.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Parses the last response of `curl -i` output (after any 100/200
/// CONNECT preamble); panics with curl's stderr if there is none.
#[track_caller]
pub fn answer(out: &Output) -> Answer {
    match parse_http(&out.stdout) {
        Some(a) => a,
        None => panic!(
            "no HTTP answer; curl stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The last response in `raw` (interim 100s and a CONNECT's 200 skipped),
/// or `None` if no complete head is there.
pub fn parse_http(raw: &[u8]) -> Option<Answer> {
    let mut rest = raw;
    loop {
        let end = find(rest, b"\r\n\r\n")?;
        let head = std::str::from_utf8(&rest[..end]).ok()?;
        let mut lines = head.split("\r\n");
        let status: u16 = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
        let headers: HashMap<String, String> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let body = &rest[end + 4..];
        // `curl -i` shows interim answers (100, the CONNECT 200) first.
        let preamble = (status == 100 || status == 200) && body.starts_with(b"HTTP/");
        if preamble {
            rest = body;
            continue;
        }
        return Some(Answer {
            status,
            headers,
            body: body.to_vec(),
        });
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Asserts a refusal of task `t`: status, rule header, task header, sentence.
#[track_caller]
pub fn assert_refused(a: &Answer, status: u16, rule: &str) {
    assert_refused_in("", a, status, rule)
}

/// [`assert_refused`], with `what` (the case) in every failure message.
#[track_caller]
pub fn assert_refused_in(what: &str, a: &Answer, status: u16, rule: &str) {
    let body = a.text();
    assert_eq!(a.status, status, "{what}: status; body: {body}");
    assert_eq!(
        a.headers.get("sluice-rule").map(String::as_str),
        Some(rule),
        "{what}: rule; body: {body}"
    );
    assert_eq!(
        a.headers.get("sluice-task").map(String::as_str),
        Some("t"),
        "{what}: task"
    );
    // A failure refused nothing: it says it could not reach.
    let start = match rule {
        "dns-failed" | "upstream-failed" | "upstream-timeout" => "sluice: could not reach ",
        _ => "sluice: refused ",
    };
    assert!(body.starts_with(start), "{what}: sentence: {body}");
    assert!(
        body.trim_end().ends_with(&format!("[{rule}]")),
        "{what}: sentence: {body}"
    );
}

/// Reads one answer from a stream: its head, then as much body as its
/// Content-Length says (a single read may return only part of it). Stops
/// at EOF, an error (a read timeout) or 1 MiB.
pub fn read_answer(s: &mut impl std::io::Read) -> Option<Answer> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(a) = parse_http(&out) {
            let want = a.headers.get("content-length").and_then(|l| l.parse().ok());
            if want.is_some_and(|len: usize| a.body.len() >= len) {
                return Some(a);
            }
        }
        if out.len() > 1 << 20 {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    parse_http(&out)
}

/// Reads one Content-Length framed response from a kept-alive
/// connection: its status, head and body (nothing past it is read).
pub fn read_one(c: &mut impl std::io::Read) -> (u16, String, Vec<u8>) {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = c.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "closed before a whole head: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&got[..head_end]).to_string();
    let len: usize = head
        .to_ascii_lowercase()
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    while got.len() < head_end + len {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed inside a body");
        got.extend_from_slice(&buf[..n]);
    }
    let status = head[9..12].parse().unwrap();
    (status, head, got[head_end..head_end + len].to_vec())
}
