//! The one verdict vocabulary of sluice: what policy says of a request, a
//! tunnel or an open connection, and the four spellings the access log,
//! metrics, the admin API and `report` use for it. Nothing else spells a
//! verdict.

use super::{Refusal, Rule};

/// `decision` in the access log: within policy.
pub(crate) const ALLOW: &str = "allow";
/// `decision` in the access log: let through by a shadow mode.
pub(crate) const WOULD_DENY: &str = "would_deny";
/// `decision` in the access log: refused.
pub(crate) const DENY: &str = "deny";
/// `decision` in the access log: nothing was refused, but the request
/// could not be carried out (`dns-failed`, `upstream-failed`,
/// `upstream-timeout`; SPEC §6).
pub(crate) const ERROR: &str = "error";
/// Every spelling, indexed by [`Verdict::index`].
pub(crate) const LABELS: [&str; 4] = [ALLOW, DENY, WOULD_DENY, ERROR];

/// What policy decided. `T` is what an admitted decision carries (the
/// [`super::Admission`] with its checked addresses, or nothing).
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict<T = ()> {
    /// Within policy.
    Allow(T),
    /// Outside policy, but a shadow mode let it through; the refusal is
    /// what enforce mode would have said, and is logged.
    WouldDeny(T, Refusal),
    /// Refused.
    Deny(Refusal),
}

impl<T> Verdict<T> {
    /// Allowed, or allowed with the refusal shadow mode let through.
    pub(crate) fn admit(payload: T, would_deny: Option<Refusal>) -> Verdict<T> {
        match would_deny {
            Some(r) => Verdict::WouldDeny(payload, r),
            None => Verdict::Allow(payload),
        }
    }

    /// The refusal, enforced or not.
    pub(crate) fn refusal(&self) -> Option<&Refusal> {
        match self {
            Verdict::Allow(_) => None,
            Verdict::WouldDeny(_, r) | Verdict::Deny(r) => Some(r),
        }
    }

    pub(crate) fn rule(&self) -> Option<Rule> {
        self.refusal().map(|r| r.rule)
    }

    /// Index into [`LABELS`]. A `Deny` under a failure rule is an error.
    pub(crate) fn index(&self) -> usize {
        match self {
            Verdict::Allow(_) => 0,
            Verdict::Deny(r) if r.rule.is_failure() => 3,
            Verdict::Deny(_) => 1,
            Verdict::WouldDeny(..) => 2,
        }
    }

    /// The access log's spelling.
    pub(crate) fn label(&self) -> &'static str {
        LABELS[self.index()]
    }

    pub(crate) fn is_deny(&self) -> bool {
        matches!(self, Verdict::Deny(_))
    }

    /// Splits an admitted verdict into its payload and the verdict without
    /// it; a refusal comes back as `Err`.
    pub(crate) fn split(self) -> Result<(T, Verdict), Refusal> {
        match self {
            Verdict::Allow(p) => Ok((p, Verdict::Allow(()))),
            Verdict::WouldDeny(p, r) => Ok((p, Verdict::WouldDeny((), r))),
            Verdict::Deny(r) => Err(r),
        }
    }

    /// The same verdict with another payload.
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> Verdict<U> {
        match self {
            Verdict::Allow(p) => Verdict::Allow(f(p)),
            Verdict::WouldDeny(p, r) => Verdict::WouldDeny(f(p), r),
            Verdict::Deny(r) => Verdict::Deny(r),
        }
    }

    /// The shadow-mode refusal of an admitted verdict (None for a refusal).
    pub(crate) fn would_deny(&self) -> Option<&Refusal> {
        match self {
            Verdict::WouldDeny(_, r) => Some(r),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_parts() {
        let r = Refusal::new(Rule::NotAllowed, "no");
        let cases: [(Verdict<u8>, &str, Option<Rule>); 3] = [
            (Verdict::Allow(1), ALLOW, None),
            (
                Verdict::WouldDeny(2, r.clone()),
                WOULD_DENY,
                Some(Rule::NotAllowed),
            ),
            (Verdict::Deny(r.clone()), DENY, Some(Rule::NotAllowed)),
        ];
        for (v, label, rule) in cases {
            assert_eq!(v.label(), label);
            assert_eq!(v.rule(), rule);
            assert_eq!(v.is_deny(), label == DENY);
            assert_eq!(v.would_deny().is_some(), label == WOULD_DENY);
            match v.split() {
                Ok((p, rest)) => {
                    assert_ne!(label, DENY);
                    assert_eq!(rest.label(), label);
                    assert!(p == 1 || p == 2);
                }
                Err(got) => assert_eq!((label, got), (DENY, r.clone())),
            }
        }
        for &rule in Rule::ALL {
            let v: Verdict = Verdict::Deny(Refusal::new(rule, "x"));
            let failure = matches!(
                rule,
                Rule::DnsFailed | Rule::UpstreamFailed | Rule::UpstreamTimeout
            );
            assert_eq!(v.label(), if failure { ERROR } else { DENY }, "{rule}");
        }
        assert_eq!(Verdict::admit(3, None), Verdict::Allow(3));
        assert_eq!(
            Verdict::admit(3, Some(r.clone())).map(|x| x + 1),
            Verdict::WouldDeny(4, r)
        );
    }
}
