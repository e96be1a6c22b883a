//! The seccomp filter, run through a small classic-BPF interpreter over
//! `struct seccomp_data` (the kernel's view of a call), and the capability
//! proof.

use super::*;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;

#[cfg(target_arch = "x86_64")]
const NATIVE: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const NATIVE: u32 = 0xc000_00b7;
/// i386, as `int 0x80` on an x86-64 kernel reports it.
const I386: u32 = 0x4000_0003;

/// The filter's verdict on one call: `nr` under `arch`, with `args`.
fn run(arch: u32, nr: i64, args: [u64; 6]) -> u32 {
    let program = program(std::env::consts::ARCH.try_into().unwrap()).unwrap();
    // struct seccomp_data: nr, arch, instruction pointer, args (little-endian).
    let mut data = Vec::with_capacity(64);
    data.extend_from_slice(&(nr as u32).to_le_bytes());
    data.extend_from_slice(&arch.to_le_bytes());
    data.extend_from_slice(&0u64.to_le_bytes());
    for a in args {
        data.extend_from_slice(&a.to_le_bytes());
    }
    let word = |k: u32| u32::from_le_bytes(data[k as usize..k as usize + 4].try_into().unwrap());
    let (mut acc, mut pc) = (0u32, 0usize);
    loop {
        let i = &program[pc];
        pc += 1;
        match (i.code & 0x07, i.code & 0xf0) {
            (0x00, _) if i.code == 0x20 => acc = word(i.k),
            (0x04, 0x50) => acc &= i.k,
            (0x05, 0x00) => pc += i.k as usize,
            (0x05, op) => {
                let taken = match op {
                    0x10 => acc == i.k,
                    0x20 => acc > i.k,
                    0x30 => acc >= i.k,
                    0x40 => acc & i.k != 0,
                    _ => panic!("jump {:#x} not interpreted", i.code),
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            (0x06, _) => return i.k,
            _ => panic!("instruction {:#x} not interpreted", i.code),
        }
    }
}

/// The verdict on a native `socket`/`socketpair(family, type)`; the upper
/// halves of the registers hold garbage (the kernel reads an int).
fn verdict(nr: i64, family: i32, ty: i32) -> u32 {
    let int = |v: i32| 0xdead_beef_0000_0000 | u64::from(v as u32);
    run(NATIVE, nr, [int(family), int(ty), 0, 0, 0, 0])
}

const REFUSED_RET: u32 = RET_ERRNO | REFUSED as u32;

#[test]
fn socket_table() {
    use libc::*;
    let cases: [(&str, i64, i32, i32, u32); 14] = [
        (
            "tcp",
            SYS_socket,
            AF_INET,
            SOCK_STREAM | SOCK_CLOEXEC,
            RET_ALLOW,
        ),
        (
            "udp6",
            SYS_socket,
            AF_INET6,
            SOCK_DGRAM | SOCK_NONBLOCK,
            RET_ALLOW,
        ),
        (
            "netlink route",
            SYS_socket,
            AF_NETLINK,
            SOCK_RAW | SOCK_CLOEXEC,
            RET_ALLOW,
        ),
        (
            "unix stream pair",
            SYS_socketpair,
            AF_UNIX,
            SOCK_STREAM,
            RET_ALLOW,
        ),
        (
            "unix seqpacket pair",
            SYS_socketpair,
            AF_UNIX,
            SOCK_SEQPACKET | SOCK_CLOEXEC,
            RET_ALLOW,
        ),
        // The finding: the kernel makes a SOCK_RAW unix pair a datagram
        // pair, whose sendto reaches any host socket by path.
        (
            "unix SOCK_RAW pair",
            SYS_socketpair,
            AF_UNIX,
            SOCK_RAW,
            REFUSED_RET,
        ),
        (
            "unix SOCK_RAW pair with flags",
            SYS_socketpair,
            AF_UNIX,
            SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK,
            REFUSED_RET,
        ),
        (
            "unix datagram pair",
            SYS_socketpair,
            AF_UNIX,
            SOCK_DGRAM,
            REFUSED_RET,
        ),
        ("unix socket", SYS_socket, AF_UNIX, SOCK_STREAM, REFUSED_RET),
        (
            "unix datagram socket",
            SYS_socket,
            AF_UNIX,
            SOCK_DGRAM | SOCK_CLOEXEC,
            REFUSED_RET,
        ),
        ("vsock", SYS_socket, AF_VSOCK, SOCK_STREAM, REFUSED_RET),
        (
            "packet socket",
            SYS_socket,
            AF_PACKET,
            SOCK_RAW,
            REFUSED_RET,
        ),
        (
            "SOCK_PACKET over inet",
            SYS_socket,
            AF_INET,
            10, // SOCK_PACKET (deprecated in libc)
            REFUSED_RET,
        ),
        (
            "inet pair",
            SYS_socketpair,
            AF_INET,
            SOCK_STREAM,
            REFUSED_RET,
        ),
    ];
    for (name, nr, family, ty, want) in cases {
        assert_eq!(verdict(nr, family, ty), want, "{name}");
    }
}

#[test]
fn only_the_listed_family_and_type_pairs_pass_whatever_the_flags() {
    let flags = [
        0,
        libc::SOCK_CLOEXEC,
        libc::SOCK_NONBLOCK,
        libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
    ];
    for (nr, allowed) in [
        (libc::SYS_socket, &ALLOWED_SOCKETS[..]),
        (libc::SYS_socketpair, &ALLOWED_PAIRS[..]),
    ] {
        for family in 0..64 {
            for ty in 0..16 {
                let listed = allowed
                    .iter()
                    .any(|(f, ts)| *f == family && ts.contains(&ty));
                for flag in flags {
                    let want = if listed { RET_ALLOW } else { REFUSED_RET };
                    assert_eq!(
                        verdict(nr, family, ty | flag),
                        want,
                        "{nr} {family} {ty} {flag:#x}"
                    );
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x32_numbers_are_refused_and_another_architecture_is_killed() {
    let stream = [libc::AF_UNIX as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
    for nr in [
        libc::SYS_socket,
        libc::SYS_socketpair,
        libc::SYS_io_uring_setup,
        514,
    ] {
        assert_eq!(run(NATIVE, X32 | nr, stream), REFUSED_RET, "x32 {nr}");
    }
    // i386 socketcall (102) and socket (359), through int 0x80.
    for nr in [102, 359, 1] {
        assert_eq!(run(I386, nr, stream), RET_KILL_PROCESS, "i386 {nr}");
    }
}

// The ioctl numbers are `c_ulong` here and `c_int` on other targets.
#[allow(clippy::unnecessary_cast)]
#[test]
fn terminal_ioctls_are_refused_and_others_pass() {
    let call = |req: u64| run(NATIVE, libc::SYS_ioctl, [0, req, 0, 0, 0, 0]);
    assert_eq!(call(libc::TIOCSTI as u64), REFUSED_RET);
    assert_eq!(call(libc::TIOCLINUX as u64), REFUSED_RET);
    assert_eq!(call(libc::TIOCGWINSZ as u64), RET_ALLOW);
    assert_eq!(run(NATIVE, libc::SYS_io_uring_setup, [0; 6]), REFUSED_RET);
    assert_eq!(run(NATIVE, libc::SYS_read, [0; 6]), RET_ALLOW);
    // The keyring (a request_key upcall runs in the host's namespaces).
    for nr in [libc::SYS_add_key, libc::SYS_request_key, libc::SYS_keyctl] {
        assert_eq!(run(NATIVE, nr, [0; 6]), REFUSED_RET, "{nr}");
        assert_eq!(run(NATIVE, X32 | nr, [0; 6]), REFUSED_RET, "x32 {nr}");
    }
}

#[test]
fn capabilities_table() {
    let status = |eff: &str, amb: Option<&str>| {
        let mut s = format!(
            "Name:\tsluice\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
             CapEff:\t{eff}\nCapBnd:\t0000000000000000\n"
        );
        if let Some(a) = amb {
            s.push_str(&format!("CapAmb:\t{a}\nNoNewPrivs:\t0\n"));
        }
        s
    };
    let zero = "0000000000000000";
    let cases = [
        ("all empty", status(zero, Some(zero)), Ok(())),
        (
            "root's full set left",
            status("000001ffffffffff", Some(zero)),
            Err("not isolated: a capability is left (CapEff: 000001ffffffffff)"),
        ),
        (
            "a set missing",
            status(zero, None),
            Err("cannot read CapAmb from /proc/self/status"),
        ),
        (
            "garbage",
            status("zz", Some(zero)),
            Err("cannot read CapEff from /proc/self/status"),
        ),
    ];
    for (name, text, want) in cases {
        assert_eq!(
            capabilities_gone(&text).map_err(|e| e.to_string()),
            want.map_err(str::to_string),
            "{name}"
        );
    }
}
