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

use crate::command_error::{CommandError, Doing};
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
pub(crate) fn client_env(task: &TaskConfig, state: &Path) -> Result<Env, CommandError> {
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
        secrets: Vec::new(),
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
) -> Result<ExitStatus, CommandError> {
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
    // The command never gets a secret's value: its variable holds the
    // placeholder sluice made, and the variable sluice read it from is gone.
    let kept = crate::secrets::read_placeholders(state, &task.id);
    for s in &task.secrets {
        if let crate::config::SecretSource::Env(var) = &s.source {
            cmd.env_remove(var);
        }
        match kept.get(&s.name) {
            Some(p) => cmd.env(&s.name, p),
            None => cmd.env_remove(&s.name),
        };
    }
    let mut relay = ns::Relay::install()?;
    // Spawned from the thread that runs sluice exec to its end: the guest
    // dies with that thread (its parent-death signal).
    let mut child = cmd
        .spawn()
        .doing(|| "cannot start sluice exec-guest")
        .map_err(CommandError::not_run)?;
    relay.wait(&mut child).await.doing(|| "lost the guest")
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
        .doing(|| "cannot tie the guest to sluice")
        .and_then(|()| {
            rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
                .doing(|| "cannot make the guest undumpable")
        })
        .and_then(|()| {
            let pid = rustix::process::getpid().as_raw_nonzero().get();
            ns::prove(&Namespaces::of_self()?, &a.sluice, pid)
        })
        .and_then(|()| ns::private_mounts_and_proc())
        .and_then(|()| isolate(&a))
        .and_then(|()| read_only_kernel())
        .and_then(|()| hide_state(&a.state));
    let ran = state.map_err(CommandError::not_run).and_then(|state| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .doing(|| "cannot start")
            .map_err(CommandError::not_run)?;
        rt.block_on(relay_and_run(&a, state))
    });
    match ran {
        Ok(status) => super::exit_code(status),
        Err(e) => {
            eprintln!("sluice exec: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// The first stage, started by sluice: moves into new user, mount,
/// network and PID namespaces (while it is still one thread), then starts
/// the second stage, the first process of the new PID namespace, and
/// waits for it, passing signals on.
fn first_stage() -> ExitCode {
    use nix::sched::CloneFlags;
    let fail = |e: CommandError| {
        let e = e.not_run();
        eprintln!("sluice exec: {e}");
        ExitCode::from(e.exit_code())
    };
    let sluice = rustix::process::getppid();
    // Dies with sluice: a `kill -9` of sluice ends the sandbox too. Set
    // after unshare, which clears it when it grants capabilities.
    let made =
        ns::enter(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWPID)
            .and_then(|()| {
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
                    .doing(|| "cannot tie the guest to sluice")
            });
    if let Err(e) = made {
        return fail(e);
    }
    if rustix::process::getppid() != sluice {
        return fail(CommandError::refused("sluice is gone"));
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(Err::<(), _>(e).doing(|| "cannot start").unwrap_err()),
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
            .doing(|| "cannot start the guest")?;
        relay.wait(&mut child).await.doing(|| "lost the guest")
    });
    match status {
        Ok(status) => super::exit_code(status),
        Err(e) => fail(e),
    }
}

/// Runs a setup command; its failure is the sandbox's.
fn setup(program: &str, args: &[&str]) -> Result<String, CommandError> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .doing(|| format!("cannot run {program}"))?;
    if !out.status.success() {
        return Err(CommandError::refused(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
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
fn isolate(a: &GuestArgs) -> Result<(), CommandError> {
    setup("ip", &["link", "set", "lo", "up"])?;
    let dev =
        std::fs::read_to_string("/proc/self/net/dev").doing(|| "cannot read /proc/self/net/dev")?;
    if let Some(other) = interfaces(&dev).into_iter().find(|i| *i != "lo") {
        return Err(CommandError::NotIsolated(format!(
            "the namespace has an interface besides lo: {other}"
        )));
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
        std::fs::write(&rules, ruleset).doing(|| format!("cannot write {}", rules.display()))?;
        setup("nft", &["-f", &rules.to_string_lossy()])?;
        let resolv = a.state.join("exec-resolv.conf");
        std::fs::write(
            &resolv,
            "nameserver 127.0.0.1\noptions attempts:1 timeout:2\n",
        )
        .doing(|| format!("cannot write {}", resolv.display()))?;
        rustix::mount::mount_bind(&resolv, "/etc/resolv.conf")
            .doing(|| "cannot cover /etc/resolv.conf")?;
    }
    Ok(())
}

/// Kernel settings the command must not write: a root outside is root
/// inside too (for file permissions), and `core_pattern` or
/// `sysrq-trigger` would act on the whole machine.
fn read_only_kernel() -> Result<(), CommandError> {
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
            .doing(|| format!("cannot make {path} read-only"))?;
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
fn hide_state(state: &Path) -> Result<OwnedFd, CommandError> {
    use rustix::fs::{open, Mode, OFlags};
    use rustix::mount::{mount, mount_bind, mount_remount, MountFlags};
    let dir = open(
        state,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .doing(|| "cannot open the state folder")?;
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
    .doing(|| "cannot cover the state folder")?;
    for f in shown {
        let at = state.join(f);
        std::fs::File::create(&at).doing(|| "cannot make a mount point")?;
        mount_bind(real.join(f), &at).doing(|| "cannot show a state file")?;
        if f != "exec.sock" {
            mount_remount(&at, MountFlags::BIND | MountFlags::RDONLY, "")
                .doing(|| "cannot make a state file read-only")?;
        }
    }
    Ok(dir)
}

/// Starts the relays, leaves the marker, runs the command (through
/// `unshare` and `sluice exec-launch`) and waits.
async fn relay_and_run(a: &GuestArgs, state: OwnedFd) -> Result<ExitStatus, CommandError> {
    let (_keep, mut relay, mut child) = start(a, state).await.map_err(CommandError::not_run)?;
    // The command started: what fails from here did not stop it running.
    relay.wait(&mut child).await.doing(|| "lost the command")
}

/// [`relay_and_run`] up to the command's start: the relays, the marker,
/// the launcher spawned. Returns what must live as long as the command
/// (the handle on sluice's socket), the signal relay and the launcher.
async fn start(
    a: &GuestArgs,
    state: OwnedFd,
) -> Result<(OwnedFd, ns::Relay, tokio::process::Child), CommandError> {
    use rustix::fs::{open, openat, Mode, OFlags};
    // The relays reach sluice through this handle, never by the path
    // (which the command could make point elsewhere).
    let socket = open(&a.to, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
        .doing(|| format!("cannot open {}", a.to.display()))?;
    let to_path = PathBuf::from(format!("/proc/self/fd/{}", socket.as_raw_fd()));
    let to = ListenAddr::Unix(to_path.clone());
    let relay = crate::listener::bind(&ListenAddr::Tcp(([127, 0, 0, 1], RELAY_PORT).into()))
        .await
        .doing(|| format!("cannot listen on 127.0.0.1:{RELAY_PORT}"))?;
    tokio::spawn(async move { crate::guest_relay::serve(&relay, &to).await });
    if a.transparent {
        let names = Arc::new(Mutex::new(Names::new(&a.names, a.any_name)));
        let dns = tokio::net::UdpSocket::bind("127.0.0.1:53")
            .await
            .doing(|| "cannot listen on 127.0.0.1:53")?;
        let refused = openat(
            &state,
            transparent::REFUSED_FILE,
            OFlags::CREATE | OFlags::WRONLY | OFlags::APPEND | OFlags::CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .doing(|| format!("cannot write {}", transparent::REFUSED_FILE))?;
        tokio::spawn(transparent::serve_dns(
            dns,
            names.clone(),
            std::fs::File::from(refused),
        ));
        let redirected = tokio::net::TcpListener::bind(("127.0.0.1", TRANSPARENT_PORT))
            .await
            .doing(|| format!("cannot listen on 127.0.0.1:{TRANSPARENT_PORT}"))?;
        tokio::spawn(transparent::serve_redirected(redirected, names, to_path));
    }
    openat(
        &state,
        MARKER,
        OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .doing(|| "cannot leave the marker")?;
    drop(state);
    // `exec-launch` makes a nested user and mount namespace (the mounts
    // above are then locked in it), drops every capability, filters and
    // becomes the command.
    let relay = ns::Relay::install()?;
    let child = tokio::process::Command::new(SELF_EXE)
        .arg("exec-launch")
        .arg("--")
        .args(&a.command)
        .spawn()
        .doing(|| "cannot start sluice exec-launch")?;
    Ok((socket, relay, child))
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
