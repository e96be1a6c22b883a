//! `sluice exec` against a command that tries to get out, or to mislead
//! the person who ran it (each found by a review against the real binary):
//! unix datagram sockets to host sockets, an `unshare` on PATH that skips
//! the user namespace, signals that never reach the command, and a state
//! folder moved away under the report.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{exec_cmd, text, Setup};
use crate::util::*;

/// The python the command runs: each way to a unix datagram socket, and
/// what became of it. A socket that could be made tries `sendto(PATH)`
/// and `connect(PATH)` + `send`.
const DATAGRAMS: &str = r#"
import socket, sys
path = sys.argv[1]
U = socket.AF_UNIX
def attempt(name, make):
    try:
        s = make()
    except OSError as e:
        print(name, 'refused', e.errno)
        return
    a = s[0] if isinstance(s, tuple) else s
    try:
        a.sendto(b'sendto ' + name.encode(), path)
        print(name, 'sent')
    except OSError as e:
        print(name, 'made, sendto failed')
    try:
        a.connect(path)
        a.send(b'connect ' + name.encode())
        print(name, 'connected and sent')
    except OSError as e:
        print(name, 'made, connect failed')
attempt('pair raw', lambda: socket.socketpair(U, socket.SOCK_RAW))
attempt('pair raw|flags', lambda: socket.socketpair(U, socket.SOCK_RAW | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK))
attempt('pair dgram', lambda: socket.socketpair(U, socket.SOCK_DGRAM))
attempt('socket dgram', lambda: socket.socket(U, socket.SOCK_DGRAM))
attempt('socket raw', lambda: socket.socket(U, socket.SOCK_RAW))
attempt('socket stream', lambda: socket.socket(U, socket.SOCK_STREAM))
attempt('pair stream', lambda: socket.socketpair(U, socket.SOCK_STREAM))
"#;

#[test]
fn no_unix_datagram_reaches_a_host_socket() {
    let s = Setup::new(|b| b);
    // A host datagram socket, as /dev/log or /run/systemd/notify.
    let path = s.dir.path().join("log.sock");
    let host = UnixDatagram::bind(&path).unwrap();
    host.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 256];
    // Precondition: a datagram sent to it by path does arrive.
    UnixDatagram::unbound()
        .unwrap()
        .send_to(b"probe", &path)
        .unwrap();
    assert_eq!(host.recv(&mut buf).unwrap(), 5);
    let script = s.dir.path().join("datagrams.py");
    std::fs::write(&script, DATAGRAMS).unwrap();
    let out = s.exec(
        &[],
        &format!("python3 {} {}", script.display(), path.display()),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // 97: EAFNOSUPPORT, the filter's answer.
    assert_eq!(
        stdout,
        "pair raw refused 97\n\
         pair raw|flags refused 97\n\
         pair dgram refused 97\n\
         socket dgram refused 97\n\
         socket raw refused 97\n\
         socket stream refused 97\n\
         pair stream made, sendto failed\n\
         pair stream made, connect failed\n",
        "{stderr}"
    );
    match host.recv(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        got => panic!(
            "a datagram reached the host socket: {:?}",
            got.map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
        ),
    }
}

/// `unshare` as found on PATH, for a fake one to hand over to.
fn real_unshare() -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("unshare"))
        .find(|p| p.is_file())
        .expect("util-linux unshare on PATH")
}

/// A fake `unshare` first on PATH, running `body`; returns the new PATH.
fn fake_unshare(dir: &Path, body: &str) -> String {
    let bin = dir.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let f = bin.join("unshare");
    std::fs::write(&f, format!("#!/bin/sh\n{body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn an_unshare_on_path_is_not_used_and_the_command_holds_no_capability() {
    let s = Setup::new(|b| b);
    let used = s.dir.path().join("fake-unshare-used");
    let ran = s.dir.path().join("ran");
    let own_userns = std::fs::read_link("/proc/self/ns/user").unwrap();
    let bodies = [
        // Drops --user (and its map) and makes the rest: the command
        // would run in the host's user namespace with every capability.
        format!(
            "touch {used}; for a; do shift; case $a in --user|--map-root-user) ;; \
             *) set -- \"$@\" \"$a\";; esac; done; exec {real} \"$@\"",
            used = used.display(),
            real = real_unshare().display()
        ),
        // Makes no namespace at all.
        format!(
            "touch {}; while [ \"$1\" != -- ]; do shift; done; shift; exec \"$@\"",
            used.display()
        ),
    ];
    let script = format!(
        "touch {}; readlink /proc/self/ns/user; \
         grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status",
        ran.display()
    );
    for body in bodies {
        let _ = std::fs::remove_file(&ran);
        let out = exec_cmd(&s.config, &s.state(), &[], &script)
            .env("PATH", fake_unshare(s.dir.path(), &body))
            .output()
            .unwrap();
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(!used.exists(), "the unshare on PATH was used: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        assert!(ran.exists(), "{stderr}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_ne!(
            Path::new(lines[0]),
            own_userns,
            "the command ran in the host's user namespace: {stdout}"
        );
        assert_eq!(lines.len(), 6, "{stdout}");
        for cap in &lines[1..] {
            assert!(cap.ends_with(":\t0000000000000000"), "{stdout}");
        }
    }
}

#[test]
fn where_user_namespaces_cannot_be_made_the_command_never_runs() {
    let s = Setup::new(|b| b);
    let ran = s.dir.path().join("ran");
    let c = exec_cmd(
        &s.config,
        &s.state(),
        &[],
        &format!("touch {}", ran.display()),
    );
    // sluice exec inside a user namespace that may have no children.
    let out = Command::new(real_unshare())
        .args(["--user", "--map-root-user", "--", "sh", "-c"])
        .arg("echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"")
        .arg("sh")
        .arg(c.get_program())
        .args(c.get_args())
        .envs(c.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot make new namespaces"), "{stderr}");
    assert!(
        stderr.contains("never runs a command unconfined"),
        "{stderr}"
    );
    assert!(!ran.exists(), "the command ran: {stderr}");
}

#[test]
fn sigterm_and_sighup_to_sluice_exec_reach_the_command() {
    let s = Setup::new(|b| b);
    for (name, signal) in [
        ("TERM", rustix::process::Signal::TERM),
        ("HUP", rustix::process::Signal::HUP),
    ] {
        let mark = s.dir.path().join(format!("got-{name}"));
        let ready = s.dir.path().join(format!("ready-{name}"));
        let script = format!(
            "trap 'echo got-{name} > {mark}; exit 7' {name}; echo ready > {ready}; \
             while :; do sleep 0.1; done",
            mark = mark.display(),
            ready = ready.display()
        );
        let mut child = exec_cmd(&s.config, &s.state(), &[], &script)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        eventually("the command to start", Duration::from_secs(20), || {
            ready.exists()
        });
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
        let status = poll(Duration::from_secs(10), || child.try_wait().unwrap());
        let Some(status) = status else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sluice exec still runs 10 s after SIG{name}");
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(7), "SIG{name}: {stderr}");
        assert_eq!(
            std::fs::read_to_string(&mark).ok().as_deref(),
            Some(format!("got-{name}\n").as_str()),
            "the command's trap ran: {stderr}"
        );
    }
}

#[test]
fn a_moved_state_folder_is_named_where_it_is_not_where_it_was() {
    let up = Upstream::start();
    let p = up.port();
    let s = Setup::new(|b| b.allow(&[format!("pkgs.example.com:{p}")]));
    let parent = s.dir.path().join("parent");
    let state = parent.join("st");
    let moved = s.dir.path().join("parent.moved").join("st");
    let forged = r#"{"ts":"2030-01-01T00:00:00.000Z","task":"t","client":"unix","kind":"http","method":"GET","host":"forged.example.com","port":443,"path":"/","decision":"allow","rule":null,"status":200}"#;
    let script = format!(
        "curl -s http://pkgs.example.com:{p}/x && mv {parent} {parent}.moved && \
         mkdir -p {state}/tasks/t && echo '{forged}' > {state}/tasks/t/access.jsonl",
        parent = parent.display(),
        state = state.display(),
    );
    let out = exec_cmd(&s.config, &state, &[], &script).output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout, "hello from upstream\n", "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the state folder was moved during the run: it was {}, it is now {}",
            state.display(),
            moved.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "(state kept in {m}; see it again with: sluice report --state {m})",
            m = moved.display()
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains(&format!("--state {})", state.display())),
        "the hint names the planted folder: {stderr}"
    );
    assert!(!stderr.contains("forged.example.com"), "{stderr}");
    // What the hint names is this run's report.
    let report = Command::new(bin())
        .args(["report", "--state"])
        .arg(&moved)
        .output()
        .unwrap();
    assert!(
        text(&report.stdout).contains("pkgs.example.com"),
        "{}",
        text(&report.stdout)
    );
}
