//! The ClientHello/SNI reader: never panics on arbitrary bytes in two
//! pushes, and a verdict, once given, is stable.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice::intercept::{ClientHelloReader, Peeked};

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let cut = (data[0] as usize).min(data.len() - 1) + 1;
    let mut r = ClientHelloReader::default();
    let first = r.push(&data[1..cut.min(data.len())]);
    if first == Peeked::NeedMore {
        let _ = r.push(&data[cut.min(data.len())..]);
    }
    if let Peeked::Tls { sni: Some(s) } = first {
        assert_eq!(s, s.to_ascii_lowercase());
    }
});
