//! cli: the `sluice` subcommands. Parses nothing itself (clap does, in
//! `main.rs`); turns a command into a call and an exit code.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{self, Intercept};

mod check;
mod env;
mod health;
mod report;

pub(crate) use check::check_report;
use env::client_env;
use health::healthcheck;
use report::{report, ReportOutput};

#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "An allow-list egress proxy with taint-aware body blocking"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve. Without --config, the embedded config/default.toml.
    Run {
        /// The config file (default: the embedded config/default.toml).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Validate a config, then print what each task may reach.
    Check {
        /// The config file (default: the embedded config/default.toml).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// One table row per task instead of a block with one host a line.
        #[arg(long)]
        wide: bool,
    },
    /// Destinations each task actually reached, from the access logs.
    Report {
        #[command(flatten)]
        state: StateArgs,
        /// Only this task.
        #[arg(long)]
        task: Option<String>,
        /// Machine-readable JSON.
        #[arg(long, conflicts_with = "allow_list")]
        json: bool,
        /// Print the `allow = [...]` line that would have admitted exactly
        /// what the task reached.
        #[arg(long)]
        allow_list: bool,
        /// Only rows written since: a duration (90s, 15m, 2h, 7d) or a
        /// time (2026-12-03T14:00:00Z, 2026-12-03). Default: all.
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// The access rows themselves, oldest first (with --json: a JSON
        /// array of rows as the access-log schema gives them), instead of
        /// the destinations.
        #[arg(long, conflicts_with_all = ["allow_list", "follow", "html"])]
        rows: bool,
        /// A live feed: one line per decision as sluice writes it (with
        /// --since, those since then first), until interrupted.
        #[arg(long, conflicts_with_all = ["json", "allow_list", "html"])]
        follow: bool,
        /// Write one self-contained HTML page (destinations, timeline,
        /// taint provenance) to FILE.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["json", "allow_list"])]
        html: Option<PathBuf>,
        /// Every tainted name with where it was named (with --json: as a
        /// JSON array), not only those on the allow-list.
        #[arg(long, conflicts_with_all = ["allow_list", "rows", "follow", "html"])]
        taint: bool,
    },
    /// Run one command with sluice as its only way out, then print what it
    /// reached: sluice exec --allow registry.npmjs.org -- npm install.
    #[cfg(feature = "exec")]
    Exec {
        /// Take the task from this config (its listeners are not used).
        #[arg(long, value_name = "FILE", conflicts_with = "allow")]
        config: Option<PathBuf>,
        /// The task of --config (default: its only task).
        #[arg(long, requires = "config")]
        task: Option<String>,
        /// A destination the command may reach, as in a config's allow
        /// (HOST, or HOST:PORT; repeat it). Default: none.
        #[arg(long, value_name = "HOST[:PORT]")]
        allow: Vec<String>,
        /// Private addresses the command may reach although not public, as
        /// a CIDR or one IP (repeat it): where the allowed names resolve to
        /// private addresses, as behind a company mirror. Own addresses of
        /// sluice stay refused.
        #[arg(long, value_name = "CIDR")]
        allow_private: Vec<String>,
        /// A secret the command gets only a placeholder for, under the
        /// variable NAME: sluice reads the value from its own NAME and
        /// swaps it in on intercepted requests to HOSTs (with --allow; each
        /// must be allowed). With --config, NAME must be one of the task's
        /// [[task.secret]] entries.
        #[arg(long, value_name = "NAME[@HOST,...]")]
        secret: Vec<String>,
        /// Shadow mode: relay every public host (IP literals and private
        /// addresses are still refused), and end with the allow line that
        /// admits exactly what the command reached.
        #[arg(long)]
        learn: bool,
        /// Intercept TLS (`all`, to see inside HTTPS and scan for taint) or
        /// not (`none`). Default: the task's setting; `all` with --allow.
        #[arg(long, value_enum)]
        intercept: Option<InterceptArg>,
        /// The state folder (CA, access log), kept afterwards. Default: a
        /// new folder under the temp folder, named in the report.
        #[arg(long, value_name = "DIR")]
        state: Option<PathBuf>,
        /// For tools that ignore proxy variables: redirect all TCP to sluice
        /// and answer DNS for the allowed names only.
        #[arg(long)]
        transparent: bool,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Inside `sluice exec`'s namespaces (started by exec, not by people).
    #[cfg(feature = "exec")]
    #[command(hide = true)]
    ExecGuest(crate::exec::guest::GuestArgs),
    /// Answer yes for a task in allow_mode = "ask": admit HOST[:PORT] now
    /// and from then on (a bare host: 80 and 443). Kept across reloads
    /// and restarts in <state>/tasks/<task>/granted.jsonl.
    Allow(AnswerArgs),
    /// Answer no for a task in allow_mode = "ask": refuse the requests
    /// waiting on HOST[:PORT], withdraw any grant, and refuse it without
    /// asking until it is allowed.
    Deny(AnswerArgs),
    /// Remove a tainted host (or an owner, HOST/OWNER) from a running
    /// task's taint set after a person has checked it; taint.jsonl keeps
    /// a line saying who removed what.
    Untaint(UntaintArgs),
    /// End a task's quarantine after a secret leak (on_violation =
    /// "quarantine"), once a person has checked what the task sent;
    /// secrets.jsonl keeps a line saying who released it and when.
    Release(ReleaseArgs),
    /// The command's last step inside `sluice exec` (started by exec).
    #[cfg(feature = "exec")]
    #[command(hide = true)]
    ExecLaunch {
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Guest-side relay (TCP → unix socket or vsock), no policy of its own.
    Forward {
        /// Where guest tools connect, e.g. tcp:127.0.0.1:3128.
        #[arg(long)]
        listen: String,
        /// Where sluice listens on the host: vsock:CID:PORT or unix:PATH.
        #[arg(long)]
        to: String,
    },
    /// Print what a task's shell needs to use sluice: proxy variables (both
    /// cases), NO_PROXY cleared, and every common tool pointed at the CA
    /// bundle. Use as: eval "$(sluice env)".
    Env {
        /// The config file (default: the embedded config/default.toml).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The task (default: the config's only task).
        #[arg(long)]
        task: Option<String>,
        /// The proxy URL the task uses, when it is not the listener's own
        /// address (a sidecar's service name, say).
        #[arg(long)]
        proxy: Option<String>,
        /// The syntax to print: `sh` (bash, zsh, dash: `eval "$(sluice env)"`),
        /// `fish` (`sluice env --shell fish | source`) or `json`.
        #[arg(long, value_enum, default_value = "sh")]
        shell: crate::clientenv::Shell,
    },
    /// Exit 0 when the running sluice's admin API (or metrics listener)
    /// answers /healthz: for container HEALTHCHECKs and probes.
    Healthcheck {
        /// The config sluice runs with (default: the embedded
        /// config/default.toml).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Create or print the interception CA (PEM).
    Ca {
        #[command(subcommand)]
        action: CaAction,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum CaAction {
    /// Create ca.pem and ca.key (0600) in the state folder.
    Init {
        #[command(flatten)]
        state: StateArgs,
        /// Replace an existing CA (every client must then trust the new one).
        #[arg(long)]
        force: bool,
    },
    /// Print the CA certificate (PEM), to install in a task's trust store.
    Show {
        #[command(flatten)]
        state: StateArgs,
    },
}

/// Which state folder: --state DIR, or the config's state_dir (default:
/// the embedded config's, `sluice-state` in the working folder).
#[derive(Debug, clap::Args)]
pub(crate) struct StateArgs {
    /// Read the state folder from this config's state_dir (default: the
    /// embedded config's, ./sluice-state).
    #[arg(long, value_name = "FILE", conflicts_with = "state")]
    config: Option<PathBuf>,
    /// The state folder itself (ca.pem, ca.key, tasks/*/access.jsonl);
    /// default: the state_dir of --config, or of the embedded config.
    #[arg(long, value_name = "DIR")]
    state: Option<PathBuf>,
}

impl StateArgs {
    fn dir(&self) -> Result<PathBuf, config::ConfigError> {
        match &self.state {
            Some(s) => Ok(s.clone()),
            None => config::load(self.config.as_deref(), 1).map(|s| s.state_dir),
        }
    }
}

/// Runs a command. Exit codes: 0 ok, 1 invalid config or refused
/// operation (usage errors exit 2 in clap).
pub(crate) fn execute(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Run { config } => {
            let snapshot = match config::load(config.as_deref(), 1) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("sluice: {e}");
                    return ExitCode::from(1);
                }
            };
            block_on(crate::server::run(snapshot, config))
        }
        Command::Ca { action } => ca(action),
        Command::Healthcheck { config } => {
            match config::load(config.as_deref(), 1)
                .map_err(health::AskError::from)
                .and_then(|s| healthcheck(&s))
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("sluice: unhealthy: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Env {
            config,
            task,
            proxy,
            shell,
        } => match client_env(config.as_deref(), task.as_deref(), proxy) {
            Ok(env) => {
                out(&env.render(shell));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("sluice: {e}");
                ExitCode::from(e.exit_code())
            }
        },
        Command::Forward { listen, to } => {
            let parsed = crate::guest_relay::parse(&listen)
                .and_then(|l| crate::guest_relay::parse(&to).map(|t| (l, t)));
            let (listen, to) = match parsed {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("sluice: {e:#}");
                    return ExitCode::from(2);
                }
            };
            block_on(crate::guest_relay::run(listen, to))
        }
        Command::Report {
            state,
            task,
            json,
            allow_list,
            since,
            rows,
            follow,
            html,
            taint,
        } => report(
            &state,
            task.as_deref(),
            ReportOutput {
                json,
                allow_list,
                since,
                rows,
                follow,
                html,
                taint,
            },
        ),
        #[cfg(feature = "exec")]
        exec @ Command::Exec { .. } => run_exec(exec),
        #[cfg(feature = "exec")]
        Command::ExecGuest(a) => crate::exec::guest::main(a),
        #[cfg(feature = "exec")]
        Command::ExecLaunch { command } => crate::exec::launch::main(command),
        Command::Allow(a) => answer(a.config, a.task.as_deref(), "allow", &a.destination),
        Command::Deny(a) => answer(a.config, a.task.as_deref(), "deny", &a.destination),
        Command::Untaint(a) => untaint(a),
        Command::Release(a) => release(a),
        Command::Check { config, wide } => {
            printed(config::load(config.as_deref(), 1).map(|s| check_report(&s, wide)))
        }
    }
}

/// `sluice exec`: the command line's options, passed on.
#[cfg(feature = "exec")]
fn run_exec(exec: Command) -> ExitCode {
    let Command::Exec {
        config,
        task,
        allow,
        allow_private,
        secret,
        learn,
        intercept,
        state,
        transparent,
        command,
    } = exec
    else {
        unreachable!("execute passes only Command::Exec");
    };
    crate::exec::run(crate::exec::Options {
        config,
        task,
        allow,
        allow_private,
        secret,
        learn,
        intercept: intercept.map(InterceptArg::into),
        state,
        transparent,
        command,
    })
}

/// Writes `text` to stdout. A reader that has gone (`| head -1`) ends
/// the command quietly with status 0, as other command-line tools do,
/// instead of a panic.
pub(crate) fn out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("sluice: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Prints the text, or the error (exit 1).
fn printed<E: std::fmt::Display>(r: Result<String, E>) -> ExitCode {
    match r {
        Ok(text) => {
            out(&text);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice: {e}");
            ExitCode::from(1)
        }
    }
}

/// `sluice allow` / `sluice deny`.
fn answer(config: Option<PathBuf>, task: Option<&str>, verb: &str, dest: &str) -> ExitCode {
    match config::load(config.as_deref(), 1)
        .map_err(health::AskError::from)
        .and_then(|s| health::answer(&s, task, verb, dest))
    {
        Ok(said) => {
            out(&said);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice {verb}: {e}");
            ExitCode::from(1)
        }
    }
}

/// `sluice untaint`: through the running sluice's admin API.
fn untaint(a: UntaintArgs) -> ExitCode {
    match config::load(a.config.as_deref(), 1)
        .map_err(health::AskError::from)
        .and_then(|s| health::untaint(&s, a.task.as_deref(), &a.name))
    {
        Ok(said) => {
            out(&said);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice untaint: {e}");
            ExitCode::from(1)
        }
    }
}

/// `sluice release --task T`.
fn release(a: ReleaseArgs) -> ExitCode {
    match config::load(a.config.as_deref(), 1)
        .map_err(health::AskError::from)
        .and_then(|s| health::release(&s, a.task.as_deref()))
    {
        Ok(said) => {
            out(&said);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice release: {e}");
            ExitCode::from(1)
        }
    }
}

/// `sluice release`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct ReleaseArgs {
    /// The config sluice runs with (its [admin] listen is asked).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The task (default: the config's only task).
    #[arg(long)]
    task: Option<String>,
}

/// `sluice untaint`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct UntaintArgs {
    /// The config sluice runs with (its [admin] listen is asked).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The task (default: the config's only task).
    #[arg(long)]
    task: Option<String>,
    /// The tainted host, or HOST/OWNER for an owner on a multi-tenant host
    /// (github.com/acme), as `sluice report --taint` lists it.
    #[arg(value_name = "HOST[/OWNER]")]
    name: String,
}

/// `sluice allow` and `sluice deny`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct AnswerArgs {
    /// The config sluice runs with (its [admin] listen is asked).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The task asking (default: the config's only task).
    #[arg(long)]
    task: Option<String>,
    /// The destination, as in allow.
    #[arg(value_name = "HOST[:PORT]")]
    destination: String,
}

/// `--intercept`'s values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum InterceptArg {
    All,
    None,
}

impl From<InterceptArg> for Intercept {
    fn from(i: InterceptArg) -> Intercept {
        match i {
            InterceptArg::All => Intercept::All,
            InterceptArg::None => Intercept::None,
        }
    }
}

/// Runs a long-lived command on a fresh runtime; its error, if any, is the
/// one line sluice prints before exiting 1.
fn block_on<E: std::fmt::Display>(f: impl std::future::Future<Output = Result<(), E>>) -> ExitCode {
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(f) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e}");
            ExitCode::from(1)
        }
    }
}

fn ca(action: CaAction) -> ExitCode {
    use crate::tls::ca;
    let (state, init) = match &action {
        CaAction::Init { state, force } => (state, Some(*force)),
        CaAction::Show { state } => (state, None),
    };
    let dir = match state.dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("sluice: {e}");
            return ExitCode::from(1);
        }
    };
    let result = match init {
        Some(force) => ca::init(&dir, force)
            .and_then(|_| crate::tls::bundle::write(&dir))
            .map(|(bundle, _)| {
                format!(
                    "created {} (0644), {} (0600) and the bundle {} (system roots + the CA, 0644)\nset a task's tools up with: eval \"$(sluice env)\"\n",
                    ca::cert_path(&dir).display(),
                    ca::key_path(&dir).display(),
                    bundle.display()
                )
            }),
        None => ca::show(&dir),
    };
    printed(result)
}
