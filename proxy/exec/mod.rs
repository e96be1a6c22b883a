//! exec: `sluice exec -- CMD`, one command with sluice as its only way out,
//! then the report of what it reached.
//!
//! This half runs outside: it builds a one-task snapshot (from `--allow`
//! or a task of `--config`), serves it on a unix socket in the state
//! folder, and starts `sluice exec-guest` ([`guest`]), which makes new
//! user, mount, network and PID namespaces ([`ns`]) for the command. When
//! the command exits it stops sluice and prints the report to stderr,
//! naming the state folder where sluice's handle says it is then.
//!
//! Must not: run the command itself, decide anything (the server it starts
//! does, through `policy`), or run the command when the sandbox could not
//! be made: the guest proves its isolation first and leaves a marker; no
//! marker, no claim that the command ran confined.

pub(crate) mod guest;
pub(crate) mod launch;
pub(crate) mod ns;
pub(crate) mod transparent;

use crate::command_error::{CommandError, Doing};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{self, Intercept, ListenAddr, Snapshot, Source};
use crate::policy::{AllowMode, TaintMode};

/// The relay's port inside the namespace (the proxy the command is given).
pub(crate) const RELAY_PORT: u16 = 3128;
/// The transparent relay's port inside the namespace (nft redirects to it).
pub(crate) const TRANSPARENT_PORT: u16 = 3129;
/// The task id of a run made from `--allow`.
const EXEC_TASK: &str = "exec";
/// The guest writes this file into the state folder once its isolation is
/// proven, just before it starts the command.
const MARKER: &str = "exec-guest.started";

/// `sluice exec`'s options, as the command line gave them.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) config: Option<PathBuf>,
    pub(crate) task: Option<String>,
    pub(crate) allow: Vec<String>,
    pub(crate) allow_private: Vec<String>,
    /// `--secret NAME[@HOST,…]`.
    pub(crate) secret: Vec<String>,
    pub(crate) learn: bool,
    pub(crate) intercept: Option<Intercept>,
    pub(crate) state: Option<PathBuf>,
    pub(crate) transparent: bool,
    pub(crate) command: Vec<String>,
}

/// Runs `sluice exec`; its exit code is the command's.
pub(crate) fn run(o: Options) -> ExitCode {
    match run_inner(&o) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice exec: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn run_inner(o: &Options) -> Result<ExitCode, CommandError> {
    if o.command.is_empty() {
        return Err(CommandError::Usage(
            "no command: sluice exec [OPTIONS] -- CMD ARGS...".into(),
        ));
    }
    let started = crate::log::now_rfc3339();
    let state = state_dir(o.state.as_deref())?;
    let result = run_in(o, &state, &started);
    if result.is_err() && o.state.is_none() {
        // A run that failed before it started leaves no empty folder.
        let _ = std::fs::remove_dir(&state);
    }
    result
}

/// [`run_inner`] once the state folder exists.
fn run_in(o: &Options, state: &Path, started: &str) -> Result<ExitCode, CommandError> {
    // Everything sluice does in the state folder goes through this handle,
    // not the path: the command may be able to rename a parent folder and
    // put another folder (or a symlink to a host socket) at the path.
    let held = rustix::fs::open(
        state,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .doing(|| format!("cannot open the state folder {}", state.display()))?;
    let by_handle = PathBuf::from(format!("/proc/self/fd/{}", held.as_raw_fd()));
    let opened = std::fs::read_link(&by_handle).ok();
    let _ = std::fs::remove_file(by_handle.join(MARKER));
    let snapshot = snapshot(o, &by_handle)?;
    let task = snapshot.tasks[0].clone();
    let rt = tokio::runtime::Runtime::new().doing(|| "cannot start")?;
    let code = rt.block_on(serve_and_run(o, snapshot, state, &by_handle))?;
    drop(rt);
    // The command and every process of its namespaces are gone now: where
    // the handle points can no longer change under sluice.
    let (now, moved) = state_now(state, opened.as_deref(), &by_handle);
    if let Some(line) = moved {
        eprintln!("sluice exec: {line}");
    }
    print_report(o, now.as_deref(), &by_handle, &task.id, started);
    drop(held);
    Ok(code)
}

/// The state folder: `--state`, or a new folder of a random name under
/// the temp folder, made private (kept afterwards, for `sluice report`).
fn state_dir(given: Option<&Path>) -> Result<PathBuf, CommandError> {
    let dir = match given {
        Some(d) => {
            std::fs::create_dir_all(d)
                .doing(|| format!("cannot create the state folder {}", d.display()))?;
            d.to_path_buf()
        }
        None => tempfile::Builder::new()
            .prefix("sluice-exec-")
            .tempdir()
            .doing(|| "cannot create a state folder")?
            .keep(),
    };
    std::path::absolute(&dir).doing(|| format!("cannot name the state folder {}", dir.display()))
}

/// The one task to serve, listening on `<state>/exec.sock`.
fn snapshot(o: &Options, state: &Path) -> Result<Snapshot, CommandError> {
    let mut snap = match &o.config {
        Some(path) => config::load(Some(path), 1).map_err(CommandError::refused)?,
        None => from_allow(&o.allow, &o.secret)?,
    };
    let chosen = match (&o.task, snap.tasks.len()) {
        (Some(id), _) => snap.task(id).cloned().ok_or_else(|| {
            let ids: Vec<&str> = snap.tasks.iter().map(|t| t.id.as_str()).collect();
            CommandError::refused(format!(
                "no task {id:?} in the config (tasks: {})",
                ids.join(", ")
            ))
        })?,
        (None, 1) => snap.tasks[0].clone(),
        (None, n) => {
            let ids: Vec<&str> = snap.tasks.iter().map(|t| t.id.as_str()).collect();
            return Err(CommandError::Usage(format!(
                "the config has {n} tasks; pass --task (one of: {})",
                ids.join(", ")
            )));
        }
    };
    let mut task = (*chosen).clone();
    task.listen = vec![ListenAddr::Unix(state.join("exec.sock"))];
    for c in &o.allow_private {
        let net = config::private_net(c)
            .map_err(|e| CommandError::Usage(format!("--allow-private: {e}")))?;
        if !task.rules.allow_private.contains(&net) {
            task.rules.allow_private.push(net);
        }
    }
    if o.learn {
        task.rules.allow_mode = AllowMode::Shadow;
        if task.taint.mode == TaintMode::Enforce {
            task.taint.mode = TaintMode::Shadow;
            task.rules.taint_mode = TaintMode::Shadow;
        }
    }
    if let Some(i) = o.intercept {
        task.intercept = i;
    }
    check_secrets(o, &task)?;
    snap.tasks = vec![Arc::new(task)];
    snap.state_dir = state.to_path_buf();
    snap.admin = None;
    snap.metrics_listen = None;
    snap.publish_ca = None;
    snap.unix_mode = 0o600;
    snap.limits.drain = Duration::from_secs(2);
    Ok(snap)
}

/// `--secret` against the task: with `--config`, each NAME one of its
/// secrets; and a task with secrets intercepts (its values are swapped in
/// only on intercepted requests).
fn check_secrets(o: &Options, task: &config::TaskConfig) -> Result<(), CommandError> {
    for spec in &o.secret {
        let name = spec.split('@').next().unwrap_or(spec);
        if o.config.is_some() && spec.contains('@') {
            return Err(CommandError::Usage(format!(
                "--secret {spec}: with --config, a secret's hosts are the config's; pass --secret {name}"
            )));
        }
        if !task.secrets.iter().any(|s| s.name == name) {
            return Err(CommandError::refused(format!(
                "--secret {name}: task {:?} has no [[task.secret]] named {name}",
                task.id
            )));
        }
    }
    if !task.secrets.is_empty() && task.intercept != config::Intercept::All {
        return Err(CommandError::Usage(
            "--intercept none: a task with secrets must intercept (sluice swaps a value in only on intercepted requests)".into(),
        ));
    }
    Ok(())
}

/// `--secret NAME@HOST,…` as a `[[task.secret]]` table: the value from
/// sluice's own `NAME`.
fn secret_table(spec: &str) -> Result<toml::Table, CommandError> {
    let Some((name, hosts)) = spec.split_once('@') else {
        return Err(CommandError::Usage(format!(
            "--secret {spec}: name its hosts, as --secret {spec}@HOST[,HOST…] (each also in --allow)"
        )));
    };
    let mut t = toml::Table::new();
    t.insert("name".into(), name.into());
    t.insert("from_env".into(), name.into());
    let hosts: Vec<toml::Value> = hosts.split(',').map(toml::Value::from).collect();
    t.insert("hosts".into(), hosts.into());
    Ok(t)
}

/// A config of one task, `exec`, allowing `--allow`'s entries and holding
/// `--secret`'s (checked as a config's are).
fn from_allow(allow: &[String], secrets: &[String]) -> Result<Snapshot, CommandError> {
    let mut task = toml::Table::new();
    task.insert("id".into(), EXEC_TASK.into());
    task.insert(
        "listen".into(),
        vec![toml::Value::from("unix:exec.sock")].into(),
    );
    task.insert(
        "allow".into(),
        allow
            .iter()
            .map(|a| toml::Value::from(a.as_str()))
            .collect::<Vec<_>>()
            .into(),
    );
    let secrets = secrets
        .iter()
        .map(|s| secret_table(s).map(toml::Value::Table))
        .collect::<Result<Vec<_>, _>>()?;
    if !secrets.is_empty() {
        task.insert("secret".into(), secrets.into());
    }
    let mut doc = toml::Table::new();
    doc.insert("task".into(), vec![toml::Value::Table(task)].into());
    let text = toml::to_string(&doc).doing(|| "--allow")?;
    config::validate(&text, Source::Embedded, Path::new("."), 1).map_err(|e| match e {
        config::ConfigError::Invalid { problems, .. } => {
            let what: Vec<String> = problems.into_iter().map(|p| p.message).collect();
            CommandError::Usage(format!("--allow, --secret: {}", what.join("; ")))
        }
        other => CommandError::refused(other),
    })
}

/// Serves the snapshot, runs the guest, and stops serving when it exits.
/// `state` is the folder's path (for the guest and the command),
/// `by_handle` the same folder through sluice's handle.
async fn serve_and_run(
    o: &Options,
    snapshot: Snapshot,
    state: &Path,
    by_handle: &Path,
) -> Result<ExitCode, CommandError> {
    let socket = by_handle.join("exec.sock");
    let task = snapshot.tasks[0].clone();
    let (logs, generation) = (snapshot.logs.clone(), snapshot.generation);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let until: crate::server::Until = Box::pin(async move {
        let _ = stop_rx.await;
    });
    let server = tokio::spawn(crate::server::run_until(snapshot, None, Some(until)));
    // Ctrl-C belongs to the command: sluice waits for it to exit.
    tokio::spawn(async {
        loop {
            if tokio::signal::ctrl_c().await.is_err() {
                return;
            }
        }
    });
    let ready = wait_for(Duration::from_secs(20), || socket.exists()).await;
    if !ready || server.is_finished() {
        return Err(match server.await {
            Ok(Err(e)) => CommandError::refused(e),
            _ => CommandError::refused("sluice did not start"),
        });
    }
    let status = guest::spawn(o, &task, state).await;
    let _ = stop_tx.send(());
    let _ = server.await;
    if o.transparent {
        transparent::record_refusals(by_handle, &task.id, logs, generation).await;
    }
    let status = status?;
    if !by_handle.join(MARKER).exists() {
        return Err(CommandError::refused(
            "the command did not run: the sandbox could not be made (see the lines above); \
             sluice exec never runs a command unconfined",
        ));
    }
    Ok(exit_code(status))
}

/// Polls `ready` every 20 ms until it holds or `limit` passes.
async fn wait_for(limit: Duration, ready: impl Fn() -> bool) -> bool {
    let end = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < end {
        if ready() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ready()
}

/// The command's exit status as sluice's: its code, or 128 + the signal.
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(s)) => ExitCode::from((128 + s).clamp(0, 255) as u8),
        _ => ExitCode::from(1),
    }
}

/// Where the state folder is now, read from sluice's handle: the command
/// may have renamed it (or a parent) and put another folder at the path it
/// was given. `opened` is where the handle pointed before the command ran.
/// Returns the path to name (none if the folder is gone) and, when it is
/// not the given one, a line saying what happened.
fn state_now(
    given: &Path,
    opened: Option<&Path>,
    by_handle: &Path,
) -> (Option<PathBuf>, Option<String>) {
    use std::os::unix::fs::MetadataExt;
    let gone = std::fs::metadata(by_handle).is_ok_and(|m| m.nlink() == 0);
    match std::fs::read_link(by_handle) {
        Ok(_) if gone => (
            None,
            Some(format!(
                "the state folder {} was deleted during the run; the report below is read \
                 from sluice's handle on it",
                shown(given)
            )),
        ),
        Ok(now) if Some(now.as_path()) == opened => (Some(given.to_path_buf()), None),
        Ok(now) => {
            let line = format!(
                "the state folder was moved during the run: it was {}, it is now {} \
                 (whatever is at the old path now is not this run's)",
                shown(given),
                shown(&now)
            );
            (Some(now), Some(line))
        }
        Err(e) => (
            None,
            Some(format!("cannot tell where the state folder is now: {e}")),
        ),
    }
}

/// A path as printed to the terminal: control characters escaped (a
/// folder the command renamed may carry a newline or an escape sequence).
fn shown(path: &Path) -> String {
    path.to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The report of the run (what `sluice report --since START` prints for
/// its state: a reused state folder holds earlier runs too), where each
/// taint came from, and with `--learn` the allow line.
fn print_report(o: &Options, state: Option<&Path>, by_handle: &Path, task: &str, started: &str) {
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        // Whatever the command left the terminal in (hidden text, say).
        eprint!("\x1b[0m");
    }
    match state {
        Some(state) => eprintln!(
            "sluice exec: what the command tried to reach (state kept in {}; see it again with: sluice report --state {})",
            shown(state),
            crate::shell::sh_quote(&shown(state))
        ),
        None => eprintln!("sluice exec: what the command tried to reach"),
    }
    let rows = match crate::report::build_since(by_handle, Some(task), Some(started)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice exec: cannot read the access log: {e}");
            return;
        }
    };
    // What taint changes comes first, as `sluice report` prints it.
    let raw = crate::report::rows(by_handle, Some(task), Some(started));
    eprint!(
        "{}",
        crate::report::taint::leading(by_handle, task, &rows, &raw, false)
    );
    eprint!("{}", crate::report::table(&rows));
    if o.learn {
        let line = crate::report::allow_list(&rows, task);
        if line == "allow = []\n" {
            eprintln!("sluice exec: the command reached no destination; no allow line to print");
        } else {
            eprint!("{line}");
        }
    }
}
