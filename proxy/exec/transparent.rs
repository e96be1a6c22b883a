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

use crate::command_error::{CommandError, Doing};
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
pub(crate) struct Names {
    by_name: HashMap<String, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, String>,
    /// Any name gets an address (`--learn`: shadow mode relays any public
    /// host; the answer is still local, so nothing leaves by DNS).
    any: bool,
    /// Names refused since the last [`Names::take_refused`], each once.
    refused: Vec<String>,
    /// Every name refused so far, up to [`MAX_REFUSED`].
    seen_refused: std::collections::HashSet<String>,
}

/// Distinct refused names recorded at most (a command asking for endless
/// names gets its first thousand in the log).
const MAX_REFUSED: usize = 1000;

impl Names {
    pub(crate) fn new(names: &[String], any: bool) -> Names {
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
    pub(crate) fn resolve(&mut self, name: &str) -> Option<Ipv4Addr> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        match self.by_name.get(&name) {
            Some(a) => Some(*a),
            None if self.any && !name.is_empty() => self.insert(&name),
            None => {
                if self.seen_refused.len() < MAX_REFUSED && self.seen_refused.insert(name.clone()) {
                    self.refused.push(name);
                }
                None
            }
        }
    }

    /// The names refused since the last call, each once in the run.
    pub(crate) fn take_refused(&mut self) -> Vec<String> {
        std::mem::take(&mut self.refused)
    }

    /// The name an address handed out stands for.
    pub(crate) fn name_of(&self, addr: Ipv4Addr) -> Option<&str> {
        self.by_addr.get(&addr).map(String::as_str)
    }
}

/// The answer to one DNS query packet, or None for what is not a query.
pub(crate) fn answer(packet: &[u8], names: &Mutex<Names>) -> Option<Vec<u8>> {
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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// Answers DNS queries on `sock` for ever. Each name refused is written
/// once to `refused` (`<state>/dns-refused.jsonl`, where the command
/// cannot reach), which sluice turns into access rows when the command
/// has ended ([`DnsRefusal`]).
pub(crate) async fn serve_dns(
    sock: UdpSocket,
    names: Arc<Mutex<Names>>,
    mut refused: std::fs::File,
) {
    use std::io::Write;
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
            continue;
        };
        if let Some(reply) = answer(&buf[..n], &names) {
            let _ = sock.send_to(&reply, peer).await;
        }
        let fresh = names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take_refused();
        for name in fresh {
            let rec = DnsRefusal {
                ts: crate::log::now_rfc3339(),
                name,
            };
            if let Ok(line) = serde_json::to_string(&rec) {
                let _ = writeln!(refused, "{line}");
            }
        }
    }
}

/// One line of `dns-refused.jsonl`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct DnsRefusal {
    pub(crate) ts: String,
    pub(crate) name: String,
}

/// The file the guest writes refused names to, in the state folder.
pub(crate) const REFUSED_FILE: &str = "dns-refused.jsonl";

/// Once the command has ended: one access row (kind `dns`, rule
/// `dns-refused`, port 0) per name the guest's DNS refused, written by
/// the access-log writer like every row, then the guest's file removed.
/// `state` is the state folder through sluice's handle.
pub(crate) async fn record_refusals(
    state: &Path,
    task: &str,
    logs: crate::config::LogSettings,
    generation: u64,
) {
    use crate::log::{AccessLog, AccessRecord, Kind, DNS_REFUSED, SCHEMA_VERSION};
    let path = state.join(REFUSED_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let log = AccessLog::spawn(state, logs, Default::default());
    let task: Arc<str> = task.into();
    for refusal in text
        .lines()
        .filter_map(|l| serde_json::from_str::<DnsRefusal>(l).ok())
    {
        let reason = format!(
            "{} is not on the task's allow-list: the task's DNS answered that it does not exist",
            refusal.name
        );
        log.access(&AccessRecord {
            v: SCHEMA_VERSION,
            ts: refusal.ts,
            task: task.clone(),
            client: "dns".into(),
            kind: Kind::Dns,
            method: "-".into(),
            host: refusal.name,
            port: 0,
            path: None,
            decision: crate::policy::verdict::DENY.into(),
            rule: Some(DNS_REFUSED.into()),
            status: 0,
            body: false,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            tainted_by: None,
            generation,
            note: None,
            conn: 0,
            addr: None,
            reason: Some(reason),
            secrets: Vec::new(),
        });
    }
    log.flush().await;
    let _ = std::fs::remove_file(&path);
}

/// Relays every redirected connection to sluice as a CONNECT, for ever.
pub(crate) async fn serve_redirected(listener: TcpListener, names: Arc<Mutex<Names>>, to: PathBuf) {
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
pub(crate) fn authority(orig: SocketAddrV4, names: &Mutex<Names>) -> String {
    let names = names
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match names.name_of(*orig.ip()) {
        Some(n) => format!("{n}:{}", orig.port()),
        None => SocketAddr::V4(orig).to_string(),
    }
}

async fn relay_one(
    mut client: TcpStream,
    names: &Mutex<Names>,
    to: &Path,
) -> Result<(), CommandError> {
    let orig =
        rustix::net::sockopt::ip_original_dst(&client).doing(|| "no original destination")?;
    let authority = authority(orig, names);
    let mut up = UnixStream::connect(to)
        .await
        .doing(|| "cannot reach sluice")?;
    up.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .doing(|| "cannot ask sluice")?;
    let (status, rest) = read_head(&mut up).await?;
    if !status.starts_with("HTTP/1.1 200") {
        // sluice logged the refusal; the client sees its connection close.
        return Err(CommandError::refused(format!(
            "sluice refused {authority}: {status}"
        )));
    }
    client
        .write_all(&rest)
        .await
        .doing(|| "cannot answer the client")?;
    let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
    Ok(())
}

/// Reads a response head (at most 16 KiB): its status line and any bytes
/// after it.
async fn read_head(up: &mut UnixStream) -> Result<(String, Vec<u8>), CommandError> {
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
            return Err(CommandError::refused(
                "sluice's answer to CONNECT is too long",
            ));
        }
        let n = up
            .read(&mut chunk)
            .await
            .doing(|| "cannot read sluice's answer")?;
        if n == 0 {
            return Err(CommandError::refused("sluice closed the connection"));
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
    fn each_refused_name_is_recorded_once() {
        let names = Mutex::new(Names::new(&["pkgs.example.com".into()], false));
        ask(&names, "other.example.com", RecordType::A);
        ask(&names, "Other.Example.com.", RecordType::AAAA);
        ask(&names, "pkgs.example.com", RecordType::A);
        let mut n = names.lock().unwrap();
        assert_eq!(n.take_refused(), vec!["other.example.com".to_string()]);
        assert!(n.take_refused().is_empty());
        drop(n);
        ask(&names, "other.example.com", RecordType::A);
        assert!(names.lock().unwrap().take_refused().is_empty());
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
