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
