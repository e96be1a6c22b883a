//! A task's quarantine (`on_violation = "quarantine"`, SPEC §10): after a
//! leak, every later request and CONNECT of the task is refused until a
//! person releases it. Kept in `<state_dir>/tasks/<id>/quarantined.json`
//! so it holds across reloads and restarts; each change is an audit line
//! in `secrets.jsonl` beside it (when, which secret, who released it).
//!
//! Must not: decide (the refusal is `policy::secrets::quarantined`), or
//! write a value.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The file whose presence quarantines a task.
const FILE: &str = "quarantined.json";
/// The audit lines.
const AUDIT: &str = "secrets.jsonl";

/// One task's quarantine.
#[derive(Debug)]
pub(crate) struct Quarantine {
    dir: PathBuf,
    /// The secret whose leak quarantined the task.
    by: Mutex<Option<Arc<str>>>,
}

impl Quarantine {
    /// The quarantine kept in task folder `dir` (a file that cannot be
    /// read still quarantines: fail closed).
    pub(crate) fn load(dir: &Path) -> Quarantine {
        let path = dir.join(FILE);
        let by = match std::fs::read(&path) {
            Ok(b) => Some(
                serde_json::from_slice::<serde_json::Value>(&b)
                    .ok()
                    .and_then(|v| v["secret"].as_str().map(Arc::from))
                    .unwrap_or_else(|| Arc::from("?")),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(_) => Some(Arc::from("?")),
        };
        Quarantine {
            dir: dir.to_path_buf(),
            by: Mutex::new(by),
        }
    }

    /// The secret the task is quarantined for, if it is.
    pub(crate) fn by(&self) -> Option<Arc<str>> {
        self.by
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Quarantines the task for `secret`'s leak (kept on disk first).
    pub(crate) fn enter(&self, secret: &str) {
        let mut by = self.by.lock().unwrap_or_else(PoisonError::into_inner);
        if by.is_some() {
            return;
        }
        let ts = crate::log::now_rfc3339();
        let line = serde_json::json!({"ts": ts, "secret": secret});
        let _ = std::fs::create_dir_all(&self.dir);
        if let Err(e) = std::fs::write(self.dir.join(FILE), line.to_string()) {
            tracing::error!(
                "cannot keep the quarantine in {}: {e}; it holds until sluice stops",
                self.dir.display()
            );
        }
        self.audit(serde_json::json!({"ts": ts, "event": "quarantined", "secret": secret}));
        tracing::error!(secret, "the task is quarantined: a secret would have leaked; every request is refused until `sluice release`");
        *by = Some(Arc::from(secret));
    }

    /// Ends the quarantine; `who` released it. `None`: there was none.
    pub(crate) fn release(&self, who: &str) -> Option<Arc<str>> {
        let mut by = self.by.lock().unwrap_or_else(PoisonError::into_inner);
        let was = by.take()?;
        if let Err(e) = std::fs::remove_file(self.dir.join(FILE)) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::error!(
                    "cannot remove {}: {e}; the quarantine holds",
                    self.dir.join(FILE).display()
                );
                *by = Some(was);
                return None;
            }
        }
        self.audit(serde_json::json!({
            "ts": crate::log::now_rfc3339(), "event": "released", "secret": &*was, "by": who,
        }));
        tracing::info!(by = who, "the task's quarantine was released");
        Some(was)
    }

    fn audit(&self, line: serde_json::Value) {
        use std::io::Write;
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(AUDIT))
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            tracing::error!("cannot write {}: {e}", self.dir.join(AUDIT).display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarantine_holds_across_a_restart_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let q = Quarantine::load(dir.path());
        assert_eq!(q.by(), None);
        q.enter("GITHUB_TOKEN");
        assert_eq!(q.by().as_deref(), Some("GITHUB_TOKEN"));
        let again = Quarantine::load(dir.path());
        assert_eq!(again.by().as_deref(), Some("GITHUB_TOKEN"));
        assert_eq!(
            again.release("sluice release, uid 0").as_deref(),
            Some("GITHUB_TOKEN")
        );
        assert_eq!(again.release("twice"), None);
        assert_eq!(Quarantine::load(dir.path()).by(), None);
        let audit = std::fs::read_to_string(dir.path().join(AUDIT)).unwrap();
        assert!(
            audit.contains("\"quarantined\"") && audit.contains("sluice release, uid 0"),
            "{audit}"
        );
        // An unreadable file still quarantines.
        std::fs::write(dir.path().join(FILE), "not json").unwrap();
        assert_eq!(Quarantine::load(dir.path()).by().as_deref(), Some("?"));
    }
}
