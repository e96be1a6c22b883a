//! The interception CA: created once per state folder, loaded on start,
//! and the minting of leaf certificates for the hosts a task CONNECTs to.
//!
//! The CA key is written with mode 0600 and never logged. Leaves share one
//! ECDSA P-256 key generated at start (minting is then one signature), are
//! valid for 30 days and are cached per host (bounded).

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Leaves minted at most before the cache starts over.
const LEAF_CACHE: usize = 10_000;
/// Leaves for refused CONNECTs kept at most, apart from the others: a task
/// asking for many refused names re-mints its own, and never evicts the
/// leaves of the hosts it may reach.
const REFUSAL_CACHE: usize = 256;

/// Leaves by host, with when they were minted.
type Leaves = Mutex<HashMap<String, (Arc<CertifiedKey>, time::OffsetDateTime)>>;

#[derive(Debug, thiserror::Error)]
pub(crate) enum CaError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("a CA already exists in {0}; pass --force to replace it (every client must then trust the new one)")]
    Exists(PathBuf),
    #[error(
        "no CA in {}; create one with `sluice ca init --state {}`, or start sluice once",
        .0.display(),
        crate::shell::sh_quote(&.0.to_string_lossy())
    )]
    Missing(PathBuf),
    #[error("cannot use the CA in {path}: {message}")]
    Bad { path: PathBuf, message: String },
    #[error("cannot mint a certificate for {host}: {message}")]
    Mint { host: String, message: String },
}

pub(crate) fn cert_path(state_dir: &Path) -> PathBuf {
    state_dir.join("ca.pem")
}

pub(crate) fn key_path(state_dir: &Path) -> PathBuf {
    state_dir.join("ca.key")
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |source| CaError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn bad(path: &Path, e: impl std::fmt::Display) -> CaError {
    CaError::Bad {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Creates `ca.pem` and `ca.key` (0600) in `state_dir`. Refuses to replace
/// an existing CA unless `force`.
pub(crate) fn init(state_dir: &Path, force: bool) -> Result<(), CaError> {
    let (cert, key) = (cert_path(state_dir), key_path(state_dir));
    if !force && (cert.exists() || key.exists()) {
        return Err(CaError::Exists(state_dir.to_path_buf()));
    }
    std::fs::create_dir_all(state_dir).map_err(io_err(state_dir))?;
    let key_pair = KeyPair::generate().map_err(|e| bad(&key, e))?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "sluice interception CA");
    dn.push(DnType::OrganizationName, "sluice");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(3650);
    let ca = params.self_signed(&key_pair).map_err(|e| bad(&cert, e))?;

    // Key first, 0600 from the moment it exists.
    write_new(&key, key_pair.serialize_pem().as_bytes(), 0o600)?;
    write_new(&cert, ca.pem().as_bytes(), 0o644)?;
    Ok(())
}

/// Replaces `path` with `bytes` at `mode`: a fresh temporary file in the
/// same folder (created exclusively, so nothing planted there is
/// followed), given its mode through its descriptor, synced, then renamed
/// over `path`.
pub(super) fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), CaError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".sluice-")
        .permissions(std::fs::Permissions::from_mode(mode & 0o600))
        .tempfile_in(dir)
        .map_err(io_err(path))?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .and_then(|_| tmp.write_all(bytes))
        .and_then(|_| tmp.as_file().sync_all())
        .map_err(io_err(path))?;
    tmp.persist(path).map_err(|e| CaError::Io {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    Ok(())
}

/// The CA certificate in PEM.
pub(crate) fn show(state_dir: &Path) -> Result<String, CaError> {
    let cert = cert_path(state_dir);
    if !cert.exists() {
        return Err(CaError::Missing(state_dir.to_path_buf()));
    }
    std::fs::read_to_string(&cert).map_err(io_err(&cert))
}

/// A loaded CA that mints leaf certificates.
pub(crate) struct Ca {
    issuer: Issuer<'static, KeyPair>,
    leaf_key: KeyPair,
    leaf_signer: Arc<dyn rustls::sign::SigningKey>,
    cache: Leaves,
    /// Leaves for refused CONNECTs (see [`REFUSAL_CACHE`]).
    refusal_cache: Leaves,
    #[cfg_attr(not(test), allow(dead_code))] // tests verify leaves against it
    cert_pem: String,
    /// The time source (the system clock; tests move it).
    clock: Clock,
}

/// Where the CA reads the time from.
pub(crate) type Clock = Arc<dyn Fn() -> time::OffsetDateTime + Send + Sync>;

/// How long a leaf is valid.
const LEAF_LIFETIME: time::Duration = time::Duration::days(30);
/// A cached leaf older than this is minted again, so a client never sees
/// one near its end (half the lifetime: a long-running sluice never serves
/// an expired certificate).
const LEAF_REMINT_AFTER: time::Duration = time::Duration::days(15);

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ca { .. }")
    }
}

impl Ca {
    /// Loads the CA of `state_dir`.
    pub(crate) fn load(state_dir: &Path, provider: &CryptoProvider) -> Result<Ca, CaError> {
        let (cert, key) = (cert_path(state_dir), key_path(state_dir));
        if !cert.exists() || !key.exists() {
            return Err(CaError::Missing(state_dir.to_path_buf()));
        }
        let cert_pem = std::fs::read_to_string(&cert).map_err(io_err(&cert))?;
        let key_pem = std::fs::read_to_string(&key).map_err(io_err(&key))?;
        let ca_key = KeyPair::from_pem(&key_pem).map_err(|e| bad(&key, e))?;
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, ca_key).map_err(|e| bad(&cert, e))?;
        let leaf_key = KeyPair::generate().map_err(|e| bad(&key, e))?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let leaf_signer = provider
            .key_provider
            .load_private_key(der)
            .map_err(|e| bad(&key, e))?;
        Ok(Ca {
            issuer,
            leaf_key,
            leaf_signer,
            cache: Mutex::new(HashMap::new()),
            refusal_cache: Mutex::new(HashMap::new()),
            cert_pem,
            clock: Arc::new(time::OffsetDateTime::now_utc),
        })
    }

    /// The CA certificate (DER), for tests that verify its leaves.
    #[cfg(test)]
    fn issuer_der(&self) -> CertificateDer<'static> {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).unwrap()
    }

    /// The same CA reading the time from `clock` (tests).
    #[cfg(test)]
    pub(crate) fn with_clock(mut self, clock: Clock) -> Ca {
        self.clock = clock;
        // A std Mutex over a plain map, never held across an await.
        for leaves in [&self.cache, &self.refusal_cache] {
            leaves
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clear();
        }
        self
    }

    /// Loads the CA, creating it first if there is none. Returns whether it
    /// was created.
    pub(crate) fn load_or_create(
        state_dir: &Path,
        provider: &CryptoProvider,
    ) -> Result<(Ca, bool), CaError> {
        let created = !cert_path(state_dir).exists() && !key_path(state_dir).exists();
        if created {
            init(state_dir, false)?;
        }
        Ok((Ca::load(state_dir, provider)?, created))
    }

    /// The leaf certificate for `host` (a normalised name), minted once
    /// and again when it is half its lifetime old.
    pub(crate) fn leaf(&self, host: &str) -> Result<Arc<CertifiedKey>, CaError> {
        self.leaf_in(&self.cache, LEAF_CACHE, host)
    }

    /// The leaf sluice shows when it answers a refused CONNECT inside TLS,
    /// from a small cache of its own.
    pub(crate) fn refusal_leaf(&self, host: &str) -> Result<Arc<CertifiedKey>, CaError> {
        self.leaf_in(&self.refusal_cache, REFUSAL_CACHE, host)
    }

    fn leaf_in(
        &self,
        leaves: &Leaves,
        cap: usize,
        host: &str,
    ) -> Result<Arc<CertifiedKey>, CaError> {
        let lock = || {
            leaves
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let now = (self.clock)();
        if let Some((c, minted)) = lock().get(host) {
            if now - *minted < LEAF_REMINT_AFTER {
                return Ok(c.clone());
            }
        }
        let mint = |e: rcgen::Error| CaError::Mint {
            host: host.to_string(),
            message: e.to_string(),
        };
        let mut params = CertificateParams::new(vec![host.to_string()]).map_err(mint)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        params.distinguished_name = dn;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + LEAF_LIFETIME;
        let cert = params
            .signed_by(&self.leaf_key, &self.issuer)
            .map_err(mint)?;
        let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
        let ck = Arc::new(CertifiedKey::new(chain, self.leaf_signer.clone()));
        let mut cache = lock();
        if cache.len() >= cap {
            cache.clear();
        }
        cache.insert(host.to_string(), (ck.clone(), now));
        Ok(ck)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn init_refuses_to_overwrite_and_key_is_private() {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path(), false).unwrap();
        let mode = std::fs::metadata(key_path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(matches!(init(dir.path(), false), Err(CaError::Exists(_))));
        let before = show(dir.path()).unwrap();
        init(dir.path(), true).unwrap();
        assert_ne!(before, show(dir.path()).unwrap());
    }

    #[test]
    fn leaves_are_minted_once_per_host() {
        let dir = tempfile::tempdir().unwrap();
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let (ca, created) = Ca::load_or_create(dir.path(), &provider).unwrap();
        assert!(created);
        let a = ca.leaf("pkgs.example.com").unwrap();
        let b = ca.leaf("pkgs.example.com").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = ca.leaf("other.example.com").unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        let (_, created) = Ca::load_or_create(dir.path(), &provider).unwrap();
        assert!(!created);
    }

    /// A sluice running for 40 days still serves leaves that are valid now:
    /// a cached leaf is minted again once it is half its lifetime old.
    #[test]
    fn leaves_are_reminted_before_they_expire() {
        let dir = tempfile::tempdir().unwrap();
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let start = time::OffsetDateTime::now_utc();
        let days = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let d2 = days.clone();
        let (ca, _) = Ca::load_or_create(dir.path(), &provider).unwrap();
        let ca = ca.with_clock(Arc::new(move || {
            start + time::Duration::days(d2.load(std::sync::atomic::Ordering::SeqCst))
        }));
        // A client's verdict at a given time: webpki with the CA as root.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.issuer_der()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(provider.clone()),
        )
        .build()
        .unwrap();
        let name = rustls::pki_types::ServerName::try_from("pkgs.example.com").unwrap();
        let valid_at = |ck: &CertifiedKey, t: i64| {
            let at = rustls::pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(
                t as u64,
            ));
            rustls::client::danger::ServerCertVerifier::verify_server_cert(
                &*verifier,
                &ck.cert[0],
                &[],
                &name,
                &[],
                at,
            )
            .is_ok()
        };
        let first = ca.leaf("pkgs.example.com").unwrap();
        for day in [1, 10, 14, 16, 29, 31, 40, 55] {
            days.store(day, std::sync::atomic::Ordering::SeqCst);
            let now = (start + time::Duration::days(day)).unix_timestamp();
            let leaf = ca.leaf("pkgs.example.com").unwrap();
            assert!(valid_at(&leaf, now), "day {day}: the leaf is valid now");
            assert!(
                valid_at(&leaf, now + 14 * 86_400),
                "day {day}: and two weeks on"
            );
            assert_eq!(
                Arc::ptr_eq(&leaf, &first),
                day < 15,
                "day {day}: cached until half-life"
            );
        }
    }

    /// Refused names have a cache of their own: many of them neither grow
    /// it past its bound nor evict the leaf of a host the task may reach.
    #[test]
    fn refusal_leaves_are_bounded_and_apart() {
        let dir = tempfile::tempdir().unwrap();
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let (ca, _) = Ca::load_or_create(dir.path(), &provider).unwrap();
        let allowed = ca.leaf("pkgs.example.com").unwrap();
        for i in 0..REFUSAL_CACHE + 10 {
            ca.refusal_leaf(&format!("n{i}.example.com")).unwrap();
            let kept = ca.refusal_cache.lock().unwrap().len();
            assert!(kept <= REFUSAL_CACHE, "{kept}");
        }
        assert!(Arc::ptr_eq(&allowed, &ca.leaf("pkgs.example.com").unwrap()));
        assert_eq!(ca.cache.lock().unwrap().len(), 1);
    }
}
