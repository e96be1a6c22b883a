//! Recording what one response names: the small interface a response
//! relay calls ([`Recorder::add`] per chunk, [`Recorder::done`] at the
//! end). Each name the scanner found goes through
//! `policy::names::taint_key`; new taints are written down and, in enforce
//! mode, close the opaque tunnels and request bodies they now refuse;
//! names still in progress at a chunk's end are only held until the next
//! chunk.
//!
//! Owns: the per-response tally (held keys, what was new) and the
//! console's one summary line per response that tainted anything, rate
//! limited; each taint itself is a debug line (the file has them all).
//! Must not: decide whether a name counts (policy does), scan (`scan`),
//! or reach the live state but through [`Now`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;

use super::{Inserted, TaintStore, TunnelRegistry};
use crate::config::{Snapshot, TaskConfig};
use crate::log::AccessLog;
use crate::policy::names::{self, Named, TaintKey};

/// The config in force now: a long response may outlive a reload (shadow
/// to enforce, new exemptions or `max_hosts`), and its names are judged
/// under the settings of the moment they arrive.
pub(crate) trait Now: Send + Sync {
    fn snapshot(&self) -> Arc<Snapshot>;
}

/// Where a task's taint lives, as a recorder needs it.
#[derive(Clone)]
pub(crate) struct TaskTaint {
    pub(crate) id: Arc<str>,
    pub(crate) store: Arc<TaintStore>,
    pub(crate) tunnels: Arc<TunnelRegistry>,
    /// `sluice_taint_hosts` and `sluice_taint_overflow` of the task.
    pub(crate) gauges: (Gauge, Gauge),
    pub(crate) log: AccessLog,
    pub(crate) now: Arc<dyn Now>,
}

/// One response's recorder.
pub(crate) struct Recorder {
    task: TaskTaint,
    /// The task's settings when the response began (used if the task is
    /// gone from the config in force).
    settings: Arc<TaskConfig>,
    /// The response URL without its query: the provenance of what it names.
    source: Arc<str>,
    /// The host that served it (by default never tainted by itself).
    served_by: Arc<str>,
    /// Keys held for names in progress at the last chunk's end.
    held: Vec<TaintKey>,
    /// New taints, and the first few of them for the summary line.
    new: usize,
    sample: Vec<String>,
}

/// Names shown in a summary line at most.
const SAMPLE: usize = 4;

/// Summary lines printed at most once a second (the rest are counted into
/// the next one).
const SUMMARY_EVERY: Duration = Duration::from_secs(1);

impl Recorder {
    pub(crate) fn new(
        task: TaskTaint,
        settings: Arc<TaskConfig>,
        source: Arc<str>,
        served_by: Arc<str>,
    ) -> Recorder {
        Recorder {
            task,
            settings,
            source,
            served_by,
            held: Vec::new(),
            new: 0,
            sample: Vec::new(),
        }
    }

    /// The response's URL without its query.
    pub(crate) fn source(&self) -> &Arc<str> {
        &self.source
    }

    /// Does it hold keys for a name in progress (so a chunk that names
    /// nothing must still be reported, to let go of them)?
    pub(crate) fn holds(&self) -> bool {
        !self.held.is_empty()
    }

    /// Adds what the response named: `names` for good, `pending` (names
    /// in progress at a chunk's end) held in place of the ones held
    /// before. In enforce mode, opaque tunnels and request bodies that a
    /// new taint refuses close.
    pub(crate) fn add(&mut self, names: Vec<Named>, pending: Vec<Named>) {
        let snap = self.task.now.snapshot();
        let began = Arc::clone(&self.settings);
        let task = snap.task(&self.task.id).map_or(&*began, |t| &**t);
        let allowed_somewhere = |n: &str| snap.tasks.iter().any(|t| t.rules.allow.names(n));
        let settings = &task.taint;
        let served_by = Arc::clone(&self.served_by);
        let own_site = |h: &str| {
            settings.self_taint == crate::config::SelfTaint::Exclude
                && settings.same_site(h, &served_by)
        };
        let judge = names::Judge {
            own_site: &own_site,
            by_owner: &settings.by_owner,
            allowed_somewhere: &allowed_somewhere,
            weak_counts: task.rules.allow_mode != crate::policy::AllowMode::Enforce,
        };
        let keys_of = |n: &Named| names::taint_keys(n, &judge);
        let held: Vec<TaintKey> = pending.iter().flat_map(keys_of).collect();
        let store = &self.task.store;
        // Hold the new before letting go of the old: no gap in between.
        store.hold(&held, &self.source);
        store.release(&std::mem::replace(&mut self.held, held));
        for key in names.iter().flat_map(keys_of) {
            self.insert(task, &key);
        }
    }

    fn insert(&mut self, task: &TaskConfig, key: &TaintKey) {
        let t = &self.task;
        match t.store.insert(key, &self.source, &task.taint, &t.log) {
            Inserted::New => {
                tracing::debug!(key = %key, source = %self.source, "tainted");
                self.new += 1;
                if self.sample.len() < SAMPLE {
                    self.sample.push(key.to_string());
                }
                t.gauges.0.set(t.store.len() as i64);
                if task.taint.mode.revokes() {
                    revoke(t, task, key);
                }
            }
            Inserted::Overflow { first: true } => {
                t.gauges.1.set(1);
                tracing::error!(
                    max_hosts = task.taint.max_hosts,
                    "taint-overflow: the taint set is full; from now on every body-carrying request to a non-exempt host is refused"
                );
                if task.taint.mode.revokes() {
                    t.tunnels.revoke_all();
                }
            }
            Inserted::Overflow { first: false } | Inserted::Known | Inserted::Exempt => {}
        }
    }

    /// The response ended: lets go of what it held, and says in one line
    /// what it tainted (at most one such line a second; the rest are
    /// counted into the next).
    pub(crate) fn done(&mut self) {
        self.task.store.release(&std::mem::take(&mut self.held));
        if self.new == 0 {
            return;
        }
        static LAST: Mutex<Option<(Instant, usize, usize)>> = Mutex::new(None);
        let Ok(mut last) = LAST.lock() else { return };
        let now = Instant::now();
        let (skipped_lines, skipped_names) = match *last {
            Some((at, lines, names)) if now.duration_since(at) < SUMMARY_EVERY => {
                *last = Some((at, lines + 1, names + self.new));
                return;
            }
            Some((_, lines, names)) => (lines, names),
            None => (0, 0),
        };
        *last = Some((now, 0, 0));
        drop(last);
        let more = self.new - self.sample.len();
        let mut shown = self.sample.join(", ");
        if more > 0 {
            shown.push_str(&format!(" and {more} more"));
        }
        let earlier = if skipped_lines > 0 {
            format!(" (and {skipped_names} from {skipped_lines} earlier responses)")
        } else {
            String::new()
        };
        tracing::info!(
            "tainted {} name{} from {}: {shown}{earlier}; list them with: sluice report --taint",
            self.new,
            if self.new == 1 { "" } else { "s" },
            self.source,
        );
        self.new = 0;
        self.sample.clear();
    }
}

/// Closes the opaque tunnels and request bodies a new taint refuses: to
/// the host, or for an owner on a multi-tenant host, every stream of its
/// family that the store now calls tainted (an opaque tunnel, or a body to
/// that owner's paths or to a path naming none).
fn revoke(t: &TaskTaint, task: &TaskConfig, key: &TaintKey) {
    let by = &task.taint.by_owner;
    let root = match key {
        TaintKey::Host(h) if by.family_of(h).is_none() => {
            t.tunnels.revoke(&crate::policy::Host::Name(h.clone()));
            return;
        }
        TaintKey::Host(h) => h.as_str(),
        TaintKey::Owner { root, .. } => root.as_str(),
    };
    let store = &t.store;
    t.tunnels.revoke_where(|s| {
        let Some(h) = s.target.host.as_name() else {
            return false;
        };
        s.opaque
            && by.family_of(h).is_some_and(|f| f.root == root)
            && matches!(
                store.state(h, s.path, &task.taint),
                crate::policy::TaintState::Tainted { .. }
            )
    });
}
