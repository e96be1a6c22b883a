//! `sluice env`: find the task, its proxy URL and (when it intercepts) the
//! CA, write the CA bundle, and hand the rest to `clientenv` to render.

use crate::config::{self, Intercept};

/// `sluice env`: the task's proxy and, when it intercepts, the CA bundle
/// (written now, beside the CA, so it holds the CA in use).
pub(super) fn client_env(
    config: Option<&std::path::Path>,
    task: Option<&str>,
    proxy: Option<String>,
) -> Result<crate::clientenv::Env, String> {
    let snap = config::load(config, 1).map_err(|e| e.to_string())?;
    let ids: Vec<&str> = snap.tasks.iter().map(|t| t.id.as_str()).collect();
    let t = match task {
        Some(id) => snap
            .task(id)
            .ok_or_else(|| format!("no task {id:?} in the config (tasks: {})", ids.join(", ")))?,
        None if snap.tasks.len() == 1 => &snap.tasks[0],
        None => {
            return Err(format!(
                "the config has {} tasks; pass --task (one of: {})",
                ids.len(),
                ids.join(", ")
            ))
        }
    };
    let (url, notes) = match (proxy, t.listen.first()) {
        (Some(p), _) => (p, vec![]),
        (None, Some(l)) => crate::clientenv::proxy_for(l)?,
        (None, None) => return Err(format!("task {:?} has no listener", t.id)),
    };
    let ca = if t.intercept == Intercept::All {
        let ca = crate::tls::ca::cert_path(&snap.state_dir);
        if !ca.exists() {
            return Err(format!(
                "task {:?} intercepts TLS but there is no CA in {} yet: start sluice once, or run `sluice ca init`",
                t.id,
                snap.state_dir.display()
            ));
        }
        let (bundle, from) =
            crate::tls::bundle::write(&snap.state_dir).map_err(|e| e.to_string())?;
        if from.is_none() {
            eprintln!("sluice: no system CA store found; the bundle holds only sluice's CA, so passthrough hosts will not verify with it");
        }
        Some((ca.display().to_string(), bundle.display().to_string()))
    } else {
        None
    };
    Ok(crate::clientenv::Env {
        task: t.id.clone(),
        proxy: url,
        ca,
        notes,
    })
}
