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
//! Must not: run CMD when the filter could not be installed.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

/// Socket families the command may create.
pub const ALLOWED_FAMILIES: [i32; 3] = [libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK];

/// The filter's rules: the syscalls it refuses, and when.
fn rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    let other_family: Vec<SeccompCondition> = ALLOWED_FAMILIES
        .iter()
        .map(|f| SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, *f as u64))
        .collect::<Result<_, _>>()?;
    let mut rules = BTreeMap::new();
    rules.insert(libc::SYS_socket, vec![SeccompRule::new(other_family)?]);
    rules.insert(libc::SYS_io_uring_setup, vec![]);
    Ok(rules)
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
