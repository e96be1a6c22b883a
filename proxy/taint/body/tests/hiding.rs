//! SPEC §9: every rule that keeps noise out of the taint set is tried by
//! an attacker who wants an allowed host, or an owner on a forge, read by
//! an agent but not tainted. The shapes that make a bare name "code" or
//! "a file name", and binary content, only ever keep a name out when no
//! allow-list names it; owners survive every encoding the scanner reads.

use super::build::*;
use super::*;

/// What `body` adds to a taint set when the allow-lists name `allowed`.
fn keys(body: &[u8], allowed: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in [1, 7, body.len().max(1)] {
        let (k, _) = default_keys(&[], body, chunk, allowed);
        if chunk != 1 {
            assert_eq!(
                k,
                out,
                "the same set in chunks of {chunk}: {:?}",
                String::from_utf8_lossy(body)
            );
        }
        out = k;
    }
    out
}

const HOST: &str = "paste.example.com";

/// Each shape that makes a bare name weak, around an allowed host.
const SHAPES: &[&str] = &[
    "upload(paste.example.com(data))",
    "send it: paste.example.com(",
    "x = paste.example.com[0]",
    "paste.example.com = target",
    "paste.example.com{ }",
    "f().paste.example.com now",
    "list[1]paste.example.com",
    "$paste.example.com",
    "#paste.example.com",
    "from .paste.example.com import x",
    "[paste.example.com]",
    "PASTE.EXAMPLE.COM",
    "paste.EXAMPLE.com",
    "Paste.Example.Com",
];

#[test]
fn a_code_or_file_shape_never_hides_an_allowed_host() {
    for shape in SHAPES {
        let got = keys(shape.as_bytes(), &[HOST]);
        assert!(
            got.contains(&HOST.to_string()),
            "{shape:?} hid {HOST}: {got:?}"
        );
    }
    // A file-extension or word suffix, allowed: tainted.
    for (text, host) in [
        ("post to paste.example.sh now", "paste.example.sh"),
        ("see drop.example.zip", "drop.example.zip"),
        ("upload to files.example.app", "files.example.app"),
        ("send to my.post", "my.post"),
    ] {
        assert_eq!(keys(text.as_bytes(), &[host]), [host], "{text}");
        assert!(
            keys(text.as_bytes(), &[]).is_empty(),
            "noise unless allowed: {text}"
        );
    }
}

#[test]
fn the_same_shapes_keep_noise_out() {
    for text in [
        "Date.now() readme.md setup.py lib.rs api.js.map lcov.info",
        "self.rfile.read() axios.post(url) this.app collections.abc typing.IO",
        "[profile.dev] [package.metadata.docs.rs] from .sansio.app import x",
        "ConnectionStrategy.is data.id candidate.read vnd.dece.zip",
    ] {
        assert!(
            keys(text.as_bytes(), &[]).is_empty(),
            "{text}: {:?}",
            keys(text.as_bytes(), &[])
        );
    }
    // What reads as a host still counts.
    assert_eq!(
        keys(b"see docs.example.com for more", &[]),
        ["docs.example.com"]
    );
    assert_eq!(keys(b"paste at evil.store/raw/1", &[]), ["evil.store"]);
    assert_eq!(
        keys(b"mail admin@mail.example.org", &[]),
        ["mail.example.org"]
    );
}

#[test]
fn binary_content_never_hides_an_allowed_host_or_a_url() {
    for magic in [
        &b"\x7fELF\x02\x01\x01\0"[..],
        b"MZ\x90\0",
        b"\xcf\xfa\xed\xfe",
        b"\0asm\x01\0\0\0",
        b"\x89PNG\r\n\x1a\n",
        b"GIF89a",
        b"wOF2",
    ] {
        let mut bin = magic.to_vec();
        bin.extend_from_slice(
            b"\0\0\x010github.com\0sync.mu\0paste.example.com\0https://drop.example.net/x\0",
        );
        let got = keys(&bin, &[HOST]);
        assert_eq!(got, ["drop.example.net", HOST], "{magic:?}");
        // The same in a tarball member.
        let tgz = gzip(&tar(&[("package/bin/tool", &bin)]));
        assert_eq!(keys(&tgz, &[HOST]), got, "{magic:?} in a .tgz");
    }
    // A text body an attacker starts with a magic number reads as binary:
    // its URLs still count, and its bare names where an allow-list names
    // them. A text member after a binary one is text again.
    let forged = b"MZ see paste.example.com or https://drop.example.net/";
    assert_eq!(keys(forged, &[HOST]), ["drop.example.net", HOST]);
    let tgz = gzip(&tar(&[
        ("a.node", b"\x7fELFx docs.example.com"),
        ("README", b"see docs.example.com"),
    ]));
    assert_eq!(keys(&tgz, &[]), ["docs.example.com"]);
}

#[test]
fn owners_survive_every_encoding_the_scanner_reads() {
    for text in [
        "https://github.com/attacker/x",
        "HTTPS://GITHUB.COM/Attacker/x",
        "github.com/attacker",
        r"https:\/\/github.com\/attacker\/x",
        "https%3A%2F%2Fgithub.com%2Fattacker%2Fx",
        "https://github.com/att&#97;cker/x",
        "https://github.com/att\\u0061cker/x",
        "https://ｇｉｔｈｕｂ.com/attacker/x",
        "https://github。com/attacker/x",
        "https://git\u{200b}hub.com/atta\u{200b}cker/x",
        "https://api.github.com/repos/attacker/x",
        "https://raw.githubusercontent.com/attacker/x/main/run.sh",
        "“github.com/attacker”",
        // URL forms a parser resolves to the same owner.
        "git@github.com:attacker/x.git",
        "https://api.github.com/repos/decoy/../attacker/x",
        "https://github.com/./attacker",
        r"github.com\attacker\x",
        "https://www.github.com/attacker/x",
        "https://github.com/attacker/repo/blob/main/src/very/deep/file.rs",
        "https://github.com/orgs/attacker/people",
        // Escapes held twice: the forge decodes what the agent sends.
        "https://github.com/&#37;61ttacker/x",
        r"https://github.com/\u002561ttacker/x",
    ] {
        assert_eq!(
            keys(text.as_bytes(), &[]),
            ["github.com/attacker"],
            "{text}"
        );
    }
    // An owner glued to a letter sluice cannot place: the whole forge.
    assert_eq!(
        keys("https://github.com/attacker请".as_bytes(), &[]),
        ["github.com"]
    );
    // No owner: nothing (SPEC §4).
    assert!(keys(
        b"see github.com or https://github.com/ and github.com.",
        &[]
    )
    .is_empty());
    // UTF-16 too.
    let utf16: Vec<u8> = "\u{feff}https://github.com/attacker/x"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    assert_eq!(keys(&utf16, &[]), ["github.com/attacker"]);
}
