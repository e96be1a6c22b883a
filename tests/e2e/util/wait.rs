//! Bounded polling: how a test waits for something to happen. Every wait
//! names what it waits for and has a limit; one that runs out fails the
//! test with that name. No test sleeps for a fixed time and hopes the
//! thing happened meanwhile.

use std::thread;
use std::time::{Duration, Instant};

/// How often a condition is checked.
const POLL: Duration = Duration::from_millis(20);

/// Checks `f` until it gives `Some`, for at most `limit`: `None` if it never
/// did. For waits whose failure message needs the state at the deadline.
pub fn poll<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(POLL);
    }
}

/// Checks `f` until it gives `Some` and returns that; panics naming `what`
/// if `limit` passes first.
#[track_caller]
pub fn wait_for<T>(what: &str, limit: Duration, f: impl FnMut() -> Option<T>) -> T {
    match poll(limit, f) {
        Some(v) => v,
        None => panic!("timed out after {limit:?} waiting for: {what}"),
    }
}

/// Checks `f` until it holds; panics naming `what` if `limit` passes first.
#[track_caller]
pub fn eventually(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    wait_for(what, limit, || f().then_some(()))
}
