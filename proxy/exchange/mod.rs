//! exchange: the layer every request, tunnel and relay goes through,
//! below `forward` and `intercept`, one file a job:
//!
//! - [`ctx`]: who is on the other end of a connection ([`ConnCtx`]), its
//!   id and its place under the cap;
//! - [`req`]: one request's context ([`ReqCtx`]: the connection, the
//!   snapshot, the task, the row), made once per request and handed
//!   through the phases;
//! - [`admit`](mod@admit): the admit phase (name → resolve → addresses →
//!   taint, each step decided by `policy`; ask mode's wait);
//! - [`row`]: the one writer of access-log rows ([`write_row`], [`Row`]);
//! - [`headers`]: what the pipeline reads of a request's headers.
//!
//! Must not parse client connections (that is `conn`), relay bytes (that
//! is `tunnel`/`forward`), or decide anything itself: every rule is a call
//! into `policy`.

mod admit;
mod ctx;
mod headers;
mod req;
mod row;

pub(crate) use admit::Sent;
pub(crate) use ctx::{next_conn_id, task_gone, ConnCtx, ConnSlot};
pub(crate) use headers::{carries_body, host_header, remove_prefixed, strip_sluice_headers};
pub(crate) use req::ReqCtx;
pub(crate) use row::{write_row, Exchange, Row};
