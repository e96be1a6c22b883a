//! Finding a task's secrets — each placeholder and each real value, in
//! every form `forms` lists — in a header, a URL or a stream of chunks.
//! Two automata (one exact, one ignoring ASCII case for hex-digit forms)
//! find them all in one pass. A stream holds back a tail as long as the
//! longest form less one byte, so a form split across chunks is found
//! before its first byte is released.
//!
//! Must not: decide what a hit means (the caller asks `policy`) or know
//! about requests.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use super::forms::forms;

/// What a pattern is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hit {
    /// Index of the secret in the task's list.
    pub(crate) secret: usize,
    /// The placeholder (else the real value).
    pub(crate) placeholder: bool,
    /// Unencoded.
    pub(crate) raw: bool,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

#[derive(Clone, Copy, Debug)]
struct Id {
    secret: usize,
    placeholder: bool,
    raw: bool,
}

/// The task's secrets as patterns.
pub(crate) struct Matcher {
    exact: AhoCorasick,
    exact_ids: Vec<Id>,
    folded: AhoCorasick,
    folded_ids: Vec<Id>,
    longest: usize,
}

impl Matcher {
    /// `secrets`: (placeholder, value) of each secret, in the task's order.
    pub(crate) fn new(secrets: &[(&[u8], &[u8])]) -> Matcher {
        let (mut exact, mut exact_ids, mut folded, mut folded_ids) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut longest = 1;
        for (i, (ph, value)) in secrets.iter().enumerate() {
            for (s, placeholder) in [(*ph, true), (*value, false)] {
                for f in forms(s) {
                    longest = longest.max(f.bytes.len());
                    let id = Id {
                        secret: i,
                        placeholder,
                        raw: f.raw,
                    };
                    if f.any_case {
                        folded.push(f.bytes);
                        folded_ids.push(id);
                    } else {
                        exact.push(f.bytes);
                        exact_ids.push(id);
                    }
                }
            }
        }
        let build = |pats: &[Vec<u8>], any_case: bool| {
            AhoCorasickBuilder::new()
                .match_kind(MatchKind::LeftmostLongest)
                .ascii_case_insensitive(any_case)
                .build(pats)
                .expect("secret patterns are plain bytes")
        };
        Matcher {
            exact: build(&exact, false),
            exact_ids,
            folded: build(&folded, true),
            folded_ids,
            longest,
        }
    }

    /// Every hit in `hay`, in order of their start.
    pub(crate) fn hits(&self, hay: &[u8]) -> Vec<Hit> {
        let mut out: Vec<Hit> = Vec::new();
        for (ac, ids) in [
            (&self.exact, &self.exact_ids),
            (&self.folded, &self.folded_ids),
        ] {
            out.extend(ac.find_iter(hay).map(|m| {
                let id = ids[m.pattern().as_usize()];
                Hit {
                    secret: id.secret,
                    placeholder: id.placeholder,
                    raw: id.raw,
                    start: m.start(),
                    end: m.end(),
                }
            }));
        }
        out.sort_by_key(|h| h.start);
        out
    }

    /// The longest form, in bytes: a stream holds back one byte less.
    pub(crate) fn longest(&self) -> usize {
        self.longest
    }
}

/// A stream's held-back tail.
#[derive(Default)]
pub(crate) struct Held(Vec<u8>);

impl Held {
    /// Joins `chunk` to the tail and returns the joined bytes, and how
    /// many of them may be released now (all but the last `longest - 1`;
    /// all at the end).
    pub(crate) fn join(&mut self, chunk: &[u8], m: &Matcher, end: bool) -> (Vec<u8>, usize) {
        let mut joined = std::mem::take(&mut self.0);
        joined.extend_from_slice(chunk);
        let keep = if end { 0 } else { m.longest() - 1 };
        let release = joined.len().saturating_sub(keep);
        (joined, release)
    }

    /// Keeps `tail` for the next chunk.
    pub(crate) fn keep(&mut self, tail: &[u8]) {
        self.0 = tail.to_vec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PH: &[u8] = b"sluice_Qx7Jm2Kd9Pz4Vb8Nc3Rt6Y";
    const VALUE: &[u8] = b"ghp_RealSecretValue012345678";

    fn m() -> Matcher {
        Matcher::new(&[(PH, VALUE)])
    }

    #[test]
    fn raw_and_encoded_forms_are_found() {
        let m = m();
        let enc = |s: &[u8]| {
            vec![
                s.to_vec(),
                data_encoding::HEXUPPER.encode(s).into_bytes(),
                data_encoding::BASE64.encode(s).into_bytes(),
                data_encoding::BASE64URL
                    .encode(&[b"a:", s].concat())
                    .into_bytes(),
                s.iter()
                    .map(|b| format!("%{b:02X}"))
                    .collect::<String>()
                    .into_bytes(),
                s.iter()
                    .enumerate()
                    .map(|(i, b)| {
                        if i % 2 == 0 {
                            format!("%{b:02x}")
                        } else {
                            format!("%{b:02X}")
                        }
                    })
                    .collect::<String>()
                    .into_bytes(),
                s.iter()
                    .map(|b| format!("\\u00{b:02x}"))
                    .collect::<String>()
                    .into_bytes(),
            ]
        };
        for (s, placeholder) in [(PH, true), (VALUE, false)] {
            for text in enc(s) {
                let hay = [b"{\"x\": \"".as_slice(), &text, b"\"}"].concat();
                let hits = m.hits(&hay);
                assert!(
                    hits.iter()
                        .any(|h| h.placeholder == placeholder && h.secret == 0),
                    "{}",
                    String::from_utf8_lossy(&text)
                );
            }
        }
        assert!(m.hits(b"nothing secret here, sluice_ alone").is_empty());
    }

    #[test]
    fn a_form_split_at_any_offset_is_found_before_release() {
        let m = m();
        let forms_of_value = [
            VALUE.to_vec(),
            data_encoding::BASE64.encode(VALUE).into_bytes(),
            data_encoding::HEXLOWER.encode(VALUE).into_bytes(),
        ];
        for form in forms_of_value {
            let body = [b"prefix ".as_slice(), &form, b" suffix"].concat();
            for cut in 0..=body.len() {
                let mut held = Held::default();
                let mut released = 0;
                let mut found = false;
                for (i, chunk) in [&body[..cut], &body[cut..]].into_iter().enumerate() {
                    let (joined, release) = held.join(chunk, &m, i == 1);
                    if m.hits(&joined).iter().any(|h| !h.placeholder) {
                        found = true;
                        break;
                    }
                    released += release;
                    held.keep(&joined[release..]);
                }
                assert!(found, "cut at {cut}");
                // Nothing of the form was released before it was found.
                assert!(released <= 7, "cut at {cut}: released {released}");
            }
        }
    }
}
