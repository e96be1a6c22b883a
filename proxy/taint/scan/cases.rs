//! Named table cases for the scanner: the forms a name takes, and one
//! regression case per way a name was hidden (issue 11) or a non-name was
//! reported.

use super::scan_all;
use super::tests::slow_hosts;

/// Named cases: what, input, the names it must yield (exactly).
pub(super) type Cases = &'static [(&'static str, &'static str, &'static [&'static str])];

/// Runs named cases: each input must yield exactly the names given, read
/// as a whole (fast paths on) and byte by byte through the state machine.
pub(super) fn table(cases: Cases) {
    for (what, input, want) in cases {
        let want: Vec<String> = want.iter().map(std::string::ToString::to_string).collect();
        assert_eq!(scan_all(input.as_bytes()), want, "case {what:?}: {input:?}");
        assert_eq!(
            slow_hosts(input.as_bytes()),
            want,
            "stepped, {what:?}: {input:?}"
        );
    }
}

const FORMS: Cases = &[
    (
        "https url",
        "see https://paste.example.com/x?y",
        &["paste.example.com"],
    ),
    (
        "url with port",
        "http://paste.example.com:8080/",
        &["paste.example.com"],
    ),
    (
        "other scheme",
        "wss://ws.example.net/socket",
        &["ws.example.net"],
    ),
    (
        "ftp scheme",
        "ftp://files.example.org",
        &["files.example.org"],
    ),
    (
        "scheme-relative",
        "<script src=\"//cdn.example.net/a.js\">",
        &["cdn.example.net"],
    ),
    (
        "scheme-relative after =",
        "<a href=//foo.internal/x>",
        &["foo.internal"],
    ),
    (
        "json escaped",
        r#"{"u":"https:\/\/paste.example.com\/x"}"#,
        &["paste.example.com"],
    ),
    (
        "percent encoded",
        "?next=https%3A%2F%2Fpaste.example.com%2Fx",
        &["paste.example.com"],
    ),
    (
        "percent lower",
        "https%3a%2f%2fpaste.example.com",
        &["paste.example.com"],
    ),
    (
        "percent dots",
        "paste%2Eexample%2Ecom",
        &["paste.example.com"],
    ),
    (
        "unicode escaped",
        r#""https:\u002F\u002Fpaste.example.com""#,
        &["paste.example.com"],
    ),
    (
        "bare domain",
        "post it to paste.example.com now",
        &["paste.example.com"],
    ),
    (
        "bare domain end of sentence",
        "Send it to paste.example.com.",
        &["paste.example.com"],
    ),
    (
        "upper case",
        "HTTPS://PASTE.EXAMPLE.COM/",
        &["paste.example.com"],
    ),
    (
        "idn url",
        "https://bücher.example/",
        &["xn--bcher-kva.example"],
    ),
    ("idn bare", "visit bücher.de today", &["xn--bcher-kva.de"]),
    (
        "idn with a combining mark",
        "ex\u{301}ample.com",
        &["xn--example-uge.com"],
    ),
    (
        "idn catalan middle dot",
        "col·legi.cat",
        &["xn--collegi-xma.cat"],
    ),
    (
        "idn label under an ascii name",
        "日本.example.com",
        &["xn--wgv71a.example.com"],
    ),
    ("punycode", "xn--bcher-kva.de", &["xn--bcher-kva.de"]),
    (
        "email domain",
        "mail admin@corp.example.com",
        &["corp.example.com"],
    ),
    (
        "userinfo",
        "https://user:pw@evil.example.com/",
        &["evil.example.com", "user"],
    ),
    ("single label in url", "http://intranet/wiki", &["intranet"]),
    (
        "file name with tld extension",
        "see readme.md",
        &["readme.md"],
    ),
    (
        "unknown tld in url",
        "http://foo.internal/",
        &["foo.internal"],
    ),
    (
        "leading dots trimmed",
        "..paste.example.com",
        &["paste.example.com"],
    ),
    (
        "two hosts",
        "a.example.com,b.example.org",
        &["a.example.com", "b.example.org"],
    ),
    (
        "ellipsis between hosts",
        "a.example.com...b.example.org",
        &["a.example.com", "b.example.org"],
    ),
    (
        "html attribute",
        "<a href='https://x.example.com'>",
        &["x.example.com"],
    ),
    (
        "percent not escape",
        "100%sure.example.com",
        &["sure.example.com"],
    ),
    (
        "backslash not escape",
        r"C:\path\host.example.com",
        &["host.example.com"],
    ),
];

#[test]
fn forms_table() {
    table(FORMS);
}

/// Issue 11: names next to non-ASCII text were not found.
const NON_ASCII_NEIGHBOURS: Cases = &[
    (
        "glued to cjk text",
        "请访问paste.example.com获取",
        &["paste.example.com"],
    ),
    (
        "glued to traditional chinese",
        "請至paste.example.com下載",
        &["paste.example.com"],
    ),
    (
        "in curly quotes",
        "“paste.example.com”",
        &["paste.example.com"],
    ),
    (
        "after no-break space",
        "see\u{a0}paste.example.com",
        &["paste.example.com"],
    ),
    (
        "before full-width comma",
        "paste.example.com，下一个",
        &["paste.example.com"],
    ),
    (
        "zero-width space inside",
        "paste.exa\u{200b}mple.com",
        &["paste.example.com"],
    ),
    (
        "zero-width non-joiner inside",
        "paste.exa\u{200c}mple.com",
        &["paste.example.com"],
    ),
    (
        "zero-width joiner inside",
        "paste.exa\u{200d}mple.com",
        &["paste.example.com"],
    ),
    (
        "word joiner inside",
        "paste.exa\u{2060}mple.com",
        &["paste.example.com"],
    ),
    (
        "byte order mark inside",
        "paste.exa\u{feff}mple.com",
        &["paste.example.com"],
    ),
    (
        "soft hyphen inside",
        "paste.exa\u{ad}mple.com",
        &["paste.example.com"],
    ),
    (
        "ideographic full stops",
        "paste。example。com",
        &["paste.example.com"],
    ),
    (
        "full-width full stops",
        "paste．example．com",
        &["paste.example.com"],
    ),
    (
        "halfwidth ideographic full stops",
        "paste｡example｡com",
        &["paste.example.com"],
    ),
    (
        "small full stops",
        "paste﹒example﹒com",
        &["paste.example.com"],
    ),
    (
        "full-width letters",
        "ｐａｓｔｅ．ｅｘａｍｐｌｅ．ｃｏｍ",
        &["paste.example.com"],
    ),
    (
        "trademark sign after",
        "paste.example.com™",
        &["paste.example.com"],
    ),
    (
        "footnote superscript after",
        "paste.example.com²",
        &["paste.example.com"],
    ),
    ("emoji after", "paste.example.com👍", &["paste.example.com"]),
    (
        "circled number before",
        "①paste.example.com",
        &["paste.example.com"],
    ),
    (
        "glued to cyrillic",
        "сайтpaste.example.com",
        &["paste.example.com", "xn--paste-3ve7d2cl.example.com"],
    ),
    (
        "idn glued to cjk stays whole",
        "请访问bücher.de获取",
        &["xn--bcher-kva.de"],
    ),
    ("cjk idn", "中国.cn", &["xn--fiqs8s.cn"]),
    (
        "url glued to cjk text",
        "http://paste.example.com请访问",
        &["paste.example.com", "paste.example.xn--com-bo0j5iy14c"],
    ),
    (
        "zero-width space after slashes",
        "http://\u{200b}intranet/",
        &["intranet"],
    ),
    (
        "zero-width space between slashes",
        "/\u{200b}/intranet/",
        &["intranet"],
    ),
    // Found by mutation testing: a token whose ASCII start follows a
    // non-ASCII character is stepped from the character's first byte.
    (
        "fullwidth name glued to CJK and ASCII",
        " 请aｆｕｌｌ．ｅｘａｍｐｌｅ．ｃｏｍ",
        &["afull.example.com", "xn--afull-s48o.example.com"],
    ),
    (
        "ideographic dots, a URL, then joiners around accented text",
        "wide。example．org｡https://paste.example.com/x \u{200d}aéa\u{200d}wide。example．org｡",
        &["paste.example.com", "xn--aawide-bva.example.org"],
    ),
    (
        "joiners and a curly quote before Cyrillic glued to a name",
        "\u{200d}\u{200d} “é-\u{200b}сайтcyr.example.com bücher.de\\\\0&a&&aa",
        &[
            "cyr.example.com",
            "xn---cyr-9oa941c2b2cl.example.com",
            "xn--bcher-kva.de",
        ],
    ),
];

#[test]
fn non_ascii_neighbours_table() {
    table(NON_ASCII_NEIGHBOURS);
}

/// Issue 11: names behind HTML character references and `\x` escapes.
const ESCAPES: Cases = &[
    (
        "html decimal reference",
        "paste&#46;example&#46;com",
        &["paste.example.com"],
    ),
    (
        "html hex reference",
        "paste&#x2e;example&#X2E;com",
        &["paste.example.com"],
    ),
    (
        "html named reference",
        "paste&period;example&period;com",
        &["paste.example.com"],
    ),
    (
        "html reference without semicolon",
        "paste&#46example&#46com",
        &["paste.example.com"],
    ),
    (
        "html slashes",
        "https:&sol;&sol;intranet&sol;",
        &["intranet"],
    ),
    (
        "html colon and slashes",
        "https&colon;&#47;&#x2F;paste.example.com",
        &["paste.example.com"],
    ),
    (
        "html letter reference",
        "b&uuml;cher.de",
        &["xn--bcher-kva.de"],
    ),
    (
        "html legacy letter without semicolon",
        "b&uumlcher.de",
        &["xn--bcher-kva.de"],
    ),
    (
        "html legacy nbsp without semicolon",
        "&nbsppaste.example.com",
        &["paste.example.com"],
    ),
    (
        "html soft hyphen reference",
        "paste.exa&shy;mple.com",
        &["paste.example.com"],
    ),
    (
        "html zero-width space reference",
        "paste.exa&ZeroWidthSpace;mple.com",
        &["paste.example.com"],
    ),
    (
        "html reference decoded once",
        "paste&amp;#46;example.com",
        &["example.com"],
    ),
    (
        "html unknown name",
        "paste.example.com&bogus;x",
        &["paste.example.com"],
    ),
    (
        "hex escapes",
        r"paste\x2eexample\x2ecom",
        &["paste.example.com"],
    ),
    (
        "hex escapes of ideographic dots",
        r"paste\xe3\x80\x82example.com",
        &["paste.example.com"],
    ),
    (
        "braced unicode escapes",
        r"paste\u{2e}example\u{2e}com",
        &["paste.example.com"],
    ),
    (
        "eight-digit unicode escape",
        r"paste\U0000002eexample.com",
        &["paste.example.com"],
    ),
    (
        "regex escaped dots",
        r"/^https?:\/\/paste\.example\.com\//",
        &["paste.example.com"],
    ),
    (
        "json-quoted regex",
        r#""paste\\.example\\.com""#,
        &["paste.example.com"],
    ),
    (
        "surrogate pair escape",
        r"\ud835\udc29aste.com",
        &["paste.com"],
    ),
    (
        "percent-encoded ideographic dots",
        "paste%E3%80%82example%E3%80%82com",
        &["paste.example.com"],
    ),
    (
        "a percent sign that starts no escape, before //",
        ":%//a",
        &["a"],
    ),
    (
        "broken unicode escape keeps its digits",
        r"\u12.example.com",
        &["u12.example.com"],
    ),
];

#[test]
fn escapes_table() {
    table(ESCAPES);
}

/// Issue 11: what must not be reported (false taints refuse real work).
const PRECISION: Cases = &[
    ("version number", "version 1.2.3 and v10.4.1", &[]),
    ("ip literal", "http://127.0.0.1/ and 10.0.0.1", &[]),
    ("file names", "index.html app.js main.css", &[]),
    ("bare suffix only", "co.uk com", &[]),
    ("unknown tld", "foo.notatld", &[]),
    ("nothing", "plain words only", &[]),
    (
        "npm integrity with slashes",
        r#""integrity":"sha512-Rb//e+dx/0dw96vsvp//b==","#,
        &[],
    ),
    ("base64 after a quote", r#""data":"//8AAAA+x/y""#, &[]),
    (
        "json-escaped base64 slashes",
        r#""sha1-ab\/\/cd\/\/ef""#,
        &[],
    ),
    (
        "hex digest after slashes",
        "//5b8a3a7765dfe001261dde915589e782f8c94d1e/",
        &[],
    ),
    (
        "hex digest",
        "shasum 5b8a3a7765dfe001261dde915589e782f8c94d1e",
        &[],
    ),
    ("doctype public id", r#""-//W3C//DTD HTML 4.01//EN""#, &[]),
    ("file url path", "file:///etc/hosts", &[]),
    ("slashes after a word", "and/or//maybe", &[]),
    (
        "idn not split into an ascii suffix",
        "bücher.de",
        &["xn--bcher-kva.de"],
    ),
];

#[test]
fn precision_table() {
    table(PRECISION);
}
