//! console: where sluice's own log lines (tracing) and the `[logs] stdout`
//! access rows go: a bounded queue and one thread that writes them out.
//!
//! A reader that pauses (a stopped pager, a full pipe) or goes away (a
//! closed pipe, a full disk under a redirect) must never block, fail or
//! panic the data path: lines that do not fit the queue, or that cannot be
//! written, are dropped and counted in `sluice_console_lines_dropped`.
//! Must not: block its callers, or decide anything.

use std::io::Write;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::LazyLock;

use prometheus_client::metrics::counter::Counter;

/// Lines queued at most before new ones are dropped.
const QUEUE_LINES: usize = 1024;

/// Lines dropped: the queue was full, or writing failed.
pub(crate) static DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Which stream a line goes to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

enum Msg {
    Line(Stream, Vec<u8>),
    /// Answered once everything queued before it is written.
    Flushed(SyncSender<()>),
}

struct Queue {
    tx: SyncSender<Msg>,
}

static QUEUE: LazyLock<Queue> = LazyLock::new(|| {
    let (tx, rx) = sync_channel(QUEUE_LINES);
    let spawned = std::thread::Builder::new()
        .name("sluice-console".into())
        .spawn(move || write_out(rx));
    if spawned.is_err() {
        // No thread: every line is dropped (and counted), nothing blocks.
        DROPPED.inc();
    }
    Queue { tx }
});

fn write_out(rx: Receiver<Msg>) {
    while let Ok(msg) = rx.recv() {
        let (stream, line) = match msg {
            Msg::Line(stream, line) => (stream, line),
            Msg::Flushed(done) => {
                let _ = done.send(());
                continue;
            }
        };
        let written = match stream {
            Stream::Stdout => std::io::stdout().lock().write_all(&line),
            Stream::Stderr => std::io::stderr().lock().write_all(&line),
        };
        if written.is_err() {
            DROPPED.inc();
        }
    }
}

/// Queues `line` (whole lines, with their newline) for `stream`; never
/// waits.
pub(crate) fn send(stream: Stream, line: Vec<u8>) {
    match QUEUE.tx.try_send(Msg::Line(stream, line)) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            DROPPED.inc();
        }
    }
}

/// A `tracing` writer: one event, queued when dropped.
pub(crate) struct Line(Vec<u8>);

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            send(Stream::Stderr, std::mem::take(&mut self.0));
        }
    }
}

/// Makes a [`Line`] per event (`tracing_subscriber::fmt().with_writer`).
pub(crate) fn stderr_line() -> Line {
    Line(Vec::with_capacity(256))
}

/// Waits (at most `limit`) until what was queued is written: at exit.
pub(crate) fn drain(limit: std::time::Duration) {
    let (done_tx, done_rx) = sync_channel::<()>(1);
    let tx = QUEUE.tx.clone();
    // The queue may be full: wait for room on another thread.
    let _ = std::thread::Builder::new().spawn(move || tx.send(Msg::Flushed(done_tx)));
    let _ = done_rx.recv_timeout(limit);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let before = DROPPED.get();
        // More than the queue holds, at once: whatever the writer thread
        // manages meanwhile, the call returns and the excess is counted.
        for _ in 0..QUEUE_LINES * 4 {
            send(Stream::Stderr, Vec::new());
        }
        assert!(DROPPED.get() > before);
    }
}
