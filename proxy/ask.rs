//! ask: `allow_mode = "ask"`. A request to a public host that is not on
//! the allow-list waits while the question is put to a person (on the
//! admin API's `/events` and in `<task>/asked.jsonl`, which `sluice report
//! --follow` shows); `sluice allow` (or `POST /tasks/ID/allow`) admits it
//! and every later request to it, `sluice deny` refuses it. Grants are
//! kept in `<task>/granted.jsonl` and outlive reloads and restarts.
//!
//! Must not: decide anything itself (`policy::askable` says what may be
//! asked; the allow-list, grants included, is checked by `policy` as
//! always), or hold a request past its timeout.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::log::AccessLog;
use crate::policy::{AllowList, AllowMode, Host, TaskRules};

/// What a person answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Allow,
    Deny,
}

/// How a question ended for one waiting request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Answered(Answer),
    /// Nobody answered in time.
    Timeout,
    /// Too many questions are waiting already: refused without asking.
    Busy,
}

/// Distinct destinations a task's requests may wait on at once: past it,
/// new ones are refused without a question (a task cannot flood the
/// person, the log or memory).
pub(crate) const MAX_WAITING: usize = 64;

/// A line of `granted.jsonl`: a grant, or (`revoked`) its withdrawal by
/// `sluice deny`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Grant {
    pub(crate) ts: String,
    pub(crate) task: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Who answered: `sluice allow`, the admin API.
    pub(crate) by: String,
    /// The request that asked, when one was waiting.
    pub(crate) asked_by: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) revoked: bool,
}

/// A line of `asked.jsonl`, and the `question` event on `/events`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Question {
    pub(crate) ts: String,
    pub(crate) task: String,
    pub(crate) question: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Always empty now: nothing is resolved before a person allows the
    /// name (a lookup is a way out); kept for readers of older files.
    #[serde(default)]
    pub(crate) addrs: Vec<String>,
    pub(crate) method: String,
    pub(crate) url: String,
    pub(crate) timeout_secs: u64,
}

type Key = (String, u16);

/// A question being waited on.
struct Waiting {
    answer: watch::Sender<Option<Answer>>,
    /// The request that asked first.
    url: String,
    /// Which question this is (a later one for the same destination is
    /// another).
    id: u64,
    /// Requests waiting on it; the last to leave removes it.
    waiters: usize,
}

/// One task's grants and the questions its requests wait on.
#[derive(Default)]
pub(crate) struct Asks {
    grants: Mutex<Vec<Key>>,
    /// Destinations a person refused (until they allow them): asked about
    /// again only after `sluice allow`.
    denied: Mutex<Vec<Key>>,
    pending: Mutex<HashMap<Key, Waiting>>,
    next_id: std::sync::atomic::AtomicU64,
}

/// Leaves a question when the request stops waiting, however it stops
/// (answered, timed out, or its client gone).
struct Leave<'a> {
    asks: &'a Asks,
    key: Key,
    id: u64,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut pending = self
            .asks
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(w) = pending.get_mut(&self.key) {
            if w.id == self.id {
                w.waiters = w.waiters.saturating_sub(1);
                if w.waiters == 0 {
                    pending.remove(&self.key);
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Asks {
    /// The grants `granted.jsonl` holds, withdrawals applied in order
    /// (unreadable lines are skipped).
    pub(crate) fn load(path: &Path) -> Asks {
        let mut grants: Vec<Key> = Vec::new();
        for g in std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Grant>(l).ok())
        {
            let key = (g.host, g.port);
            grants.retain(|k| *k != key);
            if !g.revoked {
                grants.push(key);
            }
        }
        Asks {
            grants: Mutex::new(grants),
            ..Asks::default()
        }
    }

    /// The rules with the grants added to the allow-list (in ask mode).
    pub(crate) fn effective<'a>(&self, rules: &'a TaskRules) -> Cow<'a, TaskRules> {
        let grants = lock(&self.grants);
        if rules.allow_mode != AllowMode::Ask || grants.is_empty() {
            return Cow::Borrowed(rules);
        }
        let mut allow: AllowList = rules.allow.clone();
        for (h, p) in grants.iter() {
            allow.insert(Host::Name(h.clone()), *p);
        }
        Cow::Owned(TaskRules {
            allow,
            ..rules.clone()
        })
    }

    /// Puts the question (once per destination however many requests
    /// wait on it) and waits up to `timeout` for the answer. A destination
    /// a person refused is refused again without asking.
    pub(crate) async fn ask(&self, log: &AccessLog, q: Question, timeout: Duration) -> Outcome {
        let key = (q.host.clone(), q.port);
        if lock(&self.denied).contains(&key) {
            return Outcome::Answered(Answer::Deny);
        }
        let (mut rx, id) = {
            let mut pending = lock(&self.pending);
            let full = pending.len() >= MAX_WAITING;
            match pending.get_mut(&key) {
                Some(w) => {
                    w.waiters += 1;
                    (w.answer.subscribe(), w.id)
                }
                None if full => return Outcome::Busy,
                None => {
                    let (tx, rx) = watch::channel(None);
                    let id = self
                        .next_id
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    pending.insert(
                        key.clone(),
                        Waiting {
                            answer: tx,
                            url: q.url.clone(),
                            id,
                            waiters: 1,
                        },
                    );
                    let task: Arc<str> = q.task.as_str().into();
                    log.event("question", task.clone(), &q);
                    log.line(task, "asked.jsonl", &q);
                    (rx, id)
                }
            }
        };
        let _leave = Leave {
            asks: self,
            key,
            id,
        };
        let answered = tokio::time::timeout(timeout, rx.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|a| *a));
        answered.map_or(Outcome::Timeout, Outcome::Answered)
    }

    /// A person's answer for `host` on `ports`. Allow keeps a grant (in
    /// `granted.jsonl`) before it lets the waiting requests go, so a
    /// request arriving meanwhile finds it; deny withdraws any grant and
    /// refuses the destination until it is allowed. Returns how many
    /// destinations had requests waiting.
    pub(crate) fn answer(
        &self,
        log: &AccessLog,
        task: &Arc<str>,
        (host, ports): (&str, &[u16]),
        answer: Answer,
        by: &str,
    ) -> usize {
        let mut woken = 0;
        for port in ports {
            let key = (host.to_string(), *port);
            let asked_by = lock(&self.pending).get(&key).map(|w| w.url.clone());
            let granted = lock(&self.grants).contains(&key);
            let record = |revoked: bool| Grant {
                ts: crate::log::now_rfc3339(),
                task: task.to_string(),
                host: host.to_string(),
                port: *port,
                by: by.to_string(),
                asked_by: asked_by.clone(),
                revoked,
            };
            match answer {
                Answer::Allow => {
                    lock(&self.denied).retain(|k| *k != key);
                    if !granted {
                        lock(&self.grants).push(key.clone());
                        log.taint_line_to(task.clone(), "granted.jsonl", &record(false));
                    }
                }
                Answer::Deny => {
                    let mut denied = lock(&self.denied);
                    if !denied.contains(&key) {
                        denied.push(key.clone());
                    }
                    if granted {
                        lock(&self.grants).retain(|k| *k != key);
                        log.taint_line_to(task.clone(), "granted.jsonl", &record(true));
                    }
                }
            }
            if let Some(w) = lock(&self.pending).remove(&key) {
                let _ = w.answer.send(Some(answer));
                woken += 1;
            }
        }
        woken
    }

    /// The grants in force and the destinations requests wait on now.
    pub(crate) fn status(&self) -> (Vec<Key>, Vec<Key>) {
        let mut grants = lock(&self.grants).clone();
        grants.sort();
        let mut waiting: Vec<Key> = lock(&self.pending).keys().cloned().collect();
        waiting.sort();
        (grants, waiting)
    }
}
