//! Archives by magic bytes: opened as they stream, bounded, and scanned
//! raw where they cannot be read.

use super::build::*;
use super::*;

const PACKAGE: &[u8] = br#"{"name":"x","repository":{"url":"git+https://github.com/acme/x.git"}}"#;

/// Case, Content-Encodings, body, names it must yield.
type Case<'a> = (&'a str, &'a [&'a str], Vec<u8>, Vec<&'a str>);

/// Runs archive cases: each must yield its names, in any chunking, with
/// nothing noted.
fn check_archives(cases: Vec<Case>) {
    for (what, enc, body, want) in cases {
        for chunk in [1, 5, 16 * 1024] {
            let (found, skipped, _) = run_body(enc, None, &body, chunk, 1 << 20);
            let at = format!("case {what} chunk {chunk}");
            assert!(has_all(&found, &want), "{at}: {found:?}");
            assert_eq!(skipped, None, "{at}");
            // A member's name is not text (but a plain tar's first header
            // is scanned while it may still be text, in small chunks).
            let named = found.iter().any(|f| f == "evil.example.net");
            assert!(chunk < 512 || !named, "{at}: {found:?}");
        }
    }
}

#[test]
fn tar_cases() {
    let tgz = gzip(&tar(&[
        ("package/evil.example.net", b"see docs.example.org"),
        ("package/package.json", PACKAGE),
    ]));
    let gh = || vec!["github.com"];
    check_archives(vec![
        (
            "tar-in-gzip",
            &[],
            tgz.clone(),
            vec!["docs.example.org", "github.com"],
        ),
        ("tar-in-gzip-identity", &["identity"], tgz.clone(), gh()),
        ("tar-in-gzip-encoded-gzip", &["gzip"], gzip(&tgz), gh()),
        ("tar-in-gzip-labelled-gzip", &["gzip"], tgz.clone(), gh()),
        ("plain-tar", &[], tar(&[("a.txt", PACKAGE)]), gh()),
        ("gzip-text", &[], gzip(PAGE), PAGE_HOSTS.to_vec()),
        (
            "tgz-in-zip",
            &[],
            zip(&[("x.tgz", &tgz, Method::Stored)], b""),
            gh(),
        ),
    ]);
}

#[test]
fn zip_cases() {
    let one = |m| zip(&[("p.json", PACKAGE, m)], b"");
    let described = zip(
        &[
            ("a", b"first", Method::Descriptor),
            ("p.json", PACKAGE, Method::Descriptor),
        ],
        b"",
    );
    let commented = zip(&[("a", b"x", Method::Deflate)], b"see paste.example.com");
    let gh = || vec!["github.com"];
    check_archives(vec![
        ("zip-deflate", &[], one(Method::Deflate), gh()),
        ("zip-stored", &[], one(Method::Stored), gh()),
        ("zip-with-data-descriptor", &[], described, gh()),
        (
            "zip-comment-scanned-raw",
            &[],
            commented,
            vec!["paste.example.com"],
        ),
        ("zip-in-br", &["br"], br(&one(Method::Deflate)), gh()),
    ]);
}

#[test]
fn archives_are_not_scanned_as_text() {
    // A body of compressed bytes yields nothing but what it holds.
    let text = b"just words, no names at all".repeat(50);
    let tgz = gzip(&tar(&[("a", &text)]));
    assert_eq!(
        run_body(&[], None, &tgz, 4096, 1 << 20).0,
        Vec::<String>::new()
    );
    // Scanned: the member's text, not the tar headers or the gzip bytes
    // (and, raw, the second zero block after the archive's end).
    assert_eq!(
        run_body(&[], None, &tgz, 4096, 1 << 20).2,
        text.len() as u64 + 512
    );
}

/// Archives that cannot be read: the rest is scanned raw, and said so.
#[test]
fn unreadable_archives_are_scanned_raw() {
    let host = b"see https://paste.example.com/x";
    let archive = || {
        Expect::Exactly(Skipped::Archive {
            kind: "",
            reason: String::new(),
        })
    };
    let mut corrupt_tar = tar(&[("a", b"x"), ("b", host)]);
    corrupt_tar[1024] ^= 1; // second header's name: checksum fails
                            // A gzip header, then a stored block whose length check fails.
    let bad_gzip = [&gzip(PAGE)[..10], &host[4..]].concat();
    let cut_zip = zip(&[("a", b"x", Method::Stored)], b"")[..31].to_vec();
    let unknown_method = zip(
        &[("a", b"x", Method::Ppmd), ("b", host, Method::Stored)],
        b"",
    );
    let cases = vec![
        ("zip-unknown-method", unknown_method, archive()),
        ("tar-bad-checksum", corrupt_tar, archive()),
        (
            "gzip-magic-then-text",
            bad_gzip,
            Expect::Undecodable("gzip"),
        ),
        (
            "zip-garbage-between-entries",
            [cut_zip, host.to_vec()].concat(),
            archive(),
        ),
    ];
    for (what, body, expect) in cases {
        for chunk in [1, 16 * 1024] {
            let (found, skipped, _) = run_body(&[], None, &body, chunk, 1 << 20);
            let at = format!("case {what} chunk {chunk}");
            assert!(has_all(&found, &["paste.example.com"]), "{at}: {found:?}");
            assert!(expect.holds(&skipped), "{at}: {skipped:?}");
        }
    }
}

/// A body that ends inside an archive header: the header bytes were never
/// read as one, so they are scanned raw (fuzz find).
#[test]
fn a_header_cut_by_the_end_of_the_body_is_scanned_raw() {
    let mut tar_head = vec![0u8; 100];
    tar_head[..17].copy_from_slice(b"paste.example.com");
    let cases = [
        (
            "zip",
            [&b"PK\x03\x04"[..], b"\x14\0\0\0 paste.example.com"].concat(),
        ),
        ("tar", tar_head),
    ];
    for (what, body) in cases {
        for chunk in [1, 7, 1024] {
            let (found, _, _) = run_body(&[], None, &body, chunk, 1 << 20);
            assert!(
                has_all(&found, &["paste.example.com"]),
                "{what} chunk {chunk}: {found:?}"
            );
        }
    }
}

/// A zip local header sluice cannot follow (an unknown method, encrypted,
/// a data descriptor) is scanned raw from its signature on: a URL begun
/// inside the header's own bytes and ended after it is found (fuzz find).
#[test]
fn an_unreadable_local_header_is_scanned_raw_from_its_signature() {
    // After the signature: version, then flags, method, times, sizes,
    // name and extra lengths, which here are all text.
    let unknown_method = [
        &b"PK\x03\x04"[..],
        b"\x18.dev https:&sol;&sol;intranet&sol; b&uuml;cher.d3x and more",
    ]
    .concat();
    let mut encrypted = b"PK\x03\x04\x14\x00\x01\x00\x08\x00 https://paste.ex".to_vec();
    encrypted.extend_from_slice(b"ample.com/x and the rest");
    for (what, body, host) in [
        ("unknown method", unknown_method, "intranet"),
        ("encrypted", encrypted, "paste.example.com"),
    ] {
        for chunk in [1, 5, 1024] {
            let (found, _, _) = run_body(&[], None, &body, chunk, 1 << 20);
            assert!(has_all(&found, &[host]), "{what} chunk {chunk}: {found:?}");
        }
    }
}

/// An entry's name is text a client lists: a name in it is found, in the
/// local header and in the central directory, and a name cut by the end of
/// the body too (fuzz find). It does not join the entry's contents.
#[test]
fn entry_names_are_scanned_as_text() {
    let named = zip(
        &[(
            "see https:&sol;&sol;paste.example.com&sol;x",
            b"example",
            Method::Stored,
        )],
        b"",
    );
    let mut cut = [&b"PK\x03\x04"[..], &[0x14, 0, 0, 0, 0, 0][..]].concat();
    cut.extend_from_slice(&[0; 16]);
    cut.extend_from_slice(&[0xff, 0xff, 0, 0]); // name length 65535
    cut.extend_from_slice(b"ev https:&sol;&sol;intra\x92\x9a more bytes");
    for (what, body, host) in [("named", named, "paste.example.com"), ("cut", cut, "intra")] {
        for chunk in [1, 7, 1024] {
            let (found, _, _) = run_body(&[], None, &body, chunk, 1 << 20);
            assert!(has_all(&found, &[host]), "{what} chunk {chunk}: {found:?}");
            assert!(
                !found.iter().any(|f| f.ends_with("example")),
                "{what}: the name joined the contents: {found:?}"
            );
        }
    }
}

/// An entry's name starts a text stream of its own: what the entry before
/// it left in the scanner — a UTF-16 byte-order mark, binary mode after an
/// image, an unfinished token — does not hide it (review find).
#[test]
fn an_entry_name_is_read_afresh_whatever_came_before() {
    let before: [(&str, &[u8]); 3] = [
        ("a bare byte-order mark", b"\xff\xfe"),
        ("an image", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"),
        ("an unfinished token", b"see x_"),
    ];
    for (what, data) in before {
        let whole = zip(
            &[
                ("first", data, Method::Stored),
                ("exfil.example.com", b"ok", Method::Stored),
            ],
            b"",
        );
        // Cut where the central directory starts (it repeats the names):
        // only the local header's name can be found.
        let central = whole.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
        let body = &whole[..central];
        for chunk in [1, 9, 4096] {
            let (found, _, _) = run_body(&[], None, body, chunk, 1 << 20);
            assert!(
                has_all(&found, &["exfil.example.com"]),
                "after {what}, chunk {chunk}: {found:?}"
            );
        }
    }
    // A name that itself starts with FF FE is still read as bytes.
    let body = zip(
        &[("\u{feff}https://exfil.example.com/x", b"ok", Method::Stored)],
        b"",
    );
    let (found, _, _) = run_body(&[], None, &body, 4096, 1 << 20);
    assert!(has_all(&found, &["exfil.example.com"]), "{found:?}");
}

#[test]
fn nesting_is_bounded() {
    // A .tgz inside a .tgz is four archives deep: opened.
    let inner = tar(&[("a.json", br#""https://github.com/x""#)]);
    let tgz_in_tgz = gzip(&tar(&[("inner.tgz", &gzip(&inner))]));
    let (found, skipped, _) = run_body(&[], None, &tgz_in_tgz, 16 * 1024, 1 << 24);
    assert_eq!(skipped, None);
    assert!(found.iter().any(|f| f == "github.com"), "{found:?}");
    // One more level: the innermost gzip is scanned raw, and said so.
    let deeper = gzip(&tar(&[("inner.tgz", &tgz_in_tgz)]));
    let (found, skipped, _) = run_body(&[], None, &deeper, 16 * 1024, 1 << 24);
    assert_eq!(skipped, Some(Skipped::TooDeep));
    assert!(!found.iter().any(|f| f == "github.com"), "{found:?}");
}

/// Bombs stay cut at the limit, whatever layer or archive holds them.
#[test]
fn bomb_stays_cut_at_limit() {
    // Round 3, finding 10: the limit counts the body as sent. 8 MiB of
    // spaces from a few KiB on the wire are scanned whole (the name after
    // them is found); a body that decodes to more than DECODED_PER_WIRE
    // times the limit is a bomb, and the relay cuts it.
    let limit = 1u64 << 20;
    let mut plain = vec![b' '; 8 << 20];
    plain.extend_from_slice(b" https://late.example.com/");
    let mut huge = vec![b' '; (limit * DECODED_PER_WIRE) as usize + 1024];
    huge.extend_from_slice(b" https://late.example.com/");
    let bomb = gzip(&plain);
    assert!(bomb.len() < 200_000);
    let tar_bomb = gzip(&tar(&[("a", &plain)]));
    let double = gzip(&bomb);
    let zip_bomb = zip(&[("a", &plain, Method::Deflate)], b"");
    let zstd_bomb = zstd_enc(&plain);
    let found_cases: Vec<(&str, &[&str], &[u8])> = vec![
        ("content-encoding gzip", &["gzip"], &bomb),
        ("content-encoding zstd", &["zstd"], &zstd_bomb),
        ("zip entry", &[], &zip_bomb),
        ("gzip archive", &[], &bomb),
        ("gzip, gzip", &["gzip, gzip"], &double),
        ("tar in gzip", &[], &tar_bomb),
    ];
    for (what, enc, body) in found_cases {
        let (found, skipped, _) = run_body(enc, None, body, 16 * 1024, limit);
        assert!(
            found.iter().any(|n| n == "late.example.com"),
            "case {what}: {found:?}"
        );
        assert_eq!(skipped, None, "case {what}");
    }
    let big = gzip(&huge);
    let zeros = gzip(&vec![0u8; (limit * DECODED_PER_WIRE) as usize + 1]);
    let headers_only = gzip(&tar(&vec![("a", &b""[..]); 40_000]));
    let cut_cases: Vec<(&str, &[&str], &[u8])> = vec![
        ("content-encoding gzip", &["gzip"], &big),
        ("gzip archive", &[], &big),
        ("gzip of zeros", &[], &zeros),
        ("tar headers only", &[], &headers_only),
    ];
    for (what, enc, body) in cut_cases {
        assert!((body.len() as u64) < limit, "case {what}: a bomb");
        let (_, skipped, scanned) = run_body(enc, None, body, 16 * 1024, limit);
        let want = Skipped::Expanded(limit * DECODED_PER_WIRE);
        assert_eq!(skipped, Some(want.clone()), "case {what}");
        assert!(want.fails_closed());
        assert!(scanned <= limit * DECODED_PER_WIRE, "case {what}");
    }
    // Past the limit on the wire, the rest is relayed unscanned.
    let mut plain_big = vec![b'a'; limit as usize + 10];
    plain_big.extend_from_slice(b" https://late.example.com/");
    let (found, skipped, _) = run_body(&[], None, &plain_big, 16 * 1024, limit);
    assert!(found.is_empty(), "{found:?}");
    assert_eq!(skipped, Some(Skipped::Limit(limit)));
}

#[test]
fn names_are_reported_before_the_chunk_is_passed_on() {
    // Each chunk's names come back from that chunk's feed.
    let tgz = gzip(&tar(&[("a", PAGE)]));
    for (what, enc, body) in [
        ("identity", vec![], PAGE.to_vec()),
        ("gzip", vec!["gzip"], gzip(PAGE)),
        ("tgz", vec![], tgz),
    ] {
        let values: Vec<&[u8]> = enc.iter().map(|e: &&str| e.as_bytes()).collect();
        let mut s = BodyScanner::for_response(&values, None, 1 << 20);
        let fed = s.feed(&body);
        let found: Vec<String> = fed
            .names
            .into_iter()
            .chain(fed.pending)
            .map(|n| n.host)
            .collect();
        assert!(
            found.iter().any(|f| f == "paste.example.com"),
            "case {what}: {found:?}"
        );
    }
}

#[test]
fn mislabelled_archive_is_still_opened() {
    // The layer fails on its first bytes: its raw input is the body, and
    // is sniffed like one.
    let zip_body = zip(&[("p.json", PACKAGE, Method::Deflate)], b"");
    let tgz = gzip(&tar(&[("p.json", PACKAGE)]));
    for (what, enc, body) in [
        ("zip labelled gzip", "gzip", zip_body),
        ("tgz labelled br", "br", tgz.clone()),
        ("tgz labelled zstd", "zstd", tgz),
    ] {
        for chunk in [1, 16 * 1024] {
            let (found, skipped, _) = run_body(&[enc], None, &body, chunk, 1 << 20);
            let at = format!("case {what} chunk {chunk}");
            assert!(has_all(&found, &["github.com"]), "{at}: {found:?}");
            assert!(skipped.is_some(), "{at}");
        }
    }
}

/// Fuzz find: a central-directory record whose name, extra and comment
/// lengths are all 0xffff overflowed a u16 sum (a panic in debug builds, a
/// wrong skip in release). The text after it is still scanned raw or
/// skipped, never a panic.
#[test]
fn central_directory_lengths_do_not_overflow() {
    let mut body = zip(
        &[(
            "README.md",
            b"see https://inside.example.com/",
            Method::Stored,
        )],
        b"",
    );
    // Overwrite the first central record's three lengths with 0xffff.
    let at = body
        .windows(4)
        .position(|w| w == b"PK\x01\x02")
        .expect("a central directory");
    for off in [28, 30, 32] {
        body[at + off] = 0xff;
        body[at + off + 1] = 0xff;
    }
    for chunk in [1, 7, 4096] {
        let (found, _, _) = run_body(&[], None, &body, chunk, 1 << 20);
        assert!(
            found.contains(&"inside.example.com".to_string()),
            "chunk {chunk}: {found:?}"
        );
    }
}
