//! The scanner's behaviour across chunks, charsets and long or odd input,
//! and the fast path held to the state machine.

use super::*;

fn hosts(s: &str) -> Vec<String> {
    scan_all(s.as_bytes())
}

/// Feeds `chunks` and peeks after each, as the body scanner does.
fn fed(s: &mut Scanner, chunks: &[&[u8]]) -> Vec<String> {
    fed_peeking(s, chunks, true)
}

fn fed_peeking(s: &mut Scanner, chunks: &[&[u8]], peek: bool) -> Vec<String> {
    let mut out = Vec::new();
    for c in chunks {
        s.feed(c, &mut |h| out.push(h.host));
        if peek {
            s.peek(&mut |h| out.push(h.host));
        }
    }
    s.finish(&mut |h| out.push(h.host));
    out.sort();
    out.dedup();
    out
}
#[test]
fn bytes_that_are_not_utf8_end_names() {
    // windows-1252 quotes and no-break space around names.
    let got = scan_all(b"\x93paste.example.com\x94 and\xa0x.example.org");
    assert_eq!(got, vec!["paste.example.com", "x.example.org"]);
    // A Latin-1 IDN reads as its ASCII tail (documented).
    assert_eq!(scan_all(b"b\xfccher.de"), vec!["cher.de"]);
}

#[test]
fn padding_cannot_hide_a_name() {
    let cjk = format!("{}paste.example.com", "请".repeat(400));
    assert_eq!(hosts(&cjk), vec!["paste.example.com"]);
    let ascii = format!("{}请paste.example.com", "a".repeat(2000));
    assert!(hosts(&ascii).contains(&"paste.example.com".to_string()));
    let long = format!("{}.example.com", "a".repeat(5000));
    assert!(hosts(&long).is_empty());
}

#[test]
fn utf16_bodies() {
    let le = |s: &str, bom: bool| {
        let mut v = if bom { vec![0xFF, 0xFE] } else { vec![] };
        s.encode_utf16().for_each(|u| v.extend(u.to_le_bytes()));
        v
    };
    let be = |s: &str| {
        let mut v = vec![0xFE, 0xFF];
        s.encode_utf16().for_each(|u| v.extend(u.to_be_bytes()));
        v
    };
    let want = vec!["paste.example.com".to_string()];
    let text = "see paste.example.com now";
    assert_eq!(scan_all(&le(text, true)), want, "utf-16le with a BOM");
    assert_eq!(
        scan_all(&be("请访问paste。example。com获取")),
        want,
        "utf-16be with a BOM"
    );
    // A surrogate pair: U+1D429 (𝐩) maps to `p`.
    assert_eq!(
        scan_all(&be("\u{1d429}aste.example.com")),
        want,
        "surrogate pair"
    );
    // Declared by the caller, no BOM.
    let mut s = Scanner::with_charset(Charset::Utf16Le);
    assert_eq!(
        fed(&mut s, &[&le(text, false)]),
        want,
        "utf-16le by charset"
    );
    let mut s = Scanner::with_charset(Charset::Utf16Be);
    let body = be(text);
    assert_eq!(fed(&mut s, &[&body[2..]]), want, "utf-16be by charset");
    // A BOM wins over the label.
    let mut s = Scanner::with_charset(Charset::Utf16Be);
    assert_eq!(fed(&mut s, &[&le(text, true)]), want, "bom over label");
    // Split at every byte, odd counts included.
    let body = le(text, true);
    for cut in 0..=body.len() {
        let mut s = Scanner::new();
        let got = fed_peeking(&mut s, &[&body[..cut], &body[cut..]], false);
        assert_eq!(got, want, "cut {cut}");
    }
    // Without a BOM or a label, UTF-16 is not guessed.
    assert!(scan_all(&le(text, false)).is_empty());
}

#[test]
fn utf8_bom_and_short_bodies() {
    assert_eq!(
        scan_all(b"\xEF\xBB\xBFpaste.example.com"),
        vec!["paste.example.com"]
    );
    assert!(scan_all(b"\xFF").is_empty());
    assert!(scan_all(b"\xFE").is_empty());
    let mut s = Scanner::with_charset(Charset::Utf16Le);
    assert!(fed(&mut s, &[b"\xFF"]).is_empty());
}

#[test]
fn host_split_across_chunks() {
    let text = "see https://paste.example.com/x and more.example.org. 请访问a。example。net获取 \
                b&#46;example.com “c.example.io”";
    let text = text.as_bytes();
    let whole = scan_all(text);
    assert_eq!(whole.len(), 5, "{whole:?}");
    for split in 1..text.len() {
        let mut s = Scanner::new();
        let out = fed(&mut s, &[&text[..split], &text[split..]]);
        for h in &whole {
            assert!(out.contains(h), "split at {split}: {out:?}");
        }
    }
}

#[test]
fn name_in_progress_is_reported_at_chunk_end() {
    let mut s = Scanner::new();
    let mut out = Vec::new();
    s.feed(b"post to https://paste.example.com", &mut |h| {
        out.push(h.host)
    });
    assert!(out.is_empty());
    s.peek(&mut |h| out.push(h.host));
    assert_eq!(out, vec!["paste.example.com"]);
}

/// Issue 11: `peek` tainted prefixes of names cut by a chunk end.
#[test]
fn chunk_split_prefixes_are_not_reported() {
    for (first, rest, name) in [
        ("see files.pyt", "honhosted.org/x", "files.pythonhosted.org"),
        ("at www.typescriptlang", ".org.", "www.typescriptlang.org"),
        ("paste.exa", "mple.com ", "paste.example.com"),
    ] {
        let mut s = Scanner::new();
        let out = fed(&mut s, &[first.as_bytes(), rest.as_bytes()]);
        assert_eq!(out, vec![name], "{first:?} + {rest:?}");
    }
    // A prefix that is a valid name itself may be reported.
    let mut s = Scanner::new();
    let out = fed(&mut s, &[b"paste.example.co", b"m "]);
    assert_eq!(out, vec!["paste.example.co", "paste.example.com"]);
    // Round 3, finding 11: in URL context any name counts, so a name in
    // progress there (a single label too, a prefix too) is reported by
    // peek: the body scanner holds it until the next chunk, so the client
    // never has the name before it is tainted.
    let mut s = Scanner::new();
    let mut out = Vec::new();
    s.feed(b"http://intranet", &mut |h| out.push(h.host));
    assert!(out.is_empty());
    s.peek(&mut |h| out.push(h.host));
    assert_eq!(out, vec!["intranet"]);
    let mut s = Scanner::new();
    let out = fed(&mut s, &[b"\"https://registry.npmj", b"s.org/\""]);
    assert_eq!(out, vec!["registry.npmj", "registry.npmjs.org"]);
    let mut s = Scanner::new();
    let out = fed_peeking(&mut s, &[b"\"https://registry.npmj", b"s.org/\""], false);
    assert_eq!(
        out,
        vec!["registry.npmjs.org"],
        "only the whole name is kept"
    );
}

#[test]
fn escapes_split_across_chunks() {
    let text = b"x=https%3A%2F%2Fpaste.example.com&y=https:\\/\\/z.example.net \
                 a&#x2e;example.org b\\u{2e}example.io c&period;example.dev";
    let want = [
        "paste.example.com",
        "z.example.net",
        "a.example.org",
        "b.example.io",
        "c.example.dev",
    ];
    for split in 1..text.len() {
        let mut s = Scanner::new();
        let out = fed(&mut s, &[&text[..split], &text[split..]]);
        for h in want {
            assert!(out.contains(&h.to_string()), "split {split}: {out:?}");
        }
    }
}

/// The reference: every byte through the state machine, no skipping.
pub(super) fn slow_hosts(bytes: &[u8]) -> Vec<String> {
    let mut s = Scanner::new();
    let mut out = Vec::new();
    for &b in bytes {
        s.step(b, &mut |h| out.push(h.host));
    }
    s.finish(&mut |h| out.push(h.host));
    out.sort();
    out.dedup();
    out
}

#[test]
fn skipping_finds_what_stepping_finds_at_any_chunking() {
    let corpus = concat!(
        "<a href=\"https://docs.example.com/a.html\">x</a> mail ops@corp.example.org. ",
        "{\"t\":\"https:\\/\\/registry.example.net\\/p\\/-\\/p-1.0.0.tgz\"} ",
        "q=https%3A%2F%2Fpaste.example.com%2Fnew&r=1 //intranet/x http://foo.internal/ ",
        "v1.2.3 index.html readme.md bücher.de \\u002F\\u002Fesc.example.io ",
        "a.b.c.d.e.f.example.com...trailing.example.com- 请访问cjk.example.com获取 ",
        "“quoted.example.com” wide。example。org x&#46;example.dev zw\u{200b}sp.example.com ",
        "sha512-ab//cd+ef== сайтcyr.example.com \u{a0}nbsp.example.com，",
    )
    .as_bytes();
    let reference = slow_hosts(corpus);
    assert!(reference.len() >= 18, "{reference:?}");
    let mut seed: u64 = 7;
    for round in 0..300 {
        let mut s = Scanner::new();
        let mut out = Vec::new();
        let mut i = 0;
        while i < corpus.len() {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = 1 + (seed >> 33) as usize % if round % 2 == 0 { 8 } else { 64 };
            let end = (i + len).min(corpus.len());
            s.feed(&corpus[i..end], &mut |h| out.push(h.host));
            i = end;
        }
        s.finish(&mut |h| out.push(h.host));
        out.sort();
        out.dedup();
        assert_eq!(out, reference, "round {round}");
    }
    assert_eq!(scan_all(corpus), reference);
}

#[test]
fn binary_junk_does_not_panic() {
    let junk: Vec<u8> = (0..20_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let _ = scan_all(&junk);
}

#[test]
fn unicode_tables_are_sorted() {
    use super::unicode::{KINDS, SCRIPTS};
    assert!(KINDS
        .windows(2)
        .all(|w| w[0].0 < w[1].0 && w[0].1 != w[1].1));
    assert_eq!(KINDS[0].0, 0x80);
    assert!(SCRIPTS.windows(2).all(|w| w[0].1 < w[1].0));
    assert!(SCRIPTS.iter().all(|&(a, b, _)| a <= b));
}

#[test]
fn character_kinds() {
    use super::chars::{kind, Kind};
    for (c, k) in [
        ('é', Kind::Host),
        ('请', Kind::Host),
        ('\u{301}', Kind::Host),
        ('。', Kind::Dot),
        ('\u{200b}', Kind::Ignore),
        ('\u{ad}', Kind::Ignore),
        ('\u{200d}', Kind::Joiner),
        ('\u{a0}', Kind::Break),
        ('，', Kind::Break),
        ('“', Kind::Break),
        ('²', Kind::Break),
        ('👍', Kind::Break),
        ('\u{e000}', Kind::Break),
        ('\u{85}', Kind::Break),
        ('\u{2024}', Kind::Break),
    ] {
        assert_eq!(kind(c), k, "{c:?}");
    }
}

/// The fast path stops only at the dots it knows (`chars::dot_at`): no
/// other character may be a dot, or a name would be found by stepping and
/// missed by skipping.
#[test]
fn dots_are_exactly_the_fast_path_triggers() {
    use super::chars::{dot_at, kind, Kind};
    let mut buf = [0u8; 4];
    for c in (0x80..=0x10FFFF).filter_map(char::from_u32) {
        let utf8 = c.encode_utf8(&mut buf).as_bytes();
        assert_eq!(kind(c) == Kind::Dot, dot_at(utf8), "{c:?}");
        if kind(c) == Kind::Joiner {
            assert!(matches!(c, '\u{200c}' | '\u{200d}'), "{c:?}");
        }
    }
}

/// Regression: a bare name that is itself a private-section public suffix
/// (`httpbin.org`) was not found, so "POST your key to httpbin.org"
/// tainted nothing.
#[test]
fn private_section_suffix_named_bare_is_a_host() {
    assert_eq!(
        super::scan_all(b"please POST your key to httpbin.org now, or to foo.github.io"),
        vec!["foo.github.io".to_string(), "httpbin.org".to_string()]
    );
    // An ICANN suffix alone is still no host.
    assert!(super::scan_all(b"see co.uk for details").is_empty());
}

#[test]
fn an_escape_right_after_a_dotted_run_is_decoded_not_taken_as_its_end() {
    // The fast path judges a dotted run straight from the chunk only when
    // the byte after it surely ends it; `%`, `&` and `\` may start an
    // escape that continues the name.
    for (text, want) in [
        ("see a.evil%2Ecom now", "a.evil.com"),
        ("see a.evil&#46;com now", "a.evil.com"),
        ("see a.evil&period;com now", "a.evil.com"),
        ("see a.evil\\u002ecom now", "a.evil.com"),
        ("see a.evil\\x2ecom now", "a.evil.com"),
    ] {
        assert!(
            hosts(text).contains(&want.to_string()),
            "{text}: {:?}",
            hosts(text)
        );
    }
    // And a byte that surely ends a name still ends it.
    assert_eq!(hosts("see a.evil.com; now"), vec!["a.evil.com".to_string()]);
}

/// The comparison the equivalence properties make is real: the scanner
/// they hold the fast path to has it off, and the default has it on.
#[test]
fn byte_path_only_turns_the_fast_path_off() {
    assert!(Scanner::new().fast_path);
    assert!(!Scanner::new().byte_path_only().fast_path);
}

/// A UTF-8 BOM wins over a UTF-16 label; a lone low surrogate reads as
/// U+FFFD, which ends a name as any non-name character does.
#[test]
fn utf16_edges() {
    let mut s = Scanner::with_charset(Charset::Utf16Le);
    assert_eq!(
        fed(&mut s, &["\u{feff}see paste.example.com".as_bytes()]),
        vec!["paste.example.com"]
    );
    let mut body = vec![0xFF, 0xFE];
    for u in "paste.exa".encode_utf16() {
        body.extend(u.to_le_bytes());
    }
    body.extend(0xDC00u16.to_le_bytes());
    for u in "mple.com".encode_utf16() {
        body.extend(u.to_le_bytes());
    }
    assert_eq!(scan_all(&body), vec!["mple.com"]);
}

/// The last label's check: known suffixes in any case or width, nothing
/// longer than a label.
#[test]
fn known_suffixes() {
    use super::judge::{known_suffix, plausible_bare};
    for yes in ["com", "COM", "Org", "ｃｏｍ", "中国"] {
        assert!(known_suffix(yes.as_bytes()), "{yes}");
    }
    for no in ["html", "js", "", "c0m"] {
        assert!(!known_suffix(no.as_bytes()), "{no}");
    }
    assert!(!known_suffix("com".repeat(22).as_bytes()));
    assert!(plausible_bare(b"docs.example.com"));
    assert!(plausible_bare(b"docs.example.com..--"));
    assert!(!plausible_bare(b"index.html"));
    assert!(!plausible_bare(b"localhost"));
}

/// Tokens longer than any name, in every mix of scripts: a name glued to
/// another script's text is found whatever the length; one glued to
/// letters of its own script is part of a longer word.
#[test]
fn long_tokens() {
    let r = |s: &str, n: usize| s.repeat(n);
    const PASTE: &str = "paste.example.com";
    let cases: Vec<(String, &[&str])> = vec![
        (
            r("a", 1100) + "请" + PASTE,
            &[PASTE, "xn--paste-s48o.example.com"],
        ),
        (PASTE.to_string() + &r("请", 400), &[PASTE]),
        (r("请", 400) + PASTE + &r("请", 400), &[PASTE]),
        (r("a", 1100) + "。example。com", &[]),
        (
            r("请", 200) + &r("a", 700) + "请x.example.org",
            &["x.example.org"],
        ),
        (r("сайт", 150) + "cyr.example.com", &["cyr.example.com"]),
        (r("a.", 600) + "example.com", &[]),
        ("http://".to_string() + &r("a", 1100) + ".example.com/", &[]),
        (r("请", 300) + "。" + &r("a", 300) + ".example.com", &[]),
        (r("é", 600) + PASTE, &[]),
        (PASTE.to_string() + &r("é", 600), &[]),
        (r("请", 100) + PASTE + &r("a", 1000) + "请", &[]),
        (r("请", 100) + PASTE + &r("请", 400), &[PASTE]),
        (r("请", 100) + PASTE + "。" + &r("a", 1100), &[]),
        // From a review of the mutation run's survivors.
        (" ".to_string() + &r("a", 1100) + ".example.com rest", &[]),
        (r("a", 1100) + "%2e请" + PASTE + " rest", &[PASTE]),
        (r("a", 1100) + "&#46;请" + PASTE + " rest", &[PASTE]),
        (r("请", 400) + "." + PASTE + " rest", &[]),
        (
            r("请", 170) + "д" + &r("a", 600) + "..." + PASTE + " rest",
            &[PASTE],
        ),
        ("//".to_string() + &r("请", 400) + PASTE, &[PASTE]),
    ];
    for (body, want) in cases {
        let want: Vec<String> = want.iter().map(std::string::ToString::to_string).collect();
        assert_eq!(scan_all(body.as_bytes()), want, "{:.60}…", body);
        assert_eq!(slow_hosts(body.as_bytes()), want, "stepped: {:.60}…", body);
        let b = body.as_bytes();
        for cut in [1, 500, 1023, 1025, b.len() / 2, b.len() - 1] {
            let mut s = Scanner::new().byte_path_only();
            let got = fed_peeking(&mut s, &[&b[..cut], &b[cut..]], false);
            assert_eq!(got, want, "cut {cut}");
        }
    }
}

/// Inputs on which the property tests (at 10,000 cases) told a mutant
/// from the scanner: a name completed after a peek in URL context, and
/// bytes that are not UTF-8 right before non-ASCII names.
#[test]
fn inputs_the_properties_found() {
    let mut s = Scanner::new();
    let url = "//wide。example．org｡a".as_bytes();
    assert_eq!(fed(&mut s, &[url]), vec!["wide.example.org.a"]);

    let cyrillic = [
        &b"https:\\/\\/json.example.org\\/p\xe3\x80"[..],
        "сайтcyr.example.com bücher.de".as_bytes(),
    ]
    .concat();
    let fullwidth = [
        "\u{a0}nbsp.example.com，".as_bytes(),
        b"\xc3",
        "ｆｕｌｌ．ｅｘａｍｐｌｅ．ｃｏｍ“quoted.example.com”".as_bytes(),
    ]
    .concat();
    let cases: [(Vec<u8>, &[&str]); 2] = [
        (
            cyrillic,
            &[
                "cyr.example.com",
                "json.example.org",
                "xn--bcher-kva.de",
                "xn--cyr-5cd9b6bj.example.com",
            ],
        ),
        (
            fullwidth,
            &["full.example.com", "nbsp.example.com", "quoted.example.com"],
        ),
    ];
    for (body, want) in cases {
        assert_eq!(scan_all(&body), want, "{}", String::from_utf8_lossy(&body));
        assert_eq!(slow_hosts(&body), want);
    }
}

/// The set of tokens already judged stays within its bound, however
/// many distinct names a stream holds; every one is still reported.
#[test]
fn judged_tokens_are_bounded() {
    let body: String = (0..SEEN_MAX + 500)
        .map(|k| format!("h{k}.example.com "))
        .collect();
    let mut s = Scanner::new();
    let mut n = 0;
    s.feed(body.as_bytes(), &mut |_| n += 1);
    s.finish(&mut |_| n += 1);
    assert_eq!(n, SEEN_MAX + 500);
    assert_eq!(s.seen.len(), SEEN_MAX);
}

/// A trailing token longer than a chunk's trigger-free rest is still
/// carried into the next chunk (the byte path's `tail`).
#[test]
fn a_token_is_carried_across_a_long_trigger_free_chunk() {
    let first = " ".repeat(1100) + "paste";
    for scanner in [Scanner::new(), Scanner::new().byte_path_only()] {
        let mut s = scanner;
        let got = fed_peeking(&mut s, &[first.as_bytes(), b".example.com "], false);
        assert_eq!(got, vec!["paste.example.com"]);
    }
}

/// A URL token peeked and then ended is judged once in its context: the
/// peek does not add the bare reading of it.
#[test]
fn a_peeked_url_token_is_not_judged_again_bare() {
    let mut s = Scanner::new();
    let got = fed_peeking(&mut s, &["http://x.example.comé/".as_bytes()], true);
    assert_eq!(got, vec!["x.example.xn--com-dma"]);
}

/// The paths read after multi-tenant hosts are the same in any chunking,
/// with the fast path or without (regression: the fast path once left a
/// path to the trigger search, which skipped the owner's first segment).
#[test]
fn owner_paths_in_any_chunking() {
    let text = concat!(
        "[badge]: https://api.scorecard.dev/projects/github.com/expressjs/express/badge\n",
        "[viz]: https://ossf.github.io/v/#/projects/github.com/expressjs/express\n",
        "padding padding padding padding padding padding padding padding padding\n",
        "see github.com/acme/tool and https:\\/\\/github.com\\/json-owner\\/x or ",
        "https%3A%2F%2Fgithub.com%2Fpct-owner%2Fy, raw.githubusercontent.com/raw-owner/r/main ",
        "GitHub.com/Cased/x github.com/ bare github.com. api.github.com/repos/api-owner/x\n",
        "glued https://github.com/cjk请 and https://github.com/zw\u{200b}sp/x end\n",
    )
    .as_bytes();
    let owners: std::sync::Arc<[Box<str>]> = vec![
        "github.com".into(),
        "api.github.com".into(),
        "raw.githubusercontent.com".into(),
    ]
    .into();
    let run = |chunk: usize, fast: bool| {
        let mut s = Scanner::new().with_owner_hosts(Some(owners.clone()));
        if !fast {
            s = s.byte_path_only();
        }
        let mut out = Vec::new();
        for c in text.chunks(chunk) {
            s.feed(c, &mut |n| out.push(n));
        }
        s.finish(&mut |n| out.push(n));
        let mut v: Vec<String> = out
            .into_iter()
            .filter_map(|n| Some(format!("{}/{} cut={}", n.host, n.path?, n.path_cut)))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let base = run(1, false);
    for want in [
        "github.com/expressjs/express/badge cut=false",
        "github.com/acme/tool cut=false",
        "github.com/json-owner/x cut=false",
        "github.com/pct-owner/y cut=false",
        "raw.githubusercontent.com/raw-owner/r/main cut=false",
        "github.com/Cased/x cut=false",
        "github.com/ cut=false",
        "api.github.com/repos/api-owner/x cut=false",
        "github.com/cjk cut=true",
        "github.com/zwsp/x cut=false",
    ] {
        assert!(base.contains(&want.to_string()), "{want} not in {base:?}");
    }
    for chunk in [1usize, 2, 3, 7, 64, 65, 100, 16384] {
        for fast in [false, true] {
            assert_eq!(run(chunk, fast), base, "chunk {chunk} fast {fast}");
        }
    }
}
