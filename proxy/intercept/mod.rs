//! intercept: what happens inside a CONNECT tunnel — TLS both ways
//! (terminate with a leaf from sluice's own CA, re-originate each request
//! upstream over verified TLS), plain HTTP sent through CONNECT, and the
//! opaque relay of everything else.
//!
//! After a CONNECT is answered, [`tunnel_session`] reads the client's first
//! bytes ([`hello`]); `policy::decide_tunnel_start` decides on them (a
//! ClientHello must be readable and name the CONNECT host, `sni-mismatch`
//! otherwise). An intercepted tunnel, or plain HTTP, is then served by
//! [`inner`], every request going through `forward::relay`, the same
//! pipeline as plain HTTP. Anything else is relayed opaquely and counts as
//! carrying a body. A refused CONNECT of a task that intercepts is
//! answered inside TLS ([`Refused`]), so the client shows why. Must not
//! decide on targets itself.

mod hello;
mod inner;
mod refused;
mod session;

pub use hello::{Peeked, StartReader};
pub(crate) use refused::Refused;
pub(crate) use session::{tunnel_session, Tunnel};
