//! The tunnel-start reader (ClientHello reassembly, HTTP detection): never
//! panics on arbitrary bytes pushed in arbitrary pieces, a verdict once
//! given is final, the same bytes give the same verdict however they are
//! split, and a TLS start is never called opaque or HTTP.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice::inspect::{Peeked, StartReader};
use sluice::inspect::TunnelStart;

fn run(pieces: &[&[u8]]) -> Option<TunnelStart> {
    let mut r = StartReader::default();
    for p in pieces {
        if let Peeked::Done(s) = r.push(p) {
            return Some(s);
        }
    }
    None
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let cut = (data[0] as usize).min(data.len() - 1);
    let body = &data[1..];
    let cut = cut.min(body.len());
    let whole = run(&[body]);
    let split = run(&[&body[..cut], &body[cut..]]);
    let bytewise: Vec<&[u8]> = body.chunks(1).collect();
    let one_by_one = run(&bytewise);
    // rustls may stop at a different byte when fed in pieces, but a
    // verdict on a prefix of the input must agree in kind.
    let kind = |s: &Option<TunnelStart>| match s {
        None => 0,
        Some(TunnelStart::Tls { .. }) => 1,
        Some(TunnelStart::BadHello(_)) => 2,
        Some(TunnelStart::Http) | Some(TunnelStart::Http2) => 3,
        Some(TunnelStart::Other) => 4,
        Some(TunnelStart::Nothing) => 5,
        // Only `incomplete` (a stall) says this, never `push`.
        Some(TunnelStart::Unfinished(_)) => 6,
    };
    for s in [&whole, &split, &one_by_one] {
        assert_ne!(kind(s), 6, "push never judges a start unfinished");
    }
    if body[0] == 0x16 || matches!(kind(&whole), 1 | 2) {
        for s in [&whole, &split, &one_by_one] {
            assert!(matches!(kind(s), 0 | 1 | 2), "TLS start judged {s:?}");
        }
        if let (Some(TunnelStart::Tls { sni: a }), Some(TunnelStart::Tls { sni: b })) = (&whole, &split) {
            assert_eq!(a, b, "SNI differs by split");
        }
    } else {
        assert_eq!(kind(&whole), kind(&split));
        assert_eq!(kind(&whole), kind(&one_by_one));
    }
    if let Some(TunnelStart::Tls { sni: Some(s) }) = whole {
        assert_eq!(s, s.to_ascii_lowercase());
    }
});
