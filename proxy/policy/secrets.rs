//! Where a task's secret may be swapped in for its placeholder, and the
//! refusal when a placeholder or value would go anywhere else (SPEC §10).
//! Pure: the caller finds the placeholder and says where it is.
//!
//! Must not: find placeholders (`secrets` does), or name a value.

use super::{Refusal, Rule};

/// Where a placeholder was found, as the rule needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Place {
    /// The request is inside an intercepted TLS tunnel (SNI = CONNECT
    /// host = Host, the address sluice's own resolution).
    pub(crate) intercepted: bool,
    /// The target is one of the secret's `hosts`.
    pub(crate) its_host: bool,
    /// The location (a header the secret lists) is enabled for it.
    pub(crate) enabled: bool,
    /// The placeholder itself, unencoded (an encoded placeholder, or the
    /// real value in any form, is never swapped).
    pub(crate) raw_placeholder: bool,
}

/// May the placeholder found at `p` be swapped for the value?
pub(crate) fn may_swap(p: Place) -> bool {
    p.intercepted && p.its_host && p.enabled && p.raw_placeholder
}

/// The refusal for secret `name` found in `location` (`the URL`, `header
/// x-api-key`, `the body`) of a request to `host`. Names the secret, never
/// its value.
pub(crate) fn leak(name: &str, location: &str, host: &str) -> Refusal {
    Refusal::new(
        Rule::SecretLeak,
        format!(
            "the secret {name} (its placeholder or its value) is in {location} of a request to \
             {host}: sluice puts a secret's value only in the headers its [[task.secret]] lists, \
             on intercepted HTTPS requests to its hosts; the secret did not leave (a body is \
             cut before it)"
        ),
    )
}

/// The refusal of a response from a secret's host that may carry its
/// value where the placeholder cannot be put back (`why`).
pub(crate) fn echo_cut(why: &str) -> Refusal {
    Refusal::new(Rule::SecretLeak, why.to_string())
}

/// The refusal of every request of a task quarantined after secret
/// `name` would have leaked.
pub(crate) fn quarantined(name: &str, task: &str) -> Refusal {
    Refusal::new(
        Rule::Quarantined,
        format!(
            "task {task} is quarantined: its secret {name} would have leaked; every request is \
             refused until a person checks and runs: sluice release --task {task}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_raw_placeholder_in_an_enabled_place_is_swapped() {
        let all = Place {
            intercepted: true,
            its_host: true,
            enabled: true,
            raw_placeholder: true,
        };
        assert!(may_swap(all));
        for p in [
            Place {
                intercepted: false,
                ..all
            },
            Place {
                its_host: false,
                ..all
            },
            Place {
                enabled: false,
                ..all
            },
            Place {
                raw_placeholder: false,
                ..all
            },
        ] {
            assert!(!may_swap(p), "{p:?}");
        }
        let r = leak("GITHUB_TOKEN", "the URL", "paste.example.com");
        assert_eq!(r.rule, Rule::SecretLeak);
        assert!(r.reason.contains("GITHUB_TOKEN") && r.reason.contains("paste.example.com"));
    }
}
