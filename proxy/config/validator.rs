//! validator: the [`Validator`] that collects a config's problems, each
//! with its line and key, and the small checks every section uses
//! (positive numbers, host-name lists).
//!
//! Must not: know any section or key of its own (`sections` and `task`
//! do), or stop at a problem: every problem is collected.

use std::collections::HashSet;

use crate::policy::target::normalize_host;
use crate::policy::Host;

use super::raw::S;
use super::Problem;

/// Collects the problems of one config text while it is checked.
pub(super) struct Validator<'a> {
    pub(super) text: &'a str,
    pub(super) problems: Vec<Problem>,
    /// Things that are valid but probably not meant: shown by `check` and
    /// logged at start and reload; they never refuse a config.
    pub(super) warnings: Vec<Problem>,
}

impl Validator<'_> {
    pub(super) fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    }

    pub(super) fn problem<T>(
        &mut self,
        at: &S<T>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) {
        let line = Some(self.line_of(at.span().start));
        self.problems.push(Problem {
            line,
            key: key.into(),
            message: message.into(),
        });
    }

    pub(super) fn warning<T>(
        &mut self,
        at: &S<T>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) {
        let line = Some(self.line_of(at.span().start));
        self.warnings.push(Problem {
            line,
            key: key.into(),
            message: message.into(),
        });
    }

    pub(super) fn positive(&mut self, v: &Option<S<i64>>, key: &str, default: u64) -> u64 {
        match v {
            None => default,
            Some(s) if *s.get_ref() > 0 => *s.get_ref() as u64,
            Some(s) => {
                self.problem(
                    s,
                    key,
                    format!("must be a positive number, not {}", s.get_ref()),
                );
                default
            }
        }
    }

    /// Host names, each normalised and listed once.
    pub(super) fn host_list(&mut self, items: &[S<String>], key: &str) -> HashSet<String> {
        let mut out = HashSet::new();
        for item in items {
            match normalize_host(item.get_ref()) {
                Ok(Host::Name(n)) => {
                    if !out.insert(n.clone()) {
                        self.problem(item, key, format!("{n} is listed twice"));
                    }
                }
                Ok(Host::Ip(_)) => self.problem(item, key, "expects a host name, not an IP"),
                Err(e) => self.problem(item, key, e.to_string()),
            }
        }
        out
    }
}
