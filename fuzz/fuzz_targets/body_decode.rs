//! The body pipeline with arbitrary Content-Encoding stacks (one header or
//! several lines), Content-Type charsets and splits: never panics, never
//! scans past its limit, and for an identity stack whose body has no
//! archive magic finds exactly what `scan_all` finds.
//!
//! Input: byte 0 holds the number of codings (bits 0-1, up to 3), one
//! header or one line each (bit 2) and the Content-Type (bits 3-4);
//! bytes 1-3 pick the codings; bytes 4-5 are the two chunk sizes the body
//! is fed in, alternately; the body follows.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice::inspect::BodyScanner;
use sluice::inspect::scan_all;

const CODINGS: [&str; 7] = [
    "gzip",
    "x-gzip",
    "deflate",
    "br",
    "zstd",
    "identity",
    "x-unknown",
];
const TYPES: [Option<&str>; 4] = [
    None,
    Some("application/json"),
    Some("text/html; charset=utf-16le"),
    Some("text/plain; charset=\"UTF-16BE\""),
];
const LIMIT: u64 = 1 << 20;

/// Would the body be opened as an archive rather than scanned as text?
fn archive_magic(body: &[u8]) -> bool {
    body.starts_with(&[0x1f, 0x8b])
        || body.starts_with(b"PK\x03\x04")
        || body.get(257..262) == Some(b"ustar")
        || sluice::inspect::starts_binary(body)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 6 {
        return;
    }
    let count = usize::from(data[0] & 3);
    let one_header = data[0] & 4 == 0;
    let content_type = TYPES[usize::from(data[0] >> 3 & 3)];
    let codings: Vec<&str> = data[1..1 + count]
        .iter()
        .map(|&b| CODINGS[usize::from(b) % CODINGS.len()])
        .collect();
    let joined = codings.join(", ");
    let values: Vec<&[u8]> = if one_header {
        vec![joined.as_bytes()]
    } else {
        codings.iter().map(|c| c.as_bytes()).collect()
    };
    let sizes = [usize::from(data[4]) + 1, usize::from(data[5]) + 1];
    let body = &data[6..];

    let mut s = BodyScanner::for_response(&values, content_type.map(str::as_bytes), LIMIT);
    let mut found = Vec::new();
    let (mut at, mut turn) = (0, 0);
    while at < body.len() {
        let end = (at + sizes[turn % 2]).min(body.len());
        found.extend(s.feed(&body[at..end]).names.into_iter().map(|n| n.host));
        assert!(s.scanned() <= LIMIT);
        at = end;
        turn += 1;
    }
    let (rest, _skipped) = s.finish();
    found.extend(rest.into_iter().map(|n| n.host));
    assert!(s.scanned() <= LIMIT);

    let identity = codings.iter().all(|c| *c == "identity");
    if identity && content_type.is_none_or(|t| !t.to_ascii_lowercase().contains("utf-16")) && !archive_magic(body) {
        found.sort();
        found.dedup();
        let whole = scan_all(body);
        // However it is split, nothing the whole body names is lost...
        for h in &whole {
            assert!(found.contains(h), "split {sizes:?} lost {h}");
        }
        // ...and what a split adds is the name in progress at a chunk end,
        // reported only when it is itself a name (SPEC §9).
        for h in found.iter().filter(|h| !whole.contains(h)) {
            let known = psl::suffix(h.as_bytes()).is_some_and(|s| s.is_known());
            assert!(h.contains('.') && known, "split {sizes:?} added {h}");
        }
    }
});
