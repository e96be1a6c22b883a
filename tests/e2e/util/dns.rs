//! The fake DNS server: answers NXDOMAIN to every query on 127.0.0.1, so no
//! test ever asks a real resolver (test names are pinned in the config's
//! `[resolver.hosts]` instead), and counts the queries it got.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

/// A DNS server on 127.0.0.1:0 that answers NXDOMAIN to every query.
pub struct FakeDns {
    pub addr: SocketAddr,
    pub queries: Arc<AtomicUsize>,
}

impl FakeDns {
    pub fn start() -> FakeDns {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = sock.local_addr().unwrap();
        let queries = Arc::new(AtomicUsize::new(0));
        let q = queries.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 1500];
            // Bounded: the thread ends with the test process.
            while let Ok((n, peer)) = sock.recv_from(&mut buf) {
                if n < 12 {
                    continue;
                }
                q.fetch_add(1, Ordering::SeqCst);
                let mut resp = buf[..n].to_vec();
                resp[2] = 0x81 | (buf[2] & 0x01); // QR, opcode 0, RD copied
                resp[3] = 0x83; // RA, RCODE 3 = NXDOMAIN
                resp[6..12].fill(0); // no answer, authority or additional
                                     // Strip any EDNS OPT record: keep header + question only.
                let qend = question_end(&resp).unwrap_or(n);
                resp.truncate(qend);
                let _ = sock.send_to(&resp, peer);
            }
        });
        FakeDns { addr, queries }
    }

    /// Queries answered so far.
    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }
}

fn question_end(msg: &[u8]) -> Option<usize> {
    let mut i = 12;
    while *msg.get(i)? != 0 {
        i += 1 + *msg.get(i)? as usize;
    }
    Some(i + 1 + 4)
}
