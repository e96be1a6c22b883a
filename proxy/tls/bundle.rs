//! The CA bundle a task's tools trust: the machine's own roots followed by
//! sluice's interception CA, one PEM file beside `ca.pem`. Pointing
//! `SSL_CERT_FILE` (or a tool's `cafile`) at sluice's CA alone would
//! replace the system roots and break every passthrough host; the bundle
//! keeps them.
//!
//! Writes files only, with modes a task can read (the key is never
//! copied). Must not decide anything.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::ca::{cert_path, CaError};

/// Where sluice writes the bundle.
pub fn bundle_path(state_dir: &Path) -> PathBuf {
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
            if text.contains("-----BEGIN CERTIFICATE-----") {
                return Some((path, text));
            }
        }
    }
    None
}

/// Writes `ca-bundle.pem` (system roots + `ca.pem`, mode 0644) and makes
/// `ca.pem` itself readable (0644). Returns the bundle's path and where the
/// system roots came from (None: none found, the bundle holds only
/// sluice's CA and passthrough hosts will not verify with it).
pub fn write(state_dir: &Path) -> Result<(PathBuf, Option<PathBuf>), CaError> {
    let ca = cert_path(state_dir);
    let ca_pem = std::fs::read_to_string(&ca).map_err(|source| CaError::Io {
        path: ca.clone(),
        source,
    })?;
    set_readable(&ca)?;
    let out = bundle_path(state_dir);
    let system = system_roots(&out);
    let mut text = String::new();
    if let Some((from, roots)) = &system {
        text.push_str(&format!("# system roots, from {}\n", from.display()));
        text.push_str(roots);
        if !roots.ends_with('\n') {
            text.push('\n');
        }
    }
    text.push_str("# sluice interception CA\n");
    text.push_str(&ca_pem);
    let tmp = out.with_extension("pem.tmp");
    let io = |source| CaError::Io {
        path: tmp.clone(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&tmp)
        .map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    set_readable(&tmp)?;
    std::fs::rename(&tmp, &out).map_err(|source| CaError::Io {
        path: out.clone(),
        source,
    })?;
    Ok((out, system.map(|s| s.0)))
}

/// Copies `ca.pem` and `ca-bundle.pem` (written first) into `dir`, the
/// folder tasks are given instead of the state folder, which holds the key,
/// the logs and the taint sets.
pub fn publish(state_dir: &Path, dir: &Path) -> Result<(), CaError> {
    let (bundle, _) = write(state_dir)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CaError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    for from in [cert_path(state_dir), bundle] {
        let name = from.file_name().unwrap_or_default();
        let to = dir.join(name);
        let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
        std::fs::copy(&from, &tmp).map_err(io(&tmp))?;
        set_readable(&tmp)?;
        std::fs::rename(&tmp, &to).map_err(io(&to))?;
    }
    Ok(())
}

/// 0644 whatever the umask: a task (another user) must read it.
fn set_readable(path: &Path) -> Result<(), CaError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).map_err(|source| {
        CaError::Io {
            path: path.to_path_buf(),
            source,
        }
    })
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
