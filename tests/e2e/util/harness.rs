//! The sluice process under test: the real binary started on a config with
//! port-0 listeners, its bound addresses and every stderr line captured,
//! signals, restarts, and what it writes (access and taint logs, `sluice
//! report`). The process is killed when the test ends, however it ends.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::curl;
use super::wait::poll;

/// A running sluice.
pub struct Sluice {
    child: Child,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    /// Bound addresses, in the order of the config's listeners.
    pub listeners: Vec<String>,
    /// Every stderr line so far.
    pub stderr: Arc<Mutex<Vec<String>>>,
    /// How the test reads sluice's stderr: [`READING`], [`PAUSED`] or
    /// [`CLOSED`].
    pub stderr_mode: Arc<std::sync::atomic::AtomicU8>,
}

/// sluice's stderr is read as it comes.
pub const READING: u8 = 0;
/// No more is read (after the next line): the pipe fills up.
pub const PAUSED: u8 = 1;
/// The read end is closed (after the next line): writes fail with EPIPE.
pub const CLOSED: u8 = 2;

/// The sluice binary cargo built for these tests, or `SLUICE_BIN` (the
/// heavy scale test measures a release build that way).
pub fn bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("SLUICE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_sluice").to_string())
    })
}

impl Sluice {
    /// Starts `sluice run` on the config at `path`, with `dir` as its
    /// folder. Most tests start sluice with [`super::SluiceBuilder`].
    pub fn start_in(dir: tempfile::TempDir, path: PathBuf) -> Sluice {
        let (child, listeners, stderr, stderr_mode) = spawn(&path);
        Sluice {
            child,
            dir,
            config: path,
            listeners,
            stderr,
            stderr_mode,
        }
    }

    /// The admin API's `host:port` (config `admin.listen = "tcp:127.0.0.1:0"`).
    pub fn admin(&self) -> String {
        let line = self.wait_line(|l| l.contains("admin=tcp:"));
        let i = line.find("admin=tcp:").unwrap();
        line[i + 10..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    }

    /// Waits (bounded, 10 s) for a stderr line that `pred` accepts.
    #[track_caller]
    pub fn wait_line(&self, pred: impl Fn(&str) -> bool) -> String {
        self.wait_lines(1, pred).pop().unwrap()
    }

    /// Waits (bounded, 10 s) until at least `n` stderr lines are accepted
    /// by `pred`; returns them.
    #[track_caller]
    pub fn wait_lines(&self, n: usize, pred: impl Fn(&str) -> bool) -> Vec<String> {
        let found = poll(Duration::from_secs(10), || {
            let lines: Vec<String> = self
                .stderr
                .lock()
                .unwrap()
                .iter()
                .filter(|l| pred(l))
                .cloned()
                .collect();
            (lines.len() >= n).then_some(lines)
        });
        match found {
            Some(lines) => lines,
            None => panic!(
                "fewer than {n} such lines in {:#?}",
                self.stderr.lock().unwrap()
            ),
        }
    }

    /// Successful reloads whose `trigger` field (SIGHUP, file change,
    /// admin API) is `trigger`, logged so far.
    pub fn reloads_by(&self, trigger: &str) -> usize {
        self.stderr
            .lock()
            .unwrap()
            .iter()
            .filter(|l| is_reload_by(l, trigger))
            .count()
    }

    /// Waits (bounded) until sluice has logged `n` successful reloads
    /// triggered by `trigger`; returns their lines.
    #[track_caller]
    pub fn wait_reloads_by(&self, trigger: &str, n: usize) -> Vec<String> {
        self.wait_lines(n, |l| is_reload_by(l, trigger))
    }

    /// An admin API request with curl: (status, body).
    pub fn admin_call(&self, method: &str, path: &str) -> (u16, String) {
        let url = format!("http://{}{path}", self.admin());
        let out = curl(&["-s", "-X", method, "-w", "\n%{http_code}", &url]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    /// The value of a counter or gauge in `GET /metrics` (0 if absent).
    pub fn metric(&self, name: &str) -> u64 {
        let (_, m) = self.admin_call("GET", "/metrics");
        m.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// Kills sluice hard (SIGKILL, no flush) and starts it again on the
    /// same config and state.
    pub fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr_mode
            .store(CLOSED, std::sync::atomic::Ordering::Relaxed);
        let (child, listeners, stderr, mode) = spawn(&self.config);
        self.child = child;
        self.listeners = listeners;
        self.stderr = stderr;
        self.stderr_mode = mode;
    }

    /// `http://127.0.0.1:PORT` of the n-th TCP listener.
    pub fn proxy(&self, n: usize) -> String {
        let l = self
            .listeners
            .iter()
            .filter(|l| l.starts_with("tcp:"))
            .nth(n)
            .unwrap();
        format!("http://{}", &l[4..])
    }

    /// `127.0.0.1:PORT` of the first TCP listener.
    pub fn proxy_addr(&self) -> String {
        self.proxy(0)[7..].to_string()
    }

    /// The port of the first TCP listener.
    pub fn proxy_port(&self) -> u16 {
        self.proxy_addr()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// `cfg` with the task's port-0 listener pinned to the port sluice got,
    /// so a reload to it keeps the listener instead of opening a new one.
    pub fn pin(&self, cfg: &str) -> String {
        cfg.replace(
            "listen = [\"tcp:127.0.0.1:0\"]",
            &format!("listen = [\"tcp:127.0.0.1:{}\"]", self.proxy_port()),
        )
    }

    /// Replaces the config file's content with `text` (a reload follows by
    /// the file watcher, SIGHUP or `POST /reload`).
    pub fn write_config(&self, text: &str) {
        std::fs::write(&self.config, text).unwrap();
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// A task's `access.jsonl` or `taint.jsonl`.
    pub fn task_file(&self, task: &str, file: &str) -> PathBuf {
        self.state().join("tasks").join(task).join(file)
    }

    /// Access-log rows of a task, waiting (bounded) until at least `n`.
    pub fn access_log(&self, task: &str, n: usize) -> Vec<Value> {
        wait_rows(&self.task_file(task, "access.jsonl"), n)
    }

    /// Taint-log rows of a task, waiting (bounded) until at least `n`.
    pub fn taint_log(&self, task: &str, n: usize) -> Vec<Value> {
        wait_rows(&self.task_file(task, "taint.jsonl"), n)
    }

    /// `sluice report ARGS --state <this sluice's state>`.
    pub fn report(&self, args: &[&str]) -> Output {
        Command::new(bin())
            .arg("report")
            .args(args)
            .arg("--state")
            .arg(self.state())
            .output()
            .unwrap()
    }

    /// The sluice process id.
    pub fn child_id(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (`"TERM"`, `"HUP"`, ...).
    pub fn signal(&self, sig: &str) {
        let sig: nix::sys::signal::Signal = format!("SIG{sig}").parse().expect("a signal name");
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, sig);
    }

    /// Waits (bounded, 20 s) for exit; returns the exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        poll(Duration::from_secs(20), || {
            self.child.try_wait().ok().flatten()
        })
        .and_then(|status| status.code())
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        self.stderr_mode
            .store(CLOSED, std::sync::atomic::Ordering::Relaxed);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `line` is sluice's log of a successful reload triggered by
/// `trigger` (`config reloaded: ... trigger="SIGHUP"`).
fn is_reload_by(line: &str, trigger: &str) -> bool {
    line.contains("config reloaded: ") && line.contains(&format!("trigger=\"{trigger}\""))
}

/// Starts `sluice run --config path`; waits (bounded) until every
/// listener is bound and returns their addresses.
type Spawned = (
    Child,
    Vec<String>,
    Arc<Mutex<Vec<String>>>,
    Arc<std::sync::atomic::AtomicU8>,
);

fn spawn(path: &Path) -> Spawned {
    let expected = count_listeners(&std::fs::read_to_string(path).unwrap());
    let mut child = Command::new(bin())
        .args(["run", "--config"])
        .arg(path)
        .env("SLUICE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let stderr = child.stderr.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let l2 = lines.clone();
    let mode = Arc::new(std::sync::atomic::AtomicU8::new(READING));
    let m2 = mode.clone();
    thread::spawn(move || {
        use std::sync::atomic::Ordering::Relaxed;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            // Paused: read nothing until the test reads again or ends.
            while m2.load(Relaxed) == PAUSED {
                thread::sleep(Duration::from_millis(20));
            }
            if m2.load(Relaxed) == CLOSED {
                return;
            }
            if let Some(i) = line.find("listen=") {
                let addr = line[i + 7..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_string();
                let _ = tx.send(addr);
            }
            if std::env::var_os("SLUICE_TEST_STDERR").is_some() {
                eprintln!("sluice: {line}");
            }
            l2.lock().unwrap().push(line);
        }
    });
    let mut listeners = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while listeners.len() < expected {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(a) => listeners.push(a),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "sluice did not start listening: {:#?}",
                    lines.lock().unwrap()
                );
            }
        }
    }
    (child, listeners, lines, mode)
}

fn count_listeners(config: &str) -> usize {
    let parsed: toml::Value = toml::from_str(config).unwrap();
    parsed
        .get("task")
        .and_then(|t| t.as_array())
        .map(|tasks| {
            tasks
                .iter()
                .filter_map(|t| t.get("listen").and_then(|l| l.as_array()))
                .map(std::vec::Vec::len)
                .sum()
        })
        .unwrap_or(0)
}

/// JSON rows of a JSON-lines file as it is now (none if it is missing).
pub fn read_rows(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("log line is JSON"))
        .collect()
}

/// JSON rows of a JSON-lines file, waiting up to 5 s for at least `n`
/// (fewer if they never come: the caller's assertions say what is missing).
pub fn wait_rows(path: &Path, n: usize) -> Vec<Value> {
    poll(Duration::from_secs(5), || {
        let rows = read_rows(path);
        (rows.len() >= n).then_some(rows)
    })
    .unwrap_or_else(|| read_rows(path))
}

/// The last access-log row for `host`, once the log has settled: sluice
/// flushes rows within 100 ms, so an earlier row for the same host can be
/// in the file before the one the test just caused. Waits (bounded, 5 s)
/// until a row for `host` exists and the file has not grown for 300 ms.
#[track_caller]
pub fn last_row_for(s: &Sluice, task: &str, host: &str) -> Value {
    let path = s.task_file(task, "access.jsonl");
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen = (usize::MAX, Instant::now());
    loop {
        let rows = read_rows(&path);
        if rows.len() != seen.0 {
            seen = (rows.len(), Instant::now());
        }
        let settled = seen.1.elapsed() >= Duration::from_millis(300);
        let last = rows.iter().rev().find(|r| r["host"] == host);
        match last {
            Some(row) if settled || Instant::now() > deadline => return row.clone(),
            None if Instant::now() > deadline => {
                panic!("no access-log row for {host}: {rows:#?}")
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The last access-log row for `host` that `pred` accepts, waiting
/// (bounded, 5 s) until one exists.
#[track_caller]
pub fn row_where(s: &Sluice, task: &str, host: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let path = s.task_file(task, "access.jsonl");
    let found = poll(Duration::from_secs(5), || {
        read_rows(&path)
            .into_iter()
            .rev()
            .find(|r| r["host"] == host && pred(r))
    });
    match found {
        Some(row) => row,
        None => panic!("no access-log row for {host}: {:#?}", read_rows(&path)),
    }
}
