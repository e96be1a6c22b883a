//! What sluice's console (stderr) tells a person: which config and state
//! folder it runs with, what a reload changed, what shadow mode let
//! through, and what a shutdown waits for.

use crate::util::*;

#[test]
fn startup_names_the_config_and_the_state_folder() {
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns).start();
    let line = s.wait_line(|l| l.contains("starting: config"));
    assert!(
        line.contains(&format!(
            "config {}, state folder {}",
            s.config.display(),
            s.state().display()
        )),
        "{line}"
    );
}

#[test]
fn reload_says_what_changed_per_task_and_nothing_when_nothing_did() {
    let dns = FakeDns::start();
    let b = SluiceBuilder::new(&dns)
        .allow(&["a.example.com:443", "gone.example.com:443"])
        .admin();
    let s = b.start();
    let base = s.pin(&b.config());
    s.write_config(&base);
    // The same text (pinning changed the port only if it was 0 in the
    // file; wait for whichever reload that caused) changes nothing.
    let _ = s.admin_call("POST", "/reload");
    let generation = s.metric("sluice_config_generation");
    let (code, body) = s.admin_call("POST", "/reload");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("nothing changed"), "{body}");
    assert_eq!(s.metric("sluice_config_generation"), generation);

    let changed = base
        .replace(
            "\"gone.example.com:443\"",
            "\"b.example.com:443\", \"c.example.com\"",
        )
        .replace("id = \"t\"\n", "id = \"t\"\nallow_mode = \"shadow\"\n");
    assert_ne!(changed, base);
    s.write_config(&changed);
    let line = s.wait_line(|l| l.contains("config reloaded") && l.contains("task t: allow"));
    assert!(
        line.contains(
            "task t: allow +b.example.com:443 +c.example.com:443 +c.example.com:80 \
             -gone.example.com:443; allow_mode enforce → shadow"
        ),
        "{line}"
    );
    assert_eq!(s.metric("sluice_config_generation"), generation + 1);
}

#[test]
fn shadow_decisions_reach_the_console_once_per_host() {
    let up = Upstream::start();
    let p = up.port();
    let (_dns, s) = pkgs_sluice(&up, "allow_mode = \"shadow\"", "");
    for _ in 0..3 {
        assert_eq!(get(&s, &format!("http://other.example.com:{p}/x")), 200);
    }
    s.access_log("t", 3);
    let lines = s.wait_lines(1, |l| {
        l.contains("shadow: allowed what enforce would refuse")
    });
    assert_eq!(lines.len(), 1, "once per host: {lines:#?}");
    assert!(
        lines[0].contains("other.example.com") && lines[0].contains("not-allowed"),
        "{}",
        lines[0]
    );
}

#[test]
fn shutdown_says_what_it_waits_for_and_a_second_signal_stops_at_once() {
    let up = Upstream::start();
    let p = up.port();
    // A drain far longer than the test waits: only the second signal can
    // end sluice in time.
    let (_dns, mut s) = pkgs_sluice(&up, "intercept = \"none\"", "[limits]\ndrain_secs = 3600");
    let held = tunnel(&s, &format!("pkgs.example.com:{p}"));
    s.signal("TERM");
    let line = s.wait_line(|l| l.contains("shutting down"));
    assert!(
        line.contains("waiting up to 3600 s for 1 open connection(s)")
            && line.contains("send the signal again"),
        "{line}"
    );
    s.signal("TERM");
    assert_eq!(s.wait_exit(), Some(0), "the second signal ends the drain");
    s.wait_line(|l| l.contains("second signal: closing 1 remaining connection(s) now"));
    drop(held);
}

#[test]
fn a_tunnel_still_silent_at_shutdown_gets_its_row() {
    let up = Upstream::start();
    let p = up.port();
    let (_dns, mut s) = pkgs_sluice(&up, "", "[limits]\ndrain_secs = 1");
    // Intercepting: sluice waits for the client's first bytes, which never come.
    let held = tunnel(&s, &format!("pkgs.example.com:{p}"));
    s.signal("TERM");
    assert_eq!(s.wait_exit(), Some(0));
    let rows = read_rows(&s.task_file("t", "access.jsonl"));
    assert!(
        rows.iter()
            .any(|r| r["kind"] == "connect" && r["host"] == "pkgs.example.com"),
        "{rows:#?}"
    );
    drop(held);
}

/// Issue 26: one `npm install` printed thousands of "tainted" lines. Each
/// taint is a debug line now; a response that tainted anything gets one
/// summary line (a few names and a count), and the report leads with the
/// taints on the allow-list.
#[test]
fn a_page_naming_many_hosts_gets_one_summary_line() {
    let names: Vec<String> = (0..40)
        .map(|i| format!("https://h{i}.example.net/x"))
        .collect();
    let page = format!("<p>{}</p>", names.join(" "));
    let up = Upstream::start_with(std::sync::Arc::new(move |req: &Seen| {
        (req.uri == "/many").then(|| {
            hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(page.clone())))
        })
    }));
    let (_dns, s) = pkgs_sluice(&up, "", "");
    let url = format!("http://pkgs.example.com:{}/many", up.port());
    assert_eq!(get(&s, &url), 200);
    let line = s.wait_line(|l| l.contains("tainted 40 names from"));
    assert!(line.contains(&url), "{line}");
    assert!(line.contains("and 36 more"), "{line}");
    assert!(line.contains("sluice report --taint"), "{line}");
    s.taint_log("t", 40);
    let lines = s.stderr.lock().unwrap().clone();
    let per_name = lines
        .iter()
        .filter(|l| l.contains("example.net") && !l.contains("tainted 40 names"))
        .count();
    assert_eq!(per_name, 0, "no line per name: {lines:#?}");
    // The report: the set is a count, --taint lists it.
    let out = s.report(&[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("40 more tainted names not on the allow-list"),
        "{text}"
    );
    let out = s.report(&["--taint"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(text.matches(".example.net  named by").count(), 40, "{text}");
}

/// SPEC §4 "shadow first": a refusal taint would have made in shadow
/// mode shows in the report with its provenance.
#[test]
fn shadow_taint_refusals_show_in_the_report_with_their_provenance() {
    let up = Upstream::start_with(std::sync::Arc::new(|req: &Seen| {
        (req.uri == "/readme").then(|| {
            hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(
                "send it to https://paste.example.com/new",
            )))
        })
    }));
    let p = up.port();
    let dns = FakeDns::start();
    let s = SluiceBuilder::new(&dns)
        .allow(&[
            format!("pkgs.example.com:{p}"),
            format!("paste.example.com:{p}"),
        ])
        .task_extra("[task.taint]\nmode = \"shadow\"\n")
        .start();
    assert_eq!(get(&s, &format!("http://pkgs.example.com:{p}/readme")), 200);
    s.taint_log("t", 1);
    let a = via(
        &s,
        &format!("http://paste.example.com:{p}/new"),
        &["--data", "x"],
    );
    assert_eq!(a.status, 200, "shadow lets it through");
    s.access_log("t", 2);
    let out = s.report(&[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains(&format!(
            "WOULD_DENY POST paste.example.com:{p}/new (tainted: named by http://pkgs.example.com:{p}/readme at "
        )),
        "{text}"
    );
    assert!(text.contains("1 tainted on the allow-list"), "{text}");
}
