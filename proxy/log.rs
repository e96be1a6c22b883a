//! log: the per-task JSON-lines writers (`access.jsonl`, `taint.jsonl`,
//! and for ask mode `asked.jsonl` and `granted.jsonl`), and the live
//! event stream (`/events`: decisions and questions).
//!
//! Callers hand finished records to [`AccessLog`]; one writer task owns the
//! files, so a slow disk never stalls a connection. Lines are flushed at
//! least every 100 ms and on [`AccessLog::flush`] (shutdown). A write
//! failure (full disk) is reported, never turned into an allow.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use prometheus_client::metrics::counter::Counter;

use crate::config::LogSettings;
use crate::policy::Provenance;

/// RFC 3339 UTC time, millisecond precision.
pub(crate) fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    now.format(&fmt)
        .unwrap_or_else(|_| now.unix_timestamp().to_string())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    Http,
    Connect,
    Intercepted,
    /// A name `sluice exec --transparent`'s DNS refused (rule
    /// [`DNS_REFUSED`]): no connection was made.
    Dns,
}

/// The rule of a `dns` row: a name the task asked its DNS for, refused
/// because no allow entry names it.
#[cfg(feature = "exec")]
pub(crate) const DNS_REFUSED: &str = "dns-refused";

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct TaintedBy {
    pub(crate) source: Arc<str>,
    pub(crate) at: Arc<str>,
}

impl From<&Provenance> for TaintedBy {
    fn from(p: &Provenance) -> Self {
        TaintedBy {
            source: p.source.clone(),
            at: p.at.clone(),
        }
    }
}

/// `note` of a CONNECT row whose client refused sluice's certificate.
pub(crate) const CLIENT_TLS_FAILED: &str = "client-tls-failed";
/// `note` of a refused CONNECT that sluice answered inside TLS, with its
/// own leaf, so the client shows the sentence (the task intercepts).
pub(crate) const REFUSED_INSIDE_TLS: &str = "refused-inside-tls";
/// `note` of a CONNECT row whose tunnel sluice intercepted: each request
/// inside has a row of its own (kind `intercepted`).
pub(crate) const INTERCEPTED: &str = "intercepted";

/// `note` of an upgraded connection's row (a WebSocket) whose relay sluice
/// closed because the upstream sent what it could not scan.
pub(crate) const UNSCANNABLE: &str = "unscannable";
/// The request went upstream (its first byte at least) and the client left
/// before the response's head came back: status 499.
pub(crate) const CLIENT_LEFT: &str = "client-left";

/// `note` of the second row of a request whose streamed body was cut for
/// a secret leak after its answer came back (the first row, written when
/// the answer ended, says what the client got).
pub(crate) const UPLOAD_CUT: &str = "upload-cut";

/// In a task's folder: every taint line of the task since this file was
/// made is on disk. Removed (unlinking needs no free space) when a taint
/// line cannot be written; a restart that finds it gone fails closed.
pub(crate) const TAINT_SAVED: &str = "taint.saved";
/// At the state folder's root: this sluice keeps [`TAINT_SAVED`] markers
/// (a folder an older sluice wrote has none, and lost nothing we know of).
const MARKERS_KEPT: &str = "taint-markers";

/// Can the task's saved taint set be trusted whole? Makes the marker for a
/// task that has none yet. `Err` says why not: taint lines were lost (a
/// full disk), or the marker cannot be made now.
pub(crate) fn taint_saved(state_dir: &Path, task: &str) -> Result<(), String> {
    let dir = state_dir.join("tasks").join(task);
    let marker = dir.join(TAINT_SAVED);
    if marker.exists() {
        return Ok(());
    }
    let kept = state_dir.join(MARKERS_KEPT).exists();
    let ran = ["taint.jsonl", "access.jsonl"]
        .iter()
        .any(|f| dir.join(f).exists());
    if kept && ran {
        return Err(format!(
            "taint lines of task {task} could not be written to disk earlier (a full disk?), so its saved \
             taint set may be missing hosts; the task fails closed. Once a person has checked \
             {}, create {} (or clear the task's folder)",
            dir.join("taint.jsonl").display(),
            marker.display()
        ));
    }
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::File::create(&marker))
        .and_then(|_| std::fs::File::create(state_dir.join(MARKERS_KEPT)))
        .map(|_| ())
        .map_err(|e| {
            format!(
                "cannot write {}: {e}; the task fails closed",
                marker.display()
            )
        })
}

/// The `v` of the rows this sluice writes: 2 added `v`, `conn`, `addr` and
/// `reason` (rows without `v` are version 1).
pub(crate) const SCHEMA_VERSION: u32 = 2;

/// One line of `access.jsonl` (SPEC §6). The writer and `report` (the
/// reader) share this type, so the schema is written down once.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct AccessRecord {
    /// Schema version ([`SCHEMA_VERSION`]); 1 when absent.
    #[serde(default = "version_one")]
    pub(crate) v: u32,
    pub(crate) ts: String,
    pub(crate) task: Arc<str>,
    pub(crate) client: Arc<str>,
    pub(crate) kind: Kind,
    pub(crate) method: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) path: Option<String>,
    /// A `policy::verdict` label: `allow`, `would_deny`, `deny` or `error`.
    pub(crate) decision: Cow<'static, str>,
    /// The rule id of the refusal (enforced or not).
    pub(crate) rule: Option<Cow<'static, str>>,
    pub(crate) status: u16,
    #[serde(default)]
    pub(crate) body: bool,
    #[serde(default)]
    pub(crate) bytes_up: u64,
    #[serde(default)]
    pub(crate) bytes_down: u64,
    #[serde(default)]
    pub(crate) duration_ms: u64,
    #[serde(default)]
    pub(crate) tainted_by: Option<TaintedBy>,
    /// Config generation the decision was made under.
    #[serde(default)]
    pub(crate) generation: u64,
    /// What else a person reading the row should know
    /// ([`INTERCEPTED`], [`CLIENT_TLS_FAILED`]); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<Cow<'static, str>>,
    /// The client connection: a CONNECT row and every request inside its
    /// tunnel share it (0: none, a version-1 row).
    #[serde(default)]
    pub(crate) conn: u64,
    /// The upstream address sluice dialled (`ip:port`), or null.
    #[serde(default)]
    pub(crate) addr: Option<String>,
    /// The sentence the client was given with a refusal (or, for a
    /// `would_deny`, would have been), or null.
    #[serde(default)]
    pub(crate) reason: Option<String>,
    /// The secrets swapped in, or whose leak refused the request (names,
    /// never values); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) secrets: Vec<Arc<str>>,
}

fn version_one() -> u32 {
    1
}

enum Msg {
    Line {
        task: Arc<str>,
        file: &'static str,
        line: String,
    },
    Flush(oneshot::Sender<()>),
}

/// Lines queued for the writer at most. A disk slower than the decisions
/// fills the queue instead of memory; past it, lines are dropped, counted
/// in `sluice_log_write_errors_total` and reported (decisions never wait
/// on the log, and never depend on it).
pub(crate) const QUEUE_LINES: usize = 65_536;

/// Handle to the log writer. Cheap to clone.
#[derive(Clone)]
pub(crate) struct AccessLog {
    tx: mpsc::Sender<Msg>,
    /// Taint lines never wait behind access rows nor get dropped: losing
    /// one would let a restart forget a taint. Their number is bounded by
    /// each task's `max_hosts` (and one overflow line).
    taint_tx: mpsc::UnboundedSender<Msg>,
    errors: Counter,
    /// When a dropped line was last reported (seconds since the epoch).
    last_drop_report: Arc<std::sync::atomic::AtomicU64>,
    /// Access rows as they are written, for the admin API's `/events`
    /// (a slow listener misses rows; the files never do).
    events: tokio::sync::broadcast::Sender<Event>,
}

/// One event for live listeners: its kind (`decision`: an access row;
/// `question`: a request waiting for a person), task and JSON line.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub(crate) kind: &'static str,
    pub(crate) task: Arc<str>,
    pub(crate) line: Arc<str>,
}

/// Rows a live listener may fall behind by before it misses some.
const EVENT_BACKLOG: usize = 4096;

impl AccessLog {
    /// Starts the writer task for `<state_dir>/tasks/<id>/*.jsonl`.
    /// Failed writes are counted in `errors`.
    pub(crate) fn spawn(state_dir: &Path, settings: LogSettings, errors: Counter) -> AccessLog {
        let (tx, rx) = mpsc::channel(QUEUE_LINES);
        let (taint_tx, taint_rx) = mpsc::unbounded_channel();
        let writer = Writer {
            dir: state_dir.join("tasks"),
            files: HashMap::new(),
            settings,
            errors: errors.clone(),
        };
        tokio::spawn(writer.run(rx, taint_rx));
        AccessLog {
            tx,
            taint_tx,
            errors,
            last_drop_report: Default::default(),
            events: tokio::sync::broadcast::channel(EVENT_BACKLOG).0,
        }
    }

    pub(crate) fn access(&self, rec: &AccessRecord) {
        let Ok(line) = serde_json::to_string(rec) else {
            return tracing::error!("cannot serialise an access row");
        };
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(Event {
                kind: "decision",
                task: rec.task.clone(),
                line: line.as_str().into(),
            });
        }
        self.send(rec.task.clone(), "access.jsonl", line);
    }

    /// Tells live listeners of something other than a decision.
    pub(crate) fn event(&self, kind: &'static str, task: Arc<str>, rec: &impl Serialize) {
        if let Ok(line) = serde_json::to_string(rec) {
            let _ = self.events.send(Event {
                kind,
                task,
                line: line.into(),
            });
        }
    }

    /// Appends a record that must not be dropped (a grant) to
    /// `<task>/<file>`, on the taint lines' queue.
    pub(crate) fn taint_line_to(&self, task: Arc<str>, file: &'static str, rec: &impl Serialize) {
        match serde_json::to_string(rec) {
            Ok(line) => {
                let _ = self.taint_tx.send(Msg::Line { task, file, line });
            }
            Err(e) => tracing::error!(error = %e, "cannot serialise a record"),
        }
    }

    /// Access rows from now on, as they are written.
    pub(crate) fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Appends a taint record to `<task>/taint.jsonl`: never dropped.
    pub(crate) fn taint_line(&self, task: Arc<str>, rec: &impl Serialize) {
        match serde_json::to_string(rec) {
            Ok(line) => {
                let file = "taint.jsonl";
                let _ = self.taint_tx.send(Msg::Line { task, file, line });
            }
            Err(e) => tracing::error!(error = %e, "cannot serialise a taint record"),
        }
    }

    /// Appends any serialisable record to `<task>/<file>`.
    pub(crate) fn line(&self, task: Arc<str>, file: &'static str, rec: &impl Serialize) {
        match serde_json::to_string(rec) {
            Ok(line) => self.send(task, file, line),
            Err(e) => tracing::error!(error = %e, "cannot serialise a log record"),
        }
    }

    fn send(&self, task: Arc<str>, file: &'static str, line: String) {
        if let Err(mpsc::error::TrySendError::Full(_)) =
            self.tx.try_send(Msg::Line { task, file, line })
        {
            self.dropped(file);
        }
    }

    /// Writes out everything queued so far.
    pub(crate) async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// A line did not fit in the queue: count it, say so once a second.
    fn dropped(&self, file: &str) {
        use std::sync::atomic::Ordering;
        self.errors.inc();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if self.last_drop_report.swap(now, Ordering::Relaxed) != now {
            tracing::error!(
                file,
                queued = QUEUE_LINES,
                "the log writer is {QUEUE_LINES} lines behind (a slow or stuck disk); lines are being dropped and counted in sluice_log_write_errors_total"
            );
        }
    }
}

fn ends_with_newline(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return true;
    };
    let mut last = [0u8; 1];
    f.seek(SeekFrom::End(-1)).is_err() || (f.read_exact(&mut last).is_ok() && last[0] == b'\n')
}

/// An open log file and how big it is.
struct OpenFile {
    out: std::io::BufWriter<std::fs::File>,
    size: u64,
}

struct Writer {
    dir: PathBuf,
    files: HashMap<(Arc<str>, &'static str), OpenFile>,
    settings: LogSettings,
    errors: Counter,
}

impl Writer {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Msg>,
        mut taint_rx: mpsc::UnboundedReceiver<Msg>,
    ) {
        // Rows reach the files within a tenth of a second (a flush with
        // nothing buffered writes nothing), so `sluice report` sees a
        // decision as soon as a person looks.
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                // Taint lines first: they are what a restart must not lose.
                biased;
                Some(Msg::Line { task, file, line }) = taint_rx.recv() => self.write(task, file, &line),
                msg = rx.recv() => match msg {
                    Some(Msg::Line { task, file, line }) => self.write(task, file, &line),
                    Some(Msg::Flush(done)) => {
                        while let Ok(Msg::Line { task, file, line }) = taint_rx.try_recv() {
                            self.write(task, file, &line);
                        }
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

    fn open(&mut self, task: &Arc<str>, file: &'static str) -> Option<&mut OpenFile> {
        let key = (task.clone(), file);
        if !self.files.contains_key(&key) {
            let dir = self.dir.join(&**task);
            let opened = std::fs::create_dir_all(&dir).and_then(|_| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.join(file))
            });
            match opened {
                Ok(mut f) => {
                    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
                    // A crash can leave a torn last line: end it, so the
                    // next line starts on its own.
                    if size > 0 && !ends_with_newline(&dir.join(file)) {
                        let _ = f.write_all(b"\n");
                    }
                    let out = std::io::BufWriter::with_capacity(64 * 1024, f);
                    self.files.insert(key.clone(), OpenFile { out, size });
                }
                Err(e) => {
                    self.lost(task, file);
                    self.fail(&format!("cannot open {}/{file}: {e}", dir.display()));
                    return None;
                }
            }
        }
        self.files.get_mut(&key)
    }

    fn write(&mut self, task: Arc<str>, file: &'static str, line: &str) {
        if self.settings.stdout && file == "access.jsonl" {
            // `[logs] stdout`: for `docker logs` / `kubectl logs`.
            // Never waits on a paused reader: see `console`.
            let mut row = Vec::with_capacity(line.len() + 1);
            row.extend_from_slice(line.as_bytes());
            row.push(b'\n');
            crate::console::send(crate::console::Stream::Stdout, row);
        }
        // The access log and the questions rotate: the taint log is
        // bounded by max_hosts and is read whole on start; grants are few.
        if file == "access.jsonl" || file == "asked.jsonl" {
            let over = self
                .files
                .get(&(task.clone(), file))
                .is_some_and(|f| f.size >= self.settings.rotate_bytes);
            if over {
                self.rotate(&task, file);
            }
        }
        let result = match self.open(&task, file) {
            Some(f) => {
                let r = f
                    .out
                    .write_all(line.as_bytes())
                    .and_then(|_| f.out.write_all(b"\n"));
                if r.is_ok() {
                    f.size += line.len() as u64 + 1;
                }
                r
            }
            None => return,
        };
        if let Err(e) = result {
            self.lost(&task, file);
            self.fail(&format!("cannot write {task}/{file}: {e}"));
        }
    }

    /// `access.jsonl` → `.1` → `.2` …, dropping the oldest past `keep`.
    fn rotate(&mut self, task: &Arc<str>, file: &'static str) {
        if let Some(mut f) = self.files.remove(&(task.clone(), file)) {
            if let Err(e) = f.out.flush() {
                self.fail(&format!("cannot flush {task}/{file} before rotating: {e}"));
            }
        }
        let dir = self.dir.join(&**task);
        let name = |n: usize| dir.join(format!("{file}.{n}"));
        let _ = std::fs::remove_file(name(self.settings.keep));
        for n in (1..self.settings.keep).rev() {
            let _ = std::fs::rename(name(n), name(n + 1));
        }
        if let Err(e) = std::fs::rename(dir.join(file), name(1)) {
            self.fail(&format!("cannot rotate {task}/{file}: {e}"));
        }
    }

    fn flush_all(&mut self) {
        let mut failed = Vec::new();
        for ((task, file), f) in &mut self.files {
            if let Err(e) = f.out.flush() {
                failed.push((
                    task.clone(),
                    *file,
                    format!("cannot flush {task}/{file}: {e}"),
                ));
            }
        }
        for (task, file, f) in failed {
            self.lost(&task, file);
            self.fail(&f);
        }
    }

    /// A line of `file` may not be on disk: for the taint log, the task's
    /// marker goes (a restart then fails closed).
    fn lost(&self, task: &str, file: &str) {
        if file != "taint.jsonl" {
            return;
        }
        let marker = self.dir.join(task).join(TAINT_SAVED);
        if std::fs::remove_file(&marker).is_ok() {
            tracing::error!(task, "a taint line could not be written: the task is refused from memory now, and fails closed after a restart until a person checks it");
        }
    }

    fn fail(&self, what: &str) {
        let n = self.errors.inc();
        // Say it loudly the first time, then once per thousand.
        if n.is_multiple_of(1000) {
            tracing::error!(
                failures = n + 1,
                "log write failed (policy is still enforced): {what}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn access_log_rotates_and_keeps_n_files() {
        let dir = tempfile::tempdir().unwrap();
        let settings = LogSettings {
            rotate_bytes: 100,
            keep: 2,
            stdout: false,
        };
        let log = AccessLog::spawn(dir.path(), settings, Counter::default());
        for i in 0..20 {
            log.line(
                "t".into(),
                "access.jsonl",
                &serde_json::json!({ "i": i, "pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" }),
            );
        }
        log.flush().await;
        let t = dir.path().join("tasks/t");
        let count = |p: &str| {
            std::fs::read_to_string(t.join(p))
                .map(|s| s.lines().count())
                .unwrap_or(0)
        };
        assert!(t.join("access.jsonl.1").exists());
        assert!(t.join("access.jsonl.2").exists());
        assert!(
            !t.join("access.jsonl.3").exists(),
            "only `keep` rotated files"
        );
        // Each file holds whole lines; the newest lines are in access.jsonl.
        let last: serde_json::Value = serde_json::from_str(
            std::fs::read_to_string(t.join("access.jsonl"))
                .unwrap()
                .lines()
                .last()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(last["i"], 19);
        assert!(count("access.jsonl") + count("access.jsonl.1") + count("access.jsonl.2") <= 20);
    }
}

#[cfg(test)]
mod torn {
    use super::*;

    #[tokio::test]
    async fn a_torn_last_line_is_ended_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("tasks/t");
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("access.jsonl"), "{\"ok\":1}\n{\"torn\":").unwrap();
        let log = AccessLog::spawn(dir.path(), LogSettings::default(), Counter::default());
        log.line("t".into(), "access.jsonl", &serde_json::json!({"ok": 2}));
        log.flush().await;
        let text = std::fs::read_to_string(t.join("access.jsonl")).unwrap();
        assert_eq!(text, "{\"ok\":1}\n{\"torn\":\n{\"ok\":2}\n");
    }
}
