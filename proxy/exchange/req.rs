//! One request's context (pingora's `CTX`): [`ReqCtx`] is made once per
//! request — a plain one, a CONNECT, or one inside a tunnel — and carries
//! the connection ([`ConnCtx`]: its id is the row's `conn` and the
//! connection span's), the live snapshot the request is decided, dialled,
//! pooled and logged under, the task's config in that snapshot, and the
//! request's [`Row`]: what is known so far and the decision, written
//! exactly once however the request ends.
//!
//! The phases take it in turn and hand it on: admit (`&mut`, in
//! `admit.rs`), dial/send (`&mut`, `forward::send`), respond (by value: it
//! becomes the row the response relay owns), or refuse (by value: it
//! becomes the refusal). Nothing below calls back into a phase.
//!
//! Must not: decide (every rule is `policy`'s), or touch a stream.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use http::Response;

use super::{task_gone, ConnCtx, Exchange, Row};
use crate::config::{Snapshot, TaskConfig};
use crate::policy::{Refusal, Verdict};
use crate::respond::ProxyBody;
use crate::state::Live;

/// One request's context: see the module's first lines.
pub(crate) struct ReqCtx {
    /// The client connection the request came on.
    pub(crate) conn: Arc<ConnCtx>,
    /// The snapshot the request is decided, dialled, pooled and logged
    /// under (in ask mode, the one in force when a person answered).
    pub(crate) live: Arc<Live>,
    /// The task's config in `live`.
    pub(crate) task: Arc<TaskConfig>,
    /// What the request's row will say; written when the context (or the
    /// response relay it became) ends.
    row: Row,
}

impl ReqCtx {
    /// Starts a request's context under `live`, the snapshot loaded once
    /// for it. `Err` is the refusal when the connection's task is no
    /// longer in that snapshot (logged).
    pub(crate) fn start(
        conn: &Arc<ConnCtx>,
        live: Arc<Live>,
        mut ex: Exchange,
    ) -> Result<ReqCtx, Box<Response<ProxyBody>>> {
        ex.generation = live.config.generation;
        ex.conn = conn.id;
        let Some(task) = conn.task_config(&live.config).cloned() else {
            return Err(Box::new(conn.refuse(&ex, task_gone())));
        };
        Ok(ReqCtx {
            row: Row::pending(conn.clone(), ex),
            conn: conn.clone(),
            live,
            task,
        })
    }

    /// What the row will say of the request.
    pub(crate) fn ex(&self) -> &Exchange {
        &self.row.ex
    }

    /// Fills in what the row will say (the parsed target, the address
    /// dialled, a note).
    pub(crate) fn ex_mut(&mut self) -> &mut Exchange {
        &mut self.row.ex
    }

    /// The task's secrets, when it has any (SPEC §10).
    pub(crate) fn secrets(&self) -> Option<Arc<crate::secrets::TaskSecrets>> {
        // Most configs have none: no lookup then.
        if self.live.secrets.is_empty() {
            return None;
        }
        self.live.secrets.get(&self.task.id).cloned()
    }

    /// The config in force for this request.
    pub(crate) fn snap(&self) -> &Snapshot {
        &self.live.config
    }

    pub(super) fn row_mut(&mut self) -> &mut Row {
        &mut self.row
    }

    /// After ask mode moved the context to a newer snapshot: the row says
    /// its generation, and the task's config is the one in it (a task
    /// removed meanwhile keeps the old one: the decision refused already).
    pub(super) fn moved_to_live(&mut self) {
        self.row.ex.generation = self.live.config.generation;
        if let Some(task) = self.conn.task_config(&self.live.config) {
            self.task = task.clone();
        }
    }

    /// Refuses the request: the console line, the response, and the row
    /// (written as the context ends, here: before any body is drained).
    pub(crate) fn refuse(mut self, refusal: Refusal) -> Response<ProxyBody> {
        let response = self.conn.refusal(&self.row.ex, &refusal);
        self.row.deny(refusal);
        response
    }

    /// The request is on its way upstream: from now until its response
    /// head, the row (this verdict, 499, `client-left`, the request body's
    /// bytes `up` counts) is written if the client leaves.
    pub(crate) fn on_its_way(&mut self, verdict: Verdict, up: Arc<AtomicU64>) {
        self.row.if_client_leaves(verdict, Some(up));
    }

    /// The request is answered with `status` (its verdict set by
    /// [`ReqCtx::on_its_way`] or [`ReqCtx::admitted`]): the context becomes
    /// the row the response, tunnel or relay owns from here on.
    pub(crate) fn answered(mut self, status: u16) -> Row {
        self.row.answered(status);
        self.row
    }

    /// Sets the verdict a CONNECT was admitted with, before its dial:
    /// from now until it is answered, the row (this verdict, 499,
    /// `client-left`) is written if the client leaves.
    pub(crate) fn admitted(&mut self, verdict: Verdict) {
        self.row.if_client_leaves(verdict, None);
    }
}
