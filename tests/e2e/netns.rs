//! Proof that sluice is the only route out: a task network namespace with
//! no default route and no resolver, joined to the host by one veth pair
//! on which sluice listens. From inside, a direct connection to the
//! upstream fails, DNS fails, an allowed host is reached through sluice
//! (TCP listener, and unix socket via `sluice forward`) and a not-allowed
//! host is refused.
//!
//! Needs root and `ip netns` (CI runs as root); elsewhere it fails saying
//! so, rather than passing untested. The namespace, veth pair and
//! resolv.conf are removed even when the test fails.

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::util::*;

/// A test namespace and what was made for it; removed on drop.
struct TaskNs {
    name: String,
    host_if: String,
}

/// A process killed when the test ends, however it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for TaskNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.name));
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

const HOST_ADDR: &str = "169.254.77.1";
const TASK_ADDR: &str = "169.254.77.2";

/// Builds the namespace, or says why it cannot.
fn task_ns() -> Result<TaskNs, String> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| e.to_string())?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("not root".into());
    }
    let tag = std::process::id() % 100_000;
    let ns = TaskNs {
        name: format!("sluice-task-{tag}"),
        host_if: format!("slh{tag}"),
    };
    let task_if = format!("slt{tag}");
    ip(&["netns", "add", &ns.name])?;
    // Lookups inside the namespace go to its own loopback, where nothing
    // answers: no resolver is reachable.
    let etc = format!("/etc/netns/{}", ns.name);
    std::fs::create_dir_all(&etc).map_err(|e| e.to_string())?;
    std::fs::write(
        format!("{etc}/resolv.conf"),
        "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
    )
    .map_err(|e| e.to_string())?;
    ip(&[
        "link",
        "add",
        &ns.host_if,
        "type",
        "veth",
        "peer",
        "name",
        &task_if,
    ])?;
    ip(&["link", "set", &task_if, "netns", &ns.name])?;
    ip(&[
        "addr",
        "add",
        &format!("{HOST_ADDR}/30"),
        "dev",
        &ns.host_if,
    ])?;
    ip(&["link", "set", &ns.host_if, "up"])?;
    ip(&[
        "-n",
        &ns.name,
        "addr",
        "add",
        &format!("{TASK_ADDR}/30"),
        "dev",
        &task_if,
    ])?;
    ip(&["-n", &ns.name, "link", "set", &task_if, "up"])?;
    ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
    Ok(ns)
}

fn in_ns(ns: &TaskNs, args: &[&str]) -> Output {
    without_proxy_env(&mut Command::new("ip"))
        .args(["netns", "exec", &ns.name])
        .args(args)
        .output()
        .unwrap()
}

fn code(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn sluice_is_the_only_route_out_of_a_task_namespace() {
    let ns = match task_ns() {
        Ok(ns) => ns,
        // Needs root and iproute2 (CI has both): fail rather than pass
        // untested when they are missing.
        Err(why) => panic!("network namespaces unavailable here (this test needs root): {why}"),
    };
    let dns = FakeDns::start();
    let up = Upstream::start();
    let p = up.port();
    let sock = tempfile::tempdir().unwrap();
    let sock_path = sock.path().join("task.sock");
    // sluice listens on the host end of the veth and on a unix socket.
    let s = SluiceBuilder::new(&dns)
        .allow(&[format!("pkgs.example.com:{p}")])
        .listen(&[
            format!("tcp:{HOST_ADDR}:0"),
            format!("unix:{}", sock_path.display()),
        ])
        .top("unix_mode = \"0666\"")
        .start();
    let proxy = format!("http://{}", s.listeners[0].trim_start_matches("tcp:"));
    let allowed = format!("http://pkgs.example.com:{p}/");
    let refused = format!("http://other.example.com:{p}/");
    let curl_ns = |extra: &[&str]| {
        let mut args = vec![
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "5",
        ];
        args.extend_from_slice(extra);
        in_ns(&ns, &args)
    };

    // Direct connections to the upstream fail: it is not on this network.
    let direct = curl_ns(&[&format!("http://{HOST_ADDR}:{p}/")]);
    assert_eq!(code(&direct), "000", "direct connection must fail");
    let direct = curl_ns(&[&format!("http://127.0.0.1:{p}/")]);
    assert_eq!(
        code(&direct),
        "000",
        "the namespace's loopback has no upstream"
    );
    // DNS fails.
    let lookup = in_ns(
        &ns,
        &["timeout", "5", "getent", "hosts", "pkgs.example.com"],
    );
    assert!(
        !lookup.status.success(),
        "DNS must fail inside the namespace"
    );
    assert_eq!(up.conns(), 0);

    // Through sluice: allowed passes, not-allowed is refused.
    assert_eq!(code(&curl_ns(&["-x", &proxy, &allowed])), "200");
    assert_eq!(code(&curl_ns(&["-x", &proxy, &refused])), "403");
    assert_eq!(up.requests().len(), 1);
    let row = last_row_for(&s, "t", "pkgs.example.com");
    assert!(
        row["client"].as_str().unwrap().starts_with(TASK_ADDR),
        "{row}"
    );

    // The same over the unix socket, through `sluice forward` inside the
    // namespace (no NIC needed for this path).
    let fwd = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            bin(),
            "forward",
            "--listen",
            "tcp:127.0.0.1:3128",
            "--to",
        ])
        .arg(format!("unix:{}", sock_path.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _fwd = KillOnDrop(fwd);
    eventually(
        "sluice forward comes up inside the namespace",
        Duration::from_secs(10),
        || code(&curl_ns(&["-x", "http://127.0.0.1:3128", &allowed])) == "200",
    );
    assert_eq!(
        code(&curl_ns(&["-x", "http://127.0.0.1:3128", &refused])),
        "403"
    );
    assert_eq!(
        up.requests().len(),
        2,
        "only allowed requests reached the upstream"
    );
    let rows = s.access_log("t", 4);
    assert!(rows.iter().any(|r| r["client"] == "unix"), "{rows:?}");
}
