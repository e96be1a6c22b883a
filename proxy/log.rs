//! log: the per-task JSON-lines writers (`access.jsonl`, `taint.jsonl`).
//!
//! Callers hand finished records to [`AccessLog`]; one writer task owns the
//! files, so a slow disk never stalls a connection. Lines are flushed at
//! least once a second and on [`AccessLog::flush`] (shutdown). A write
//! failure (full disk) is reported, never turned into an allow.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::policy::Provenance;

/// RFC 3339 UTC time, millisecond precision.
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    now.format(&fmt)
        .unwrap_or_else(|_| now.unix_timestamp().to_string())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Http,
    Connect,
    Intercepted,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    Deny,
    WouldDeny,
}

#[derive(Debug, Serialize)]
pub struct TaintedBy {
    pub source: Arc<str>,
    pub at: Arc<str>,
}

impl From<&Provenance> for TaintedBy {
    fn from(p: &Provenance) -> Self {
        TaintedBy {
            source: p.source.clone(),
            at: p.at.clone(),
        }
    }
}

/// One line of `access.jsonl` (SPEC §6).
#[derive(Debug, Serialize)]
pub struct AccessRecord {
    pub ts: String,
    pub task: Arc<str>,
    pub client: Arc<str>,
    pub kind: Kind,
    pub method: String,
    pub host: String,
    pub port: u16,
    pub path: Option<String>,
    pub decision: Verdict,
    pub rule: Option<&'static str>,
    pub status: u16,
    pub body: bool,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
    pub tainted_by: Option<TaintedBy>,
    /// Config generation the decision was made under.
    pub generation: u64,
}

enum Msg {
    Line {
        task: Arc<str>,
        file: &'static str,
        line: String,
    },
    Flush(oneshot::Sender<()>),
}

/// Handle to the log writer. Cheap to clone.
#[derive(Clone)]
pub struct AccessLog {
    tx: mpsc::UnboundedSender<Msg>,
    /// Lines that could not be written (full disk, permissions).
    pub write_errors: Arc<AtomicU64>,
}

impl AccessLog {
    /// Starts the writer task for `<state_dir>/tasks/<id>/*.jsonl`.
    pub fn spawn(state_dir: &Path) -> AccessLog {
        let (tx, rx) = mpsc::unbounded_channel();
        let write_errors = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            dir: state_dir.join("tasks"),
            files: HashMap::new(),
            errors: write_errors.clone(),
        };
        tokio::spawn(writer.run(rx));
        AccessLog { tx, write_errors }
    }

    pub fn access(&self, rec: &AccessRecord) {
        self.line(rec.task.clone(), "access.jsonl", rec);
    }

    /// Appends any serialisable record to `<task>/<file>`.
    pub fn line(&self, task: Arc<str>, file: &'static str, rec: &impl Serialize) {
        match serde_json::to_string(rec) {
            Ok(line) => {
                let _ = self.tx.send(Msg::Line { task, file, line });
            }
            Err(e) => tracing::error!(error = %e, "cannot serialise a log record"),
        }
    }

    /// Writes out everything queued so far.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

struct Writer {
    dir: PathBuf,
    files: HashMap<(Arc<str>, &'static str), std::io::BufWriter<std::fs::File>>,
    errors: Arc<AtomicU64>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(Msg::Line { task, file, line }) => self.write(task, file, &line),
                    Some(Msg::Flush(done)) => {
                        self.flush_all();
                        let _ = done.send(());
                    }
                    None => {
                        self.flush_all();
                        return;
                    }
                },
                _ = tick.tick() => self.flush_all(),
            }
        }
    }

    fn write(&mut self, task: Arc<str>, file: &'static str, line: &str) {
        let key = (task, file);
        if !self.files.contains_key(&key) {
            let dir = self.dir.join(&*key.0);
            let opened = std::fs::create_dir_all(&dir).and_then(|_| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.join(file))
            });
            match opened {
                Ok(f) => {
                    self.files
                        .insert(key.clone(), std::io::BufWriter::with_capacity(64 * 1024, f));
                }
                Err(e) => {
                    self.fail(&format!("cannot open {}/{file}: {e}", dir.display()));
                    return;
                }
            }
        }
        if let Some(w) = self.files.get_mut(&key) {
            if let Err(e) = w
                .write_all(line.as_bytes())
                .and_then(|_| w.write_all(b"\n"))
            {
                self.fail(&format!("cannot write {}/{}: {e}", key.0, file));
            }
        }
    }

    fn flush_all(&mut self) {
        let mut failed = Vec::new();
        for ((task, file), w) in &mut self.files {
            if let Err(e) = w.flush() {
                failed.push(format!("cannot flush {task}/{file}: {e}"));
            }
        }
        for f in failed {
            self.fail(&f);
        }
    }

    fn fail(&self, what: &str) {
        let n = self.errors.fetch_add(1, Ordering::Relaxed);
        // Say it loudly the first time, then once per thousand.
        if n.is_multiple_of(1000) {
            tracing::error!(failures = n + 1, "log write failed: {what}");
        }
    }
}
