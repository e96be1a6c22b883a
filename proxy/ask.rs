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
pub enum Answer {
    Allow,
    Deny,
}

/// A line of `granted.jsonl`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Grant {
    pub ts: String,
    pub task: String,
    pub host: String,
    pub port: u16,
    /// Who answered: `sluice allow`, the admin API.
    pub by: String,
    /// The request that asked, when one was waiting.
    pub asked_by: Option<String>,
}

/// A line of `asked.jsonl`, and the `question` event on `/events`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Question {
    pub ts: String,
    pub task: String,
    pub question: String,
    pub host: String,
    pub port: u16,
    pub method: String,
    pub url: String,
    pub timeout_secs: u64,
}

type Key = (String, u16);

/// A question being waited on: where its answer goes, and the request
/// that asked first.
type Waiting = (watch::Sender<Option<Answer>>, String);

/// One task's grants and the questions its requests wait on.
#[derive(Default)]
pub struct Asks {
    grants: Mutex<Vec<Key>>,
    pending: Mutex<HashMap<Key, Waiting>>,
}

impl Asks {
    /// The grants `granted.jsonl` holds (unreadable lines are skipped).
    pub fn load(path: &Path) -> Asks {
        let grants = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Grant>(l).ok())
            .map(|g| (g.host, g.port))
            .collect();
        Asks {
            grants: Mutex::new(grants),
            pending: Mutex::default(),
        }
    }

    /// The rules with the grants added to the allow-list (in ask mode).
    pub fn effective<'a>(&self, rules: &'a TaskRules) -> Cow<'a, TaskRules> {
        let grants = self.grants.lock().unwrap_or_else(|p| p.into_inner());
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
    /// wait on it) and waits up to `timeout` for the answer.
    pub async fn ask(&self, log: &AccessLog, q: Question, timeout: Duration) -> Option<Answer> {
        let key = (q.host.clone(), q.port);
        let mut rx = {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            match pending.get(&key) {
                Some((tx, _)) => tx.subscribe(),
                None => {
                    let (tx, rx) = watch::channel(None);
                    pending.insert(key.clone(), (tx, q.url.clone()));
                    let task: Arc<str> = q.task.as_str().into();
                    log.event("question", task.clone(), &q);
                    log.line(task, "asked.jsonl", &q);
                    rx
                }
            }
        };
        let answered = tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await;
        let answer = match answered {
            Ok(Ok(a)) => *a,
            _ => None,
        };
        if answer.is_none() {
            self.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
        }
        answer
    }

    /// A person's answer for `host` on `ports`: a grant is kept (and
    /// written to `granted.jsonl`); waiting requests are let go. Returns
    /// how many destinations had requests waiting.
    pub fn answer(
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
            let waiting = self
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
            if answer == Answer::Allow {
                let mut grants = self.grants.lock().unwrap_or_else(|p| p.into_inner());
                if !grants.contains(&key) {
                    grants.push(key.clone());
                    let grant = Grant {
                        ts: crate::log::now_rfc3339(),
                        task: task.to_string(),
                        host: host.to_string(),
                        port: *port,
                        by: by.to_string(),
                        asked_by: waiting.as_ref().map(|(_, url)| url.clone()),
                    };
                    log.taint_line_to(task.clone(), "granted.jsonl", &grant);
                }
            }
            if let Some((tx, _)) = waiting {
                let _ = tx.send(Some(answer));
                woken += 1;
            }
        }
        woken
    }

    /// The destinations requests are waiting on now.
    pub fn waiting(&self) -> Vec<(String, u16)> {
        let mut w: Vec<Key> = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        w.sort();
        w
    }
}
