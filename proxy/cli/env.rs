//! `sluice env`: find the task, its proxy URL and (when it intercepts) the
//! CA, write the CA bundle, and hand the rest to `clientenv` to render.

use std::path::Path;

use crate::command_error::{CommandError, Doing};
use crate::config::{self, Intercept};

/// `sluice env`: the task's proxy and, when it intercepts, the CA and the
/// bundle.
pub(super) fn client_env(
    config: Option<&std::path::Path>,
    task: Option<&str>,
    proxy: Option<String>,
) -> Result<crate::clientenv::Env, CommandError> {
    let snap = config::load(config, 1).map_err(CommandError::refused)?;
    let ids: Vec<&str> = snap.tasks.iter().map(|t| t.id.as_str()).collect();
    let t = match task {
        Some(id) => snap.task(id).ok_or_else(|| {
            CommandError::refused(format!(
                "no task {id:?} in the config (tasks: {})",
                ids.join(", ")
            ))
        })?,
        None if snap.tasks.len() == 1 => &snap.tasks[0],
        None => {
            return Err(CommandError::Usage(format!(
                "the config has {} tasks; pass --task (one of: {})",
                ids.len(),
                ids.join(", ")
            )))
        }
    };
    let (url, notes) = match (proxy, t.listen.first()) {
        (Some(p), _) => (checked_proxy(p)?, vec![]),
        (None, Some(l)) => crate::clientenv::proxy_for(l).map_err(CommandError::refused)?,
        (None, None) => {
            return Err(CommandError::refused(format!(
                "task {:?} has no listener",
                t.id
            )))
        }
    };
    let ca = if t.intercept == Intercept::All {
        Some(ca_files(&snap.state_dir, &t.id)?)
    } else {
        None
    };
    let secrets = placeholders(&snap.state_dir, t)?;
    Ok(crate::clientenv::Env {
        task: t.id.clone(),
        proxy: url,
        ca,
        notes,
        secrets,
    })
}

/// Each of the task's secrets and its placeholder, as `sluice run` keeps
/// them (never a value: `env` does not read one).
fn placeholders(
    state_dir: &Path,
    t: &crate::config::TaskConfig,
) -> Result<Vec<(String, String)>, CommandError> {
    let kept = crate::secrets::read_placeholders(state_dir, &t.id);
    t.secrets
        .iter()
        .map(|s| match kept.get(&s.name) {
            Some(p) => Ok((s.name.clone(), p.clone())),
            None => Err(CommandError::refused(format!(
                "the secret {} of task {:?} has no placeholder yet: start sluice once with its value at hand (it makes the placeholder in {})",
                s.name,
                t.id,
                state_dir.join("tasks").join(&t.id).join("placeholders.json").display()
            ))),
        })
        .collect()
}

/// The CA and the bundle, as absolute paths (a relative one breaks as soon
/// as the shell changes folder). The bundle is rewritten when it is missing
/// or older than the CA; a read-only state folder (a task's view of it)
/// keeps the one `sluice run` wrote.
fn ca_files(state_dir: &Path, task: &str) -> Result<(String, String), CommandError> {
    let state_dir = std::path::absolute(state_dir)
        .doing(|| format!("cannot name the state folder {}", state_dir.display()))?;
    let ca = crate::tls::ca::cert_path(&state_dir);
    let bundle = crate::tls::bundle::bundle_path(&state_dir);
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(ca_time) = modified(&ca) else {
        return Err(CommandError::refused(format!(
            "task {task:?} intercepts TLS but there is no CA in {} yet: start sluice once, or run `sluice ca init --state {}`",
            state_dir.display(),
            crate::shell::sh_quote(&state_dir.to_string_lossy())
        )));
    };
    let fresh = modified(&bundle).is_some_and(|b| b >= ca_time);
    if !fresh {
        match crate::tls::bundle::write(&state_dir) {
            Ok((_, None)) => eprintln!("sluice: no system CA store found; the bundle holds only sluice's CA, so passthrough hosts will not verify with it"),
            Ok(_) => {}
            Err(e) if bundle.exists() => eprintln!("sluice: using the existing {}: cannot rewrite it: {e}", bundle.display()),
            Err(e) => return Err(e).doing(|| format!("cannot write {}", bundle.display())),
        }
    }
    Ok((ca.display().to_string(), bundle.display().to_string()))
}

/// `--proxy`: an `http://host:port` URL and nothing a shell or a tool would
/// read as more.
fn checked_proxy(p: String) -> Result<String, CommandError> {
    let rest = p.strip_prefix("http://").ok_or_else(|| {
        CommandError::Usage(format!(
            "--proxy {p:?}: expected http://HOST:PORT (sluice speaks plain HTTP to its clients)"
        ))
    })?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let ok = rest.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && port.parse::<u16>().is_ok()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-[]:".contains(&b))
    });
    if ok {
        Ok(p)
    } else {
        Err(CommandError::Usage(format!(
            "--proxy {p:?}: expected http://HOST:PORT"
        )))
    }
}
