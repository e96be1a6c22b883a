//! ns: the namespaces `sluice exec` runs its command in. Makes them with
//! unshare(2) (never an `unshare` binary found on PATH), maps the caller
//! to root inside, proves that a process sits in namespaces other than
//! sluice's own, and relays signals to a child while waiting for it (every
//! process between sluice and the command does).
//!
//! Must not: start the command or the relays (the guest does), or take a
//! namespace on trust: whoever relies on one checks it with [`prove`].

use crate::command_error::{CommandError, Doing};
use std::os::unix::fs::MetadataExt;
use std::process::ExitStatus;

use nix::sched::CloneFlags;

/// A process's namespaces, by the inodes of `/proc/self/ns/*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub(crate) struct Namespaces {
    /// Its user namespace: the one its capabilities count in.
    #[arg(long = "user-ns")]
    pub(crate) user: u64,
    /// Its mount namespace: where the guest's mounts (the covered state
    /// folder, read-only kernel settings) are made.
    #[arg(long = "mnt-ns")]
    pub(crate) mnt: u64,
    /// Its PID namespace: no other process of the machine is visible.
    #[arg(long = "pid-ns")]
    pub(crate) pid: u64,
    /// Its network namespace: loopback only.
    #[arg(long = "net-ns")]
    pub(crate) net: u64,
}

impl Namespaces {
    /// The calling process's namespaces.
    pub(crate) fn of_self() -> Result<Namespaces, CommandError> {
        let ino = |name: &str| {
            let path = format!("/proc/self/ns/{name}");
            std::fs::metadata(&path)
                .map(|m| m.ino())
                .doing(|| format!("cannot read {path}"))
        };
        Ok(Namespaces {
            user: ino("user")?,
            mnt: ino("mnt")?,
            pid: ino("pid")?,
            net: ino("net")?,
        })
    }

    /// These namespaces as the guest's command line gives them.
    pub(crate) fn args(&self) -> [String; 8] {
        [
            "--user-ns".into(),
            self.user.to_string(),
            "--mnt-ns".into(),
            self.mnt.to_string(),
            "--pid-ns".into(),
            self.pid.to_string(),
            "--net-ns".into(),
            self.net.to_string(),
        ]
    }
}

/// Proves that a process with namespaces `mine` and process id `pid` is
/// isolated from sluice (`sluice`'s namespaces): every namespace differs,
/// and it is the first process of its PID namespace.
pub(crate) fn prove(mine: &Namespaces, sluice: &Namespaces, pid: i32) -> Result<(), CommandError> {
    let same: Vec<&str> = [
        ("user", mine.user == sluice.user),
        ("mount", mine.mnt == sluice.mnt),
        ("PID", mine.pid == sluice.pid),
        ("network", mine.net == sluice.net),
    ]
    .into_iter()
    .filter_map(|(name, same)| same.then_some(name))
    .collect();
    if !same.is_empty() {
        return Err(CommandError::NotIsolated(format!(
            "the {} namespace{} sluice's own",
            same.join(", "),
            if same.len() == 1 { " is" } else { "s are" }
        )));
    }
    if pid != 1 {
        return Err(CommandError::NotIsolated(format!(
            "the guest is process {pid} of its PID namespace, not its first"
        )));
    }
    Ok(())
}

/// Moves this (single-threaded) process into a new user namespace and the
/// new namespaces `others` names, owned by it, as root inside: user id and
/// group id 0 map to the caller's, and nothing else is mapped.
pub(crate) fn enter(others: CloneFlags) -> Result<(), CommandError> {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER | others)
        .doing(|| "cannot make new namespaces (unshare(2))")?;
    // setgroups must be refused before an unprivileged caller may map a
    // group (and an older kernel without the file has no such rule).
    match std::fs::write("/proc/self/setgroups", "deny") {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).doing(|| "cannot write /proc/self/setgroups"),
    }
    for (file, id) in [("uid_map", uid), ("gid_map", gid)] {
        std::fs::write(format!("/proc/self/{file}"), format!("0 {id} 1\n"))
            .doing(|| format!("cannot write /proc/self/{file}"))?;
    }
    Ok(())
}

/// In a new mount and PID namespace (proven first): stops mounts from
/// propagating anywhere, and mounts a `/proc` of this PID namespace.
pub(crate) fn private_mounts_and_proc() -> Result<(), CommandError> {
    use rustix::mount::{mount, mount_change, MountFlags, MountPropagationFlags};
    mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .doing(|| "cannot make the mounts private")?;
    mount(
        "proc",
        "/proc",
        "proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        None,
    )
    .doing(|| "cannot mount /proc")
}

/// The signals passed on to the next process towards the command, and
/// SIGINT held: Ctrl-C reaches the command from the terminal itself (it
/// is in the terminal's process group), and the processes between must
/// outlive it to report the command's exit.
pub(crate) struct Relay {
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Relay {
    /// Installs the handlers (before the child starts, so that no signal
    /// falls between).
    pub(crate) fn install() -> Result<Relay, CommandError> {
        use tokio::signal::unix::{signal, SignalKind};
        let on = |kind: SignalKind| signal(kind).doing(|| "cannot watch signals");
        Ok(Relay {
            term: on(SignalKind::terminate())?,
            hup: on(SignalKind::hangup())?,
            int: on(SignalKind::interrupt())?,
        })
    }

    /// Waits for `child`, passing SIGTERM and SIGHUP on to it.
    pub(crate) async fn wait(
        &mut self,
        child: &mut tokio::process::Child,
    ) -> std::io::Result<ExitStatus> {
        use rustix::process::Signal;
        loop {
            let signal = tokio::select! {
                s = child.wait() => return s,
                _ = self.term.recv() => Signal::TERM,
                _ = self.hup.recv() => Signal::HUP,
                _ = self.int.recv() => continue,
            };
            if let Some(pid) = child
                .id()
                .and_then(|p| rustix::process::Pid::from_raw(p as i32))
            {
                let _ = rustix::process::kill_process(pid, signal);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLUICE: Namespaces = Namespaces {
        user: 1,
        mnt: 2,
        pid: 3,
        net: 4,
    };

    #[test]
    fn every_namespace_must_differ_and_the_guest_be_pid_1() {
        let fresh = Namespaces {
            user: 11,
            mnt: 12,
            pid: 13,
            net: 14,
        };
        let cases: [(&str, Namespaces, i32, Result<(), &str>); 5] = [
            ("all new", fresh, 1, Ok(())),
            (
                "an unshare that drops --user",
                Namespaces { user: 1, ..fresh },
                1,
                Err("not isolated: the user namespace is sluice's own"),
            ),
            (
                "only a new network namespace (the old check)",
                Namespaces { net: 14, ..SLUICE },
                1,
                Err("not isolated: the user, mount, PID namespaces are sluice's own"),
            ),
            (
                "no namespaces at all",
                SLUICE,
                1,
                Err("not isolated: the user, mount, PID, network namespaces are sluice's own"),
            ),
            (
                "a new PID namespace the guest is not the first of",
                fresh,
                7,
                Err("not isolated: the guest is process 7 of its PID namespace, not its first"),
            ),
        ];
        for (name, mine, pid, want) in cases {
            assert_eq!(
                prove(&mine, &SLUICE, pid).map_err(|e| e.to_string()),
                want.map_err(str::to_string),
                "{name}"
            );
        }
    }
}
