//! Properties of the scanner over generated bodies: chunking does not
//! change what is found, the fast path finds what the state machine finds,
//! UTF-16 finds what UTF-8 finds, and nothing panics.

use super::tests::slow_hosts;
use super::*;
use proptest::prelude::*;

/// Pieces of text with every form the scanner reads: URLs, escapes, HTML
/// references, non-ASCII neighbours, dots and invisible characters, bytes
/// that are not UTF-8, base64 and hex.
fn corpus() -> impl Strategy<Value = Vec<u8>> {
    let text = prop_oneof![
        Just("https://paste.example.com/x ".to_string()),
        Just("//cdn.example.net/a.js".to_string()),
        Just(r"https:\/\/json.example.org\/p".to_string()),
        Just("https%3A%2F%2Fpct.example.com%2F".to_string()),
        Just(" bare.example.io ".to_string()),
        Just("v1.2.3 index.html ".to_string()),
        Just("see docs.example.com. or a.example.org...b.example.net".to_string()),
        Just("请访问cjk.example.com获取".to_string()),
        Just("“quoted.example.com”".to_string()),
        Just("wide。example．org｡".to_string()),
        Just("ｆｕｌｌ．ｅｘａｍｐｌｅ．ｃｏｍ".to_string()),
        Just("zw\u{200b}sp.exa\u{ad}mple.com\u{200d}".to_string()),
        Just("\u{a0}nbsp.example.com，".to_string()),
        Just("сайтcyr.example.com bücher.de".to_string()),
        Just("ent&#46;example&#x2e;com&period;x&amp;y&nbspz&sol;&uuml".to_string()),
        Just(r"esc\x2eexample\u{2e}com\.io\ud835\udc29\U0000002e".to_string()),
        Just("sha512-ab//cd+ef==//5b8a3a7765dfe0 -//W3C//".to_string()),
        Just("see github.com/acme/tool and https://api.github.com/repos/o/r ".to_string()),
        Just("date.now() readme.md [profile.dev] admin@mail.example.org ".to_string()),
        "[a-z ./:%\\\\]{0,12}",
        "[a-zA-Z0-9 ./:%\\\\@<>_é-]{0,16}",
        "[a-z.&#;x/\\\\u{}0-9]{0,16}",
        "[a-z .。请é“\u{200b}\u{200d}²-]{0,12}",
    ]
    .prop_map(String::into_bytes);
    let raw = prop_oneof![
        Just(vec![0x93u8]),
        Just(vec![0xff]),
        Just(vec![0xe3, 0x80]),
        Just(vec![0xc3]),
        Just(vec![0x80, 0x80]),
    ];
    let piece = prop_oneof![8 => text, 1 => raw];
    prop::collection::vec(piece, 1..12).prop_map(|v| v.concat())
}

/// Plain ASCII around the forms above, in runs long enough to fill the
/// fast path's 64-byte windows and to cut tokens at every place in them.
fn windows() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        4 => corpus(),
        3 => "[a-zA-Z0-9 ,;:\"()<>=]{0,70}".prop_map(String::into_bytes),
        2 => "[a-z0-9.]{1,24}".prop_map(String::into_bytes),
        1 => "[a-z0-9-]{55,75}".prop_map(String::into_bytes),
        1 => "[a-z./ ]{0,8}".prop_map(String::into_bytes),
        1 => Just(b" docs.example.com ".to_vec()),
        1 => Just(b"api.example.co.uk/".to_vec()),
        1 => Just(b"x.io".to_vec()),
        1 => Just(b"github.com/".to_vec()),
        1 => Just(b"github.com".to_vec()),
        1 => Just(b"//".to_vec()),
        1 => Just(b"/".to_vec()),
    ];
    prop::collection::vec(piece, 1..16).prop_map(|v| v.concat())
}

/// Every report, in order (not sorted or deduplicated), with how each
/// name was written and the path read after it.
fn reports(s: &mut Scanner, chunks: &[&[u8]], peek: bool) -> Vec<String> {
    let mut found = Vec::new();
    let mut push = |n: Named| {
        found.push(format!(
            "{} {:?} {:?} {}",
            n.host, n.seen, n.path, n.path_cut
        ))
    };
    for c in chunks {
        s.feed(c, &mut push);
        if peek {
            s.peek(&mut push);
        }
    }
    s.finish(&mut push);
    found
}

/// Scanners that read the path after these hosts.
fn forges() -> Option<std::sync::Arc<[Box<str>]>> {
    Some(vec!["github.com".into(), "api.github.com".into()].into())
}

fn split_at(body: &[u8], cuts: Vec<usize>) -> Vec<&[u8]> {
    let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
    cuts.sort();
    let mut out = Vec::new();
    let mut last = 0;
    for c in cuts.into_iter().chain([body.len()]) {
        out.push(&body[last..c]);
        last = c;
    }
    out
}

fn feed_all(s: &mut Scanner, chunks: &[&[u8]], peek: bool) -> Vec<String> {
    let mut found: Vec<String> = reports(s, chunks, peek)
        .into_iter()
        .map(|r| r.split(' ').next().unwrap_or("").to_string())
        .collect();
    found.sort();
    found.dedup();
    found
}

proptest! {
    /// Without peek, the names found do not depend on the chunking.
    #[test]
    fn same_hosts_however_the_body_is_split(body in corpus(), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        let whole = scan_all(&body);
        let found = feed_all(&mut Scanner::new(), &split_at(&body, cuts), false);
        prop_assert_eq!(found, whole);
    }

    /// With peek at every chunk end (as the body scanner does), the only
    /// extra names are valid names (prefixes of longer ones): bare domains,
    /// or any name in URL context (held only until the next chunk).
    #[test]
    fn peek_adds_only_valid_names(body in corpus(), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        let whole = scan_all(&body);
        let found = feed_all(&mut Scanner::new(), &split_at(&body, cuts), true);
        for h in &whole {
            prop_assert!(found.contains(h), "missing {} in {:?}", h, found);
        }
        for h in found.iter().filter(|h| !whole.contains(h)) {
            let bare = scan_all(h.as_bytes()) == vec![h.clone()];
            let in_url = scan_all(format!("//{h}/").as_bytes()) == vec![h.clone()];
            prop_assert!(bare || in_url, "extra {}", h);
        }
    }

    /// Byte-at-a-time feeding never takes the in-chunk fast path, and the
    /// reference steps the state machine alone: both hold the fast path
    /// to exactly what the state machine finds.
    #[test]
    fn fast_path_finds_what_the_state_machine_finds(body in corpus()) {
        let whole = scan_all(&body);
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        let slow = feed_all(&mut Scanner::new(), &bytes, false);
        prop_assert_eq!(&whole, &slow);
        prop_assert_eq!(whole, slow_hosts(&body));
    }

    /// The 64-byte fast path reports exactly what the byte path reports,
    /// in the same order, however the body is split, with or without peek.
    #[test]
    fn block_path_reports_what_the_byte_path_reports(
        body in windows(),
        cuts in prop::collection::vec(any::<usize>(), 0..4),
        peek in any::<bool>(),
    ) {
        let chunks = split_at(&body, cuts);
        let fast = reports(&mut Scanner::new().with_owner_hosts(forges()), &chunks, peek);
        let bytes = reports(&mut Scanner::new().with_owner_hosts(forges()).byte_path_only(), &chunks, peek);
        prop_assert_eq!(fast, bytes);
    }

    /// A UTF-16 body (BOM or label) yields what its UTF-8 form does,
    /// however it is split.
    #[test]
    fn utf16_finds_what_utf8_finds(body in corpus(), cuts in prop::collection::vec(any::<usize>(), 0..6), be in any::<bool>()) {
        let text = String::from_utf8_lossy(&body);
        let mut utf16 = Vec::new();
        for u in text.encode_utf16() {
            utf16.extend(if be { u.to_be_bytes() } else { u.to_le_bytes() });
        }
        let want = scan_all(text.as_bytes());
        let label = if be { Charset::Utf16Be } else { Charset::Utf16Le };
        let found = feed_all(&mut Scanner::with_charset(label), &split_at(&utf16, cuts), false);
        prop_assert_eq!(found, want);
    }

    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..2000), split in any::<usize>(), label in 0u8..3) {
        let charset = [Charset::Auto, Charset::Utf16Le, Charset::Utf16Be][label as usize];
        let mut s = Scanner::with_charset(charset);
        let cut = split % (body.len() + 1);
        s.feed(&body[..cut], &mut |_| {});
        s.peek(&mut |_| {});
        s.feed(&body[cut..], &mut |_| {});
        s.finish(&mut |_| {});
    }
}
