//! The one place that decides what a violation does, for every webhook:
//! the configured action as of a time (staged enforcement), then the
//! configuration's exceptions matched against the object judged. The MR
//! rules, the Composition patches and the teardown guard all decide
//! through it, below them, so a waiver or a staged date reads the same
//! whichever webhook answers.

use std::borrow::Cow;

use crate::admission::config::{Config, RuleAction, Subject};
use crate::admission::model::{Action, Finding, Note, Violation};

/// What a finding is judged against besides its rule's action: the object
/// exceptions are matched with and the time staged actions and expiries
/// are read at.
pub(crate) struct Judging<'a> {
    pub(crate) config: &'a Config,
    pub(crate) subject: Subject<'a>,
    pub(crate) now: jiff::Timestamp,
}

impl Judging<'_> {
    /// The one place that decides what a violation does: the configured
    /// action as of `now` (Off, Audit, Warn, Deny, or a staged Deny that
    /// warns until its date), capped for warn-only violations, then waived
    /// by the first exception that matches. `None` when the rule is Off.
    pub(crate) fn decide(
        &self,
        rule: Cow<'static, str>,
        configured: RuleAction,
        v: Violation,
    ) -> Option<Finding> {
        let (mut action, deny_from) = configured.at(self.now);
        if v.warn_only {
            action = action.min(Action::Warn);
        }
        if action == Action::Off {
            return None;
        }
        let mut note = match deny_from {
            // A warn-only violation never denies, so nothing is staged for it.
            Some(t) if !v.warn_only => Some(Note::Staged {
                deny_from: t.to_string(),
            }),
            _ => None,
        };
        if let Some(e) = self.config.exception_for(&rule, &self.subject, self.now) {
            // Waived: allowed, and the user is told which exception waived it.
            action = Action::Warn;
            note = Some(Note::Waived {
                exception: e.name.clone(),
                expires: e.expires.map(|t| t.to_string()),
            });
        }
        Some(Finding {
            rule,
            action,
            message: v.message,
            fix: v.fix,
            note,
        })
    }
}
