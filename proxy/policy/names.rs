//! Which names a response's text taints: the shape rules for bare names
//! (file names and code are not hosts), and whether a name the scanner
//! found joins a task's taint set.
//!
//! Owns: [`Named`] (what the scanner reports: a host, how it was written,
//! and the path after it), [`bare_evidence`] (SPEC §9 "What the scanner
//! does not taint": file names, code identifiers) and [`taint_key`] (the
//! one function that turns a found name into what the store keeps).
//! Must not: do I/O, or know about connections; the scanner calls
//! [`bare_evidence`] on its tokens, the exchange calls [`taint_key`].
//!
//! The safety argument (SECURITY.md): a shape rule never hides a name
//! that matters. A body to a host no allow-list names is refused as
//! `not-allowed` anyway, so a bare name that reads as code or a file name
//! is still tainted when some task's allow-list names it. The rules only
//! keep noise (`date.now`, `readme.md`) out of the set an operator reads.

use super::owners::{self, Owner};

/// How a name was written where the scanner found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Seen {
    /// After `scheme://` or `//`: always a name.
    Url,
    /// After `@`: the domain of an e-mail address.
    Email,
    /// A bare name with nothing against it.
    Bare,
    /// A bare name shaped like a file name or code: tainted only when an
    /// allow-list names it.
    Weak,
}

/// A name the scanner found: normalised host, how it was written, and
/// (for a name followed by `/`) the path segments after it as written,
/// decoded, at most `PATH_MAX` bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Named {
    /// The host name, normalised (lower case, ASCII).
    pub host: String,
    pub(crate) seen: Seen,
    /// `Some` when a `/` followed the name: the path after it (`acme/tool`),
    /// possibly empty.
    pub(crate) path: Option<String>,
    /// The path was cut by something that may still belong to it (a
    /// non-ASCII letter, the length bound): its owner cannot be read.
    pub(crate) path_cut: bool,
}

impl Named {
    pub(crate) fn new(host: impl Into<String>, seen: Seen) -> Named {
        Named {
            host: host.into(),
            seen,
            path: None,
            path_cut: false,
        }
    }
}

/// Path bytes kept after a name (enough for `api/v4/projects/OWNER`).
pub(crate) const PATH_MAX: usize = 160;

/// Last labels that are also common file extensions: a bare `setup.py`,
/// `readme.md` or `lib.rs` is a file name, not a host (SPEC §9).
const FILE_EXTENSIONS: &[&str] = &[
    "ac", "am", "cab", "cc", "in", "info", "js", "la", "map", "md", "mk", "ml", "mov", "pl", "pm",
    "ps", "py", "rs", "sh", "so", "tf", "ts", "zip",
];

/// Top-level suffixes that are common English words or identifiers
/// (`data.id`, `connectionstrategy.is`, `date.now`, `axios.post`): a bare
/// name under one of these needs a path after it, a `www.` before it, or
/// an allow-list entry to count.
const WORD_SUFFIXES: &[&str] = &[
    "abc",
    "add",
    "app",
    "as",
    "at",
    "auto",
    "bar",
    "be",
    "black",
    "blue",
    "bold",
    "buy",
    "by",
    "call",
    "case",
    "channel",
    "click",
    "codes",
    "data",
    "date",
    "dot",
    "download",
    "email",
    "events",
    "family",
    "final",
    "fire",
    "foo",
    "fun",
    "ge",
    "get",
    "global",
    "go",
    "green",
    "gt",
    "help",
    "host",
    "id",
    "ing",
    "is",
    "it",
    "link",
    "live",
    "lt",
    "me",
    "menu",
    "moe",
    "my",
    "name",
    "new",
    "next",
    "no",
    "now",
    "off",
    "one",
    "open",
    "page",
    "pet",
    "pid",
    "pink",
    "play",
    "plus",
    "post",
    "properties",
    "property",
    "read",
    "red",
    "report",
    "rest",
    "review",
    "run",
    "safety",
    "save",
    "search",
    "seek",
    "select",
    "show",
    "site",
    "space",
    "storage",
    "store",
    "stream",
    "style",
    "tab",
    "talk",
    "target",
    "to",
    "tools",
    "top",
    "total",
    "type",
    "tz",
    "us",
    "watch",
    "web",
    "white",
    "win",
    "work",
    "world",
    "yellow",
    "zero",
];

/// First labels that are code receivers, never a host's first label in
/// text (`this.app`, `self.rfile.read`, `window.open`).
const RECEIVERS: &[&str] = &[
    "this",
    "self",
    "super",
    "window",
    "document",
    "globalthis",
    "module",
    "exports",
    "process",
    "console",
    "cls",
    "req",
    "res",
    "builtins",
];

/// Judges a bare token (as written, before normalisation, trimmed; ASCII
/// or not) by its shape and what surrounds it: `before` is the byte
/// before it, `term` the byte after it (0 for none or non-ASCII).
/// Returns [`Seen::Email`] after `@`, [`Seen::Weak`] for a file name or
/// code, else [`Seen::Bare`].
pub(crate) fn bare_evidence(token: &[u8], before: u8, term: u8) -> Seen {
    if before == b'@' {
        return Seen::Email;
    }
    if code_context(before, term) || code_shape(token) || placeholder(token) || not_a_name(token) {
        return Seen::Weak;
    }
    // A path after it (`pastebin.com/raw/x`): a URL without its scheme.
    if term == b'/' {
        return Seen::Bare;
    }
    let last = last_label(token);
    let lower = |l: &[u8]| l.to_ascii_lowercase();
    let last = lower(last);
    let www = token.len() > 4 && token[..4].eq_ignore_ascii_case(b"www.");
    if FILE_EXTENSIONS
        .iter()
        .any(|e| e.as_bytes() == last.as_slice())
    {
        return Seen::Weak;
    }
    // A TOML table (`[profile.dev]`, `[package.metadata.docs.rs]`), unless
    // it reads as a host in brackets (`[example.com]`).
    if before == b'[' && term == b']' && !classic_suffix(&last) {
        return Seen::Weak;
    }
    if !www
        && WORD_SUFFIXES
            .iter()
            .any(|e| e.as_bytes() == last.as_slice())
    {
        return Seen::Weak;
    }
    Seen::Bare
}

/// The byte before or after says code: a call, an index, an assignment,
/// a block (`axios.post(`, `config.data[`, `a.b = `, `[profile.dev]`),
/// a member of a call's result (`x().y.com`) or a relative import
/// (`from .sansio.app import`).
fn code_context(before: u8, term: u8) -> bool {
    CODE_AFTER.contains(&term) || matches!(before, b')' | b']' | b'$' | b'#' | b'.')
}

/// Bytes after a name that make it code: a call, an index, an
/// assignment, a block (an opening brace, written as `\x7b`).
const CODE_AFTER: &[u8] = b"([=\x7b";

/// The old generic top-level suffixes.
const GENERIC: &[&str] = &["com", "org", "net", "edu", "gov", "mil", "int"];

/// The common suffixes of hosts in text: the old generic ones, and
/// two-letter country codes that are neither file extensions nor words.
fn classic_suffix(last: &[u8]) -> bool {
    GENERIC.iter().any(|g| g.as_bytes() == last)
        || (last.len() == 2
            && !FILE_EXTENSIONS.iter().any(|e| e.as_bytes() == last)
            && !WORD_SUFFIXES.iter().any(|e| e.as_bytes() == last))
}

/// Shaped like code: a label in camelCase or with an upper-case letter
/// after the first label's (`typing.IO`, `Date.now` is caught by its
/// suffix), an underscore, or a receiver first (`this.app`).
fn code_shape(token: &[u8]) -> bool {
    if !token.is_ascii() {
        return false;
    }
    let mut labels = token.split(|&b| b == b'.').filter(|l| !l.is_empty());
    let Some(first) = labels.next() else {
        return false;
    };
    if RECEIVERS
        .iter()
        .any(|r| r.as_bytes().eq_ignore_ascii_case(first))
    {
        return true;
    }
    let lower_first = !first.iter().any(u8::is_ascii_uppercase);
    std::iter::once(first).chain(labels).any(|l| {
        l.contains(&b'_')
            || l.windows(2)
                .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
    }) || (lower_first && token.iter().any(u8::is_ascii_uppercase))
}

/// Shaped like something else: a version (`1.0.0.dev`: every label but
/// the last is digits) or a reverse-DNS identifier (`com.android.art`,
/// `org.apache.commons`: a generic top-level label first).
fn not_a_name(token: &[u8]) -> bool {
    let labels: Vec<&[u8]> = token.split(|&b| b == b'.').collect();
    let Some((_, init)) = labels.split_last() else {
        return false;
    };
    let version = init
        .iter()
        .all(|l| !l.is_empty() && l.iter().all(u8::is_ascii_digit));
    let reversed = labels.len() >= 3
        && GENERIC
            .iter()
            .any(|g| g.as_bytes().eq_ignore_ascii_case(labels[0]));
    version || reversed
}

/// A mask or placeholder: every label one repeated character
/// (`xxx.xxx.xxx.xxx`).
fn placeholder(token: &[u8]) -> bool {
    token.split(|&b| b == b'.').all(|l| {
        l.first()
            .is_some_and(|f| l.iter().all(|b| b.eq_ignore_ascii_case(f)))
    })
}

fn last_label(token: &[u8]) -> &[u8] {
    token.rsplit(|&b| b == b'.').next().unwrap_or(token)
}

/// What a found name adds to a task's taint set.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TaintKey {
    /// The whole host.
    Host(String),
    /// One owner on a multi-tenant host's family (`github.com`, `acme`).
    Owner { root: String, owner: String },
}

impl std::fmt::Display for TaintKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaintKey::Host(h) => f.write_str(h),
            TaintKey::Owner { root, owner } => write!(f, "{root}/{owner}"),
        }
    }
}

/// What a caller knows when it asks [`taint_keys`].
pub(crate) struct Judge<'a> {
    /// The response's own site (the host that served it and the hosts its
    /// `related` group lets it name), when `self = "exclude"`.
    pub(crate) own_site: &'a dyn Fn(&str) -> bool,
    pub(crate) by_owner: &'a owners::ByOwner,
    /// Does some task's allow-list (or an ask-mode grant) name this host?
    pub(crate) allowed_somewhere: &'a dyn Fn(&str) -> bool,
    /// Weak names count like bare ones: the task relays hosts no
    /// allow-list names (`allow_mode = "shadow"` or `"ask"`), so the
    /// argument that lets weak names go does not hold for it.
    pub(crate) weak_counts: bool,
}

/// What a name found in a response adds to the task's taint set. Only a
/// name someone could reach: under a public suffix with a label before it
/// (a private-section suffix such as `httpbin.org` is itself a host), or
/// one that some task's allow-list names (`intranet`). A [`Seen::Weak`]
/// name only when an allow-list names it (or `weak_counts`). Not the
/// response's own site. On a multi-tenant host (`by_owner`) the owner the
/// path names, nothing when it names none, and the whole forge when the
/// owner cannot be read; the own-site rule does not apply there (a page in
/// `github.com/attacker` must taint `attacker`). A Pages host
/// (`acme.github.io`) also taints its owner on the forge. Exemptions are
/// the store's to apply.
pub(crate) fn taint_keys(name: &Named, j: &Judge<'_>) -> Vec<TaintKey> {
    let host = name.host.as_str();
    let family = j.by_owner.family_of(host);
    if family.is_none() && (j.own_site)(host) {
        return Vec::new();
    }
    let counts = match name.seen {
        Seen::Weak => j.weak_counts || (j.allowed_somewhere)(host),
        _ => reachable_name(host) || (j.allowed_somewhere)(host),
    };
    if !counts {
        return Vec::new();
    }
    let Some(family) = family else {
        let mut keys = vec![TaintKey::Host(host.to_string())];
        keys.extend(
            j.by_owner
                .pages_owner(host)
                .map(|(root, owner)| TaintKey::Owner {
                    root: root.to_string(),
                    owner,
                }),
        );
        return keys;
    };
    let root = family.root.clone();
    match owners::scanned_owner(family, host, name.path.as_deref(), name.path_cut) {
        Owner::Named(owner) => vec![TaintKey::Owner { root, owner }],
        Owner::None => Vec::new(),
        // The owner cannot be read: the whole forge, failing closed.
        Owner::Unreadable => vec![TaintKey::Host(root)],
    }
}

/// Is `name` under a known public suffix, with a label before it (or
/// itself a private-section suffix, which names a real host)?
fn reachable_name(name: &str) -> bool {
    match psl::suffix(name.as_bytes()) {
        Some(s) if s.is_known() => {
            s.typ() == Some(psl::Type::Private) || s.as_bytes().len() < name.len()
        }
        _ => false,
    }
}

#[cfg(test)]
#[path = "names_tests.rs"]
mod tests;
