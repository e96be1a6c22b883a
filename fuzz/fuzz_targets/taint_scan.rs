//! The taint scanner with every Content-Encoding and arbitrary chunking:
//! never panics, stays within its scan limit, and (for identity bodies)
//! finds the same hosts however the body is split.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice::taint::body::BodyScanner;
use sluice::taint::scan::scan_all;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let encoding = match data[0] % 6 {
        0 => None,
        1 => Some("gzip"),
        2 => Some("deflate"),
        3 => Some("br"),
        4 => Some("zstd"),
        _ => Some("compress"),
    };
    let split = data[1] as usize;
    let body = &data[2..];
    let mut s = BodyScanner::new(encoding, 1 << 20);
    let mut found = Vec::new();
    let cut = split.min(body.len());
    found.extend(s.feed(&body[..cut]));
    found.extend(s.feed(&body[cut..]));
    found.extend(s.finish().0);
    assert!(s.scanned() <= 1 << 20);
    if encoding.is_none() {
        for h in scan_all(body) {
            assert!(found.contains(&h), "split at {cut} lost {h}");
        }
    }
});
