//! The taint scanner with every Content-Encoding and arbitrary chunking:
//! never panics, stays within its scan limit, and (for identity bodies)
//! finds the same hosts however the body is split. The host scanner on its
//! own, in each charset: split in two, it finds exactly what it finds
//! whole; fed byte by byte (never the fast path), the same; with `peek` at
//! the split, only names that are valid by themselves (or, in URL
//! context, after `//`) come in addition.
//! The 64-byte fast path reports exactly what the byte path reports, in
//! the same order, whole and split.
//!
//! Input: byte 0 picks the Content-Encoding (`% 6`) and the charset
//! (`/ 6 % 3`: auto, UTF-16LE, UTF-16BE), byte 1 the split, the rest is
//! the body.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice::inspect::BodyScanner;
use sluice::inspect::{scan_all, Charset, Named, Scanner};

/// Names found feeding `chunks` (with `peek` after each if asked).
fn scan(charset: Charset, chunks: &[&[u8]], peek: bool) -> Vec<String> {
    let found = reports(Scanner::with_charset(charset), chunks, peek);
    let mut found: Vec<String> = found.into_iter().map(|n| n.host).collect();
    found.sort();
    found.dedup();
    found
}

/// Every report, in order (the path after github.com read too).
fn reports(s: Scanner, chunks: &[&[u8]], peek: bool) -> Vec<Named> {
    let owners: std::sync::Arc<[Box<str>]> = vec!["github.com".into()].into();
    let mut s = s.with_owner_hosts(Some(owners));
    let mut found = Vec::new();
    for c in chunks {
        s.feed(c, &mut |h| found.push(h));
        if peek {
            s.peek(&mut |h| found.push(h));
        }
    }
    s.finish(&mut |h| found.push(h));
    found
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let encoding = match data[0] % 6 {
        0 => None,
        1 => Some("gzip"),
        2 => Some("deflate"),
        3 => Some("br"),
        4 => Some("zstd"),
        _ => Some("compress"),
    };
    let split = data[1] as usize;
    let body = &data[2..];
    let mut s = BodyScanner::new(encoding, 1 << 20);
    let mut found = Vec::new();
    let cut = split.min(body.len());
    found.extend(s.feed(&body[..cut]).names.into_iter().map(|n| n.host));
    found.extend(s.feed(&body[cut..]).names.into_iter().map(|n| n.host));
    found.extend(s.finish().0.into_iter().map(|n| n.host));
    assert!(s.scanned() <= 1 << 20);
    // Binary content (an ELF, an image) yields URL-context names only.
    // An archive is read as one (entries, names, comments), not as its
    // raw bytes: a name made of header fields and a name's first bytes is
    // text no client shows (archives have their own unit tests and the
    // body_decode target).
    let archive = body.starts_with(b"PK\x03\x04")
        || body.starts_with(&[0x1f, 0x8b])
        || body.get(257..262) == Some(b"ustar");
    let binary = sluice::inspect::starts_binary(body) || archive;
    if encoding.is_none() && !binary {
        for h in scan_all(body) {
            assert!(found.contains(&h), "split at {cut} lost {h}");
        }
    }

    let charset = [Charset::Auto, Charset::Utf16Le, Charset::Utf16Be][usize::from(data[0] / 6 % 3)];
    let whole = scan(charset, &[body], false);
    let halves = [&body[..cut], &body[cut..]];
    assert_eq!(scan(charset, &halves, false), whole, "split at {cut}");
    for (chunks, peek) in [(&[body][..], false), (&halves[..], true)] {
        assert_eq!(
            reports(Scanner::with_charset(charset), chunks, peek),
            reports(Scanner::with_charset(charset).byte_path_only(), chunks, peek),
            "fast path and byte path differ (split at {cut}, peek {peek})"
        );
    }
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(scan(charset, &bytes, false), whole, "byte by byte");
    let peeked = scan(charset, &halves, true);
    for h in &whole {
        assert!(peeked.contains(h), "peek at {cut} lost {h}");
    }
    for h in peeked.iter().filter(|h| !whole.contains(h)) {
        // A bare name by itself, or a name in URL context (SPEC §8: any
        // valid name after `//` is tainted before its last byte leaves).
        let in_url = format!("https://{h}");
        let valid = scan_all(h.as_bytes()) == vec![h.clone()] || scan_all(in_url.as_bytes()) == vec![h.clone()];
        assert!(valid, "peek at {cut} added {h}");
    }
});
