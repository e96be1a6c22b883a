//! launch: `sluice exec-launch -- CMD`, the last step before the command,
//! run by the guest in a nested user and mount namespace (so that the
//! guest's mounts are locked and the command holds no capability over the
//! network namespace). It installs a seccomp filter and execs CMD.
//!
//! The filter leaves the command only IPv4, IPv6 and netlink sockets (all
//! confined by the network namespace) and no io_uring (which can make a
//! socket without socket(2)). A unix socket reached by its path, or vsock,
//! would otherwise be a way out that a network namespace does not close: a
//! container engine's or a desktop session's socket, a resolver's varlink,
//! the host side of a microVM. `socketpair(2)` stays allowed: its sockets
//! have no address.
//!
//! The filter also refuses `TIOCSTI` and `TIOCLINUX` (which would type
//! into the terminal sluice exec was started from, outliving the run),
//! datagram `socketpair`s (whose sockets can `sendto` any unix socket by
//! path, `/dev/log` say), and on x86-64 the same calls by their x32
//! numbers. Descriptors the command would inherit from whoever started
//! sluice (a socket to anywhere) are closed first.
//!
//! Must not: run CMD when the filter could not be installed.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

/// Socket families the command may create.
pub const ALLOWED_FAMILIES: [i32; 3] = [libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK];

/// Terminal ioctls the command may not make.
// The ioctl numbers are `c_ulong` here and `c_int` on other targets.
#[allow(clippy::unnecessary_cast)]
const REFUSED_IOCTLS: [u64; 2] = [libc::TIOCSTI as u64, libc::TIOCLINUX as u64];

/// The x32 syscall numbers' bit (x86-64 kernels that have the x32 ABI).
const X32: i64 = 0x4000_0000;

/// The filter's rules: the syscalls it refuses, and when.
fn rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    let arg =
        |i: u8, op: SeccompCmpOp, v: u64| SeccompCondition::new(i, SeccompCmpArgLen::Dword, op, v);
    let other_family: Vec<SeccompCondition> = ALLOWED_FAMILIES
        .iter()
        .map(|f| arg(0, SeccompCmpOp::Ne, *f as u64))
        .collect::<Result<_, _>>()?;
    let ioctls = REFUSED_IOCTLS
        .iter()
        .map(|r| SeccompRule::new(vec![arg(1, SeccompCmpOp::Eq, *r)?]))
        .collect::<Result<Vec<_>, seccompiler::BackendError>>()?;
    let dgram_pair = SeccompRule::new(vec![arg(
        1,
        SeccompCmpOp::MaskedEq(0xf),
        libc::SOCK_DGRAM as u64,
    )?])?;
    let mut rules = BTreeMap::new();
    rules.insert(libc::SYS_socket, vec![SeccompRule::new(other_family)?]);
    rules.insert(libc::SYS_socketpair, vec![dgram_pair]);
    rules.insert(libc::SYS_ioctl, ioctls);
    rules.insert(libc::SYS_io_uring_setup, vec![]);
    if cfg!(target_arch = "x86_64") {
        // x32: refuse these outright (ioctl is 514 there).
        for nr in [
            libc::SYS_socket,
            libc::SYS_socketpair,
            libc::SYS_io_uring_setup,
            514,
        ] {
            rules.insert(X32 | nr, vec![]);
        }
    }
    Ok(rules)
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
pub fn install() -> Result<(), String> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("{e:?}"))?;
    let filter = SeccompFilter::new(
        rules().map_err(|e| e.to_string())?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EAFNOSUPPORT as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let program: seccompiler::BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    seccompiler::apply_filter(&program).map_err(|e| e.to_string())
}

/// Filters, then becomes CMD.
pub fn main(command: Vec<String>) -> ExitCode {
    close_inherited();
    if let Err(e) = install() {
        eprintln!("sluice exec: cannot install the socket filter: {e}; the command was not run");
        return ExitCode::from(1);
    }
    let err = std::process::Command::new(&command[0])
        .args(&command[1..])
        .exec();
    eprintln!("sluice exec: cannot run {}: {err}", command[0]);
    ExitCode::from(127)
}
