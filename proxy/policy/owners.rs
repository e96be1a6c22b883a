//! Multi-tenant hosts (`[task.taint] by_owner`, SPEC §4): code forges
//! where tenants live in the path, tainted per owner instead of whole.
//!
//! Owns: the families of hosts that share owners (`github.com` with its
//! API, raw-content, codeload and gist hosts), reading the owner from a
//! scanned path or a request path, and what a request to such a host
//! carries (git's smart-HTTP fetch is a read). Must not: do I/O or keep
//! state: the taint store keeps the owners, this only names them.
//!
//! Fail closed: a request path whose owner cannot be read cleanly (an
//! escape left after one decoding, an empty or dot segment, a character
//! no forge allows in an owner) is "no owner", and a body to it is
//! refused while any owner of the family is tainted.

use std::collections::HashMap;

/// Where the owner sits in a host's paths: patterns tried in order. Each
/// is `/`-separated segments; a segment lists alternatives with `|`;
/// `{owner}` is the owner. A pattern without `{owner}` whose segments
/// match the path's first ones says the path names no owner.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Shape(&'static [&'static str]);

/// The built-in families: root, then each host with its shape.
const FAMILIES: &[(&str, &[(&str, Shape)])] = &[
    (
        "github.com",
        &[
            ("github.com", Shape(&["{owner}"])),
            ("gist.github.com", Shape(&["{owner}"])),
            ("api.github.com", Shape(&["repos|users|orgs/{owner}"])),
            ("uploads.github.com", Shape(&["repos/{owner}"])),
            ("raw.githubusercontent.com", Shape(&["{owner}"])),
            ("gist.githubusercontent.com", Shape(&["{owner}"])),
            ("codeload.github.com", Shape(&["{owner}"])),
        ],
    ),
    (
        "gitlab.com",
        &[(
            "gitlab.com",
            Shape(&["api/v4/projects|groups|users/{owner}", "api", "{owner}"]),
        )],
    ),
    (
        "bitbucket.org",
        &[
            ("bitbucket.org", Shape(&["{owner}"])),
            (
                "api.bitbucket.org",
                Shape(&["2.0/repositories|workspaces|users/{owner}"]),
            ),
        ],
    ),
    (
        "codeberg.org",
        &[(
            "codeberg.org",
            Shape(&["api/v1/repos|users|orgs/{owner}", "api", "{owner}"]),
        )],
    ),
];

/// The roots of the built-in families: `by_owner`'s default.
pub fn default_roots() -> Vec<String> {
    FAMILIES.iter().map(|(r, _)| r.to_string()).collect()
}

/// One family: hosts that share owners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Family {
    /// The name owner taints are kept under (`github.com`).
    pub root: String,
    shapes: HashMap<String, Shape>,
}

/// What a path says of its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// This owner (lower-case).
    Named(String),
    /// The path is of the host itself (`/graphql`, `/`), no owner's.
    None,
    /// The owner's segment cannot be read cleanly.
    Unreadable,
}

impl Family {
    /// Reads the owner from a path (no leading `/`, no query; already
    /// decoded as the scanner decodes text).
    pub fn owner_in(&self, host: &str, path: &str) -> Owner {
        let Some(shape) = self.shapes.get(host) else {
            return Owner::None;
        };
        let segs: Vec<&str> = path.split('/').collect();
        for pattern in shape.0 {
            let parts: Vec<&str> = pattern.split('/').collect();
            let mut matched = true;
            for (i, part) in parts.iter().enumerate() {
                let Some(seg) = segs.get(i) else {
                    matched = false;
                    break;
                };
                if *part == "{owner}" {
                    return owner_segment(seg);
                }
                if !part.split('|').any(|alt| alt.eq_ignore_ascii_case(seg)) {
                    matched = false;
                    break;
                }
            }
            if matched {
                return Owner::None;
            }
        }
        Owner::None
    }
}

impl Owner {
    /// An owner as written by a person (`sluice untaint github.com/Acme`).
    pub fn from_segment(seg: &str) -> Owner {
        owner_segment(seg)
    }
}

/// An owner segment: letters, digits, `-`, `_`, `.` (GitLab allows the
/// last two), not empty, not `.` or `..`; compared case-blind. GitLab's
/// `acme%2Ftool` project id arrives decoded as `acme/tool`: the owner is
/// before the `/`, which the split already did.
fn owner_segment(seg: &str) -> Owner {
    // A sentence may end right after it (`github.com/acme.`).
    let seg = seg.trim_end_matches('.');
    if seg.is_empty() {
        return Owner::None;
    }
    let clean = seg
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !clean || seg == "." || seg == ".." || seg.len() > 100 {
        return Owner::Unreadable;
    }
    Owner::Named(seg.to_ascii_lowercase())
}

/// A task's multi-tenant hosts, by host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ByOwner {
    families: Vec<Family>,
    /// Host → index into `families`.
    by_host: HashMap<String, usize>,
    /// The same hosts, shared with every scanner.
    scan: Option<std::sync::Arc<[Box<str>]>>,
}

impl ByOwner {
    /// Families for these roots: a built-in root brings its family; any
    /// other (normalised) name is a family of one, owners as the first
    /// path segment.
    pub fn from_roots(roots: &[String]) -> ByOwner {
        let mut by = ByOwner::default();
        for root in roots {
            let shapes: HashMap<String, Shape> = match FAMILIES.iter().find(|(r, _)| r == root) {
                Some((_, hosts)) => hosts
                    .iter()
                    .map(|(h, s)| (h.to_string(), s.clone()))
                    .collect(),
                None => [(root.clone(), Shape(&["{owner}"]))].into(),
            };
            let i = by.families.len();
            for h in shapes.keys() {
                by.by_host.insert(h.clone(), i);
            }
            by.families.push(Family {
                root: root.clone(),
                shapes,
            });
        }
        let mut hosts: Vec<Box<str>> = by.by_host.keys().map(|h| h.as_str().into()).collect();
        hosts.sort();
        by.scan = (!hosts.is_empty()).then(|| hosts.into());
        by
    }

    /// The hosts whose paths a scanner reads, shared (none: None).
    pub fn scan_hosts(&self) -> Option<std::sync::Arc<[Box<str>]>> {
        self.scan.clone()
    }

    /// The built-in families (the default).
    pub fn default_families() -> ByOwner {
        ByOwner::from_roots(&default_roots())
    }

    /// None: every host is tainted whole.
    pub fn none() -> ByOwner {
        ByOwner::default()
    }

    /// The family `host` belongs to, if it is multi-tenant.
    pub fn family_of(&self, host: &str) -> Option<&Family> {
        self.by_host.get(host).map(|&i| &self.families[i])
    }

    /// Every multi-tenant host (for the scanner: it reads the path after
    /// these).
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.by_host.keys().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.families.is_empty()
    }

    /// The roots, in config order.
    pub fn roots(&self) -> Vec<&str> {
        self.families.iter().map(|f| f.root.as_str()).collect()
    }

    /// Whose paths does a request to `host` with `path` (as sent: a
    /// leading `/`, no query) write to? `None` when `host` is not
    /// multi-tenant. The path is percent-decoded once; anything still
    /// unclear is [`Owner::Unreadable`].
    pub fn request_owner(&self, host: &str, path: &str) -> Option<(&str, Owner)> {
        let family = self.family_of(host)?;
        let decoded = match percent_decode_once(path.strip_prefix('/').unwrap_or(path)) {
            Some(p) => p,
            None => return Some((&family.root, Owner::Unreadable)),
        };
        let dots = decoded.split('/').any(|s| s == "." || s == "..");
        if dots || decoded.contains('%') || decoded.contains('\\') {
            return Some((&family.root, Owner::Unreadable));
        }
        Some((&family.root, family.owner_in(host, &decoded)))
    }
}

impl ByOwner {
    /// Does a request carry task data for taint's purposes? A body does,
    /// except git's smart-HTTP fetch to a multi-tenant host
    /// ([`is_git_fetch`]).
    pub fn body_counts(&self, body: bool, host: &str, method: &str, path: Option<&str>) -> bool {
        body && !(self.family_of(host).is_some() && path.is_some_and(|p| is_git_fetch(method, p)))
    }
}

/// `%XX` decoded once; None for a bad escape or bytes that are not UTF-8.
fn percent_decode_once(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Is this request git's smart-HTTP fetch (`POST …/git-upload-pack`, any
/// protocol version)? Its body is the wants and haves of a fetch: it
/// carries no task data to the repository's owner, so on a multi-tenant
/// host it is a read. `git-receive-pack` (push) is a write.
pub fn is_git_fetch(method: &str, path: &str) -> bool {
    method.eq_ignore_ascii_case("POST") && path.ends_with("/git-upload-pack")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_owners() {
        let by = ByOwner::default_families();
        let o = |h: &str, p: &str| by.request_owner(h, p).map(|(r, o)| (r.to_string(), o));
        let named = |r: &str, n: &str| Some((r.to_string(), Owner::Named(n.into())));
        let none = |r: &str| Some((r.to_string(), Owner::None));
        let bad = |r: &str| Some((r.to_string(), Owner::Unreadable));
        assert_eq!(
            o("github.com", "/acme/tool.git/git-receive-pack"),
            named("github.com", "acme")
        );
        assert_eq!(o("github.com", "/ACME/tool"), named("github.com", "acme"));
        assert_eq!(o("github.com", "/acme."), named("github.com", "acme"));
        assert_eq!(o("github.com", "/%61cme/tool"), named("github.com", "acme"));
        assert_eq!(o("github.com", "/%2561cme/tool"), bad("github.com"));
        assert_eq!(o("github.com", "//acme/tool"), none("github.com"));
        assert_eq!(o("github.com", "/../acme"), bad("github.com"));
        assert_eq!(o("github.com", "/me/../attacker/x"), bad("github.com"));
        assert_eq!(o("github.com", "/me/%2e%2e/attacker/x"), bad("github.com"));
        assert_eq!(o("github.com", "/ac%ZZme"), bad("github.com"));
        assert_eq!(o("github.com", "/"), none("github.com"));
        assert_eq!(
            o("api.github.com", "/repos/acme/x/issues"),
            named("github.com", "acme")
        );
        assert_eq!(
            o("api.github.com", "/Users/acme"),
            named("github.com", "acme")
        );
        assert_eq!(o("api.github.com", "/graphql"), none("github.com"));
        assert_eq!(o("api.github.com", "/repos/"), none("github.com"));
        assert_eq!(o("gist.github.com", "/acme"), named("github.com", "acme"));
        assert_eq!(
            o("raw.githubusercontent.com", "/acme/x/main/f"),
            named("github.com", "acme")
        );
        assert_eq!(
            o("codeload.github.com", "/acme/x/tar.gz/main"),
            named("github.com", "acme")
        );
        assert_eq!(
            o("gitlab.com", "/api/v4/projects/acme%2Ftool/issues"),
            named("gitlab.com", "acme")
        );
        assert_eq!(o("gitlab.com", "/api/graphql"), none("gitlab.com"));
        assert_eq!(
            o("gitlab.com", "/group.sub/x"),
            named("gitlab.com", "group.sub")
        );
        assert_eq!(
            o("api.bitbucket.org", "/2.0/repositories/acme/x"),
            named("bitbucket.org", "acme")
        );
        assert_eq!(
            o("codeberg.org", "/api/v1/repos/acme/x"),
            named("codeberg.org", "acme")
        );
        assert_eq!(o("example.com", "/acme"), None);
        // A family of one from config.
        let own = ByOwner::from_roots(&["git.example.org".into()]);
        assert_eq!(
            own.request_owner("git.example.org", "/acme/x")
                .map(|(_, o)| o),
            Some(Owner::Named("acme".into()))
        );
    }

    #[test]
    fn a_git_fetch_to_a_forge_carries_no_task_data() {
        let by = ByOwner::default_families();
        let fetch = Some("/acme/x.git/git-upload-pack");
        assert!(!by.body_counts(true, "github.com", "POST", fetch));
        assert!(by.body_counts(
            true,
            "github.com",
            "POST",
            Some("/acme/x.git/git-receive-pack")
        ));
        assert!(by.body_counts(true, "pkgs.example.com", "POST", fetch));
        assert!(by.body_counts(true, "github.com", "POST", None));
        assert!(!by.body_counts(false, "github.com", "POST", None));
        assert!(ByOwner::none().body_counts(true, "github.com", "POST", fetch));
    }

    #[test]
    fn git_fetch_is_upload_pack_only() {
        assert!(is_git_fetch("POST", "/acme/x.git/git-upload-pack"));
        assert!(!is_git_fetch("POST", "/acme/x.git/git-receive-pack"));
        assert!(!is_git_fetch("PUT", "/acme/x.git/git-upload-pack"));
        assert!(!is_git_fetch("POST", "/acme/x.git/git-upload-pack/x"));
    }
}
