//! intercept: what happens inside a CONNECT tunnel — TLS both ways
//! (terminate with a leaf from sluice's own CA, re-originate each request
//! upstream over verified TLS), plain HTTP sent through CONNECT, and the
//! opaque relay of everything else.
//!
//! After a CONNECT is answered, [`tunnel_session`] reads the client's first
//! bytes ([`hello`]); `policy::decide_tunnel_start` decides on them (a
//! ClientHello must be readable and name the CONNECT host, `sni-mismatch`
//! otherwise). An intercepted tunnel, or plain HTTP, is then served by
//! [`inner`], every request going through `forward::exchange`, the same
//! pipeline as plain HTTP. Anything else is relayed opaquely and counts as
//! carrying a body. Must not decide on targets itself.

pub mod ca;
mod hello;
mod inner;
pub mod rewind;
mod session;

pub use hello::{Peeked, StartReader, MAX_HELLO};
pub use session::tunnel_session;

use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use std::time::Duration;

use crate::config::{Intercept, Snapshot, TaskConfig};
use crate::policy::{Rule, Target};
use crate::tunnel::DialError;
pub use ca::Ca;
use tokio_rustls::TlsConnector;

/// TLS settings shared by every connection.
#[derive(Clone)]
pub struct Tls {
    /// The `extra_roots` the client config was built with (reload compares).
    pub extra_roots: Vec<std::path::PathBuf>,
    pub provider: Arc<rustls::crypto::CryptoProvider>,
    /// Upstream side: Mozilla roots, the system store and `extra_roots`.
    pub client: Arc<ClientConfig>,
    /// Client side, when some task intercepts: leaves minted by the CA.
    pub server: Option<Arc<ServerConfig>>,
    pub ca: Option<Arc<Ca>>,
}

/// Mints (or reuses) the leaf for the SNI the client asked for; the SNI
/// was checked against the CONNECT host before the handshake.
#[derive(Debug)]
struct LeafResolver(Arc<Ca>);

impl rustls::server::ResolvesServerCert for LeafResolver {
    fn resolve(
        &self,
        hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        let name = hello.server_name()?;
        match self.0.leaf(&name.to_ascii_lowercase()) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!(error = %e, "cannot mint a leaf certificate");
                None
            }
        }
    }
}

impl Tls {
    /// Builds the TLS settings; `ca` is the loaded CA when a task
    /// intercepts.
    pub fn new(snapshot: &Snapshot, ca: Option<Ca>) -> anyhow::Result<Tls> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let native = rustls_native_certs::load_native_certs();
        for cert in native.certs {
            let _ = roots.add(cert);
        }
        for path in &snapshot.extra_roots {
            use rustls::pki_types::pem::PemObject;
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| anyhow::anyhow!("upstream.extra_roots {}: {e}", path.display()))?;
            if certs.is_empty() {
                anyhow::bail!(
                    "upstream.extra_roots {}: no certificate in it",
                    path.display()
                );
            }
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| anyhow::anyhow!("upstream.extra_roots {}: {e}", path.display()))?;
            }
        }
        let mut client = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];

        let ca = ca.map(Arc::new);
        let server = match &ca {
            Some(ca) => {
                let mut server = ServerConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()?
                    .with_no_client_auth()
                    .with_cert_resolver(Arc::new(LeafResolver(ca.clone())));
                server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
                Some(Arc::new(server))
            }
            None => None,
        };
        Ok(Tls {
            extra_roots: snapshot.extra_roots.clone(),
            provider,
            client: Arc::new(client),
            server,
            ca,
        })
    }

    /// Opens verified TLS to an upstream for `name`.
    pub async fn connect(
        &self,
        name: &str,
        stream: TcpStream,
        timeout: Duration,
    ) -> Result<TlsStream<TcpStream>, DialError> {
        let server_name = ServerName::try_from(name.to_string()).map_err(|e| DialError {
            rule: Rule::UpstreamFailed,
            message: format!("{name} is not a valid TLS server name: {e}"),
        })?;
        let connector = TlsConnector::from(self.client.clone());
        match tokio::time::timeout(timeout, connector.connect(server_name, stream)).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(DialError {
                rule: Rule::UpstreamFailed,
                message: match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                    Some(rustls::Error::InvalidCertificate(why)) => format!(
                        "the upstream's TLS certificate for {name} was rejected ({why:?}); sluice never falls back to an unverified connection"
                    ),
                    _ => format!("TLS handshake with the upstream for {name} failed: {e}"),
                },
            }),
            Err(_) => Err(DialError {
                rule: Rule::UpstreamTimeout,
                message: format!("no TLS handshake with the upstream for {name} within {}s", timeout.as_secs()),
            }),
        }
    }
}

/// Will a CONNECT to `target` be intercepted (if the client speaks TLS)?
pub fn intercepts(shared: &crate::server::Shared, task: &TaskConfig, target: &Target) -> bool {
    task.intercept == Intercept::All
        && shared.tls.load().server.is_some()
        && target
            .host
            .as_name()
            .is_some_and(|h| !task.passthrough.contains(h))
}
