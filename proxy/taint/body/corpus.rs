//! The precision corpus (issues 11, 26): real package-registry documents
//! and packages, fetched once with the ordinary package clients, run
//! through [`BodyScanner`](super::BodyScanner) as a proxy would see them,
//! and through `policy::names::taint_key` with the default settings, which
//! decides what of that joins a taint set.
//!
//! Each fixture's names must be plausible (a label before a known public
//! suffix, no base64 or hex fragments), must include the hosts its
//! archives name, and are measured against the reviewed list beside it,
//! `tests/fixtures/corpus/<file>.hosts` (the names a person reading the
//! fixture takes as hosts): precision at least 95 %, recall at least 99 %. After a scanner change,
//! regenerate the lists with `SLUICE_BLESS=1 cargo test --lib
//! taint::body::corpus`, review the diff by eye and take out what is not
//! a host; `python3 tools/corpus-urls.py` checks the lists hold
//! every name an independent regular expression finds in URL or e-mail
//! context.

use std::path::PathBuf;

use super::tests::build::gzip;
use super::tests::typed_keys;
use super::Skipped;

/// The Content-Encoding stacks a fixture is served with.
type Stacks = &'static [&'static [&'static str]];

/// Fixture, Content-Encodings to serve it with, names it must yield.
const FIXTURES: &[(&str, Stacks, &[&str])] = &[
    ("express-5.3.0.tgz", &[&[]], &["expressjs.com"]),
    ("lodash-4.18.1.tgz", &[&[]], &["lodash.com"]),
    ("axios-1.21.1.tgz", &[&[]], &["axios-http.com"]),
    ("typescript-7.0.2.tgz", &[&[]], &["github.com/microsoft"]),
    (
        "express.packument.json",
        &[&[], &["gzip"]],
        &["expressjs.com"],
    ),
    (
        "ms.packument.json",
        &[&[], &["gzip"], &["br"]],
        &["github.com/vercel"],
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
    ("try-lock-0.2.5.crate", &[&[]], &["github.com/seanmonstar"]),
    (
        "equivalent-1.0.3.crate",
        &[&[]],
        &["github.com/indexmap-rs"],
    ),
    ("vary.README.md", &[&[]], &["nodejs.org", "coveralls.io"]),
    ("ms-2.1.3.tgz", &[&[]], &["github.com/vercel"]),
    // A native addon: a Mach-O binary beside its JavaScript.
    ("fsevents-2.3.3.tgz", &[&[]], &["github.com/fsevents"]),
    // A crate whose tests list hundreds of `*.rs` files.
    ("syn-2.0.87.crate", &[&[]], &["docs.rs"]),
    // The Python registry's index page for a project (HTML).
    (
        "requests.simple.html",
        &[&[], &["gzip"]],
        &["files.pythonhosted.org"],
    ),
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
    let Some(suffix) = psl::suffix(name.as_bytes()).filter(psl::Suffix::is_known) else {
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

/// A fixture's taint set in 16 KiB chunks (the same however it is
/// encoded), and one byte at a time where [`BYTEWISE`] asks.
fn scan_fixture(file: &str, encodings: Stacks) -> (Vec<String>, Option<Vec<String>>) {
    let body = std::fs::read(dir().join(file)).expect("fixture");
    let (found, skipped) = taint_set(&[], &body, 16 * 1024);
    assert_eq!(skipped, None, "{file}");
    for enc in encodings.iter().filter(|e| !e.is_empty()) {
        let (again, skipped) = taint_set(enc, &encode(&body, enc), 16 * 1024);
        assert_eq!(skipped, None, "{file} {enc:?}");
        assert_eq!(again, found, "{file} served as {enc:?}");
    }
    let bytewise = BYTEWISE.contains(&file).then(|| taint_set(&[], &body, 1).0);
    (found, bytewise)
}

/// What a body would add to a taint set under the default settings (no
/// allow-list names anything, no host served it, the default multi-tenant
/// hosts read by owner): keys as `sluice report --taint` lists them.
fn taint_set(encodings: &[&str], body: &[u8], chunk: usize) -> (Vec<String>, Option<Skipped>) {
    // HTML is served as such: its rendered text is a reading of its own.
    let html = body.starts_with(b"<!DOCTYPE html") || body.starts_with(b"<html");
    typed_keys(encodings, html.then_some("text/html"), body, chunk, &[])
}

/// The reviewed list beside a fixture: the names a person reading it
/// takes as hosts (URL and e-mail context, and bare mentions such as
/// "see docs.example.com"), owners on multi-tenant hosts as `root/owner`.
fn reviewed(file: &str) -> Vec<String> {
    std::fs::read_to_string(dir().join(format!("{file}.hosts")))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// Precision and recall of the scanner over the whole corpus, against the
/// reviewed lists; printed (`cargo test corpus -- --nocapture`) and held
/// to at least 95 % and 99 %. `SLUICE_BLESS=1` writes what the scanner
/// finds to the lists, for a person to review.
#[test]
fn corpus_precision_and_recall() {
    let bless = std::env::var_os("SLUICE_BLESS").is_some();
    let (mut tp, mut fp, mut fneg) = (0usize, 0usize, 0usize);
    let mut report = Vec::new();
    for (file, encodings, must) in FIXTURES {
        let (found, bytewise) = scan_fixture(file, encodings);
        for m in *must {
            assert!(
                found.iter().any(|f| f == m),
                "{file}: {m} not found in {found:?}"
            );
        }
        if let Some(bytewise) = bytewise {
            assert_eq!(bytewise, found, "{file}: one byte at a time");
        }
        if bless {
            let text: String = found.iter().map(|h| format!("{h}\n")).collect();
            std::fs::write(dir().join(format!("{file}.hosts")), text).expect("write the list");
            continue;
        }
        let truth = reviewed(file);
        let extra: Vec<&String> = found.iter().filter(|f| !truth.contains(f)).collect();
        let missed: Vec<&String> = truth.iter().filter(|t| !found.contains(t)).collect();
        tp += found.len() - extra.len();
        fp += extra.len();
        fneg += missed.len();
        report.push(format!(
            "{file}: {} found, {} reviewed, not hosts: {extra:?}, missed: {missed:?}",
            found.len(),
            truth.len()
        ));
    }
    if bless {
        return;
    }
    let precision = tp as f64 / (tp + fp).max(1) as f64;
    let recall = tp as f64 / (tp + fneg).max(1) as f64;
    println!("{}", report.join("\n"));
    println!(
        "corpus: precision {:.1} % ({tp} of {} names found are hosts), recall {:.1} % ({tp} of {} hosts found)",
        precision * 100.0,
        tp + fp,
        recall * 100.0,
        tp + fneg
    );
    assert!(
        precision >= 0.95 && recall >= 0.99,
        "precision {precision:.3}, recall {recall:.3}:\n{}",
        report.join("\n")
    );
}

#[test]
fn corpus_names_are_plausible() {
    let mut problems = Vec::new();
    for (file, encodings, _) in FIXTURES {
        let (found, bytewise) = scan_fixture(file, encodings);
        let hosts: Vec<String> = found
            .iter()
            .map(|k| k.split('/').next().unwrap_or(k).to_string())
            .collect();
        problems.extend(implausible(file, &hosts));
        if let Some(bytewise) = bytewise {
            let hosts: Vec<String> = bytewise
                .iter()
                .map(|k| k.split('/').next().unwrap_or(k).to_string())
                .collect();
            problems.extend(implausible(&format!("{file} bytewise"), &hosts));
        }
    }
    assert!(
        problems.is_empty(),
        "implausible names:\n{}",
        problems.join("\n")
    );
}

/// The same bytes give the same set however they are split (SPEC §9): 20
/// random chunkings of each of two fixtures, nothing recorded in part.
#[test]
fn random_splits_give_the_same_set() {
    for file in ["express-5.3.0.tgz", "vary.README.md"] {
        let body = std::fs::read(dir().join(file)).expect("fixture");
        let (whole, _) = taint_set(&[], &body, body.len());
        let mut seed: u64 = 0x5eed ^ body.len() as u64;
        for round in 0..20 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let chunk = 1 + (seed >> 33) as usize % 700;
            let (got, _) = taint_set(&[], &body, chunk);
            assert_eq!(got, whole, "{file}, round {round}, chunks of {chunk}");
        }
    }
}
