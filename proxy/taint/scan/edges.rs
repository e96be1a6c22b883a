//! Named table cases found by issue 12's mutation run of the scanner
//! (`tools/scan-mutants.sh`): each pins behaviour a surviving mutant
//! changed and no earlier test noticed.

use super::cases::{table, Cases};

/// Edges the mutation run showed untested: URL context and what may
/// precede `//`, base64 after a URL label, script pieces in URL context,
/// a combining mark after a name, and escapes followed by hex letters.
const EDGES: Cases = &[
    (
        "IDN single label in a URL",
        "http://bücher/x",
        &["xn--bcher-kva"],
    ),
    (
        "base64 after a label, then the label in a URL",
        "//intranet+ //intranet/",
        &["intranet"],
    ),
    (
        "script pieces in URL context",
        "//请paste/",
        &["xn--df3a", "xn--paste-s48o"],
    ),
    (
        "combining mark glued to a name",
        "see x.example.com\u{301} now",
        &["x.example.com"],
    ),
    ("URL label with a digit", "http://host1/", &["host1"]),
    ("newline before //", "\n//intranet/", &["intranet"]),
    ("control byte before //: binary", "\x01//intranet/", &[]),
    (
        "variation selector between slashes",
        "/\u{FE00}/intranet/",
        &["intranet"],
    ),
    (
        "\\u escape then a hex letter",
        r"a\u002eexample.com",
        &["a.example.com"],
    ),
    (
        "\\u{} escape then a hex letter",
        r"a\u{2e}example.com",
        &["a.example.com"],
    ),
    (
        "hex reference without ; takes every hex digit",
        "a&#x2eexample.com",
        &["xn--axample-hce.com"],
    ),
    (
        "decimal reference without ;",
        "x&#46example.com",
        &["x.example.com"],
    ),
    ("& before an escape", "a&%2eexample.com", &["example.com"]),
    (
        "an entity name longer than any",
        "x&aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa;a.example.com",
        &["a.example.com"],
    ),
    (
        "\\u{} with seven digits is no escape",
        r"a\u{000002e}example.com",
        &["example.com"],
    ),
    (
        "\\u{} with six digits",
        r"a\u{00002e}example.com",
        &["a.example.com"],
    ),
    (
        "&# then a letter is no reference",
        "x&#a2e;example.com",
        &["example.com"],
    ),
    (
        "&#x then no hex digit",
        "&#xyz.example.com",
        &["xyz.example.com"],
    ),
    (
        "reference cut by the end",
        "paste.example.co&#109",
        &["paste.example.com"],
    ),
    (
        "percent escape cut by the end",
        "paste.example.co%6d",
        &["paste.example.com"],
    ),
    ("empty \\u{}", r"a\u{}b.example.com", &["b.example.com"]),
    (
        "four-byte CJK glued to a name",
        "see 𠀀paste.example.com",
        &["paste.example.com", "xn--paste-tm55d.example.com"],
    ),
    (
        "URL label after a leading mark: no name",
        "//\u{301}abc/",
        &[],
    ),
    (
        "URL label before marks and base64",
        "//abc\u{301}\u{301}+",
        &["abc"],
    ),
    (
        "a mark on the first of two joined names",
        "a.example.com\u{301}...b.example.org",
        &["b.example.org"],
    ),
    (
        "joined names after CJK",
        "请a.example.com...b.example.org",
        &["a.example.com", "b.example.org", "xn--a-gk2d.example.com"],
    ),
    (
        "a URL label before an ellipsis and base64",
        "http://intranet...x+",
        &["intranet"],
    ),
    (
        "a bare // label before an ellipsis",
        "see //intranet...x= ok",
        &["intranet"],
    ),
    ("empty \\u{} before //", r"\u{}//intranet/", &["intranet"]),
];

#[test]
fn edges_table() {
    table(EDGES);
}
