//! Bodies for the tests: each coding, handmade frames and archives.

use std::io::Write;

pub(crate) fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}
pub(crate) fn zlib(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}
pub(crate) fn raw_deflate(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}
pub(crate) fn br_window(b: &[u8], lgwin: u32) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, lgwin);
        w.write_all(b).unwrap();
    }
    out
}
pub(crate) fn br(b: &[u8]) -> Vec<u8> {
    br_window(b, 22)
}
pub(crate) fn zstd_enc(b: &[u8]) -> Vec<u8> {
    zstd::stream::encode_all(b, 3).unwrap()
}

/// A zstd frame announcing a 2^`window_log` window, holding `b` as one raw
/// block (RFC 8878 3.1.1).
pub(crate) fn zstd_raw_frame(b: &[u8], window_log: u8) -> Vec<u8> {
    let mut f = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, (window_log - 10) << 3];
    let header = ((b.len() as u32) << 3) | 1; // last block, raw
    f.extend_from_slice(&header.to_le_bytes()[..3]);
    f.extend_from_slice(b);
    f
}

/// A brotli stream announcing a 2^24 window, holding `b` as one
/// uncompressed meta-block (RFC 7932 9.1, 9.2).
pub(crate) fn brotli_stored(b: &[u8]) -> Vec<u8> {
    // WBITS 24 (1, 111), ISLAST 0, MNIBBLES 4 (00), MLEN-1, ISUNCOMPRESSED.
    let bits: u32 = 0b1111 | ((b.len() as u32 - 1) << 7) | 1 << 23;
    let mut s = bits.to_le_bytes()[..3].to_vec();
    s.extend_from_slice(b);
    s.push(0b11); // ISLAST, ISLASTEMPTY
    s
}

/// A ustar archive of regular files.
pub(crate) fn tar(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in files {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..108].copy_from_slice(b"0000644\0");
        h[108..116].copy_from_slice(b"0000000\0");
        h[116..124].copy_from_slice(b"0000000\0");
        h[124..136].copy_from_slice(format!("{:011o}\0", data.len()).as_bytes());
        h[136..148].copy_from_slice(b"00000000000\0");
        h[156] = b'0';
        h[257..265].copy_from_slice(b"ustar\x0000");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

#[derive(Clone, Copy)]
pub(crate) enum Method {
    Stored,
    Deflate,
    /// Deflate, sizes in a data descriptor after the data.
    Descriptor,
    Bzip2,
    Lzma,
    /// A method this reader does not decode (PPMd, 98).
    Ppmd,
}

/// A zip archive, with its central directory and an end record whose
/// comment is `comment`.
pub(crate) fn zip(files: &[(&str, &[u8], Method)], comment: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data, method) in files {
        let offset = out.len() as u32;
        let mut crc = flate2::Crc::new();
        crc.update(data);
        let (flags, code, body): (u16, u16, Vec<u8>) = match method {
            Method::Stored => (0, 0, data.to_vec()),
            Method::Deflate => (0, 8, raw_deflate(data)),
            Method::Descriptor => (8, 8, raw_deflate(data)),
            Method::Bzip2 => (0, 12, bzip2_enc(data)),
            Method::Lzma => (0, 14, zip_lzma(data)),
            Method::Ppmd => (0, 98, data.to_vec()),
        };
        let described = flags & 8 != 0;
        let sizes = |v: &mut Vec<u8>| {
            v.extend_from_slice(&crc.sum().to_le_bytes());
            v.extend_from_slice(&(body.len() as u32).to_le_bytes());
            v.extend_from_slice(&(data.len() as u32).to_le_bytes());
        };
        let mut local = b"PK\x03\x04\x14\x00".to_vec();
        local.extend_from_slice(&flags.to_le_bytes());
        local.extend_from_slice(&code.to_le_bytes());
        local.extend_from_slice(&[0; 4]);
        if described {
            local.extend_from_slice(&[0; 12]);
        } else {
            sizes(&mut local);
        }
        local.extend_from_slice(&(name.len() as u16).to_le_bytes());
        local.extend_from_slice(&[0, 0]);
        local.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&local);
        out.extend_from_slice(&body);
        if described {
            out.extend_from_slice(b"PK\x07\x08");
            sizes(&mut out);
        }
        central.extend_from_slice(b"PK\x01\x02\x14\x00\x14\x00");
        central.extend_from_slice(&flags.to_le_bytes());
        central.extend_from_slice(&code.to_le_bytes());
        central.extend_from_slice(&[0; 4]);
        sizes(&mut central);
        central.extend_from_slice(&(name.len() as u16).to_le_bytes());
        central.extend_from_slice(&[0; 12]);
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let at = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(b"PK\x05\x06\0\0\0\0");
    out.extend_from_slice(&(files.len() as u16).to_le_bytes());
    out.extend_from_slice(&(files.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&at.to_le_bytes());
    out.extend_from_slice(&(comment.len() as u16).to_le_bytes());
    out.extend_from_slice(comment);
    out
}

pub(crate) fn bzip2_enc(b: &[u8]) -> Vec<u8> {
    let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}
pub(crate) fn xz_enc(b: &[u8]) -> Vec<u8> {
    let mut e = liblzma::write::XzEncoder::new(Vec::new(), 6);
    e.write_all(b).unwrap();
    e.finish().unwrap()
}
/// A zip LZMA entry's data (APPNOTE 5.8.8): version, properties size and
/// properties, then raw LZMA1 with an end marker (from the `.lzma` form,
/// whose 13-byte header is the properties and the size).
pub(crate) fn zip_lzma(b: &[u8]) -> Vec<u8> {
    let opts = liblzma::stream::LzmaOptions::new_preset(6).unwrap();
    let s = liblzma::stream::Stream::new_lzma_encoder(&opts).unwrap();
    let mut e = liblzma::write::XzEncoder::new_stream(Vec::new(), s);
    e.write_all(b).unwrap();
    let alone = e.finish().unwrap();
    let mut out = vec![9, 20, 5, 0];
    out.extend_from_slice(&alone[..5]);
    out.extend_from_slice(&alone[13..]);
    out
}
