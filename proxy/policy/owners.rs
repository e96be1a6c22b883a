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

/// A forge's host: its name, where the owner sits in its paths, and
/// whether it serves git.
type ForgeHost = (&'static str, Shape, bool);

/// The built-in families: root, then each host with its shape. A host
/// that serves git (`git-upload-pack`) is marked `true`.
const FAMILIES: &[(&str, &[ForgeHost])] = &[
    (
        "github.com",
        &[
            (
                "github.com",
                Shape(&["orgs|users/{owner}", "{owner}"]),
                true,
            ),
            (
                "www.github.com",
                Shape(&["orgs|users/{owner}", "{owner}"]),
                true,
            ),
            ("gist.github.com", Shape(&["{owner}"]), true),
            (
                "api.github.com",
                Shape(&["repos|users|orgs/{owner}"]),
                false,
            ),
            ("uploads.github.com", Shape(&["repos/{owner}"]), false),
            ("raw.githubusercontent.com", Shape(&["{owner}"]), false),
            ("gist.githubusercontent.com", Shape(&["{owner}"]), false),
            ("codeload.github.com", Shape(&["{owner}"]), false),
        ],
    ),
    (
        "gitlab.com",
        &[
            ("gitlab.com", Shape(GITLAB), true),
            ("www.gitlab.com", Shape(GITLAB), true),
        ],
    ),
    (
        "bitbucket.org",
        &[
            ("bitbucket.org", Shape(&["{owner}"]), true),
            ("www.bitbucket.org", Shape(&["{owner}"]), true),
            (
                "api.bitbucket.org",
                Shape(&["2.0/repositories|workspaces|users/{owner}"]),
                false,
            ),
        ],
    ),
    ("codeberg.org", &[("codeberg.org", Shape(GITEA), true)]),
];

/// GitLab: the API's project, group and user paths (a numeric project id
/// names no owner), `/-/` routes, groups.
const GITLAB: &[&str] = &[
    "api/v4/projects|groups|users/{owner}",
    "api",
    "-",
    "groups/{owner}",
    "{owner}",
];

/// Gitea, Forgejo (Codeberg) and a forge named in `by_owner` that sluice
/// does not know: the API's repo, user and org paths, then the owner
/// first.
const GITEA: &[&str] = &[
    "api/v1/repos|users|orgs/{owner}",
    "api/v4/projects|groups|users/{owner}",
    "api",
    "-",
    "{owner}",
];

/// Pages hosts: `OWNER.SUFFIX` is that owner's site on the forge `root`.
const PAGES: &[(&str, &str)] = &[
    ("github.io", "github.com"),
    ("gitlab.io", "gitlab.com"),
    ("codeberg.page", "codeberg.org"),
];

/// The roots of the built-in families: `by_owner`'s default.
pub(crate) fn default_roots() -> Vec<String> {
    FAMILIES.iter().map(|(r, _)| r.to_string()).collect()
}

/// One family: hosts that share owners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Family {
    /// The name owner taints are kept under (`github.com`).
    pub(crate) root: String,
    shapes: HashMap<String, Shape>,
    /// The hosts that serve git.
    git: Vec<String>,
}

/// What a path says of its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
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
    pub(crate) fn owner_in(&self, host: &str, path: &str) -> Owner {
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
                    // An API's numeric project id names no owner.
                    let id = i > 0 && parts[i - 1].contains("projects");
                    if id && !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
                        return Owner::Unreadable;
                    }
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

/// The owner a path found after a forge host names (SPEC §4 `by_owner`):
/// the path as the scanner read it (escapes decoded once), after `:`
/// for `host:port/…` and `git@host:owner/…`. It is decoded once more (an
/// owner written `&#37;61cme` reaches the forge as `%61cme`), `\` read as
/// `/` and `.` and `..` segments resolved, as URL parsers do; whatever is
/// still unclear is [`Owner::Unreadable`]. A path `cut` by something that
/// may belong to it names its owner only if that segment was whole.
pub(crate) fn scanned_owner(family: &Family, host: &str, path: Option<&str>, cut: bool) -> Owner {
    let Some(path) = path else {
        return Owner::None;
    };
    let path = match path.strip_prefix(':') {
        Some(rest) => match rest.split_once('/') {
            // `host:443/owner/…`
            // `host:443/owner` or `git@host:12345/repo` (an owner may be all
            // digits): which one cannot be told, so the whole forge.
            Some((port, _)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
                return Owner::Unreadable;
            }
            Some(_) => rest,
            // `host:443` alone, or `git@host:owner`.
            None if rest.bytes().all(|b| b.is_ascii_digit()) => "",
            None => rest,
        },
        None => path,
    };
    let path = if cut {
        // Only the segments before the cut are whole.
        match path.rfind('/') {
            Some(i) => &path[..=i],
            None => return Owner::Unreadable,
        }
    } else {
        path
    };
    let Some(decoded) = percent_decode_once(&path.replace('\\', "/")) else {
        return Owner::Unreadable;
    };
    if decoded.contains('%') {
        return Owner::Unreadable;
    }
    let mut segs: Vec<&str> = Vec::new();
    let mut dots = false;
    for seg in decoded.split('/') {
        match seg {
            "." => dots = true,
            ".." => {
                dots = true;
                segs.pop();
            }
            s => segs.push(s),
        }
    }
    if cut && dots {
        // A `..` after the cut could still move the owner.
        return Owner::Unreadable;
    }
    let resolved = segs.join("/");
    if resolved.is_empty() {
        return if cut { Owner::Unreadable } else { Owner::None };
    }
    if resolved.starts_with('/') {
        // `//owner`: an empty first segment.
        return Owner::Unreadable;
    }
    match family.owner_in(host, &resolved) {
        // The owner's segment lay beyond the cut.
        Owner::None if cut => Owner::Unreadable,
        owner => owner,
    }
}

impl Owner {
    /// An owner as written by a person (`sluice untaint github.com/Acme`).
    pub(crate) fn from_segment(seg: &str) -> Owner {
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
pub(crate) struct ByOwner {
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
    pub(crate) fn from_roots(roots: &[String]) -> ByOwner {
        let mut by = ByOwner::default();
        for root in roots {
            let (shapes, git): (HashMap<String, Shape>, Vec<String>) =
                match FAMILIES.iter().find(|(r, _)| r == root) {
                    Some((_, hosts)) => (
                        hosts
                            .iter()
                            .map(|(h, s, _)| (h.to_string(), s.clone()))
                            .collect(),
                        hosts
                            .iter()
                            .filter(|(_, _, git)| *git)
                            .map(|(h, _, _)| h.to_string())
                            .collect(),
                    ),
                    None => ([(root.clone(), Shape(GITEA))].into(), vec![root.clone()]),
                };
            let i = by.families.len();
            for h in shapes.keys() {
                by.by_host.insert(h.clone(), i);
            }
            by.families.push(Family {
                root: root.clone(),
                shapes,
                git,
            });
        }
        let mut hosts: Vec<Box<str>> = by.by_host.keys().map(|h| h.as_str().into()).collect();
        hosts.sort();
        by.scan = (!hosts.is_empty()).then(|| hosts.into());
        by
    }

    /// The hosts whose paths a scanner reads, shared (none: None).
    pub(crate) fn scan_hosts(&self) -> Option<std::sync::Arc<[Box<str>]>> {
        self.scan.clone()
    }

    /// The built-in families (the default).
    pub(crate) fn default_families() -> ByOwner {
        ByOwner::from_roots(&default_roots())
    }

    /// None: every host is tainted whole.
    #[cfg(test)]
    pub(crate) fn none() -> ByOwner {
        ByOwner::default()
    }

    /// The family `host` belongs to, if it is multi-tenant.
    pub(crate) fn family_of(&self, host: &str) -> Option<&Family> {
        self.by_host.get(host).map(|&i| &self.families[i])
    }

    /// A Pages host (`acme.github.io`): its owner on the forge, if that
    /// forge is tainted by owner here.
    pub(crate) fn pages_owner(&self, host: &str) -> Option<(&str, String)> {
        PAGES.iter().find_map(|(suffix, root)| {
            let owner = host.strip_suffix(suffix)?.strip_suffix('.')?;
            let family = self.family_of(root)?;
            match owner_segment(owner) {
                Owner::Named(o) if !owner.contains('.') => Some((family.root.as_str(), o)),
                _ => None,
            }
        })
    }

    /// Every multi-tenant host (for the scanner: it reads the path after
    /// these).
    pub(crate) fn hosts(&self) -> impl Iterator<Item = &str> {
        self.by_host.keys().map(String::as_str)
    }

    /// The roots, in config order.
    pub(crate) fn roots(&self) -> Vec<&str> {
        self.families.iter().map(|f| f.root.as_str()).collect()
    }

    /// Whose paths does a request to `host` with `path` (as sent: a
    /// leading `/`, no query) write to? `None` when `host` is not
    /// multi-tenant. The path is percent-decoded once; anything still
    /// unclear is [`Owner::Unreadable`].
    pub(crate) fn request_owner(&self, host: &str, path: &str) -> Option<(&str, Owner)> {
        let family = self.family_of(host)?;
        let Some(decoded) = percent_decode_once(path.strip_prefix('/').unwrap_or(path)) else {
            return Some((&family.root, Owner::Unreadable));
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
    /// except git's smart-HTTP fetch to a forge host that serves git
    /// ([`is_git_fetch`]).
    pub(crate) fn body_counts(&self, body: bool, host: &str, req: GitRequest<'_>) -> bool {
        let git_host = self
            .family_of(host)
            .is_some_and(|f| f.git.iter().any(|h| h == host));
        body && !(git_host && is_git_fetch(req))
    }
}

/// What [`is_git_fetch`] looks at.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GitRequest<'a> {
    pub(crate) method: &'a str,
    /// As sent (none for a CONNECT).
    pub(crate) path: Option<&'a str>,
    pub(crate) content_type: Option<&'a str>,
}

/// `%XX` decoded once; None for a bad escape or bytes that are not UTF-8.
fn percent_decode_once(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Is this request git's smart-HTTP fetch: `POST /OWNER/REPO[.git]/git-upload-pack`
/// with git's own content type (any protocol version)? Its body is the
/// wants and haves of a fetch: it carries no task data to the
/// repository's owner, so on a forge it is a read. `git-receive-pack`
/// (push) is a write, and so is anything else that ends in the same word
/// (an API call that creates a file of that name).
pub(crate) fn is_git_fetch(req: GitRequest<'_>) -> bool {
    let Some(path) = req.path else {
        return false;
    };
    let segs: Vec<&str> = path.split('/').collect();
    req.method.eq_ignore_ascii_case("POST")
        && segs.len() == 4
        && segs[0].is_empty()
        && !segs[1].is_empty()
        && !segs[2].is_empty()
        && segs[3] == "git-upload-pack"
        && req.content_type.is_some_and(|c| {
            c.trim()
                .eq_ignore_ascii_case("application/x-git-upload-pack-request")
        })
}

/// The root of the built-in family `host` belongs to, whatever the config
/// says (a reload that drops `by_owner` must not forget owner taints).
pub(crate) fn builtin_root(host: &str) -> Option<&'static str> {
    FAMILIES
        .iter()
        .find(|(_, hosts)| hosts.iter().any(|(h, _, _)| *h == host))
        .map(|(root, _)| *root)
}

#[cfg(test)]
#[path = "owners_tests.rs"]
mod tests;
