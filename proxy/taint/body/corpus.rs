//! The precision corpus (issue 11): real package-registry documents and
//! packages, fetched once with the ordinary package clients, run through
//! [`BodyScanner`](super::BodyScanner) as a proxy would see them, and
//! through `policy::worth_tainting`, which decides what of that joins a
//! taint set: the names here are exactly what the fixture would taint.
//!
//! Each fixture's names must be plausible (a label before a known public
//! suffix, no base64 or hex fragments), must include the hosts its
//! archives name, and must equal the reviewed list beside it,
//! `tests/fixtures/corpus/<file>.hosts`. After a scanner change,
//! regenerate the lists with `SLUICE_BLESS=1 cargo test --lib
//! taint::body::corpus` and review the diff by eye: noise there is a
//! scanner bug.

use std::path::PathBuf;

use super::tests::build::gzip;
use super::tests::run_body;

/// The Content-Encoding stacks a fixture is served with.
type Stacks = &'static [&'static [&'static str]];

/// Fixture, Content-Encodings to serve it with, names it must yield.
const FIXTURES: &[(&str, Stacks, &[&str])] = &[
    ("express-5.3.0.tgz", &[&[]], &["expressjs.com"]),
    ("lodash-4.18.1.tgz", &[&[]], &["lodash.com"]),
    ("axios-1.21.1.tgz", &[&[]], &["axios-http.com"]),
    ("typescript-7.0.2.tgz", &[&[]], &["github.com"]),
    (
        "express.packument.json",
        &[&[], &["gzip"]],
        &["expressjs.com"],
    ),
    (
        "ms.packument.json",
        &[&[], &["gzip"], &["br"]],
        &["github.com"],
    ),
    (
        "requests-2.34.2-py3-none-any.whl",
        &[&[]],
        &["requests.readthedocs.io"],
    ),
    (
        "flask-3.1.3-py3-none-any.whl",
        &[&[]],
        &["flask.palletsprojects.com"],
    ),
    ("try-lock-0.2.5.crate", &[&[]], &["github.com"]),
    ("equivalent-1.0.3.crate", &[&[]], &["github.com"]),
    ("vary.README.md", &[&[]], &["nodejs.org", "coveralls.io"]),
];

/// Fixtures also fed one byte at a time.
const BYTEWISE: &[&str] = &["vary.README.md", "express-5.3.0.tgz"];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus")
}

fn encode(body: &[u8], encodings: &[&str]) -> Vec<u8> {
    use std::io::Write;
    let mut out = body.to_vec();
    for e in encodings {
        out = match *e {
            "gzip" => gzip(&out),
            "br" => {
                let mut v = Vec::new();
                let mut w = brotli::CompressorWriter::new(&mut v, 4096, 9, 22);
                w.write_all(&out).unwrap();
                drop(w);
                v
            }
            other => panic!("no encoder for {other}"),
        };
    }
    out
}

/// A label that looks like a fragment of base64 or hex, not a name.
fn encoded_fragment(label: &str) -> bool {
    let digits = label.bytes().filter(u8::is_ascii_digit).count();
    let letters = label.bytes().filter(u8::is_ascii_alphabetic).count();
    let hex = label.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && label.len() >= 8 && digits > 0 && letters > 0)
        || (label.len() >= 16 && !label.contains('-') && digits >= 3 && letters > 0)
}

/// A name with a known public suffix and a label before it. A suffix from
/// the list's private section (`httpbin.org`, `github.io`) is itself a
/// registered name, so it has its label.
fn valid(name: &str) -> bool {
    let Some(suffix) = psl::suffix(name.as_bytes()).filter(|s| s.is_known()) else {
        return false;
    };
    name.contains('.')
        && (psl::domain(name.as_bytes()).is_some() || suffix.typ() == Some(psl::Type::Private))
}

/// The precision problems of a fixture's names.
fn implausible(what: &str, found: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    for name in found {
        if !name.contains('.') {
            problems.push(format!("{what}: single label {name}"));
        } else if !valid(name) {
            problems.push(format!(
                "{what}: no public suffix with a label before it: {name}"
            ));
        }
        if name.split('.').any(encoded_fragment) {
            problems.push(format!("{what}: encoded fragment {name}"));
        }
        for other in found {
            if other != name && other.starts_with(name.as_str()) && !valid(name) {
                problems.push(format!("{what}: {name} is a prefix of {other}"));
            }
        }
    }
    problems
}

/// A fixture's names in 16 KiB chunks (the same however it is encoded),
/// and one byte at a time where [`BYTEWISE`] asks.
fn scan_fixture(file: &str, encodings: Stacks) -> (Vec<String>, Option<Vec<String>>) {
    let body = std::fs::read(dir().join(file)).expect("fixture");
    let (found, skipped, _) = run_body(&[], None, &body, 16 * 1024, 64 << 20);
    let found = tainted(found);
    assert_eq!(skipped, None, "{file}");
    for enc in encodings.iter().filter(|e| !e.is_empty()) {
        let (again, skipped, _) = run_body(enc, None, &encode(&body, enc), 16 * 1024, 64 << 20);
        let again = tainted(again);
        assert_eq!(skipped, None, "{file} {enc:?}");
        assert_eq!(again, found, "{file} served as {enc:?}");
    }
    let bytewise = BYTEWISE
        .contains(&file)
        .then(|| tainted(run_body(&[], None, &body, 1, 64 << 20).0));
    (found, bytewise)
}

/// What of the scanner's names would join a taint set (no allow-list
/// names anything; the serving host is not among them).
fn tainted(found: Vec<String>) -> Vec<String> {
    use crate::policy::{worth_tainting, SelfTaint};
    found
        .into_iter()
        .filter(|n| worth_tainting(n, "", SelfTaint::Taint, |_| false))
        .collect()
}

#[test]
fn corpus_names_match_reviewed_lists() {
    let bless = std::env::var_os("SLUICE_BLESS").is_some();
    let mut failures = Vec::new();
    for (file, encodings, must) in FIXTURES {
        let (found, bytewise) = scan_fixture(file, encodings);
        for m in *must {
            assert!(
                found.iter().any(|f| f == m),
                "{file}: {m} not found in {found:?}"
            );
        }
        if let Some(bytewise) = bytewise {
            for name in &found {
                assert!(bytewise.contains(name), "{file} bytewise: {name} lost");
            }
        }
        let list = dir().join(format!("{file}.hosts"));
        let text: String = found.iter().map(|h| format!("{h}\n")).collect();
        if bless {
            std::fs::write(&list, &text).expect("write the list");
        } else if std::fs::read_to_string(&list).ok().as_deref() != Some(text.as_str()) {
            failures.push(format!("{file}: found\n{text}"));
        }
    }
    assert!(
        failures.is_empty(),
        "names differ from the reviewed lists (SLUICE_BLESS=1 regenerates them):\n{}",
        failures.join("\n")
    );
}

#[test]
fn corpus_names_are_plausible() {
    let mut problems = Vec::new();
    for (file, encodings, _) in FIXTURES {
        let (found, bytewise) = scan_fixture(file, encodings);
        problems.extend(implausible(file, &found));
        if let Some(bytewise) = bytewise {
            problems.extend(implausible(&format!("{file} bytewise"), &bytewise));
        }
    }
    assert!(
        problems.is_empty(),
        "implausible names:\n{}",
        problems.join("\n")
    );
}
