//! The CA bundle a task's tools trust: the machine's own roots followed by
//! sluice's interception CA, one PEM file beside `ca.pem`. Pointing
//! `SSL_CERT_FILE` (or a tool's `cafile`) at sluice's CA alone would
//! replace the system roots and break every passthrough host; the bundle
//! keeps them.
//!
//! Writes files only, with modes a task can read (the key is never
//! copied). Must not decide anything.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::ca::{cert_path, CaError};

/// Where sluice writes the bundle.
pub(crate) fn bundle_path(state_dir: &Path) -> PathBuf {
    state_dir.join("ca-bundle.pem")
}

/// The machine's trusted roots as one PEM file, where common systems keep
/// it (`SSL_CERT_FILE` first, unless it is this bundle).
fn system_roots(own: &Path) -> Option<(PathBuf, String)> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
    let candidates = from_env.into_iter().chain(
        [
            "/etc/ssl/certs/ca-certificates.crt",
            "/etc/pki/tls/certs/ca-bundle.crt",
            "/etc/ssl/ca-bundle.pem",
            "/etc/pki/tls/cacert.pem",
            "/etc/ssl/cert.pem",
        ]
        .map(PathBuf::from),
    );
    for path in candidates {
        if path == own || path.canonicalize().ok().as_deref() == own.canonicalize().ok().as_deref()
        {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(&path) {
            let certs = certificates(&text);
            if !certs.is_empty() {
                return Some((path, certs));
            }
        }
    }
    None
}

/// Writes `ca-bundle.pem` (system roots + `ca.pem`, mode 0644) and makes
/// `ca.pem` itself readable (0644). Returns the bundle's path and where the
/// system roots came from (None: none found, the bundle holds only
/// sluice's CA and passthrough hosts will not verify with it).
///
/// Safe in a folder someone else could plant files in: `ca.pem` is opened
/// without following symlinks and must be a regular file (it is made
/// readable through its descriptor, and only when it is ours); the bundle
/// is written to a fresh temporary file and renamed into place.
pub(crate) fn write(state_dir: &Path) -> Result<(PathBuf, Option<PathBuf>), CaError> {
    let ca_pem = read_ca(state_dir)?;
    let out = bundle_path(state_dir);
    let system = system_roots(&out);
    let mut text = String::new();
    if let Some((from, roots)) = &system {
        text.push_str(&format!("# system roots, from {}\n", from.display()));
        text.push_str(roots);
    }
    text.push_str("# sluice interception CA\n");
    text.push_str(&certificates(&ca_pem));
    replace(&out, text.as_bytes())?;
    Ok((out, system.map(|s| s.0)))
}

/// Reads `ca.pem` without following a symlink, making it 0644 when it is
/// ours and not yet readable by all.
fn read_ca(state_dir: &Path) -> Result<String, CaError> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let ca = cert_path(state_dir);
    let io = |source| CaError::Io {
        path: ca.clone(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&ca)
        .map_err(io)?;
    let meta = f.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(CaError::Bad {
            path: ca.clone(),
            message: "not a regular file".into(),
        });
    }
    if meta.mode() & 0o004 == 0 && meta.uid() == rustix::process::geteuid().as_raw() {
        f.set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(io)?;
    }
    let mut text = String::new();
    f.read_to_string(&mut text).map_err(io)?;
    Ok(text)
}

/// Only the certificate blocks of a PEM text: a key in a combined file
/// never reaches a file others can read.
fn certificates(pem: &str) -> String {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = String::new();
    let mut inside = false;
    for line in pem.lines() {
        let line = line.trim_end();
        if line == BEGIN {
            inside = true;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
        if line == END {
            inside = false;
        }
    }
    out
}

/// Replaces `path` with `bytes`, readable by all (see `ca::write_new`).
fn replace(path: &Path, bytes: &[u8]) -> Result<(), CaError> {
    super::ca::write_new(path, bytes, 0o644)
}

/// Copies `ca.pem` and `ca-bundle.pem` (written first) into `dir`, the
/// folder tasks are given instead of the state folder, which holds the key,
/// the logs and the taint sets.
pub(crate) fn publish(state_dir: &Path, dir: &Path) -> Result<(), CaError> {
    let (bundle, _) = write(state_dir)?;
    std::fs::create_dir_all(dir).map_err(|source| CaError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let ca = certificates(&read_ca(state_dir)?);
    let bundle_text = std::fs::read_to_string(&bundle).map_err(|source| CaError::Io {
        path: bundle.clone(),
        source,
    })?;
    replace(&dir.join("ca.pem"), ca.as_bytes())?;
    replace(&dir.join("ca-bundle.pem"), bundle_text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn bundle_holds_system_roots_then_the_ca_readable_by_all() {
        let dir = tempfile::tempdir().unwrap();
        crate::tls::ca::init(dir.path(), false).unwrap();
        let (path, from) = write(dir.path()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let ca = std::fs::read_to_string(cert_path(dir.path())).unwrap();
        assert!(text.ends_with(&ca), "the CA comes last");
        if from.is_some() {
            assert!(
                text.matches("-----BEGIN CERTIFICATE-----").count() > 1,
                "system roots kept"
            );
        }
        for p in [&path, &cert_path(dir.path())] {
            assert_eq!(std::fs::metadata(p).unwrap().mode() & 0o777, 0o644, "{p:?}");
        }
        let key = crate::tls::ca::key_path(dir.path());
        assert_eq!(std::fs::metadata(key).unwrap().mode() & 0o777, 0o600);
        assert!(!text.contains("PRIVATE KEY"));
    }

    #[test]
    fn only_certificates_are_copied_and_symlinks_are_not_followed() {
        let pem = "junk\n-----BEGIN PRIVATE KEY-----\nSECRET\n-----END PRIVATE KEY-----\n-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n";
        assert_eq!(
            certificates(pem),
            "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n"
        );
        // A ca.pem that is a symlink (to a secret, say) is refused.
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(
            &secret,
            "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&secret, cert_path(dir.path())).unwrap();
        assert!(write(dir.path()).is_err());
        assert_eq!(
            std::fs::metadata(&secret).unwrap().mode() & 0o777,
            0o600,
            "not chmodded"
        );
        assert!(!bundle_path(dir.path()).exists());
    }

    #[test]
    fn publish_copies_the_certificates_and_nothing_else() {
        let state = tempfile::tempdir().unwrap();
        let public = tempfile::tempdir().unwrap();
        crate::tls::ca::init(state.path(), false).unwrap();
        std::fs::write(state.path().join("secret.jsonl"), "x").unwrap();
        publish(state.path(), &public.path().join("ca")).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(public.path().join("ca"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        assert_eq!(names, ["ca-bundle.pem", "ca.pem"]);
        for n in &names {
            let m = std::fs::metadata(public.path().join("ca").join(n)).unwrap();
            assert_eq!(m.mode() & 0o777, 0o644, "{n}");
        }
    }
}
