//! transparent: `sluice exec --transparent`, for tools that ignore proxy
//! variables. Inside the namespace, a DNS responder answers only the names
//! the task may reach, each with an address from 198.18.0.0/15 (reserved
//! for benchmarks, never a real destination) that maps back to the name;
//! every other name is NXDOMAIN, and no query ever leaves the namespace,
//! so DNS cannot carry data out. nft redirects all TCP to the relay here,
//! which reads the original destination and asks sluice for a CONNECT to
//! the name that address stands for (or to the bare address, which sluice
//! refuses and logs as `ip-literal`). sluice then checks the TLS SNI or the
//! HTTP Host against that name and decides as for any CONNECT.
//!
//! Must not: decide anything (sluice does) or forward a DNS query.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hickory_resolver::proto::op::{Message, MessageType, ResponseCode};
use hickory_resolver::proto::rr::{rdata::A, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket, UnixStream};

/// The first address handed out: 198.18.0.1.
const FIRST: u32 = u32::from_be_bytes([198, 18, 0, 1]);
/// Addresses in 198.18.0.0/15 after the first.
const SPAN: u32 = (1 << 17) - 2;

/// The names the namespace may resolve and the address each stands for.
#[derive(Debug, Default)]
pub struct Names {
    by_name: HashMap<String, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, String>,
    /// Any name gets an address (`--learn`: shadow mode relays any public
    /// host; the answer is still local, so nothing leaves by DNS).
    any: bool,
}

impl Names {
    pub fn new(names: &[String], any: bool) -> Names {
        let mut n = Names {
            any,
            ..Names::default()
        };
        for name in names {
            n.insert(name);
        }
        n
    }

    fn insert(&mut self, name: &str) -> Option<Ipv4Addr> {
        if let Some(a) = self.by_name.get(name) {
            return Some(*a);
        }
        let i = u32::try_from(self.by_name.len())
            .ok()
            .filter(|i| *i < SPAN)?;
        let addr = Ipv4Addr::from(FIRST + i);
        self.by_name.insert(name.to_string(), addr);
        self.by_addr.insert(addr, name.to_string());
        Some(addr)
    }

    /// The address `name` (any case, with or without the final dot)
    /// resolves to here, if it may resolve at all.
    pub fn resolve(&mut self, name: &str) -> Option<Ipv4Addr> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        match self.by_name.get(&name) {
            Some(a) => Some(*a),
            None if self.any && !name.is_empty() => self.insert(&name),
            None => None,
        }
    }

    /// The name an address handed out stands for.
    pub fn name_of(&self, addr: Ipv4Addr) -> Option<&str> {
        self.by_addr.get(&addr).map(String::as_str)
    }
}

/// The answer to one DNS query packet, or None for what is not a query.
pub fn answer(packet: &[u8], names: &Mutex<Names>) -> Option<Vec<u8>> {
    let query = Message::from_vec(packet).ok()?;
    if query.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut reply = Message::response(query.metadata.id, query.metadata.op_code);
    reply.metadata.recursion_desired = query.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    reply.metadata.authoritative = true;
    let mut code = ResponseCode::NoError;
    for q in &query.queries {
        reply.add_query(q.clone());
        let name = q.name().to_ascii();
        let addr = names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .resolve(&name);
        match (addr, q.query_type()) {
            (Some(a), RecordType::A) => {
                reply.add_answer(Record::from_rdata(q.name().clone(), 5, RData::A(A(a))));
            }
            // A name that resolves, asked for another type: no data.
            (Some(_), _) => {}
            (None, _) => code = ResponseCode::NXDomain,
        }
    }
    reply.metadata.response_code = code;
    reply.to_vec().ok()
}

/// Answers DNS queries on `sock` for ever.
pub async fn serve_dns(sock: UdpSocket, names: Arc<Mutex<Names>>) {
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
            continue;
        };
        if let Some(reply) = answer(&buf[..n], &names) {
            let _ = sock.send_to(&reply, peer).await;
        }
    }
}

/// Relays every redirected connection to sluice as a CONNECT, for ever.
pub async fn serve_redirected(listener: TcpListener, names: Arc<Mutex<Names>>, to: PathBuf) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let names = names.clone();
        let to = to.clone();
        tokio::spawn(async move {
            if let Err(e) = relay_one(client, &names, &to).await {
                tracing::warn!("transparent: {e}");
            }
        });
    }
}

/// `host:port` to ask sluice for: the name the original destination
/// stands for, or the bare address (which sluice refuses and logs).
pub fn authority(orig: SocketAddrV4, names: &Mutex<Names>) -> String {
    let names = names.lock().unwrap_or_else(|p| p.into_inner());
    match names.name_of(*orig.ip()) {
        Some(n) => format!("{n}:{}", orig.port()),
        None => SocketAddr::V4(orig).to_string(),
    }
}

async fn relay_one(mut client: TcpStream, names: &Mutex<Names>, to: &Path) -> Result<(), String> {
    let orig = rustix::net::sockopt::ip_original_dst(&client)
        .map_err(|e| format!("no original destination: {e}"))?;
    let authority = authority(orig, names);
    let mut up = UnixStream::connect(to)
        .await
        .map_err(|e| format!("cannot reach sluice: {e}"))?;
    up.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let (status, rest) = read_head(&mut up).await?;
    if !status.starts_with("HTTP/1.1 200") {
        // sluice logged the refusal; the client sees its connection close.
        return Err(format!("sluice refused {authority}: {status}"));
    }
    client.write_all(&rest).await.map_err(|e| e.to_string())?;
    let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
    Ok(())
}

/// Reads a response head (at most 16 KiB): its status line and any bytes
/// after it.
async fn read_head(up: &mut UnixStream) -> Result<(String, Vec<u8>), String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let status = String::from_utf8_lossy(&buf[..end])
                .lines()
                .next()
                .unwrap_or("")
                .to_string();
            return Ok((status, buf[end + 4..].to_vec()));
        }
        if buf.len() > 16 * 1024 {
            return Err("sluice's answer to CONNECT is too long".into());
        }
        let n = up.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("sluice closed the connection".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_resolver::proto::op::Query;
    use hickory_resolver::proto::rr::Name;

    fn ask(names: &Mutex<Names>, name: &str, t: RecordType) -> Message {
        let mut q = Message::query();
        q.metadata.id = 77;
        q.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
        Message::from_vec(&answer(&q.to_vec().unwrap(), names).unwrap()).unwrap()
    }

    #[test]
    fn only_listed_names_resolve_and_map_back() {
        let names = Mutex::new(Names::new(
            &["pkgs.example.com".into(), "b.example".into()],
            false,
        ));
        let r = ask(&names, "PKGS.example.com.", RecordType::A);
        assert_eq!(r.metadata.id, 77);
        assert_eq!(r.metadata.response_code, ResponseCode::NoError);
        let RData::A(A(a)) = r.answers[0].data else {
            panic!("{r:?}")
        };
        assert_eq!(a, Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(
            authority(SocketAddrV4::new(a, 443), &names),
            "pkgs.example.com:443"
        );
        let r = ask(&names, "b.example", RecordType::AAAA);
        assert_eq!(
            (r.metadata.response_code, r.answers.len()),
            (ResponseCode::NoError, 0)
        );
        let r = ask(&names, "secret-data.evil.example", RecordType::A);
        assert_eq!(r.metadata.response_code, ResponseCode::NXDomain);
        assert!(r.answers.is_empty());
        assert_eq!(
            authority(
                SocketAddrV4::new(Ipv4Addr::new(93, 184, 216, 34), 80),
                &names
            ),
            "93.184.216.34:80"
        );
        assert_eq!(
            authority(SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 9), 80), &names),
            "198.18.0.9:80",
            "an address never handed out is no name"
        );
    }

    #[test]
    fn learning_hands_out_an_address_to_any_name() {
        let mut names = Names::new(&[], true);
        let a = names.resolve("x.example").unwrap();
        assert_eq!(names.resolve("X.example."), Some(a));
        assert_ne!(names.resolve("y.example"), Some(a));
        assert_eq!(names.name_of(a), Some("x.example"));
        assert_eq!(names.resolve(""), None);
    }

    #[test]
    fn garbage_is_not_answered() {
        let names = Mutex::new(Names::new(&[], false));
        assert!(answer(b"\x00\x01garbage", &names).is_none());
    }
}
