//! secrets: credentials kept out of the task (SPEC §10). The task holds a
//! placeholder; sluice swaps the real value in only where
//! `policy::secrets` allows (an intercepted request to one of the secret's
//! hosts, in a header it lists), refuses the placeholder or the value in
//! any form anywhere else (`secret-leak`), and puts the placeholder back
//! where a response from the secret's host echoes the value.
//!
//! Owns: reading values and keeping placeholders (`store`), the forms a
//! secret can take (`forms`), finding them (`matcher`), and doing the
//! swaps in one exchange (`guard`).
//! Must not: decide (policy does), or write a value to any log, file,
//! metric or message.

mod body;
mod forms;
mod guard;
mod matcher;
mod quarantine;
mod store;

pub(crate) use body::{EchoBody, LeakGuard, Watch};
pub(crate) use guard::{At, Dest, EchoCut, Leak};
pub(crate) use quarantine::Quarantine;
pub(crate) use store::{load_all, read_placeholders, ByTask, SecretError, TaskSecrets};

#[cfg(test)]
mod tests;
