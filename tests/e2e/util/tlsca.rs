//! A test CA made at run time, and TLS server configs it signs, for
//! upstreams that sluice (through `[upstream] extra_roots`) or a client
//! must verify; and a raw rustls client trusting a CA file (sluice's).

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

/// A test CA, made at run time.
pub struct TestCa {
    pub issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

pub fn test_ca() -> TestCa {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sluice tests upstream CA");
    let cert = params.self_signed(&key).unwrap();
    TestCa {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A server config for `names`, signed by `ca`, offering h2 and http/1.1.
pub fn server_config(ca: &TestCa, names: &[&str]) -> Arc<rustls::ServerConfig> {
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(
        names
            .iter()
            .map(std::string::ToString::to_string)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// A rustls client trusting `ca_file`, for `name` (an IP name sends no
/// SNI), offering HTTP/1.1.
pub fn rustls_client(ca_file: &str, name: &str) -> rustls::ClientConnection {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca_file).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    rustls::ClientConnection::new(
        Arc::new(cfg),
        ServerName::try_from(name.to_string()).unwrap(),
    )
    .unwrap()
}
