//! The spellings of one secret string that count as the secret: raw,
//! fully percent-encoded, hex, base64 and base64url at each of the three
//! alignments (only the characters the string alone decides), and JSON
//! `\u00XX`. Hex-digit forms are matched without regard to case, so one
//! lower-case spelling stands for every mix of cases.
//!
//! Must not: match (the matcher does) or know where a form was found.

use data_encoding::{BASE64URL_NOPAD, BASE64_NOPAD, HEXLOWER};

/// A form of a secret string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Form {
    pub(crate) bytes: Vec<u8>,
    /// Matched ignoring ASCII case (hex digits: `%2f` and `%2F` alike).
    pub(crate) any_case: bool,
    /// The string itself, unencoded.
    pub(crate) raw: bool,
}

/// Every form of `s` (at least 4 bytes long; shorter strings have base64
/// cores too short to mean anything, and the config refuses them).
pub(crate) fn forms(s: &[u8]) -> Vec<Form> {
    let exact = |bytes: Vec<u8>| Form {
        bytes,
        any_case: false,
        raw: false,
    };
    let any_case = |bytes: Vec<u8>| Form {
        bytes,
        any_case: true,
        raw: false,
    };
    let mut out = vec![Form {
        bytes: s.to_vec(),
        any_case: false,
        raw: true,
    }];
    let hex = HEXLOWER.encode(s);
    out.push(any_case(hex.clone().into_bytes()));
    let mut pct = String::with_capacity(s.len() * 3);
    let mut json = String::with_capacity(s.len() * 6);
    for pair in hex.as_bytes().chunks(2) {
        let pair = std::str::from_utf8(pair).unwrap_or("00");
        pct.push('%');
        pct.push_str(pair);
        json.push_str("\\u00");
        json.push_str(pair);
    }
    out.push(any_case(pct.into_bytes()));
    out.push(any_case(json.into_bytes()));
    // Percent-encoded where a URL must (sluice's own spelling of a value
    // it puts into a query).
    let mut reserved = String::with_capacity(s.len() * 3);
    for &b in s {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            reserved.push(b as char);
        } else {
            reserved.push_str(&format!("%{b:02x}"));
        }
    }
    if reserved.as_bytes() != s {
        out.push(any_case(reserved.into_bytes()));
    }
    for align in 0..3 {
        for enc in [&BASE64_NOPAD, &BASE64URL_NOPAD] {
            let core = base64_core(enc, s, align);
            if !core.is_empty() {
                out.push(exact(core));
            }
        }
    }
    out.dedup_by(|a, b| a.bytes == b.bytes && a.any_case == b.any_case);
    out
}

/// The base64 characters that depend on `s` alone when it starts `align`
/// bytes into a 3-byte group: whatever bytes come before or after it in
/// the encoded stream, these characters appear.
fn base64_core(enc: &data_encoding::Encoding, s: &[u8], align: usize) -> Vec<u8> {
    let mut padded = vec![0u8; align];
    padded.extend_from_slice(s);
    let encoded = enc.encode(&padded).into_bytes();
    // Characters touching the pad bytes before `s`.
    let skip = [0, 2, 3][align];
    // Characters all of whose 6 bits fall inside the bytes: floor(8n / 6).
    let whole = padded.len() * 8 / 6;
    encoded
        .get(skip..whole)
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

/// `s` as a reader may decode it, so a form spelled partly in escapes is
/// found as the plain string: `%XX`, `\/`, JSON `\u00XX`, HTML `&#NN;`
/// and `&#xHH;` (ASCII only) decoded, and line breaks dropped (base64
/// wrapped in lines, as MIME and PEM write it).
pub(crate) fn normalize(s: &[u8]) -> Vec<u8> {
    if !escaped(s) {
        return s.to_vec();
    }
    let hex = |b: &[u8]| -> Option<u8> {
        let t = std::str::from_utf8(b).ok()?;
        u8::from_str_radix(t, 16).ok().filter(u8::is_ascii)
    };
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        let decoded = match rest {
            [b'%', a, b, ..] => hex(&[*a, *b]).map(|c| (c, 3)),
            [b'\\', b'/', ..] => Some((b'/', 2)),
            [b'\\', b'u', b'0', b'0', a, b, ..] => hex(&[*a, *b]).map(|c| (c, 6)),
            [b'&', b'#', b'x' | b'X', ..] => entity(&rest[3..], 16).map(|(c, n)| (c, n + 3)),
            [b'&', b'#', ..] => entity(&rest[2..], 10).map(|(c, n)| (c, n + 2)),
            [b'\r' | b'\n', ..] => {
                i += 1;
                continue;
            }
            _ => None,
        };
        match decoded {
            Some((c, n)) => {
                out.push(c);
                i += n;
            }
            None => {
                out.push(s[i]);
                i += 1;
            }
        }
    }
    out
}

/// Could [`normalize`] change `s`? (Most header values and URLs have no
/// escape or line break: they are looked at once.)
pub(crate) fn escaped(s: &[u8]) -> bool {
    memchr::memchr3(b'%', b'\\', b'&', s).is_some() || memchr::memchr2(b'\r', b'\n', s).is_some()
}

/// The digits of an HTML numeric entity up to its `;`: the ASCII byte and
/// how many bytes the digits and `;` take.
fn entity(s: &[u8], radix: u32) -> Option<(u8, usize)> {
    let end = s.iter().take(8).position(|b| *b == b';')?;
    let n = u32::from_str_radix(std::str::from_utf8(&s[..end]).ok()?, radix).ok()?;
    u8::try_from(n)
        .ok()
        .filter(u8::is_ascii)
        .map(|c| (c, end + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alignment_of_base64_contains_its_core() {
        let s = b"ghp_Secr3tValue0123456789";
        for prefix_len in 0..6 {
            for suffix_len in 0..4 {
                let mut text = vec![b'x'; prefix_len];
                text.extend_from_slice(s);
                text.extend(std::iter::repeat_n(b'y', suffix_len));
                for enc in [&BASE64_NOPAD, &BASE64URL_NOPAD, &data_encoding::BASE64] {
                    let encoded = enc.encode(&text);
                    let found = forms(s).iter().any(|f| {
                        !f.raw
                            && encoded
                                .as_bytes()
                                .windows(f.bytes.len())
                                .any(|w| w == f.bytes)
                    });
                    assert!(found, "prefix {prefix_len} suffix {suffix_len}: {encoded}");
                }
            }
        }
    }

    #[test]
    fn normalize_decodes_what_readers_decode() {
        assert_eq!(normalize(b"a%2Fb\\/c\\u002fd&#47;e&#x2F;f"), b"a/b/c/d/e/f");
        assert_eq!(normalize(b"YWJj\r\nZGVm\n"), b"YWJjZGVm");
        assert_eq!(
            normalize(b"100% &#;&#x110; \\u00zz"),
            b"100% &#;&#x110; \\u00zz"
        );
    }

    #[test]
    fn hex_percent_and_json_forms() {
        let f = forms(b"Ab/");
        let texts: Vec<String> = f
            .iter()
            .map(|f| String::from_utf8(f.bytes.clone()).unwrap())
            .collect();
        assert!(texts.contains(&"Ab/".to_string()));
        assert!(texts.contains(&"41622f".to_string()));
        assert!(texts.contains(&"%41%62%2f".to_string()));
        assert!(texts.contains(&"\\u0041\\u0062\\u002f".to_string()));
        // "Ab/" has a '/': its URL spelling "Ab%2f" is a fourth.
        assert!(texts.contains(&"Ab%2f".to_string()));
        assert!(f.iter().filter(|f| f.any_case).count() == 4);
        assert!(forms(b"AbC").iter().filter(|f| f.any_case).count() == 3);
    }
}
