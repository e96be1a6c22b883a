//! Table tests of `policy::names`.
use super::*;

#[test]
fn bare_shapes() {
    // (token, before, term, expected)
    let cases: &[(&str, u8, u8, Seen)] = &[
        ("example.com", b' ', b' ', Seen::Bare),
        ("paste.example.com", b'"', b'"', Seen::Bare),
        ("user.example.com", b'@', b'>', Seen::Email),
        ("readme.md", b' ', b' ', Seen::Weak),
        ("setup.py", b' ', b'\n', Seen::Weak),
        ("lib.rs", b'/', b'"', Seen::Weak),
        ("api.js.map", b'"', b'"', Seen::Weak),
        ("vnd.dece.zip", b'/', b'"', Seen::Weak),
        ("lcov.info", b' ', b' ', Seen::Weak),
        ("date.now", b' ', b'(', Seen::Weak),
        ("Date.now", b' ', b';', Seen::Weak),
        ("axios.post", b' ', b'(', Seen::Weak),
        ("data.id", b' ', b';', Seen::Weak),
        ("this.app", b' ', b';', Seen::Weak),
        ("self.rfile.read", b' ', b'(', Seen::Weak),
        ("collections.abc", b' ', b'\n', Seen::Weak),
        ("typing.IO", b' ', b'[', Seen::Weak),
        ("typing.IO", b' ', b',', Seen::Weak),
        ("profile.dev", b'[', b']', Seen::Weak),
        ("example.com", b'[', b']', Seen::Bare),
        ("herodevs.com", b'>', b'<', Seen::Bare),
        ("package.metadata.docs.rs", b'[', b']', Seen::Weak),
        ("my_module.com", b' ', b' ', Seen::Weak),
        ("ConnectionStrategy.is", b' ', b' ', Seen::Weak),
        ("a.b.com", b')', b' ', Seen::Weak),
        ("config.data.com", b' ', b'=', Seen::Weak),
        // A path after it makes a word suffix a host.
        ("evil.store", b' ', b'/', Seen::Bare),
        ("t.me", b' ', b'/', Seen::Bare),
        ("youtu.be", b' ', b'/', Seen::Bare),
        ("www.evil.store", b' ', b' ', Seen::Bare),
        ("docs.python.org", b' ', b' ', Seen::Bare),
        ("Example.COM", b' ', b' ', Seen::Bare),
        ("GITHUB.COM", b' ', b' ', Seen::Bare),
        ("github.io", b' ', b'.', Seen::Bare),
        ("sansio.app", b'.', b' ', Seen::Weak),
        ("flask.app", b' ', b' ', Seen::Weak),
        ("req.app", b' ', b';', Seen::Weak),
        ("datetime.date", b' ', b' ', Seen::Weak),
        ("xxx.xxx.xxx.xxx", b' ', b'\n', Seen::Weak),
        ("1.0.0.dev", b' ', b' ', Seen::Weak),
        ("com.android.art", b'"', b'"', Seen::Weak),
        ("authrootstl.cab", b' ', b' ', Seen::Weak),
        ("chalk.red.yellow.green", b' ', b' ', Seen::Weak),
        ("h11.events", b' ', b' ', Seen::Weak),
        ("builtins.int", b' ', b' ', Seen::Weak),
        ("who.int", b' ', b' ', Seen::Bare),
        ("org.example.com", b' ', b' ', Seen::Weak),
        ("www.xxx.com", b' ', b' ', Seen::Bare),
    ];
    for &(t, before, term, want) in cases {
        assert_eq!(
            bare_evidence(t.as_bytes(), before, term),
            want,
            "{t:?} between {:?} and {:?}",
            before as char,
            term as char
        );
    }
}

fn named(host: &str, seen: Seen, path: Option<&str>) -> Named {
    Named {
        host: host.into(),
        seen,
        path: path.map(Into::into),
        path_cut: false,
    }
}

#[test]
fn taint_keys_table() {
    let by = owners::ByOwner::default_families();
    let none = owners::ByOwner::none();
    let key = |n: &Named, by: &owners::ByOwner, allowed: &[&str]| {
        let allowed = |h: &str| allowed.contains(&h);
        let j = Judge {
            own_site: &|h: &str| h == "served.example",
            by_owner: by,
            allowed_somewhere: &allowed,
            weak_counts: false,
        };
        taint_keys(n, &j)
            .into_iter()
            .map(|k| k.to_string())
            .collect::<Vec<_>>()
    };
    let v = |s: &[&str]| {
        s.iter()
            .map(std::string::ToString::to_string)
            .collect::<Vec<_>>()
    };
    // Weak names only when allowed.
    let weak = named("readme.md", Seen::Weak, None);
    assert_eq!(key(&weak, &by, &[]), v(&[]));
    assert_eq!(key(&weak, &by, &["readme.md"]), v(&["readme.md"]));
    // ... or when the task relays what no allow-list names.
    let j = Judge {
        own_site: &|_: &str| false,
        by_owner: &by,
        allowed_somewhere: &|_: &str| false,
        weak_counts: true,
    };
    assert_eq!(
        taint_keys(&named("drop.evil.app", Seen::Weak, None), &j).len(),
        1
    );
    // Plain names, single labels only when allowed.
    assert_eq!(
        key(&named("paste.example.com", Seen::Bare, None), &by, &[]),
        v(&["paste.example.com"])
    );
    assert_eq!(key(&named("intranet", Seen::Url, None), &by, &[]), v(&[]));
    assert_eq!(
        key(&named("intranet", Seen::Url, None), &by, &["intranet"]),
        v(&["intranet"])
    );
    // The host that served it.
    assert_eq!(
        key(
            &named("served.example", Seen::Url, None),
            &by,
            &["served.example"]
        ),
        v(&[])
    );
    // Multi-tenant hosts: the owner, nothing, or the whole forge.
    let gh = |p: Option<&str>| named("github.com", Seen::Url, p);
    assert_eq!(
        key(&gh(Some("acme/tool")), &by, &[]),
        v(&["github.com/acme"])
    );
    assert_eq!(key(&gh(Some("ACME")), &by, &[]), v(&["github.com/acme"]));
    assert_eq!(key(&gh(None), &by, &[]), v(&[]));
    assert_eq!(key(&gh(Some("")), &by, &[]), v(&[]));
    assert_eq!(
        key(&gh(Some("orgs/acme/x")), &by, &[]),
        v(&["github.com/acme"])
    );
    assert_eq!(key(&gh(Some(":443/acme/x")), &by, &[]), v(&["github.com"]));
    assert_eq!(
        key(&gh(Some(":acme/x.git")), &by, &[]),
        v(&["github.com/acme"])
    );
    assert_eq!(key(&gh(Some("./acme")), &by, &[]), v(&["github.com/acme"]));
    assert_eq!(
        key(&gh(Some("%61cme/x")), &by, &[]),
        v(&["github.com/acme"])
    );
    assert_eq!(key(&gh(Some("/acme/x")), &by, &[]), v(&["github.com"]));
    assert_eq!(key(&gh(Some("%zz/x")), &by, &[]), v(&["github.com"]));
    assert_eq!(key(&gh(Some("%2561cme/x")), &by, &[]), v(&["github.com"]));
    let api = |p: &str| named("api.github.com", Seen::Url, Some(p));
    assert_eq!(key(&api("repos/Acme/x"), &by, &[]), v(&["github.com/acme"]));
    assert_eq!(
        key(&api("repos/decoy/../attacker/x"), &by, &[]),
        v(&["github.com/attacker"])
    );
    assert_eq!(key(&api("graphql"), &by, &[]), v(&[]));
    assert_eq!(
        key(
            &named("raw.githubusercontent.com", Seen::Bare, Some("acme/x/main")),
            &by,
            &[]
        ),
        v(&["github.com/acme"])
    );
    assert_eq!(
        key(&named("www.github.com", Seen::Url, Some("acme")), &by, &[]),
        v(&["github.com/acme"])
    );
    // A forge's own pages name owners too: no own-site exclusion there.
    let served_by_forge = Judge {
        own_site: &|h: &str| h == "github.com",
        by_owner: &by,
        allowed_somewhere: &|_: &str| false,
        weak_counts: false,
    };
    assert_eq!(
        taint_keys(&gh(Some("attacker/x")), &served_by_forge).len(),
        1
    );
    // Pages hosts: the host and its owner on the forge.
    assert_eq!(
        key(&named("acme.github.io", Seen::Url, None), &by, &[]),
        v(&["acme.github.io", "github.com/acme"])
    );
    // A cut path: the owner when it was whole before the cut, else the
    // whole forge.
    let mut cut = named("raw.githubusercontent.com", Seen::Url, Some("acm"));
    cut.path_cut = true;
    assert_eq!(key(&cut, &by, &[]), v(&["github.com"]));
    cut.path = Some("acme/long-repo-name-cut-her".into());
    assert_eq!(key(&cut, &by, &[]), v(&["github.com/acme"]));
    // by_owner = []: the host whole, as any other.
    assert_eq!(key(&gh(Some("acme/tool")), &none, &[]), v(&["github.com"]));
}
