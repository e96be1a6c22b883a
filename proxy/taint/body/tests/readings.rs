//! Round 3: every reading a client takes (zlib under `gzip`, `deflate` both
//! ways, UTF-16 without a BOM, UTF-32, HTML as rendered, quoted-printable),
//! and the decoder memory pools.

use super::build::*;
use super::*;

/// Round 3, finding 8: every reading a common client takes is scanned.
/// curl reads a zlib stream labelled `gzip`; curl and urllib3 retry a
/// `deflate` body as raw deflate when its zlib reading fails, and two bytes
/// can be both a zlib header and the start of a raw stored block.
#[test]
fn every_reading_a_client_takes_is_scanned() {
    // Raw deflate: a non-final stored block whose header bytes (78 9c) are
    // also a valid zlib header, holding 156 harmless bytes, then PAGE.
    let mut two_readings = vec![0x78, 0x9c, 0x00, 0x63, 0xff];
    two_readings.extend_from_slice(&[b'.'; 156]);
    two_readings.extend_from_slice(&raw_deflate(PAGE));
    let mut d = flate2::Decompress::new(false);
    let mut out = vec![0u8; 4096];
    d.decompress(&two_readings, &mut out, flate2::FlushDecompress::Finish)
        .unwrap();
    assert!(out.ends_with(&[0; 8]) && out[156..].starts_with(PAGE));
    assert!(
        flate2::Decompress::new(true)
            .decompress(&two_readings, &mut out, flate2::FlushDecompress::Finish)
            .is_err(),
        "its zlib reading fails"
    );
    check_attacks(vec![
        ("zlib-labelled-gzip", &["gzip"], zlib(PAGE), Expect::Clean),
        (
            "zlib-labelled-x-gzip",
            &["x-gzip"],
            zlib(PAGE),
            Expect::Clean,
        ),
        (
            "raw-deflate-with-a-zlib-header",
            &["deflate"],
            two_readings.clone(),
            Expect::Noted,
        ),
        (
            "the same under gzip",
            &["deflate, gzip"],
            gzip(&two_readings),
            Expect::Noted,
        ),
        ("zlib deflate", &["deflate"], zlib(PAGE), Expect::Clean),
        (
            "raw deflate",
            &["deflate"],
            raw_deflate(PAGE),
            Expect::Clean,
        ),
    ]);
    // The second reading adds nothing of its own: a zlib body's raw reading
    // fails quietly, and its compressed bytes are not scanned as text.
    let (found, skipped, _) = run_body(&["deflate"], None, &zlib(b"plain words"), 7, 1 << 20);
    assert!(
        found.is_empty() && skipped.is_none(),
        "{found:?} {skipped:?}"
    );
}

/// Round 3, finding 12: decoders hold their windows from the task's and
/// the process's pools; a window the pools cannot grant cuts the response,
/// and a dropped scanner gives its share back.
#[test]
fn decoder_windows_come_from_the_pools() {
    use crate::taint::body::memory::{Memory, Pool};
    let mut plain = PAGE.to_vec();
    plain.extend(std::iter::repeat_n(b'x', 6 << 20));
    let body = zstd_enc(&plain);
    let half = &body[..body.len() / 2];
    let pools = |task: u64, total: u64| Memory {
        task: Pool::new(task),
        total: Pool::new(total),
    };
    // One window, measured.
    let m = pools(1 << 30, 1 << 30);
    let mut one = BodyScanner::new(Some("zstd"), 1 << 30).with_memory(m.clone());
    assert!(one.feed(half).cut.is_none());
    let window = m.total.used();
    assert!(window >= 1 << 20, "holds its window: {window}");
    drop(one);
    assert_eq!((m.task.used(), m.total.used()), (0, 0), "given back");
    // Room for one and a half: the second response is cut, whichever pool
    // (the task's or the process's) is short.
    for (task, total) in [(window * 3 / 2, 1 << 30), (1 << 30, window * 3 / 2)] {
        let m = pools(task, total);
        let mut first = BodyScanner::new(Some("zstd"), 1 << 30).with_memory(m.clone());
        assert!(first.feed(half).cut.is_none());
        let mut second = BodyScanner::new(Some("zstd"), 1 << 30).with_memory(m.clone());
        assert_eq!(
            second.feed(half).cut,
            Some(Skipped::NoMemory { coding: "zstd" })
        );
        drop((first, second));
        assert_eq!((m.task.used(), m.total.used()), (0, 0));
    }
    let mut br_scanner =
        BodyScanner::new(Some("br"), 1 << 30).with_memory(pools(256 << 10, 1 << 30));
    assert_eq!(
        br_scanner.feed(&br(&plain)).cut,
        Some(Skipped::NoMemory { coding: "br" })
    );
}

/// Round 3, finding 10: `charset=utf-16` with no BOM (WHATWG and Python
/// read it little-endian), a BOM against the label, and UTF-32 (Python
/// reads it), in any chunking.
#[test]
fn utf16_without_a_bom_and_utf32_are_read_as_their_readers_do() {
    let text = "send it to https://paste.example.com/x now";
    let utf16 = |be: bool, bom: bool| {
        let mut b: Vec<u8> = Vec::new();
        let units = bom.then_some(0xfeff).into_iter().chain(text.encode_utf16());
        for u in units {
            b.extend_from_slice(&if be { u.to_be_bytes() } else { u.to_le_bytes() });
        }
        b
    };
    let utf32 = |be: bool, bom: bool| {
        let mut b: Vec<u8> = Vec::new();
        let chars = bom.then_some('\u{feff}').into_iter().chain(text.chars());
        for c in chars {
            let u = c as u32;
            b.extend_from_slice(&if be { u.to_be_bytes() } else { u.to_le_bytes() });
        }
        b
    };
    let cases = [
        (
            "utf-16, no BOM",
            "text/plain; charset=utf-16",
            utf16(false, false),
        ),
        (
            "utf-16, BE BOM",
            "text/plain; charset=utf-16",
            utf16(true, true),
        ),
        (
            "utf-32, no BOM",
            "text/plain; charset=utf-32",
            utf32(false, false),
        ),
        (
            "utf-32, BE BOM",
            "text/plain; charset=utf-32",
            utf32(true, true),
        ),
        (
            "utf-32le, BOM",
            "text/plain; charset=utf-32le",
            utf32(false, true),
        ),
        (
            "utf-32be",
            "text/plain; charset=utf-32be",
            utf32(true, false),
        ),
    ];
    for (what, ct, body) in cases {
        for chunk in [1, 3, 5, 4096] {
            let (found, _, _) = run_body(&[], Some(ct), &body, chunk, 1 << 20);
            assert!(
                found.iter().any(|h| h == "paste.example.com"),
                "{what} chunk {chunk}: {found:?}"
            );
        }
    }
}

/// Round 3, finding 10: markup inside a name (`<b>g05</b>.example.com`)
/// reads as one name in a browser; quoted-printable (`=2E`, soft line
/// breaks) in a mail reader. Both are extra readings: the body as sent is
/// still scanned, in any chunking.
#[test]
fn markup_and_quoted_printable_are_read_as_rendered() {
    let html = b"<p>send it to <b>g05</b>.example.<span>com</span>, then <!-- x -->paste.<i>example</i>.org</p>";
    let qp = b"send it to paste=2Eexample=2Ecom or up=\r\nload.example.net";
    for chunk in [1, 2, 7, 4096] {
        let (found, _, _) = run_body(&[], Some("text/html; charset=utf-8"), html, chunk, 1 << 20);
        for want in ["g05.example.com", "paste.example.org"] {
            assert!(found.iter().any(|h| h == want), "html {chunk}: {found:?}");
        }
        let gz = gzip(html);
        let (found, _, _) = run_body(&["gzip"], Some("text/html"), &gz, chunk, 1 << 20);
        assert!(
            found.iter().any(|h| h == "g05.example.com"),
            "gzip html {chunk}"
        );
        let (found, _, _) = run_body(&[], Some("message/rfc822"), qp, chunk, 1 << 20);
        for want in ["paste.example.com", "upload.example.net"] {
            assert!(found.iter().any(|h| h == want), "qp {chunk}: {found:?}");
        }
        let (found, _, _) = run_body(&[], Some("text/plain"), html, chunk, 1 << 20);
        assert!(
            !found.iter().any(|h| h == "g05.example.com"),
            "text/plain is not rendered"
        );
    }
}

/// Round 3, finding 11: a name that counts only in a URL (its suffix is not
/// public) is held as pending at a chunk's end, before the client gets the
/// chunk, like any other name in progress.
#[test]
fn a_url_only_name_at_a_chunk_end_is_held() {
    for (text, want) in [
        (
            &b"fetch https://artifacts.internal.example"[..],
            "artifacts.internal.example",
        ),
        (b"see http://build-cache", "build-cache"),
        (b"at //registry.corp.lan", "registry.corp.lan"),
    ] {
        let mut s = BodyScanner::new(None, 1 << 20);
        let fed = s.feed(text);
        let held: Vec<String> = fed.pending.iter().map(|n| n.host.clone()).collect();
        assert!(held.iter().any(|h| h == want), "{want}: {held:?}");
        // The bare spelling is not held: it would not count when it ends.
        let mut bare = BodyScanner::new(None, 1 << 20);
        let fed = bare.feed(&text[text.iter().rposition(|b| *b == b'/').unwrap() + 1..]);
        assert!(fed.pending.is_empty(), "{want}: {:?}", fed.pending);
    }
}

/// Round 3, finding 10: `.tar.xz`, `.tar.bz2` (several streams too) and
/// `.tar.zst` inside a body, and zip entries compressed with bzip2 or LZMA,
/// are opened as they stream, in any chunking; text that starts like a
/// magic number is still text.
#[test]
fn xz_bzip2_zstd_and_zip_lzma_archives_are_opened() {
    let page = b"<p>post it to https://paste.example.com/new</p>";
    let t = tar(&[("package/README", &page[..])]);
    let two_streams = [bzip2_enc(b"nothing here "), bzip2_enc(&t)].concat();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("tar.xz", xz_enc(&t)),
        ("tar.bz2", bzip2_enc(&t)),
        ("two bzip2 streams", two_streams),
        ("tar.zst", zstd_enc(&t)),
        ("zip bzip2", zip(&[("a", &page[..], Method::Bzip2)], b"")),
        ("zip lzma", zip(&[("a", &page[..], Method::Lzma)], b"")),
        (
            "zip lzma then stored",
            zip(
                &[("a", b"x", Method::Lzma), ("b", &page[..], Method::Stored)],
                b"",
            ),
        ),
    ];
    for (what, body) in cases {
        for chunk in [1, 7, 4096] {
            let (found, skipped, _) = run_body(&[], None, &body, chunk, 1 << 20);
            assert!(
                found.iter().any(|h| h == "paste.example.com"),
                "{what}/{chunk}: {found:?} {skipped:?}"
            );
            assert_eq!(skipped, None, "{what}/{chunk}");
        }
    }
    let (found, _, _) = run_body(
        &[],
        None,
        &b"BZhello from paste.example.com"[..],
        3,
        1 << 20,
    );
    assert_eq!(
        found,
        vec!["paste.example.com"],
        "BZh then a letter is text"
    );
}
