//! The commands layer's error: why a subcommand (`exec`, `env`, `report`)
//! could not do what it was asked, typed by what the person can do about
//! it. Each prints as one sentence after the command's name; the kind
//! picks the exit code (SPEC: 1 refused or failed, 2 usage).
//!
//! Owns: [`CommandError`] and [`Doing`], the one way an OS or library
//! error becomes a sentence naming what was being done.
//! Must not: print, exit, or decide anything (the caller does).

use std::fmt;

/// Why a subcommand stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CommandError {
    /// The command line asked for something that cannot be done as
    /// written (no command, a malformed flag value, a choice left open):
    /// the person changes it. Exit 2.
    #[error("{0}")]
    Usage(String),
    /// The sandbox could not be shown to hold (a namespace shared with
    /// sluice, a capability left): nothing was run.
    #[cfg_attr(not(feature = "exec"), allow(dead_code))]
    #[error("not isolated: {0}")]
    NotIsolated(String),
    /// A system call, file or library step failed, with what it was doing.
    #[error("{doing}: {source}")]
    Failed {
        /// What was being done, as a sentence fragment ("cannot mount /proc").
        doing: String,
        /// The OS's or library's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Something sluice checked is not as it must be (a setup program's
    /// failure, a missing file, a state folder that says stop).
    #[error("{0}")]
    Refused(String),
    /// A step before the command started failed: it was never run.
    #[cfg_attr(not(feature = "exec"), allow(dead_code))]
    #[error("{0}; the command was not run")]
    NotRun(Box<CommandError>),
}

impl CommandError {
    /// The exit code SPEC gives this kind: 2 for usage, 1 otherwise.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            CommandError::Usage(_) => 2,
            CommandError::NotRun(e) => e.exit_code(),
            _ => 1,
        }
    }

    /// This error, failing a step before the command started.
    #[cfg_attr(not(feature = "exec"), allow(dead_code))]
    pub(crate) fn not_run(self) -> CommandError {
        match self {
            CommandError::NotRun(_) => self,
            other => CommandError::NotRun(Box::new(other)),
        }
    }

    /// A refusal: something sluice checked did not hold.
    pub(crate) fn refused(why: impl fmt::Display) -> CommandError {
        CommandError::Refused(why.to_string())
    }
}

/// Names what was being done when a step failed:
/// `fs::read(p).doing(|| format!("cannot read {}", p.display()))`.
pub(crate) trait Doing<T> {
    fn doing<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T, CommandError>;
}

impl<T, E> Doing<T> for Result<T, E>
where
    E: std::error::Error + Send + Sync + 'static,
{
    fn doing<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T, CommandError> {
        self.map_err(|e| CommandError::Failed {
            doing: what().into(),
            source: Box::new(e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_reads_as_one_sentence_with_its_exit_code() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = Err::<(), _>(io)
            .doing(|| "cannot read /proc/self/status")
            .unwrap_err();
        assert!(
            e.to_string().starts_with("cannot read /proc/self/status: "),
            "{e}"
        );
        assert_eq!(e.exit_code(), 1);
        assert!(std::error::Error::source(&e).is_some());
        let u = CommandError::Usage("no command".into());
        assert_eq!((u.to_string().as_str(), u.exit_code()), ("no command", 2));
        let n = CommandError::NotIsolated("the user namespace is sluice's own".into());
        assert_eq!(
            n.to_string(),
            "not isolated: the user namespace is sluice's own"
        );
        assert_eq!(n.exit_code(), 1);
        assert_eq!(CommandError::refused("x").exit_code(), 1);
        let twice = CommandError::refused("sluice is gone").not_run().not_run();
        assert_eq!(twice.to_string(), "sluice is gone; the command was not run");
        assert_eq!(CommandError::Usage("u".into()).not_run().exit_code(), 2);
    }
}
