//! tls: the TLS settings every connection shares — the interception CA
//! and its leaves (client side), and the verified client config for
//! upstreams (Mozilla roots, the system store, `extra_roots`).
//!
//! Builds configuration only: must not open connections (that is
//! `upstream`) or decide whether a tunnel is intercepted (that is
//! `policy::intercepts`).

pub(crate) mod bundle;
pub(crate) mod ca;

use std::path::PathBuf;
use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::config::{Intercept, Snapshot};
pub(crate) use ca::{Ca, CaError};

/// Why the TLS settings could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    #[error("upstream.extra_roots {0}: {1}")]
    ExtraRoots(PathBuf, String),
    #[error("cannot set up the interception CA: {0}")]
    Ca(#[from] CaError),
    #[error("rustls: {0}")]
    Rustls(#[from] rustls::Error),
}

/// TLS settings shared by every connection.
#[derive(Clone)]
pub(crate) struct Tls {
    /// The `extra_roots` the client config was built with (reload compares).
    pub(crate) extra_roots: Vec<std::path::PathBuf>,
    /// Upstream side: Mozilla roots, the system store and `extra_roots`.
    pub(crate) client: Arc<ClientConfig>,
    /// Client side, when some task intercepts: leaves minted by the CA.
    pub(crate) server: Option<Arc<ServerConfig>>,
    /// Client side, for a refused CONNECT of a task that intercepts:
    /// HTTP/1.1 only, leaves from the CA's small refusal cache.
    pub(crate) refusals: Option<Arc<ServerConfig>>,
    pub(crate) ca: Option<Arc<Ca>>,
}

/// The leaf for a refused CONNECT (see `intercept::refused`): always for
/// the CONNECT host, whatever SNI the client sends (or none), so the
/// client can only pick names the refusal cache already holds.
#[derive(Debug)]
struct RefusalResolver {
    ca: Arc<Ca>,
    /// The CONNECT host; empty in the template config.
    name: String,
}

impl rustls::server::ResolvesServerCert for RefusalResolver {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        if self.name.is_empty() {
            return None;
        }
        self.ca.refusal_leaf(&self.name).ok()
    }
}

impl Tls {
    /// The server side for answering a refused CONNECT to `name` inside
    /// TLS: the refusal template with a resolver fixed to that name.
    /// `None` when no task intercepts (no CA).
    pub(crate) fn refusal_for(&self, name: &str) -> Option<Arc<ServerConfig>> {
        let (template, ca) = (self.refusals.as_ref()?, self.ca.as_ref()?);
        let mut config = (**template).clone();
        config.cert_resolver = Arc::new(RefusalResolver {
            ca: ca.clone(),
            name: name.to_string(),
        });
        Some(Arc::new(config))
    }
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
    pub(crate) fn new(snapshot: &Snapshot, ca: Option<Ca>) -> Result<Tls, TlsError> {
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
                .and_then(std::iter::Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| TlsError::ExtraRoots(path.clone(), e.to_string()))?;
            if certs.is_empty() {
                return Err(TlsError::ExtraRoots(
                    path.clone(),
                    "no certificate in it".into(),
                ));
            }
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| TlsError::ExtraRoots(path.clone(), e.to_string()))?;
            }
        }
        let mut client = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];

        let ca = ca.map(Arc::new);
        let (server, refusals) = match &ca {
            Some(ca) => {
                let mut server = ServerConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()?
                    .with_no_client_auth()
                    .with_cert_resolver(Arc::new(LeafResolver(ca.clone())));
                server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
                // A client that comes back resumes with a ticket (no
                // certificate, no signature), however many clients there
                // are: the ticket carries the session, encrypted under a
                // key rotated every six hours. rustls resumes only for the
                // same SNI, which was checked against the CONNECT host.
                server.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()?;
                let mut refusals = ServerConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()?
                    .with_no_client_auth()
                    .with_cert_resolver(Arc::new(RefusalResolver {
                        ca: ca.clone(),
                        name: String::new(),
                    }));
                refusals.alpn_protocols = vec![b"http/1.1".to_vec()];
                (Some(Arc::new(server)), Some(Arc::new(refusals)))
            }
            None => (None, None),
        };
        Ok(Tls {
            extra_roots: snapshot.extra_roots.clone(),
            client: Arc::new(client),
            server,
            refusals,
            ca,
        })
    }
}

/// Loads (or on first use creates) the CA when a task intercepts, and
/// builds the TLS settings. `current` is reused when nothing changed.
pub(crate) fn for_snapshot(snapshot: &Snapshot, current: Option<&Tls>) -> Result<Tls, TlsError> {
    let intercepting = snapshot.tasks.iter().any(|t| t.intercept == Intercept::All);
    if let Some(cur) = current {
        if cur.extra_roots == snapshot.extra_roots && (cur.ca.is_some() || !intercepting) {
            return Ok(cur.clone());
        }
    }
    let loaded = if intercepting {
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let (ca, created) = Ca::load_or_create(&snapshot.state_dir, &provider)?;
        // The bundle a task's tools trust, rewritten at every start so it
        // holds the CA in use and the machine's current roots.
        if let Some(dir) = &snapshot.publish_ca {
            if let Err(e) = bundle::publish(&snapshot.state_dir, dir) {
                tracing::error!(error = %e, "cannot publish the CA for tasks");
            }
        }
        match bundle::write(&snapshot.state_dir) {
            Ok((path, _)) if created => tracing::info!(
                ca = %ca::cert_path(&snapshot.state_dir).display(), bundle = %path.display(),
                "created the interception CA; set a task's tools up with: eval \"$(sluice env{})\"",
                match &snapshot.source {
                    crate::config::Source::File(p) => {
                        format!(" --config {}", crate::shell::sh_quote(&p.to_string_lossy()))
                    }
                    crate::config::Source::Embedded => String::new(),
                }
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot write the CA bundle for tasks"),
        }
        Some(ca)
    } else {
        None
    };
    Tls::new(snapshot, loaded)
}
