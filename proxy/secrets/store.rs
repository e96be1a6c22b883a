//! A task's secrets at hand: each value read from sluice's environment or
//! a file (held in memory that is zeroed when dropped, never printed), and
//! each placeholder — random, `sluice_` then letters and digits, as long
//! as the value (at least 19 bytes) — kept in
//! `<state_dir>/tasks/<id>/placeholders.json` (names and placeholders
//! only) so that it survives restarts and reloads.
//!
//! Must not: decide where a secret may go (`policy::secrets`), or write a
//! value anywhere.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use super::matcher::Matcher;
use crate::config::{SecretConfig, SecretSource, TaskConfig};

/// The placeholders' recognisable start.
pub(crate) const PREFIX: &str = "sluice_";

/// Random characters after the prefix, at least (71 bits: a placeholder
/// must not turn up in other text; it is not itself a secret).
const MIN_RANDOM: usize = 12;

/// Values shorter than this are refused: their encoded forms would match
/// ordinary text.
const MIN_VALUE: usize = 8;

/// One secret: its settings, its placeholder and its value.
pub(crate) struct Secret {
    pub(crate) config: SecretConfig,
    pub(crate) placeholder: String,
    value: Zeroizing<Vec<u8>>,
}

impl Secret {
    /// The real value.
    pub(crate) fn value(&self) -> &[u8] {
        &self.value
    }
}

#[cfg(test)]
impl Secret {
    pub(crate) fn for_test(config: SecretConfig, placeholder: &str, value: &[u8]) -> Secret {
        Secret {
            config,
            placeholder: placeholder.into(),
            value: Zeroizing::new(value.to_vec()),
        }
    }
}

#[cfg(test)]
impl TaskSecrets {
    pub(crate) fn for_test(list: Vec<Secret>) -> TaskSecrets {
        let pairs: Vec<(&[u8], &[u8])> = list
            .iter()
            .map(|s| (s.placeholder.as_bytes(), s.value()))
            .collect();
        let matcher = Matcher::new(&pairs);
        TaskSecrets { list, matcher }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.config.name)
            .field("value", &"(not shown)")
            .finish_non_exhaustive()
    }
}

/// A task's secrets and the matcher that finds them.
pub(crate) struct TaskSecrets {
    pub(crate) list: Vec<Secret>,
    pub(crate) matcher: Matcher,
}

impl fmt::Debug for TaskSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.list).finish()
    }
}

/// Why a task's secrets could not be made ready (sluice does not start,
/// or a reload changes nothing). Never carries a value.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SecretError {
    #[error("secret {name} of task {task}: ${var} is not set in sluice's environment")]
    NotSet {
        task: String,
        name: String,
        var: String,
    },
    #[error("secret {name} of task {task}: cannot read {}: {source}", path.display())]
    File {
        task: String,
        name: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("secret {name} of task {task}: the value is shorter than {MIN_VALUE} bytes or not one line of printable text")]
    Unfit { task: String, name: String },
    #[error("task {task}: cannot keep the placeholders in {}: {source}", path.display())]
    Placeholders {
        task: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("task {task}: no randomness for a placeholder: {why}")]
    Random { task: String, why: String },
}

/// Every task's secrets, by task id (tasks with none are absent).
pub(crate) type ByTask = std::collections::HashMap<String, std::sync::Arc<TaskSecrets>>;

/// Reads the secrets of every task of `snap` (at start, and on each
/// reload before anything is swapped: a value that cannot be read fails
/// the start or the reload).
pub(crate) fn load_all(snap: &crate::config::Snapshot) -> Result<ByTask, SecretError> {
    let mut out = ByTask::new();
    for t in &snap.tasks {
        if let Some(s) = load(t, &snap.state_dir)? {
            out.insert(t.id.clone(), std::sync::Arc::new(s));
        }
    }
    Ok(out)
}

/// Where a task's placeholders are kept.
pub(crate) fn placeholders_path(state_dir: &Path, task: &str) -> PathBuf {
    state_dir.join("tasks").join(task).join("placeholders.json")
}

/// The placeholders kept for `task` (name → placeholder); empty when none.
pub(crate) fn read_placeholders(state_dir: &Path, task: &str) -> BTreeMap<String, String> {
    std::fs::read(placeholders_path(state_dir, task))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Reads `task`'s secret values and makes sure each has a placeholder
/// (kept from before, or made and saved now). `None`: the task has none.
pub(crate) fn load(
    task: &TaskConfig,
    state_dir: &Path,
) -> Result<Option<TaskSecrets>, SecretError> {
    if task.secrets.is_empty() {
        return Ok(None);
    }
    let mut kept = read_placeholders(state_dir, &task.id);
    let before = kept.clone();
    let mut list = Vec::new();
    for config in &task.secrets {
        let value = read_value(&task.id, config)?;
        let placeholder = match kept.get(&config.name) {
            Some(p) if p.starts_with(PREFIX) => p.clone(),
            _ => {
                let p = make_placeholder(value.len()).map_err(|why| SecretError::Random {
                    task: task.id.clone(),
                    why,
                })?;
                kept.insert(config.name.clone(), p.clone());
                p
            }
        };
        list.push(Secret {
            config: config.clone(),
            placeholder,
            value,
        });
    }
    if kept != before {
        save(state_dir, &task.id, &kept)?;
    }
    let pairs: Vec<(&[u8], &[u8])> = list
        .iter()
        .map(|s| (s.placeholder.as_bytes(), s.value()))
        .collect();
    let matcher = Matcher::new(&pairs);
    Ok(Some(TaskSecrets { list, matcher }))
}

fn read_value(task: &str, config: &SecretConfig) -> Result<Zeroizing<Vec<u8>>, SecretError> {
    let name = config.name.clone();
    let mut value = match &config.source {
        SecretSource::Env(var) => match std::env::var_os(var) {
            Some(v) => Zeroizing::new(v.into_encoded_bytes()),
            None => {
                return Err(SecretError::NotSet {
                    task: task.into(),
                    name,
                    var: var.clone(),
                })
            }
        },
        SecretSource::File(path) => {
            Zeroizing::new(std::fs::read(path).map_err(|source| SecretError::File {
                task: task.into(),
                name: name.clone(),
                path: path.clone(),
                source,
            })?)
        }
    };
    // A file's trailing newline is not part of the value.
    while value.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        value.pop();
    }
    if value.len() < MIN_VALUE || !value.iter().all(|b| (0x21..0x7f).contains(b)) {
        return Err(SecretError::Unfit {
            task: task.into(),
            name,
        });
    }
    Ok(value)
}

/// A new placeholder as long as a value of `len` bytes (at least the
/// prefix and [`MIN_RANDOM`] characters).
fn make_placeholder(len: usize) -> Result<String, String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let want = len.max(PREFIX.len() + MIN_RANDOM) - PREFIX.len();
    let mut out = String::from(PREFIX);
    let mut buf = [0u8; 64];
    while out.len() < PREFIX.len() + want {
        getrandom::fill(&mut buf).map_err(|e| e.to_string())?;
        for b in buf {
            // 248 = 4 × 62: no bias.
            if b < 248 && out.len() < PREFIX.len() + want {
                out.push(ALPHABET[usize::from(b) % 62] as char);
            }
        }
    }
    Ok(out)
}

fn save(state_dir: &Path, task: &str, kept: &BTreeMap<String, String>) -> Result<(), SecretError> {
    let path = placeholders_path(state_dir, task);
    let err = |source| SecretError::Placeholders {
        task: task.into(),
        path: path.clone(),
        source,
    };
    let dir = path.parent().unwrap_or(state_dir);
    std::fs::create_dir_all(dir).map_err(err)?;
    let text = serde_json::to_vec_pretty(kept).map_err(|e| err(e.into()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
    std::io::Write::write_all(&mut tmp, &text).map_err(err)?;
    tmp.persist(&path).map_err(|e| err(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placeholder_is_as_long_as_its_value_and_recognisable() {
        let p = make_placeholder(40).unwrap();
        assert_eq!(p.len(), 40);
        assert!(p.starts_with(PREFIX));
        assert!(p[PREFIX.len()..].bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(
            make_placeholder(10).unwrap().len(),
            PREFIX.len() + MIN_RANDOM
        );
        assert_ne!(make_placeholder(40).unwrap(), p);
    }

    #[test]
    fn debug_output_never_shows_a_value() {
        let s = Secret {
            config: SecretConfig {
                name: "TOKEN".into(),
                source: SecretSource::Env("TOKEN".into()),
                hosts: Default::default(),
                headers: vec!["authorization".into()],
                query: false,
                body: false,
                on_violation: crate::config::OnViolation::Refuse,
            },
            placeholder: "sluice_x".into(),
            value: Zeroizing::new(b"hunter2-very-secret".to_vec()),
        };
        let shown = format!("{s:?} {s:#?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("TOKEN"));
    }
}
