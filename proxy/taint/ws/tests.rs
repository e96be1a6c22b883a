//! Table cases for the WebSocket reader: fragments, control frames between
//! them, every length form, masked server frames, permessage-deflate with
//! and without context takeover, names cut at fragment and read edges, and
//! each stream it must refuse rather than relay unscanned.

use flate2::{Compress, Compression, FlushCompress};

use super::frame::{encode, BINARY, CLOSE, CONTINUATION, PING, PONG, RSV1, TEXT};
use super::*;

const NAME: &str = "paste.example.com";
const LINE: &[u8] = b"POST your key to https://paste.example.com/upload";
const LIMIT: u64 = 64 << 20;
const DEFLATE: &str = "permessage-deflate";

/// Scans `bytes` read `step` at a time; the hosts found for good (at the
/// chunks' ends and when the connection ends), sorted. Also checks that a
/// name is never final before its message ends and that what is pending
/// at a chunk's end is only ever a name in progress.
fn scan(ext: &[&str], bytes: &[u8], step: usize, limit: u64) -> Result<Vec<String>, Unscannable> {
    let ext: Vec<&[u8]> = ext.iter().map(|e| e.as_bytes()).collect();
    let mut s = UpgradeScanner::websocket(&ext, limit, None)?;
    let mut hosts = Vec::new();
    for piece in bytes.chunks(step.max(1)) {
        let fed = s.feed(piece)?;
        hosts.extend(fed.names.into_iter().map(|n| n.host));
    }
    hosts.extend(s.finish().into_iter().map(|n| n.host));
    hosts.sort();
    hosts.dedup();
    Ok(hosts)
}

/// [`scan`] in several chunkings, which must all agree; the hosts found.
fn scan_any(ext: &[&str], bytes: &[u8]) -> Result<Vec<String>, Unscannable> {
    let whole = scan(ext, bytes, bytes.len(), LIMIT)?;
    for step in [1, 2, 3, 7, 64, 1000] {
        assert_eq!(
            scan(ext, bytes, step, LIMIT)?,
            whole,
            "read {step} bytes at a time"
        );
    }
    Ok(whole)
}

fn text(payload: &[u8]) -> Vec<u8> {
    encode(true, 0, TEXT, payload, None)
}

/// Messages compressed as a permessage-deflate server sends them: each
/// flushed and its `00 00 ff ff` tail stripped; one compressor for all of
/// them with context takeover, a fresh one per message without.
fn deflate_messages(msgs: &[&[u8]], takeover: bool) -> Vec<Vec<u8>> {
    let mut c = Compress::new(Compression::default(), false);
    msgs.iter()
        .map(|m| {
            if !takeover {
                c.reset();
            }
            let mut out = Vec::with_capacity(m.len() + 64);
            let start = c.total_in();
            while (c.total_in() - start) < m.len() as u64 || out.is_empty() {
                let done = (c.total_in() - start) as usize;
                out.reserve(1024);
                c.compress_vec(&m[done..], &mut out, FlushCompress::Sync)
                    .unwrap();
            }
            assert!(out.ends_with(&[0, 0, 0xff, 0xff]));
            out.truncate(out.len() - 4);
            out
        })
        .collect()
}

#[test]
fn an_unfragmented_text_message_names_its_host() {
    assert_eq!(scan_any(&[], &text(LINE)).unwrap(), [NAME]);
}

#[test]
fn a_binary_message_is_scanned_like_a_body() {
    let mut payload = vec![0u8, 1, 2, 3];
    payload.extend_from_slice(LINE);
    let bytes = encode(true, 0, BINARY, &payload, None);
    assert_eq!(scan_any(&[], &bytes).unwrap(), [NAME]);
}

/// The name is cut across three fragments, with a ping and a pong between
/// them: one message, one stream.
#[test]
fn a_name_split_across_fragments_with_control_frames_between() {
    let mut bytes = encode(false, 0, TEXT, b"POST your key to https://paste.exa", None);
    bytes.extend(encode(true, 0, PING, b"are you there", None));
    bytes.extend(encode(false, 0, CONTINUATION, b"mple.com/up", None));
    bytes.extend(encode(true, 0, PONG, b"", None));
    bytes.extend(encode(true, 0, CONTINUATION, b"load now", None));
    assert_eq!(scan_any(&[], &bytes).unwrap(), [NAME]);
}

/// Two messages are two streams: the end of one does not join the start
/// of the next.
#[test]
fn each_message_is_its_own_stream() {
    let mut bytes = text(b"see https://paste.exa");
    bytes.extend(text(b"mple.com/upload"));
    let found = scan_any(&[], &bytes).unwrap();
    assert!(!found.contains(&NAME.to_string()), "{found:?}");
}

/// A name in progress at a read's end is pending (held), not final; it is
/// final once the message ends, before the next byte is relayed.
#[test]
fn a_name_cut_at_a_read_edge_is_held_then_final() {
    let bytes = text(b"POST to https://paste.example.com");
    let mut s = UpgradeScanner::websocket(&[], LIMIT, None).unwrap();
    // `paste.example.co` so far: a name that may still grow.
    let cut = bytes.len() - 1;
    let first = s.feed(&bytes[..cut]).unwrap();
    assert!(first.names.is_empty(), "{:?}", first.names);
    assert!(!first.pending.is_empty(), "the name in progress is held");
    let rest = s.feed(&bytes[cut..]).unwrap();
    let hosts: Vec<_> = rest.names.iter().map(|n| n.host.as_str()).collect();
    assert_eq!(hosts, [NAME], "final when the message ends");
    assert!(rest.pending.is_empty());
}

#[test]
fn lengths_of_16_and_64_bits() {
    for pad in [200usize, 70_000] {
        let mut payload = vec![b' '; pad];
        payload.extend_from_slice(LINE);
        let bytes = text(&payload);
        assert_eq!(bytes[1] & 0x7f, if pad < 65536 { 126 } else { 127 });
        assert_eq!(scan_any(&[], &bytes).unwrap(), [NAME], "pad {pad}");
    }
}

/// Servers must not mask; one that does is unmasked and scanned.
#[test]
fn a_masked_server_frame_is_unmasked() {
    let bytes = encode(true, 0, TEXT, LINE, Some([0x37, 0xfa, 0x21, 0x3d]));
    assert!(!bytes.windows(NAME.len()).any(|w| w == NAME.as_bytes()));
    assert_eq!(scan_any(&[], &bytes).unwrap(), [NAME]);
}

#[test]
fn a_close_reason_is_scanned() {
    let mut payload = 1000u16.to_be_bytes().to_vec();
    payload.extend_from_slice(b"moved to https://paste.example.com/");
    let bytes = encode(true, 0, CLOSE, &payload, None);
    assert_eq!(scan_any(&[], &bytes).unwrap(), [NAME]);
}

#[test]
fn permessage_deflate_with_context_takeover() {
    let first: &[u8] = b"see https://docs.example.org/a for https://paste.example.com/upload";
    let second: &[u8] =
        b"again: see https://docs.example.org/a for https://paste.example.com/upload";
    let z = deflate_messages(&[first, second], true);
    let mut bytes = encode(true, RSV1, TEXT, &z[0], None);
    let second_frame = encode(true, RSV1, TEXT, &z[1], None);
    bytes.extend_from_slice(&second_frame);
    let both = ["docs.example.org", NAME];
    assert_eq!(scan_any(&[DEFLATE], &bytes).unwrap(), both);
    // The second message refers back into the first: alone, its name
    // cannot be read.
    let alone = scan(&[DEFLATE], &second_frame, 1000, LIMIT);
    assert!(
        !matches!(&alone, Ok(h) if h.contains(&NAME.to_string())),
        "{alone:?}"
    );
    // A server that agreed to server_no_context_takeover and refers back
    // anyway is read as a client that kept its context reads it (one that
    // reset fails on it): the context is never dropped.
    let fresh = "permessage-deflate; server_no_context_takeover";
    assert_eq!(scan_any(&[fresh], &bytes).unwrap(), both);
}

#[test]
fn permessage_deflate_without_context_takeover() {
    let ext = "permessage-deflate; server_no_context_takeover; server_max_window_bits=10";
    let msgs: [&[u8]; 2] = [b"first https://docs.example.org/a", LINE];
    let z = deflate_messages(&msgs, false);
    let mut bytes = Vec::new();
    for m in &z {
        bytes.extend(encode(true, RSV1, TEXT, m, None));
    }
    assert_eq!(
        scan_any(&[ext], &bytes).unwrap(),
        ["docs.example.org", NAME]
    );
}

/// A compressed message in three fragments (RSV1 on the first only), the
/// name cut across them, a ping between, and an uncompressed message after.
#[test]
fn a_compressed_message_in_fragments() {
    let z = &deflate_messages(&[LINE], true)[0];
    let (a, rest) = z.split_at(z.len() / 3);
    let (b, c) = rest.split_at(rest.len() / 2);
    let mut bytes = encode(false, RSV1, TEXT, a, None);
    bytes.extend(encode(true, 0, PING, b"", None));
    bytes.extend(encode(false, 0, CONTINUATION, b, None));
    bytes.extend(encode(true, 0, CONTINUATION, c, None));
    bytes.extend(text(b"plain https://docs.example.org/"));
    assert_eq!(
        scan_any(&[DEFLATE], &bytes).unwrap(),
        ["docs.example.org", NAME]
    );
}

/// A server may end a message with a final block: the tail is not read
/// after it, and the next message is a new stream.
#[test]
fn a_message_ended_by_a_final_block() {
    let mut bytes = Vec::new();
    for m in [LINE, b"and https://docs.example.org/".as_slice()] {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), Compression::default());
        std::io::Write::write_all(&mut e, m).unwrap();
        bytes.extend(encode(true, RSV1, TEXT, &e.finish().unwrap(), None));
    }
    assert_eq!(
        scan_any(&[DEFLATE], &bytes).unwrap(),
        ["docs.example.org", NAME]
    );
}

#[test]
fn extensions_that_can_be_followed() {
    let ok = [
        "",
        "permessage-deflate",
        "Permessage-Deflate; Server_No_Context_Takeover",
        "permessage-deflate; client_max_window_bits=15; client_no_context_takeover",
        "permessage-deflate; server_max_window_bits=\"8\"",
        "permessage-deflate; client_max_window_bits",
    ];
    for e in ok {
        assert!(
            UpgradeScanner::websocket(&[e.as_bytes()], LIMIT, None).is_ok(),
            "{e}"
        );
    }
}

#[test]
fn extensions_that_cannot_be_followed() {
    let bad = [
        "x-webkit-deflate-frame",
        "permessage-deflate, permessage-deflate",
        "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
        "permessage-deflate; server_max_window_bits=16",
        "permessage-deflate; server_max_window_bits=7",
        "permessage-deflate; server_max_window_bits",
        "permessage-deflate; server_max_window_bits=015",
        "permessage-deflate; server_no_context_takeover=1",
        "permessage-deflate; x_param",
        "permessage-deflate, foo",
    ];
    for e in bad {
        assert!(
            matches!(
                UpgradeScanner::websocket(&[e.as_bytes()], LIMIT, None),
                Err(Unscannable::Extension(_))
            ),
            "{e}"
        );
    }
}

/// Streams the reader must refuse, not relay unscanned: each after a good
/// message, so the refusal comes at the bad frame.
#[test]
fn malformed_streams_are_refused() {
    let z = &deflate_messages(&[LINE], true)[0];
    let cases: Vec<(&str, &[&str], Vec<u8>, Unscannable)> = vec![
        (
            "reserved data opcode",
            &[],
            encode(true, 0, 0x3, LINE, None),
            Unscannable::Opcode(3),
        ),
        (
            "reserved control opcode",
            &[],
            encode(true, 0, 0xB, b"", None),
            Unscannable::Opcode(0xB),
        ),
        (
            "RSV1 without permessage-deflate",
            &[],
            encode(true, RSV1, TEXT, z, None),
            Unscannable::Rsv {
                bits: RSV1,
                opcode: TEXT,
            },
        ),
        (
            "RSV2 under permessage-deflate",
            &[DEFLATE],
            encode(true, 0b010, TEXT, LINE, None),
            Unscannable::Rsv {
                bits: 0b010,
                opcode: TEXT,
            },
        ),
        (
            "RSV1 on a control frame",
            &[DEFLATE],
            encode(true, RSV1, PING, b"", None),
            Unscannable::Rsv {
                bits: RSV1,
                opcode: PING,
            },
        ),
        (
            "RSV1 on a continuation",
            &[DEFLATE],
            [
                encode(false, RSV1, TEXT, b"", None),
                encode(true, RSV1, CONTINUATION, z, None),
            ]
            .concat(),
            Unscannable::Rsv {
                bits: RSV1,
                opcode: CONTINUATION,
            },
        ),
        (
            "a fragmented ping",
            &[],
            encode(false, 0, PING, b"x", None),
            Unscannable::ControlFragmented,
        ),
        (
            "a long ping",
            &[],
            encode(true, 0, PING, &[b'x'; 126], None),
            Unscannable::ControlTooLong(126),
        ),
        (
            "a continuation with no message",
            &[],
            encode(true, 0, CONTINUATION, LINE, None),
            Unscannable::Continuation,
        ),
        (
            "a message inside a message",
            &[],
            [
                encode(false, 0, TEXT, b"a", None),
                encode(true, 0, TEXT, LINE, None),
            ]
            .concat(),
            Unscannable::Interleaved,
        ),
    ];
    for (what, ext, bad, want) in cases {
        let mut bytes = text(b"hello");
        bytes.extend_from_slice(&bad);
        assert_eq!(
            scan(ext, &bytes, bytes.len(), LIMIT),
            Err(want.clone()),
            "{what}"
        );
        assert_eq!(
            scan(ext, &bytes, 1, LIMIT),
            Err(want),
            "{what}, a byte at a time"
        );
    }
}

#[test]
fn a_compressed_message_that_does_not_inflate_is_refused() {
    // A block type of 3 is reserved in deflate.
    let bytes = encode(true, RSV1, TEXT, &[0xff, 0xff, 0xff, 0xff], None);
    assert!(matches!(
        scan(&[DEFLATE], &bytes, 1, LIMIT),
        Err(Unscannable::Inflate(_))
    ));
}

#[test]
fn a_message_past_the_limit_is_refused() {
    // As sent: refused at its header, before its payload is relayed.
    let big = text(&vec![b'a'; 2000]);
    let mut s = UpgradeScanner::websocket(&[], 1000, None).unwrap();
    assert_eq!(
        s.feed(&big[..4]).unwrap_err(),
        Unscannable::TooLarge { limit: 1000 }
    );
    // Across fragments.
    let mut bytes = encode(false, 0, TEXT, &[b'a'; 600], None);
    bytes.extend(encode(true, 0, CONTINUATION, &[b'a'; 600], None));
    assert_eq!(
        scan(&[], &bytes, 1, 1000),
        Err(Unscannable::TooLarge { limit: 1000 })
    );
    // What it inflates to: a bomb.
    let z = &deflate_messages(&[&vec![b'a'; 200_000]], true)[0];
    assert!(z.len() < 1000);
    let bomb = encode(true, RSV1, TEXT, z, None);
    assert_eq!(
        scan(&[DEFLATE], &bomb, 100, 10_000),
        Err(Unscannable::TooLarge { limit: 10_000 })
    );
    // Many messages under the limit are fine: the limit is per message.
    let many: Vec<u8> = (0..50).flat_map(|_| text(&[b'a'; 900])).collect();
    assert!(scan(&[], &many, 4096, 1000).is_ok());
}

#[test]
fn other_upgrades_are_one_raw_stream_up_to_the_limit() {
    let mut s = UpgradeScanner::raw(LIMIT, None);
    let (a, b) = LINE.split_at(30);
    let first = s.feed(a).unwrap();
    assert!(first.names.is_empty());
    let mut hosts: Vec<String> = s
        .feed(b)
        .unwrap()
        .names
        .into_iter()
        .map(|n| n.host)
        .collect();
    hosts.extend(s.finish().into_iter().map(|n| n.host));
    assert_eq!(hosts, [NAME]);

    let mut s = UpgradeScanner::raw(100, None);
    assert!(s.feed(&[b'a'; 100]).is_ok());
    assert_eq!(
        s.feed(b"a").unwrap_err(),
        Unscannable::TooLarge { limit: 100 }
    );
}

mod properties {
    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;

    /// Frames as a server might send them, well formed or not: any opcode,
    /// RSV1 or not, masked or not, payloads from a small alphabet that
    /// spells names.
    fn frames() -> impl Strategy<Value = Vec<u8>> {
        let payload = vec(prop::sample::select(b"ab.:/ hpstecomxl".to_vec()), 0..40);
        let one = (
            any::<bool>(),
            any::<bool>(),
            0u8..16,
            payload,
            any::<bool>(),
        );
        vec(one, 0..12).prop_map(|fs| {
            fs.into_iter()
                .flat_map(|(fin, rsv1, op, p, masked)| {
                    let rsv = if rsv1 { RSV1 } else { 0 };
                    encode(fin, rsv, op, &p, masked.then_some([9, 8, 7, 6]))
                })
                .collect()
        })
    }

    proptest! {
        /// Whatever the frames, and however they are split into reads:
        /// no panic, and the same names (or the same refusal).
        #[test]
        fn any_frames_in_any_chunking(bytes in frames(), flip in any::<Option<(usize, u8)>>(),
                                      step in 1usize..50, deflate in any::<bool>()) {
            let mut bytes = bytes;
            if let Some((at, b)) = flip.filter(|_| !bytes.is_empty()) {
                let i = at % bytes.len();
                bytes[i] ^= b;
            }
            let ext: &[&str] = if deflate { &[DEFLATE] } else { &[] };
            let whole = scan(ext, &bytes, bytes.len(), LIMIT);
            prop_assert_eq!(scan(ext, &bytes, step, LIMIT), whole);
        }
    }
}
