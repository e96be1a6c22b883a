//! Target parsing and host normalisation: never panics; a normalised name
//! normalises to itself; a parsed authority's port is 1..=65535.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice::inspect::{normalize_host, parse_authority};
use sluice::inspect::Host;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(Host::Name(n)) = normalize_host(s) {
        assert_eq!(normalize_host(&n), Ok(Host::Name(n.clone())), "not idempotent: {s:?}");
        assert!(n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b)));
    }
    for default in [None, Some(80), Some(443)] {
        if let Ok(t) = parse_authority(s, default) {
            assert!(t.port >= 1);
        }
    }
});
