use super::*;
use crate::policy::owners::ByOwner;
use std::collections::HashSet;

fn settings(max: usize, exempt: &[&str]) -> TaintSettings {
    TaintSettings {
        mode: TaintMode::Enforce,
        exempt: exempt
            .iter()
            .map(std::string::ToString::to_string)
            .collect::<HashSet<_>>(),
        max_hosts: max,
        max_scan_bytes: 1 << 20,
        self_taint: crate::config::SelfTaint::Exclude,
        by_owner: ByOwner::default_families(),
        related: Default::default(),
    }
}

fn host(h: &str) -> TaintKey {
    TaintKey::Host(h.into())
}

fn owner(root: &str, o: &str) -> TaintKey {
    TaintKey::Owner {
        root: root.into(),
        owner: o.into(),
    }
}

fn tainted_key(state: TaintState) -> Option<(String, bool)> {
    match state {
        TaintState::Tainted { key, exact, .. } => Some((key, exact)),
        _ => None,
    }
}

#[tokio::test]
async fn insert_exempt_overflow_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let log = AccessLog::spawn(dir.path(), Default::default(), Default::default());
    let s = settings(2, &["api.example.com"]);
    let store = TaintStore::new("t");
    let src: Arc<str> = "http://docs.example.com/readme".into();
    assert_eq!(
        store.insert(&host("a.example.com"), &src, &s, &log),
        Inserted::New
    );
    assert_eq!(
        store.insert(&host("a.example.com"), &src, &s, &log),
        Inserted::Known
    );
    assert_eq!(
        store.insert(&host("api.example.com"), &src, &s, &log),
        Inserted::Exempt
    );
    assert_eq!(
        store.insert(&host("b.example.com"), &src, &s, &log),
        Inserted::New
    );
    assert_eq!(
        store.insert(&host("c.example.com"), &src, &s, &log),
        Inserted::Overflow { first: true }
    );
    assert_eq!(
        store.insert(&host("d.example.com"), &src, &s, &log),
        Inserted::Overflow { first: false }
    );
    assert!(matches!(
        store.state("a.example.com", Some("/"), &s),
        TaintState::Tainted { by, .. } if &*by.source == "http://docs.example.com/readme"
    ));
    assert_eq!(store.state("api.example.com", None, &s), TaintState::Clean);
    assert_eq!(
        store.state("zzz.example.com", None, &s),
        TaintState::Overflow
    );
    log.flush().await;

    let path = dir.path().join("tasks/t/taint.jsonl");
    let (reloaded, n, bad) = TaintStore::load("t", &path, 100);
    assert_eq!((n, bad), (2, 0));
    assert!(tainted_key(reloaded.state("b.example.com", None, &s)).is_some());
    // Regression (issue 11, finding 6): the overflow itself is saved, so a
    // restart — even with a larger max_hosts — stays failed closed for the
    // host that was dropped.
    assert!(reloaded.overflowed());
    assert_eq!(
        reloaded.state("c.example.com", None, &s),
        TaintState::Overflow
    );
    // A torn last line (crash mid-write) is skipped, not fatal.
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"ts\":\"2026");
    std::fs::write(&path, text).unwrap();
    let (_, n, bad) = TaintStore::load("t", &path, 100);
    assert_eq!((n, bad), (2, 1));
    // Loading more than max_hosts starts overflowed.
    let (small, _, _) = TaintStore::load("t", &path, 1);
    assert!(small.overflowed());
}

#[tokio::test]
async fn owners_are_tainted_apart_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = AccessLog::spawn(dir.path(), Default::default(), Default::default());
    let s = settings(100, &[]);
    let store = TaintStore::new("t");
    let src: Arc<str> = "https://docs.example.com/readme".into();
    assert_eq!(
        store.insert(&owner("github.com", "acme"), &src, &s, &log),
        Inserted::New
    );
    let st = |store: &TaintStore, h: &str, p: Option<&str>| tainted_key(store.state(h, p, &s));
    let acme = Some(("github.com/acme".to_string(), true));
    let any = Some(("github.com/acme".to_string(), false));
    // The owner's paths, on every host of the family.
    assert_eq!(
        st(
            &store,
            "github.com",
            Some("/acme/tool.git/git-receive-pack")
        ),
        acme
    );
    assert_eq!(st(&store, "github.com", Some("/ACME/tool")), acme);
    assert_eq!(
        st(&store, "api.github.com", Some("/repos/acme/tool/issues")),
        acme
    );
    assert_eq!(
        st(&store, "raw.githubusercontent.com", Some("/acme/x")),
        acme
    );
    assert_eq!(st(&store, "gist.github.com", Some("/acme")), acme);
    // Another owner's paths are clean; so is a prefix of the owner.
    assert_eq!(
        st(&store, "github.com", Some("/me/tool.git/git-receive-pack")),
        None
    );
    assert_eq!(st(&store, "github.com", Some("/acm/tool")), None);
    assert_eq!(st(&store, "github.com", Some("/acmecorp/tool")), None);
    // No owner, an unreadable one, or an opaque tunnel: any owner counts.
    assert_eq!(st(&store, "api.github.com", Some("/graphql")), any);
    assert_eq!(st(&store, "github.com", Some("/%2561cme/x")), any);
    assert_eq!(st(&store, "github.com", None), any);
    // Other families and hosts are not touched.
    assert_eq!(st(&store, "gitlab.com", Some("/acme/x")), None);
    assert_eq!(st(&store, "pkgs.example.com", None), None);
    log.flush().await;
    let path = dir.path().join("tasks/t/taint.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("\"host\":\"github.com\"") && text.contains("\"owner\":\"acme\""),
        "{text}"
    );
    let (reloaded, n, _) = TaintStore::load("t", &path, 100);
    assert_eq!(n, 1);
    assert_eq!(st(&reloaded, "github.com", Some("/acme/x")), acme);
    assert_eq!(st(&reloaded, "github.com", Some("/x")), None);
}

#[tokio::test]
async fn untaint_removes_with_a_line_and_a_restart_replays_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = AccessLog::spawn(dir.path(), Default::default(), Default::default());
    let s = settings(100, &[]);
    let store = TaintStore::new("t");
    let src: Arc<str> = "https://docs.example.com/readme".into();
    store.insert(&host("paste.example.com"), &src, &s, &log);
    store.insert(&owner("github.com", "acme"), &src, &s, &log);
    assert!(store.untaint("nothere.example.com", "test", &log).is_none());
    let p = store.untaint("github.com/acme", "test", &log).unwrap();
    assert_eq!(&*p.source, "https://docs.example.com/readme");
    assert_eq!(store.state("github.com", None, &s), TaintState::Clean);
    assert!(store.untaint("paste.example.com", "test", &log).is_some());
    assert_eq!(store.len(), 0);
    // Tainted again later, by another page: a new line, a new taint.
    let src2: Arc<str> = "https://other.example.com/".into();
    assert_eq!(
        store.insert(&host("paste.example.com"), &src2, &s, &log),
        Inserted::New
    );
    log.flush().await;
    let path = dir.path().join("tasks/t/taint.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches("\"event\":\"untaint\"").count(), 2, "{text}");
    assert!(text.contains("\"cleared_source\":\"https://docs.example.com/readme\""));
    let (reloaded, n, bad) = TaintStore::load("t", &path, 100);
    assert_eq!((n, bad), (1, 0));
    assert!(matches!(
        reloaded.state("paste.example.com", None, &s),
        TaintState::Tainted { by, .. } if &*by.source == "https://other.example.com/"
    ));
    assert_eq!(
        reloaded.state("github.com", Some("/acme/x"), &s),
        TaintState::Clean
    );
}

#[test]
fn pending_taints_count_until_released_and_are_never_kept() {
    let s = settings(100, &[]);
    let store = TaintStore::new("t");
    let src: Arc<str> = "https://docs.example.com/".into();
    let k = [host("github.co")];
    store.hold(&k, &src);
    store.hold(&k, &src);
    assert!(tainted_key(store.state("github.co", None, &s)).is_some());
    store.release(&k);
    assert!(tainted_key(store.state("github.co", None, &s)).is_some());
    store.release(&k);
    assert_eq!(store.state("github.co", None, &s), TaintState::Clean);
    assert!(store.list().is_empty());
    // A pending owner counts for the owner's paths, and for paths that
    // name none.
    let o = [owner("github.com", "att")];
    store.hold(&o, &src);
    assert!(tainted_key(store.state("github.com", Some("/att/x"), &s)).is_some());
    assert!(tainted_key(store.state("api.github.com", Some("/graphql"), &s)).is_some());
    store.release(&o);
    assert_eq!(
        store.state("github.com", Some("/att/x"), &s),
        TaintState::Clean
    );
}

#[test]
fn off_mode_sees_nothing() {
    let mut s = settings(10, &[]);
    let store = TaintStore::new("t");
    store.put(
        "a.example.com",
        None,
        Provenance {
            source: "x".into(),
            at: "y".into(),
        },
    );
    s.mode = TaintMode::Off;
    assert_eq!(store.state("a.example.com", None, &s), TaintState::Clean);
}

#[tokio::test]
async fn dropping_by_owner_keeps_owner_taints_failing_closed() {
    let dir = tempfile::tempdir().unwrap();
    let log = AccessLog::spawn(dir.path(), Default::default(), Default::default());
    let mut s = settings(100, &["github.com/me"]);
    let store = TaintStore::new("t");
    let src: Arc<str> = "https://docs.example.com/readme".into();
    assert_eq!(
        store.insert(&owner("github.com", "me"), &src, &s, &log),
        Inserted::Exempt
    );
    store.insert(&owner("github.com", "attacker"), &src, &s, &log);
    s.by_owner = ByOwner::none();
    for (h, p) in [
        ("github.com", "/me/x"),
        ("api.github.com", "/repos/me/x"),
        ("github.com", "/attacker/x"),
    ] {
        assert!(tainted_key(store.state(h, Some(p), &s)).is_some(), "{h}{p}");
    }
    assert_eq!(
        store.state("gitlab.com", Some("/me/x"), &s),
        TaintState::Clean
    );
}
