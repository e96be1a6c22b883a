//! upstream: open connections to admitted upstreams — TCP to exactly the
//! checked addresses, verified TLS, HTTP/1.1 or HTTP/2 — and keep idle
//! ones per task ([`Pool`]).
//!
//! [`dial`] consumes an [`Admission`], which only `policy` can make and
//! which carries the [`CheckedAddr`]s it admits: dialling without a
//! decision, twice on one decision, or at other addresses does not
//! compile. Idle connections are keyed by address, TLS name and config
//! generation ([`PoolKey`]). Must not resolve names, decide, or know about
//! client connections.

mod pool;

pub(crate) use pool::{connect, Pool, PoolKey, Sender, Spare, UpBody};

use std::net::SocketAddr;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::policy::{Admission, CheckedAddr, Refusal, Rule};
use crate::tls::Tls;

/// Why an upstream could not be reached or failed: each becomes an
/// `upstream-failed` or `upstream-timeout` refusal with its sentence.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("no address to connect to")]
    NoAddress,
    #[error("no connection to {addr} within {secs}s")]
    ConnectTimeout { addr: String, secs: u64 },
    #[error("{name} is not a valid TLS server name: {source}")]
    ServerName {
        name: String,
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("the upstream's TLS certificate for {name} was rejected ({why}); sluice never falls back to an unverified connection")]
    Certificate { name: String, why: String },
    #[error("TLS handshake with the upstream for {name} failed: {source}")]
    TlsHandshake {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no TLS handshake with the upstream for {name} within {secs}s")]
    TlsTimeout { name: String, secs: u64 },
    #[error("HTTP handshake with {addr} failed: {source}")]
    HttpHandshake {
        addr: SocketAddr,
        #[source]
        source: hyper::Error,
    },
    #[error("the upstream at {addr} failed: {source}")]
    Exchange {
        addr: SocketAddr,
        #[source]
        source: hyper::Error,
    },
    #[error("the upstream at {addr} closed the connection")]
    Closed { addr: SocketAddr },
    #[error("the upstream for {target} sent no response within {secs}s")]
    FirstByteTimeout { target: String, secs: u64 },
}

impl UpstreamError {
    /// The rule of the refusal this error becomes.
    pub(crate) fn rule(&self) -> Rule {
        match self {
            UpstreamError::ConnectTimeout { .. }
            | UpstreamError::TlsTimeout { .. }
            | UpstreamError::FirstByteTimeout { .. } => Rule::UpstreamTimeout,
            _ => Rule::UpstreamFailed,
        }
    }

    /// The refusal the client gets.
    pub(crate) fn refusal(&self) -> Refusal {
        Refusal::new(self.rule(), self.to_string())
    }
}

/// Connects to the first of the admission's addresses that answers, within
/// `timeout` overall. The admission is used up: one admission, one dial.
pub(crate) async fn dial(
    admission: Admission,
    timeout: Duration,
) -> Result<(TcpStream, CheckedAddr), UpstreamError> {
    let addrs = admission.addrs();
    let attempt = async {
        let mut last = None;
        for a in addrs {
            match TcpStream::connect(a.addr()).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok((s, a.clone()));
                }
                Err(e) => last = Some((a.addr(), e)),
            }
        }
        Err(match last {
            Some((addr, source)) => UpstreamError::Connect { addr, source },
            None => UpstreamError::NoAddress,
        })
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(UpstreamError::ConnectTimeout {
            addr: addrs
                .first()
                .map(|a| a.addr().to_string())
                .unwrap_or_default(),
            secs: timeout.as_secs(),
        }),
    }
}

/// Opens verified TLS to an upstream for `name`.
pub(crate) async fn tls_connect(
    tls: &Tls,
    name: &str,
    stream: TcpStream,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, UpstreamError> {
    let server_name =
        ServerName::try_from(name.to_string()).map_err(|source| UpstreamError::ServerName {
            name: name.to_string(),
            source,
        })?;
    let connector = TlsConnector::from(tls.client.clone());
    match tokio::time::timeout(timeout, connector.connect(server_name, stream)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(
            match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                Some(rustls::Error::InvalidCertificate(why)) => UpstreamError::Certificate {
                    name: name.to_string(),
                    why: format!("{why:?}"),
                },
                _ => UpstreamError::TlsHandshake {
                    name: name.to_string(),
                    source: e,
                },
            },
        ),
        Err(_) => Err(UpstreamError::TlsTimeout {
            name: name.to_string(),
            secs: timeout.as_secs(),
        }),
    }
}
