//! secret: the checks of a task's `[[task.secret]]` entries (SPEC §10)
//! into [`SecretConfig`]s: a name, where sluice reads the value (its own
//! environment or a file — never the config), the hosts it belongs to and
//! where in their requests it may be swapped in.
//!
//! Must not: read a value (sluice does at start and on reload, in
//! `secrets`), or repeat one in a message: a value written in the config
//! is refused by its place only.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::policy::target::parse_authority;
use crate::policy::{AllowList, Host};

use super::raw::{RawSecret, S};
use super::validator::Validator;
use super::Intercept;

/// One secret of a task.
#[derive(Clone, Debug)]
pub(crate) struct SecretConfig {
    /// The variable the task gets its placeholder under.
    pub(crate) name: String,
    pub(crate) source: SecretSource,
    /// Its hosts, exact as in `allow` (a bare name: ports 80 and 443).
    pub(crate) hosts: AllowList,
    /// Request headers it may be swapped into, lower case.
    pub(crate) headers: Vec<String>,
    /// Opt-in: the query string (the value percent-encoded there).
    pub(crate) query: bool,
    /// Opt-in: request bodies (a small body is read whole; a longer
    /// placeholder than value drops Content-Length).
    pub(crate) body: bool,
    pub(crate) on_violation: OnViolation,
}

/// Where sluice reads a secret's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SecretSource {
    /// A variable of sluice's own environment.
    Env(String),
    /// A file (relative to the config's folder).
    File(PathBuf),
}

/// What a leak does beyond refusing the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnViolation {
    Refuse,
    Quarantine,
}

/// The settings a task's secrets are checked against.
pub(super) struct TaskView<'a> {
    pub(super) id: &'a str,
    pub(super) allow: &'a AllowList,
    pub(super) intercept: Intercept,
    pub(super) passthrough: &'a HashSet<String>,
}

fn key(id: &str, name: &str, k: &str) -> String {
    format!("task[{id}].secret[{name}].{k}")
}

/// A variable name: what `sluice env` exports it as.
fn is_var_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !s.as_bytes()[0].is_ascii_digit()
}

impl Validator<'_> {
    /// A task's secrets; problems are reported and the bad ones left out.
    pub(super) fn secrets(
        &mut self,
        raw: &[S<RawSecret>],
        task: &TaskView<'_>,
        base: &Path,
    ) -> Vec<SecretConfig> {
        let mut names = HashSet::new();
        raw.iter()
            .filter_map(|r| self.secret(r, task, base, &mut names))
            .collect()
    }

    fn secret(
        &mut self,
        r: &S<RawSecret>,
        task: &TaskView<'_>,
        base: &Path,
        names: &mut HashSet<String>,
    ) -> Option<SecretConfig> {
        let start = self.problems.len();
        let raw = r.get_ref();
        let name = raw.name.get_ref().clone();
        let id = task.id;
        if !is_var_name(&name) {
            self.problem(
                &raw.name,
                format!("task[{id}].secret.name"),
                format!("{name:?} must be a variable name (letters, digits, '_'; not starting with a digit): the task gets its placeholder under it"),
            );
        } else if !names.insert(name.clone()) {
            self.problem(
                &raw.name,
                format!("task[{id}].secret.name"),
                format!("the secret {name} is defined twice"),
            );
        }
        if let Some(v) = &raw.value {
            self.problem(
                v,
                key(id, &name, "value"),
                "a secret's value is never written in the config (it would sit in every copy of the file): remove it and use from_env = \"VAR\" (sluice's own environment) or from_file = \"PATH\"",
            );
        }
        let source = match (&raw.from_env, &raw.from_file) {
            (Some(e), None) if is_var_name(e.get_ref()) => {
                Some(SecretSource::Env(e.get_ref().clone()))
            }
            (Some(e), None) => {
                self.problem(e, key(id, &name, "from_env"), "must be a variable name");
                None
            }
            (None, Some(f)) => Some(SecretSource::File(base.join(f.get_ref()))),
            (Some(e), Some(_)) => {
                self.problem(
                    e,
                    key(id, &name, "from_env"),
                    "give from_env or from_file, not both",
                );
                None
            }
            (None, None) => {
                self.problem(
                    &raw.name,
                    key(id, &name, "from_env"),
                    "give from_env = \"VAR\" or from_file = \"PATH\": where sluice reads the value",
                );
                None
            }
        };
        let hosts = self.secret_hosts(raw, task, &name);
        let headers = self.secret_headers(raw, id, &name);
        let on_violation = match raw.on_violation.as_ref().map(|v| v.get_ref().as_str()) {
            None | Some("refuse") => OnViolation::Refuse,
            Some("quarantine") => OnViolation::Quarantine,
            Some(other) => {
                let at = raw.on_violation.as_ref().unwrap_or(&raw.name);
                self.problem(
                    at,
                    key(id, &name, "on_violation"),
                    format!("{other:?}: expected \"refuse\" or \"quarantine\""),
                );
                OnViolation::Refuse
            }
        };
        if self.problems.len() > start {
            return None;
        }
        Some(SecretConfig {
            name,
            source: source?,
            hosts,
            headers,
            query: raw.query.as_ref().is_some_and(|q| *q.get_ref()),
            body: raw.body.as_ref().is_some_and(|b| *b.get_ref()),
            on_violation,
        })
    }

    /// `hosts`: at least one; each a name the task allows, intercepts and
    /// does not pass through.
    fn secret_hosts(&mut self, raw: &RawSecret, task: &TaskView<'_>, name: &str) -> AllowList {
        let mut hosts = AllowList::default();
        let k = key(task.id, name, "hosts");
        if raw.hosts.is_empty() {
            self.problem(
                &raw.name,
                k.clone(),
                "list the hosts the secret belongs to (exact names, as in allow)",
            );
        }
        if !raw.hosts.is_empty() && task.intercept != Intercept::All {
            self.problem(&raw.name, k.clone(), "a secret is swapped in only on intercepted requests: the task needs intercept = \"all\"");
        }
        for h in &raw.hosts {
            let written = h.get_ref().as_str();
            let target = match parse_authority(written, Some(0)) {
                Ok(t) => t,
                Err(e) => {
                    self.problem(h, k.clone(), format!("{written:?}: {e}"));
                    continue;
                }
            };
            let Host::Name(n) = &target.host else {
                self.problem(
                    h,
                    k.clone(),
                    format!("{written:?}: a secret belongs to host names, not IP addresses"),
                );
                continue;
            };
            let ports: &[u16] = if target.port == 0 {
                &[80, 443]
            } else {
                &[target.port]
            };
            for p in ports {
                if !task.allow.contains(&target.host, *p) {
                    self.problem(
                        h,
                        k.clone(),
                        format!("{n}:{p} is not in the task's allow: add it there too"),
                    );
                }
                hosts.insert(target.host.clone(), *p);
            }
            if task.passthrough.contains(n.as_str()) {
                self.problem(h, k.clone(), format!("{n} is in passthrough: sluice cannot swap a secret into a tunnel it does not open"));
            }
        }
        hosts
    }

    /// `headers`: names of request headers, lower-cased (default
    /// `authorization`).
    fn secret_headers(&mut self, raw: &RawSecret, id: &str, name: &str) -> Vec<String> {
        let Some(list) = &raw.headers else {
            return vec!["authorization".to_string()];
        };
        let mut out = Vec::new();
        for h in list {
            match http::HeaderName::from_bytes(h.get_ref().as_bytes()) {
                Ok(n) => out.push(n.as_str().to_string()),
                Err(_) => self.problem(
                    h,
                    key(id, name, "headers"),
                    format!("{:?} is not a header name", h.get_ref()),
                ),
            }
        }
        out
    }
}
