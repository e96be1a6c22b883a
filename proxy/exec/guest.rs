//! guest: the inside of `sluice exec`. [`spawn`] (run by sluice) starts
//! `sluice exec-guest`, whose first stage makes new user, mount, network
//! and PID namespaces ([`ns::enter`]) and starts the second stage in them,
//! as the first process of the new PID namespace. The second stage proves
//! that every one of those namespaces differs from sluice's own, mounts a
//! private `/proc`, brings `lo` up and checks it is the only interface,
//! covers the state folder, starts the relay to sluice's unix socket (and
//! with `--transparent`, the DNS responder, the nft redirect and the
//! redirected relay), then runs the command through `sluice exec-launch`.
//! Each stage passes SIGTERM and SIGHUP on and exits as its child did.
//!
//! Must not: run the command before its isolation is proven, touch a mount
//! before the mount namespace is proven new, or decide anything about
//! traffic (sluice, outside, does).

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus};
use std::sync::{Arc, Mutex};

use crate::clientenv::Env;
use crate::config::{Intercept, ListenAddr, TaskConfig};
use rustix::process::Signal;

use super::ns::{self, Namespaces};
use super::transparent::{self, Names};
use super::{Options, MARKER, RELAY_PORT, TRANSPARENT_PORT};

/// What the command's environment says: `sluice env` for the relay inside.
pub(crate) fn client_env(task: &TaskConfig, state: &Path) -> Result<Env, String> {
    let ca = (task.intercept == Intercept::All).then(|| {
        (
            crate::tls::ca::cert_path(state).display().to_string(),
            crate::tls::bundle::bundle_path(state).display().to_string(),
        )
    });
    Ok(Env {
        task: task.id.clone(),
        proxy: format!("http://127.0.0.1:{RELAY_PORT}"),
        ca,
        notes: Vec::new(),
    })
}

/// This binary, as the kernel knows it (never looked up on PATH).
const SELF_EXE: &str = "/proc/self/exe";

/// Starts the guest, which makes the namespaces, and waits for it;
/// SIGTERM and SIGHUP to sluice are passed on to it.
pub(crate) async fn spawn(
    o: &Options,
    task: &TaskConfig,
    state: &Path,
) -> Result<ExitStatus, String> {
    let socket = state.join("exec.sock");
    let env = client_env(task, state)?;
    let mut cmd = tokio::process::Command::new(SELF_EXE);
    cmd.arg("exec-guest")
        .arg("--to")
        .arg(&socket)
        .arg("--state")
        .arg(state)
        .args(Namespaces::of_self()?.args());
    if o.transparent {
        cmd.arg("--transparent");
        if o.learn {
            cmd.arg("--any-name");
        }
        for n in allowed_names(task) {
            cmd.arg("--name").arg(n);
        }
    }
    cmd.arg("--");
    cmd.args(&o.command);
    for (k, v) in env.vars() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let mut relay = ns::Relay::install()?;
    // Spawned from the thread that runs sluice exec to its end: the guest
    // dies with that thread (its parent-death signal).
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start sluice exec-guest: {e}; the command was not run"))?;
    relay.wait(&mut child).await.map_err(|e| e.to_string())
}

/// The host names a task's allow-list names (for the transparent DNS).
pub(crate) fn allowed_names(task: &TaskConfig) -> Vec<String> {
    let mut names: Vec<String> = task
        .rules
        .allow
        .entries()
        .filter_map(|(h, _)| h.as_name().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// `sluice exec-guest`'s arguments (given by [`spawn`], not by people).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct GuestArgs {
    /// sluice's socket.
    #[arg(long)]
    pub(crate) to: PathBuf,
    /// The state folder (covered before the command starts).
    #[arg(long)]
    pub(crate) state: PathBuf,
    /// sluice's own namespaces (the guest's must all differ).
    #[command(flatten)]
    pub(crate) sluice: Namespaces,
    /// Set by the first stage when it starts the second, in the new
    /// namespaces.
    #[arg(long)]
    pub(crate) inside: bool,
    #[arg(long)]
    pub(crate) transparent: bool,
    /// `--learn`: the transparent DNS answers any name.
    #[arg(long)]
    pub(crate) any_name: bool,
    /// Names the transparent DNS answers.
    #[arg(long = "name")]
    pub(crate) names: Vec<String>,
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<String>,
}

/// `sluice exec-guest`: the first stage, or with `--inside` the second.
pub(crate) fn main(a: GuestArgs) -> ExitCode {
    if !a.inside {
        return first_stage();
    }
    // Dies with the first stage (as `unshare --kill-child` did), and with
    // it every process of the namespace. Not dumpable: the command (same
    // user, nested namespace) can then neither ptrace this process nor
    // open its files through /proc.
    let state = rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
        .map_err(|e| format!("cannot tie the guest to sluice: {e}"))
        .and_then(|()| {
            rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
                .map_err(|e| format!("cannot make the guest undumpable: {e}"))
        })
        .and_then(|()| {
            let pid = rustix::process::getpid().as_raw_nonzero().get();
            ns::prove(&Namespaces::of_self()?, &a.sluice, pid)
        })
        .and_then(|()| ns::private_mounts_and_proc())
        .and_then(|()| isolate(&a))
        .and_then(|()| read_only_kernel())
        .and_then(|()| hide_state(&a.state));
    let state = match state {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("sluice exec: {e}; the command was not run");
            return ExitCode::from(1);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice exec: {e}; the command was not run");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(relay_and_run(&a, state)) {
        Ok(status) => super::exit_code(status),
        Err((code, e)) => {
            eprintln!("sluice exec: {e}");
            ExitCode::from(code)
        }
    }
}

/// The first stage, started by sluice: moves into new user, mount,
/// network and PID namespaces (while it is still one thread), then starts
/// the second stage, the first process of the new PID namespace, and
/// waits for it, passing signals on.
fn first_stage() -> ExitCode {
    use nix::sched::CloneFlags;
    let fail = |e: String| {
        eprintln!("sluice exec: {e}; the command was not run");
        ExitCode::from(1)
    };
    let sluice = rustix::process::getppid();
    // Dies with sluice: a `kill -9` of sluice ends the sandbox too. Set
    // after unshare, which clears it when it grants capabilities.
    let made =
        ns::enter(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWPID)
            .and_then(|()| {
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
                    .map_err(|e| format!("cannot tie the guest to sluice: {e}"))
            });
    if let Err(e) = made {
        return fail(e);
    }
    if rustix::process::getppid() != sluice {
        return fail("sluice is gone".into());
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(e.to_string()),
    };
    // The second stage gets this stage's arguments, and `--inside`.
    let args: Vec<OsString> = std::env::args_os()
        .skip_while(|a| a != "exec-guest")
        .skip(1)
        .collect();
    let status = rt.block_on(async {
        let mut relay = ns::Relay::install()?;
        let mut child = tokio::process::Command::new(SELF_EXE)
            .args(["exec-guest", "--inside"])
            .args(args)
            .spawn()
            .map_err(|e| format!("cannot start the guest: {e}"))?;
        relay.wait(&mut child).await.map_err(|e| e.to_string())
    });
    match status {
        Ok(status) => super::exit_code(status),
        Err(e) => fail(e),
    }
}

/// Runs a setup command; its failure is the sandbox's.
fn setup(program: &str, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The interfaces `/proc/net/dev` lists (the reading process's network
/// namespace).
fn interfaces(dev: &str) -> Vec<&str> {
    // Two header lines, then `  NAME: counters…` per interface.
    dev.lines()
        .skip(2)
        .filter_map(|l| Some(l.split_once(':')?.0.trim()))
        .collect()
}

/// Brings `lo` up and proves the (new) network namespace has nothing else,
/// reading the kernel's list, not a tool's; with `--transparent`, routes
/// everything to `lo`, redirects all TCP to the relay, and points the
/// resolver at the responder here.
fn isolate(a: &GuestArgs) -> Result<(), String> {
    setup("ip", &["link", "set", "lo", "up"])?;
    let dev = std::fs::read_to_string("/proc/self/net/dev")
        .map_err(|e| format!("cannot read /proc/self/net/dev: {e}"))?;
    if let Some(other) = interfaces(&dev).into_iter().find(|i| *i != "lo") {
        return Err(format!(
            "the namespace has an interface besides lo: {other}"
        ));
    }
    if a.transparent {
        // With no `src`, a socket routed this way gets 0.0.0.0 as its own
        // address and never sees a reply.
        setup(
            "ip",
            &["route", "add", "default", "dev", "lo", "src", "127.0.0.1"],
        )?;
        let rules = a.state.join("exec-nft.conf");
        let ruleset = format!(
            "table ip sluice_exec {{\n  chain out {{\n    type nat hook output priority -100;\n    \
             ip daddr != 127.0.0.0/8 meta l4proto tcp redirect to :{TRANSPARENT_PORT}\n  }}\n}}\n"
        );
        std::fs::write(&rules, ruleset).map_err(|e| e.to_string())?;
        setup("nft", &["-f", &rules.to_string_lossy()])?;
        let resolv = a.state.join("exec-resolv.conf");
        std::fs::write(
            &resolv,
            "nameserver 127.0.0.1\noptions attempts:1 timeout:2\n",
        )
        .map_err(|e| e.to_string())?;
        rustix::mount::mount_bind(&resolv, "/etc/resolv.conf")
            .map_err(|e| format!("cannot cover /etc/resolv.conf: {e}"))?;
    }
    Ok(())
}

/// Kernel settings the command must not write: a root outside is root
/// inside too (for file permissions), and `core_pattern` or
/// `sysrq-trigger` would act on the whole machine.
fn read_only_kernel() -> Result<(), String> {
    use rustix::mount::{mount_bind, mount_bind_recursive, mount_remount, MountFlags};
    for path in ["/proc/sys", "/proc/sysrq-trigger", "/sys"] {
        if !Path::new(path).exists() {
            continue;
        }
        let bound = if path == "/sys" {
            mount_bind_recursive(path, path)
        } else {
            mount_bind(path, path)
        };
        bound
            .and_then(|()| mount_remount(path, MountFlags::BIND | MountFlags::RDONLY, ""))
            .map_err(|e| format!("cannot make {path} read-only: {e}"))?;
    }
    Ok(())
}

/// Files of the state folder the command may see: the socket, and the CA
/// certificate and bundle (read-only).
const SHOWN: [&str; 3] = ["exec.sock", "ca.pem", "ca-bundle.pem"];

/// Covers the state folder with an empty tmpfs holding only [`SHOWN`]:
/// the command must not read the CA key or rewrite the access log it is
/// judged by. Returns the real folder (an `O_PATH` descriptor), for the
/// marker.
fn hide_state(state: &Path) -> Result<OwnedFd, String> {
    use rustix::fs::{open, Mode, OFlags};
    use rustix::mount::{mount, mount_bind, mount_remount, MountFlags};
    let err = |what: &str, e: std::io::Error| format!("cannot {what}: {e}");
    let dir = open(
        state,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err("open the state folder", e.into()))?;
    let real = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    let shown: Vec<&str> = SHOWN
        .into_iter()
        .filter(|f| real.join(f).exists())
        .collect();
    mount(
        "tmpfs",
        state,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        Some(c"mode=0755"),
    )
    .map_err(|e| err("cover the state folder", e.into()))?;
    for f in shown {
        let at = state.join(f);
        std::fs::File::create(&at).map_err(|e| err("make a mount point", e))?;
        mount_bind(real.join(f), &at).map_err(|e| err("show a state file", e.into()))?;
        if f != "exec.sock" {
            mount_remount(&at, MountFlags::BIND | MountFlags::RDONLY, "")
                .map_err(|e| err("make a state file read-only", e.into()))?;
        }
    }
    Ok(dir)
}

/// Starts the relays, leaves the marker, runs the command (through
/// `unshare` and `sluice exec-launch`) and waits.
async fn relay_and_run(a: &GuestArgs, state: OwnedFd) -> Result<ExitStatus, (u8, String)> {
    use rustix::fs::{open, openat, Mode, OFlags};
    let fail = |e: String| (1u8, format!("{e}; the command was not run"));
    // The relays reach sluice through this handle, never by the path
    // (which the command could make point elsewhere).
    let socket = open(&a.to, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| fail(format!("cannot open {}: {e}", a.to.display())))?;
    let to_path = PathBuf::from(format!("/proc/self/fd/{}", socket.as_raw_fd()));
    let to = ListenAddr::Unix(to_path.clone());
    let relay = crate::listener::bind(&ListenAddr::Tcp(([127, 0, 0, 1], RELAY_PORT).into()))
        .await
        .map_err(|e| fail(format!("cannot listen on 127.0.0.1:{RELAY_PORT}: {e}")))?;
    tokio::spawn(async move { crate::guest_relay::serve(&relay, &to).await });
    if a.transparent {
        let names = Arc::new(Mutex::new(Names::new(&a.names, a.any_name)));
        let dns = tokio::net::UdpSocket::bind("127.0.0.1:53")
            .await
            .map_err(|e| fail(format!("cannot listen on 127.0.0.1:53: {e}")))?;
        let refused = openat(
            &state,
            transparent::REFUSED_FILE,
            OFlags::CREATE | OFlags::WRONLY | OFlags::APPEND | OFlags::CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| fail(format!("cannot write {}: {e}", transparent::REFUSED_FILE)))?;
        tokio::spawn(transparent::serve_dns(
            dns,
            names.clone(),
            std::fs::File::from(refused),
        ));
        let redirected = tokio::net::TcpListener::bind(("127.0.0.1", TRANSPARENT_PORT))
            .await
            .map_err(|e| {
                fail(format!(
                    "cannot listen on 127.0.0.1:{TRANSPARENT_PORT}: {e}"
                ))
            })?;
        tokio::spawn(transparent::serve_redirected(redirected, names, to_path));
    }
    openat(
        &state,
        MARKER,
        OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| fail(format!("cannot leave the marker: {e}")))?;
    drop(state);
    let _keep = socket;
    // `exec-launch` makes a nested user and mount namespace (the mounts
    // above are then locked in it), drops every capability, filters and
    // becomes the command.
    let mut relay = ns::Relay::install().map_err(|e| (1, e))?;
    let mut child = tokio::process::Command::new(SELF_EXE)
        .arg("exec-launch")
        .arg("--")
        .args(&a.command)
        .spawn()
        .map_err(|e| fail(format!("cannot start sluice exec-launch: {e}")))?;
    relay.wait(&mut child).await.map_err(|e| (1, e.to_string()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn interfaces_are_read_from_proc_net_dev() {
        let dev = "Inter-|   Receive                            |  Transmit\n \
                   face |bytes    packets errs drop fifo frame compressed multicast|bytes\n    \
                   lo:       0       0    0    0    0     0          0         0        0\n  \
                   eth0: 1234      10    0    0    0     0          0         0      567\n";
        assert_eq!(super::interfaces(dev), ["lo", "eth0"]);
    }
}
