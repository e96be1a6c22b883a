//! launch: `sluice exec-launch -- CMD`, the last step before the command,
//! run by the guest. It makes a nested user and mount namespace (so that
//! the guest's mounts are locked and the command holds no capability over
//! the network namespace), drops every capability and proves from
//! `/proc/self/status` that none is left, installs a seccomp filter and
//! execs CMD.
//!
//! The filter is an allow-list of sockets: `socket(2)` makes only IPv4 and
//! IPv6 stream and datagram sockets and netlink sockets (all confined by
//! the network namespace); `socketpair(2)` only unix stream and seqpacket
//! pairs (no address, and no way to `sendto` or `connect` one to a path).
//! A unix socket reached by its path, a unix datagram socket (whose
//! `sendto` reaches `/dev/log`, journald or `/run/systemd/notify` by path,
//! `SOCK_RAW` included: the kernel makes it a datagram socket), or vsock
//! would otherwise be a way out that a network namespace does not close.
//! The type is compared under its mask (`0xf`), so `SOCK_CLOEXEC` and
//! `SOCK_NONBLOCK` do not matter. No io_uring (which can make a socket
//! without socket(2)).
//!
//! The filter also refuses `TIOCSTI` and `TIOCLINUX` (which would type
//! into the terminal sluice exec was started from, outliving the run), and
//! on x86-64 the same calls by their x32 numbers. A call of another
//! architecture (i386's `int 0x80` on x86-64) kills the process: seccompiler
//! checks the architecture first. Descriptors the command would inherit
//! from whoever started sluice (a socket to anywhere) are closed first.
//!
//! Must not: run CMD when the namespaces could not be made, a capability
//! is left or the filter could not be installed.

use crate::command_error::{CommandError, Doing};
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

/// The sockets the command may create: (family, types under `0xf`).
pub(crate) const ALLOWED_SOCKETS: [(i32, &[i32]); 3] = [
    (libc::AF_INET, &[libc::SOCK_STREAM, libc::SOCK_DGRAM]),
    (libc::AF_INET6, &[libc::SOCK_STREAM, libc::SOCK_DGRAM]),
    (libc::AF_NETLINK, &[libc::SOCK_DGRAM, libc::SOCK_RAW]),
];

/// The socket pairs the command may create: (family, types under `0xf`).
pub(crate) const ALLOWED_PAIRS: [(i32, &[i32]); 1] =
    [(libc::AF_UNIX, &[libc::SOCK_STREAM, libc::SOCK_SEQPACKET])];

/// The bits of a socket type that name it (`SOCK_TYPE_MASK`); the rest
/// are flags.
const TYPE_MASK: u64 = 0xf;

/// Terminal ioctls the command may not make.
// The ioctl numbers are `c_ulong` here and `c_int` on other targets.
#[allow(clippy::unnecessary_cast)]
const REFUSED_IOCTLS: [u64; 2] = [libc::TIOCSTI as u64, libc::TIOCLINUX as u64];

/// The x32 syscall numbers' bit (x86-64 kernels that have the x32 ABI).
const X32: i64 = 0x4000_0000;

/// The errno every refused call gets (one nothing else would give for
/// most of them, so a refusal is easy to tell).
const REFUSED: i32 = libc::EAFNOSUPPORT;

fn arg(i: u8, op: SeccompCmpOp, v: u64) -> Result<SeccompCondition, seccompiler::BackendError> {
    SeccompCondition::new(i, SeccompCmpArgLen::Dword, op, v)
}

/// Rules matching every (family, type) that `allowed` does not list:
/// another family, or a listed family with another type under the mask.
/// seccompiler has no "masked not equal", so the refused types are
/// enumerated (the mask leaves 16).
fn refuse_all_but(
    allowed: &[(i32, &[i32])],
) -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    let other_family = allowed
        .iter()
        .map(|(f, _)| arg(0, SeccompCmpOp::Ne, *f as u64))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rules = vec![SeccompRule::new(other_family)?];
    for (family, types) in allowed {
        for t in (0..=TYPE_MASK).filter(|t| !types.iter().any(|a| *a as u64 == *t)) {
            rules.push(SeccompRule::new(vec![
                arg(0, SeccompCmpOp::Eq, *family as u64)?,
                arg(1, SeccompCmpOp::MaskedEq(TYPE_MASK), t)?,
            ])?);
        }
    }
    Ok(rules)
}

/// The keyring syscalls, refused outright.
const KEYRING: [i64; 3] = [libc::SYS_add_key, libc::SYS_request_key, libc::SYS_keyctl];

/// The filter's rules: the syscalls it refuses, and when.
fn rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    let ioctls = REFUSED_IOCTLS
        .iter()
        .map(|r| SeccompRule::new(vec![arg(1, SeccompCmpOp::Eq, *r)?]))
        .collect::<Result<Vec<_>, seccompiler::BackendError>>()?;
    let mut rules = BTreeMap::new();
    rules.insert(libc::SYS_socket, refuse_all_but(&ALLOWED_SOCKETS)?);
    rules.insert(libc::SYS_socketpair, refuse_all_but(&ALLOWED_PAIRS)?);
    rules.insert(libc::SYS_ioctl, ioctls);
    rules.insert(libc::SYS_io_uring_setup, vec![]);
    // The kernel's keyring: `request_key` can make the kernel run a helper
    // (`/sbin/request-key`, e.g. the dns_resolver upcall) in the host's
    // namespaces, a DNS query from outside the sandbox.
    for nr in KEYRING {
        rules.insert(nr, vec![]);
    }
    if cfg!(target_arch = "x86_64") {
        // x32: refuse these outright (ioctl is 514 there).
        for nr in [
            libc::SYS_socket,
            libc::SYS_socketpair,
            libc::SYS_io_uring_setup,
            514,
        ]
        .into_iter()
        .chain(KEYRING)
        {
            rules.insert(X32 | nr, vec![]);
        }
    }
    Ok(rules)
}

/// A user namespace nested in the guest's, with a mount namespace of its
/// own, as root inside; proven by its namespaces having changed.
fn nest() -> Result<(), CommandError> {
    use super::ns::{self, Namespaces};
    let before = Namespaces::of_self()?;
    ns::enter(nix::sched::CloneFlags::CLONE_NEWNS)?;
    let after = Namespaces::of_self()?;
    if after.user == before.user || after.mnt == before.mnt {
        return Err(CommandError::NotIsolated(
            "the nested user or mount namespace was not made".into(),
        ));
    }
    Ok(())
}

/// Drops every capability: the bounding set (so that exec gives root none
/// back), then the effective, permitted, inheritable and ambient sets.
fn drop_capabilities() -> Result<(), CommandError> {
    use rustix::io::Errno;
    use rustix::thread::{self, CapabilitySet, CapabilitySets};
    for cap in 0..64 {
        match thread::remove_capability_from_bounding_set(CapabilitySet::from_bits_retain(1 << cap))
        {
            Ok(()) => {}
            // Past the kernel's last capability.
            Err(Errno::INVAL) => break,
            Err(e) => return Err(e).doing(|| format!("cannot drop capability {cap}")),
        }
    }
    thread::clear_ambient_capability_set().doing(|| "cannot clear the ambient capabilities")?;
    let none = CapabilitySet::empty();
    thread::set_capabilities(
        None,
        CapabilitySets {
            effective: none,
            permitted: none,
            inheritable: none,
        },
    )
    .doing(|| "cannot drop the capabilities")
}

/// The capability sets `/proc/self/status` shows; every one must be
/// present and empty.
fn capabilities_gone(status: &str) -> Result<(), CommandError> {
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let value = status
            .lines()
            .find_map(|l| l.strip_prefix(set)?.strip_prefix(':'))
            .map(str::trim);
        match value.map(|v| u64::from_str_radix(v, 16)) {
            Some(Ok(0)) => {}
            Some(Ok(_)) => {
                return Err(CommandError::NotIsolated(format!(
                    "a capability is left ({set}: {})",
                    value.unwrap_or("")
                )))
            }
            _ => {
                return Err(CommandError::refused(format!(
                    "cannot read {set} from /proc/self/status"
                )))
            }
        }
    }
    Ok(())
}

/// Closes every descriptor above stderr: the command inherits nothing
/// sluice's own caller left open.
fn close_inherited() {
    let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in open {
        // The directory listing's own descriptor is already closed: EBADF.
        let _ = nix::unistd::close(fd);
    }
}

/// Installs the filter on this (single-threaded) process; it is inherited
/// across exec, with no_new_privs set.
pub(crate) fn install() -> Result<(), CommandError> {
    let arch = std::env::consts::ARCH.try_into().map_err(|e| {
        CommandError::refused(format!("no socket filter for this architecture: {e:?}"))
    })?;
    let program = program(arch).doing(|| "cannot compile the socket filter")?;
    seccompiler::apply_filter(&program).doing(|| "cannot install the socket filter")
}

/// The filter, compiled for `arch`.
fn program(
    arch: seccompiler::TargetArch,
) -> Result<seccompiler::BpfProgram, seccompiler::BackendError> {
    SeccompFilter::new(
        rules()?,
        SeccompAction::Allow,
        SeccompAction::Errno(REFUSED as u32),
        arch,
    )?
    .try_into()
}

/// Nests, drops the capabilities, filters, then becomes CMD.
pub(crate) fn main(command: Vec<String>) -> ExitCode {
    let confined = nest().and_then(|()| drop_capabilities()).and_then(|()| {
        let status = std::fs::read_to_string("/proc/self/status")
            .doing(|| "cannot read /proc/self/status")?;
        capabilities_gone(&status)
    });
    if let Err(e) = confined.and_then(|()| {
        close_inherited();
        install()
    }) {
        let e = e.not_run();
        eprintln!("sluice exec: {e}");
        return ExitCode::from(e.exit_code());
    }
    let err = std::process::Command::new(&command[0])
        .args(&command[1..])
        .exec();
    eprintln!("sluice exec: cannot run {}: {err}", command[0]);
    ExitCode::from(127)
}

#[cfg(test)]
#[path = "launch_tests.rs"]
mod tests;
