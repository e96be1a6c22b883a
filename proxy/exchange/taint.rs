//! Adding what a response names to the task's taint set: each name the
//! scanner found goes through `policy::names::taint_key`, new taints are
//! written down (and close opaque tunnels they now refuse), names still in
//! progress at a chunk's end are held only until the next chunk.
//!
//! Owns: the per-response [`Tally`] (held keys, what was new) and the
//! console's one summary line per response that tainted anything, rate
//! limited; each taint itself is a debug line (the file has them all).
//! Must not: decide whether a name counts (policy does) or scan (taint).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::ConnCtx;
use crate::config::TaskConfig;
use crate::policy::names::{self, Named, TaintKey};
use crate::taint::Inserted;

/// What one response has tainted so far.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Keys held for names in progress at the last chunk's end.
    held: Vec<TaintKey>,
    /// New taints, and the first few of them for the summary line.
    new: usize,
    sample: Vec<String>,
}

impl Tally {
    /// Does it hold keys for a name in progress?
    pub(crate) fn holds(&self) -> bool {
        !self.held.is_empty()
    }
}

/// Names shown in a summary line at most.
const SAMPLE: usize = 4;

/// Summary lines printed at most once a second (the rest are counted into
/// the next one).
const SUMMARY_EVERY: Duration = Duration::from_secs(1);

impl ConnCtx {
    /// Adds what the response at `source` (served by `served_by`) named:
    /// `names` for good, `pending` (names in progress at a chunk's end)
    /// held in place of the ones held before. In enforce mode, opaque
    /// tunnels that a new taint refuses close.
    pub(crate) fn taint(
        &self,
        task: &TaskConfig,
        tally: &mut Tally,
        names: Vec<Named>,
        pending: Vec<Named>,
        source: &Arc<str>,
        served_by: &str,
    ) {
        let snap = self.shared.snapshot();
        // The taint settings in force now: a long response may outlive a
        // reload (shadow to enforce, new exemptions or max_hosts).
        let task = snap.task(&self.task.id).map(|t| &**t).unwrap_or(task);
        let allowed_somewhere = |n: &str| snap.tasks.iter().any(|t| t.rules.allow.names(n));
        let settings = &task.taint;
        let own_site = |h: &str| {
            settings.self_taint == crate::config::SelfTaint::Exclude
                && settings.same_site(h, served_by)
        };
        let judge = names::Judge {
            own_site: &own_site,
            by_owner: &settings.by_owner,
            allowed_somewhere: &allowed_somewhere,
            weak_counts: task.rules.allow_mode != crate::policy::AllowMode::Enforce,
        };
        let keys_of = |n: &Named| names::taint_keys(n, &judge);
        let held: Vec<TaintKey> = pending.iter().flat_map(keys_of).collect();
        let store = &self.task.taint;
        // Hold the new before letting go of the old: no gap in between.
        store.hold(&held, source);
        store.release(&std::mem::replace(&mut tally.held, held));
        for key in names.iter().flat_map(keys_of) {
            self.insert(task, tally, &key, source);
        }
    }

    fn insert(&self, task: &TaskConfig, tally: &mut Tally, key: &TaintKey, source: &Arc<str>) {
        match self
            .task
            .taint
            .insert(key, source, &task.taint, &self.shared.log)
        {
            Inserted::New => {
                tracing::debug!(key = %key, source = %source, "tainted");
                tally.new += 1;
                if tally.sample.len() < SAMPLE {
                    tally.sample.push(key.to_string());
                }
                self.task
                    .metrics
                    .taint_hosts
                    .set(self.task.taint.len() as i64);
                if task.taint.mode.revokes() {
                    self.revoke(task, key);
                }
            }
            Inserted::Overflow { first: true } => {
                self.task.metrics.taint_overflow.set(1);
                tracing::error!(
                    max_hosts = task.taint.max_hosts,
                    "taint-overflow: the taint set is full; from now on every body-carrying request to a non-exempt host is refused"
                );
                if task.taint.mode.revokes() {
                    self.task.tunnels.revoke_all();
                }
            }
            Inserted::Overflow { first: false } | Inserted::Known | Inserted::Exempt => {}
        }
    }

    /// Closes the opaque tunnels and request bodies a new taint refuses:
    /// to the host, or for an owner on a multi-tenant host, every stream
    /// of its family that the store now calls tainted (an opaque tunnel,
    /// or a body to that owner's paths or to a path naming none).
    fn revoke(&self, task: &TaskConfig, key: &TaintKey) {
        let by = &task.taint.by_owner;
        let root = match key {
            TaintKey::Host(h) if by.family_of(h).is_none() => {
                self.task
                    .tunnels
                    .revoke(&crate::policy::Host::Name(h.clone()));
                return;
            }
            TaintKey::Host(h) => h.as_str(),
            TaintKey::Owner { root, .. } => root.as_str(),
        };
        let store = &self.task.taint;
        self.task.tunnels.revoke_where(|s| {
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

    /// The response ended: lets go of what it held, and says in one line
    /// what it tainted (at most one such line a second; the rest are
    /// counted into the next).
    pub(crate) fn taint_done(&self, tally: &mut Tally, source: &str) {
        self.task.taint.release(&std::mem::take(&mut tally.held));
        if tally.new == 0 {
            return;
        }
        static LAST: Mutex<Option<(Instant, usize, usize)>> = Mutex::new(None);
        let Ok(mut last) = LAST.lock() else { return };
        let now = Instant::now();
        let (skipped_lines, skipped_names) = match *last {
            Some((at, lines, names)) if now.duration_since(at) < SUMMARY_EVERY => {
                *last = Some((at, lines + 1, names + tally.new));
                return;
            }
            Some((_, lines, names)) => (lines, names),
            None => (0, 0),
        };
        *last = Some((now, 0, 0));
        drop(last);
        let more = tally.new - tally.sample.len();
        let mut shown = tally.sample.join(", ");
        if more > 0 {
            shown.push_str(&format!(" and {more} more"));
        }
        let earlier = if skipped_lines > 0 {
            format!(" (and {skipped_names} from {skipped_lines} earlier responses)")
        } else {
            String::new()
        };
        tracing::info!(
            "tainted {} name{} from {source}: {shown}{earlier}; list them with: sluice report --taint",
            tally.new,
            if tally.new == 1 { "" } else { "s" },
        );
        tally.new = 0;
        tally.sample.clear();
    }
}
