//! Address classification: never panics; a public IPv4 address is none of
//! the std-known special kinds, and IPv4-mapped forms agree.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice::inspect::{classify, classify_v4, classify_v6};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fuzz_target!(|data: [u8; 16]| {
    let v6 = Ipv6Addr::from(data);
    let _ = classify(IpAddr::V6(v6));
    let v4 = Ipv4Addr::new(data[0], data[1], data[2], data[3]);
    let public = classify_v4(v4).is_ok();
    if public {
        assert!(!v4.is_private() && !v4.is_loopback() && !v4.is_link_local() && !v4.is_multicast());
    }
    assert_eq!(classify_v6(v4.to_ipv6_mapped()).is_ok(), public);
});
