//! Table tests of `policy::owners`.
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

const UPLOAD: &str = "application/x-git-upload-pack-request";

fn req<'a>(method: &'a str, path: &'a str, ct: &'a str) -> GitRequest<'a> {
    GitRequest {
        method,
        path: Some(path),
        content_type: Some(ct),
    }
}

#[test]
fn a_git_fetch_to_a_forge_carries_no_task_data() {
    let by = ByOwner::default_families();
    let fetch = req("POST", "/acme/x.git/git-upload-pack", UPLOAD);
    assert!(!by.body_counts(true, "github.com", fetch));
    assert!(!by.body_counts(true, "gist.github.com", fetch));
    let push = req("POST", "/acme/x.git/git-receive-pack", UPLOAD);
    assert!(by.body_counts(true, "github.com", push));
    assert!(by.body_counts(true, "pkgs.example.com", fetch));
    // Hosts that do not serve git: an API call ending in the word.
    assert!(by.body_counts(true, "api.github.com", fetch));
    assert!(by.body_counts(true, "raw.githubusercontent.com", fetch));
    let none = GitRequest {
        method: "POST",
        path: None,
        content_type: None,
    };
    assert!(by.body_counts(true, "github.com", none));
    assert!(!by.body_counts(false, "github.com", none));
    assert!(ByOwner::none().body_counts(true, "github.com", fetch));
}

#[test]
fn git_fetch_is_upload_pack_only() {
    let fetch = |m, p, c| is_git_fetch(req(m, p, c));
    assert!(fetch("POST", "/acme/x.git/git-upload-pack", UPLOAD));
    assert!(fetch(
        "post",
        "/acme/x/git-upload-pack",
        " Application/X-Git-Upload-Pack-Request"
    ));
    assert!(!fetch("POST", "/acme/x.git/git-receive-pack", UPLOAD));
    assert!(!fetch("PUT", "/acme/x.git/git-upload-pack", UPLOAD));
    assert!(!fetch("POST", "/acme/x.git/git-upload-pack/x", UPLOAD));
    assert!(!fetch("POST", "/acme/x.git/git-upload-pack", "text/plain"));
    assert!(!fetch(
        "POST",
        "/repos/acme/x/contents/git-upload-pack",
        UPLOAD
    ));
    assert!(!fetch(
        "POST",
        "/api/v4/projects/acme%2Fx/repository/files/git-upload-pack",
        UPLOAD
    ));
    assert!(!fetch("POST", "//x/git-upload-pack", UPLOAD));
}

#[test]
fn owners_in_the_forges_other_paths() {
    let by = ByOwner::default_families();
    let o = |h: &str, p: &str| by.request_owner(h, p).map(|(_, o)| o);
    let named = |n: &str| Some(Owner::Named(n.into()));
    assert_eq!(o("github.com", "/orgs/acme/people"), named("acme"));
    assert_eq!(o("gitlab.com", "/groups/acme/x"), named("acme"));
    assert_eq!(
        o("gitlab.com", "/api/v4/projects/12345/issues"),
        Some(Owner::Unreadable)
    );
    assert_eq!(o("gitlab.com", "/-/ide/project"), Some(Owner::None));
    assert_eq!(o("www.github.com", "/acme/x"), named("acme"));
    assert_eq!(o("github.com", "/%+Acme"), Some(Owner::Unreadable));
    let own = ByOwner::from_roots(&["git.example.org".into()]);
    assert_eq!(
        own.request_owner("git.example.org", "/api/v1/repos/acme/x")
            .map(|(_, o)| o),
        named("acme")
    );
    assert_eq!(
        by.pages_owner("acme.github.io"),
        Some(("github.com", "acme".into()))
    );
    assert_eq!(by.pages_owner("a.b.github.io"), None);
    assert_eq!(by.pages_owner("github.io"), None);
    assert_eq!(builtin_root("api.github.com"), Some("github.com"));
    assert_eq!(builtin_root("pkgs.example.com"), None);
}
