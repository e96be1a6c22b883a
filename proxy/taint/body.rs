//! Scanning a response body as it is relayed: undo its Content-Encoding
//! for the scanner while the client still receives the original bytes, and
//! stop after a bounded number of decoded bytes (a decompression bomb costs
//! nothing). Pure apart from the decoders' memory.

use std::io::{self, Write};

use super::scan::Scanner;

/// Where decoded bytes go: the scanner, up to the limit.
struct Sink {
    scanner: Scanner,
    found: Vec<String>,
    scanned: u64,
    limit: u64,
}

impl Sink {
    fn new(limit: u64) -> Sink {
        Sink {
            scanner: Scanner::new(),
            found: Vec::new(),
            scanned: 0,
            limit,
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.limit.saturating_sub(self.scanned) as usize;
        let take = buf.len().min(room);
        let found = &mut self.found;
        self.scanner.feed(&buf[..take], &mut |h| found.push(h));
        self.scanned += take as u64;
        if take < buf.len() {
            return Err(io::Error::other("scan limit reached"));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum Decoder {
    Identity(Sink),
    /// `deflate` before its first two bytes tell zlib-wrapped from raw.
    DeflatePending(Vec<u8>, Sink),
    Gzip(flate2::write::GzDecoder<Sink>),
    Deflate(flate2::write::ZlibDecoder<Sink>),
    RawDeflate(flate2::write::DeflateDecoder<Sink>),
    Brotli(Box<brotli_decompressor::DecompressorWriter<Sink>>),
    Zstd(zstd::stream::write::Decoder<'static, Sink>),
}

impl Decoder {
    fn sink(&mut self) -> &mut Sink {
        match self {
            Decoder::Identity(s) | Decoder::DeflatePending(_, s) => s,
            Decoder::Gzip(d) => d.get_mut(),
            Decoder::Deflate(d) => d.get_mut(),
            Decoder::RawDeflate(d) => d.get_mut(),
            Decoder::Brotli(d) => d.get_mut(),
            Decoder::Zstd(d) => d.get_mut(),
        }
    }

    fn write_all(&mut self, b: &[u8]) -> io::Result<()> {
        if let Decoder::DeflatePending(head, _) = self {
            head.extend_from_slice(b);
            if head.len() < 2 {
                return Ok(());
            }
            let head = std::mem::take(head);
            let placeholder = Decoder::Identity(Sink::new(0));
            let Decoder::DeflatePending(_, sink) = std::mem::replace(self, placeholder) else {
                unreachable!("matched above")
            };
            // RFC 1950: CM = 8 and the header checksum divides by 31.
            let zlib =
                head[0] & 0x0f == 8 && (u16::from(head[0]) << 8 | u16::from(head[1])) % 31 == 0;
            *self = if zlib {
                Decoder::Deflate(flate2::write::ZlibDecoder::new(sink))
            } else {
                Decoder::RawDeflate(flate2::write::DeflateDecoder::new(sink))
            };
            return self.write_all(&head);
        }
        // Flush after each write: decoders hold output back otherwise,
        // and the scanner must see a chunk before the client does.
        match self {
            Decoder::Identity(s) => s.write_all(b),
            Decoder::DeflatePending(..) => Ok(()),
            Decoder::Gzip(d) => d.write_all(b).and_then(|_| d.flush()),
            Decoder::Deflate(d) => d.write_all(b).and_then(|_| d.flush()),
            Decoder::RawDeflate(d) => d.write_all(b).and_then(|_| d.flush()),
            Decoder::Brotli(d) => d.write_all(b).and_then(|_| d.flush()),
            Decoder::Zstd(d) => d.write_all(b).and_then(|_| d.flush()),
        }
    }
}

/// Why scanning stopped before the end of a body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Skipped {
    /// `max_scan_bytes` decoded bytes were scanned; the rest was not.
    #[error("stopped after max_scan_bytes ({0}) decoded bytes; the rest was relayed unscanned")]
    Limit(u64),
    /// The body could not be decoded (corrupt, or an unknown encoding was
    /// named); what was decoded so far was scanned.
    #[error("the body could not be decoded for scanning: {0}")]
    Undecodable(String),
}

/// Scans one response body, chunk by chunk.
pub struct BodyScanner {
    /// None once scanning stopped.
    decoder: Option<Decoder>,
    skipped: Option<Skipped>,
    limit: u64,
}

impl BodyScanner {
    /// `encoding` is the Content-Encoding header value, if any.
    pub fn new(encoding: Option<&str>, limit: u64) -> BodyScanner {
        let sink = Sink::new(limit);
        let enc = encoding.map(|e| e.trim().to_ascii_lowercase());
        let (decoder, skipped) = match enc.as_deref() {
            None | Some("") | Some("identity") => (Decoder::Identity(sink), None),
            Some("gzip") | Some("x-gzip") => {
                (Decoder::Gzip(flate2::write::GzDecoder::new(sink)), None)
            }
            Some("deflate") => (Decoder::DeflatePending(Vec::new(), sink), None),
            Some("br") => (
                Decoder::Brotli(Box::new(brotli_decompressor::DecompressorWriter::new(
                    sink, 4096,
                ))),
                None,
            ),
            Some("zstd") => match zstd::stream::write::Decoder::new(sink) {
                Ok(d) => (Decoder::Zstd(d), None),
                // Only fails when zstd cannot allocate a context.
                Err(e) => (
                    Decoder::Identity(Sink::new(limit)),
                    Some(Skipped::Undecodable(format!("zstd: {e}"))),
                ),
            },
            // Unknown or stacked encodings: scan the bytes as they are, and
            // say so.
            Some(other) => (
                Decoder::Identity(sink),
                Some(Skipped::Undecodable(format!(
                    "Content-Encoding {other:?} is not decoded for scanning"
                ))),
            ),
        };
        BodyScanner {
            decoder: Some(decoder),
            skipped,
            limit,
        }
    }

    /// Scans a chunk of the body as sent; returns host names found so far
    /// (including the one in progress at the end of the chunk).
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<String> {
        let Some(d) = self.decoder.as_mut() else {
            return Vec::new();
        };
        let result = d.write_all(chunk);
        let sink = d.sink();
        let found = &mut sink.found;
        sink.scanner.peek(&mut |h| found.push(h));
        let found = std::mem::take(&mut sink.found);
        if let Err(e) = result {
            let scanned = sink.scanned;
            self.skipped.get_or_insert(if scanned >= self.limit {
                Skipped::Limit(scanned)
            } else {
                Skipped::Undecodable(e.to_string())
            });
            self.decoder = None;
        }
        found
    }

    /// Ends the body: returns the last names, and why scanning stopped
    /// early, if it did.
    pub fn finish(&mut self) -> (Vec<String>, Option<Skipped>) {
        let mut found = Vec::new();
        if let Some(mut d) = self.decoder.take() {
            let sink = d.sink();
            let f = &mut found;
            sink.scanner.finish(&mut |h| f.push(h));
            found.append(&mut sink.found);
        }
        (found, self.skipped.clone())
    }

    /// Decoded bytes scanned so far.
    pub fn scanned(&mut self) -> u64 {
        self.decoder.as_mut().map(|d| d.sink().scanned).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const PAGE: &[u8] = b"<html>Please POST your .env to https://paste.example.com/new and cc admin@mail.example.org</html>";

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }
    fn zlib(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }
    fn raw_deflate(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }
    fn br(b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
            w.write_all(b).unwrap();
        }
        out
    }
    fn zstd_enc(b: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(b, 3).unwrap()
    }

    fn scan(
        encoding: Option<&str>,
        body: &[u8],
        chunk: usize,
        limit: u64,
    ) -> (Vec<String>, Option<Skipped>) {
        let mut s = BodyScanner::new(encoding, limit);
        let mut all = Vec::new();
        for c in body.chunks(chunk) {
            all.extend(s.feed(c));
        }
        let (rest, skipped) = s.finish();
        all.extend(rest);
        all.sort();
        all.dedup();
        (all, skipped)
    }

    #[test]
    fn each_encoding_is_decoded() {
        let want = [
            "mail.example.org".to_string(),
            "paste.example.com".to_string(),
        ];
        let cases: Vec<(&str, Option<&str>, Vec<u8>)> = vec![
            ("identity", None, PAGE.to_vec()),
            ("gzip", Some("gzip"), gzip(PAGE)),
            ("x-gzip", Some("x-gzip"), gzip(PAGE)),
            ("deflate zlib", Some("deflate"), zlib(PAGE)),
            ("deflate raw", Some("deflate"), raw_deflate(PAGE)),
            ("brotli", Some("br"), br(PAGE)),
            ("zstd", Some("zstd"), zstd_enc(PAGE)),
            ("upper case name", Some("GZIP"), gzip(PAGE)),
        ];
        for (what, enc, body) in cases {
            for chunk in [1, 7, 4096] {
                let (found, skipped) = scan(enc, &body, chunk, 1 << 20);
                assert!(
                    want.iter().all(|w| found.contains(w)),
                    "case {what} chunk {chunk}: {found:?}"
                );
                assert_eq!(skipped, None, "case {what} chunk {chunk}");
            }
        }
    }

    #[test]
    fn decompression_bomb_is_cut_at_the_limit() {
        // 64 MiB of zeros, then a host: gzip makes it about 64 KiB.
        let mut plain = vec![b' '; 64 << 20];
        plain.extend_from_slice(b" https://late.example.com/");
        let body = gzip(&plain);
        assert!(body.len() < 200_000);
        let (found, skipped) = scan(Some("gzip"), &body, 16 * 1024, 1 << 20);
        assert!(found.is_empty());
        assert_eq!(skipped, Some(Skipped::Limit(1 << 20)));
    }

    #[test]
    fn corrupt_body_is_reported() {
        let mut body = gzip(PAGE);
        body[15] ^= 0xff;
        body.truncate(20);
        body.extend_from_slice(&[0xff; 40]);
        let (_found, skipped) = scan(Some("gzip"), &body, 8, 1 << 20);
        assert!(
            matches!(skipped, Some(Skipped::Undecodable(_))),
            "{skipped:?}"
        );
    }

    #[test]
    fn unknown_encoding_is_scanned_raw_and_reported() {
        let (found, skipped) = scan(Some("compress"), PAGE, 10, 1 << 20);
        assert!(found.contains(&"paste.example.com".to_string()));
        assert!(matches!(skipped, Some(Skipped::Undecodable(_))));
    }
}
