//! The vocabulary every other module shares: the admission [`Operation`],
//! a rule's [`Action`], what a rule reports ([`Violation`]) and what a
//! decision carries ([`Finding`]). It depends on nothing else in the crate.

use std::borrow::Cow;

use serde::Deserialize;

/// Admission operations, spelled as the AdmissionReview spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
    /// `DELETE` (and `deletecollection`, which the API server sends per object).
    Delete,
    /// `CONNECT`: never judged.
    Connect,
}

impl Operation {
    /// The AdmissionReview spelling, e.g. `CREATE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

impl From<&kube_core::admission::Operation> for Operation {
    fn from(op: &kube_core::admission::Operation) -> Self {
        use kube_core::admission::Operation as K;
        match op {
            K::Create => Operation::Create,
            K::Update => Operation::Update,
            K::Delete => Operation::Delete,
            K::Connect => Operation::Connect,
        }
    }
}

/// The teardown guard's name in messages, metrics and exceptions
/// (docs/rules.md); it has no configurable action, so it is not in
/// [`RULE_NAMES`].
pub const TEARDOWN: &str = "teardown";

/// The stable names of the built-in rules (docs/rules.md), in the order findings
/// are reported. They name rules in messages, metrics and the
/// configuration, which checks its `rules` keys against this list below
/// the rules themselves; `rules::RULES` implements one rule per name, in
/// this order, and a test keeps the two equal.
pub const RULE_NAMES: [&str; 21] = [
    "deletion-policy",
    "management-policies",
    "deletion-policy-conflict",
    "init-provider-late-init",
    "init-provider-change",
    "immutable-field",
    "documented-immutable-field",
    "external-name-change",
    "observe-only-external-name",
    "paused-value",
    "paused-delete",
    "deletion-protection",
    "creation-incomplete",
    "connection-secret-ref",
    "reference",
    "composition-immutable-patch",
    "external-identity",
    "adoption",
    "provider-config-exists",
    "provider-config-kind",
    "reconcile-annotations",
];

/// What a rule does when it finds something; ordered `Off < Audit < Warn < Deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum Action {
    /// The rule is not evaluated.
    Off,
    /// Findings are only counted (metrics, audit, policy reports); the
    /// request is allowed with no warning.
    Audit,
    /// Findings become warnings; the request is allowed.
    Warn,
    /// Findings deny the request.
    Deny,
}

impl Action {
    /// The configuration spelling, e.g. `Deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Off => "Off",
            Action::Audit => "Audit",
            Action::Warn => "Warn",
            Action::Deny => "Deny",
        }
    }
}

/// What one rule found wrong, before the configured action is applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// What is wrong, naming the field.
    pub message: String,
    /// How to fix it, when there is a fix to tell.
    pub fix: Option<String>,
    /// Never more than a warning, whatever the configured action.
    pub warn_only: bool,
}

impl Violation {
    /// A violation with a message and no fix.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            fix: None,
            warn_only: false,
        }
    }

    /// Adds the fix to tell the user.
    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    /// Caps the action at Warn.
    pub fn warn_only(mut self) -> Self {
        self.warn_only = true;
        self
    }
}

/// A violation with its rule name and effective action (Audit, Warn or Deny).
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// The rule's stable name, e.g. `immutable-field` or `cel:team-label`.
    pub rule: Cow<'static, str>,
    /// What admission does with it: Audit, Warn or Deny, never Off. A
    /// waived finding is a Warn (the user is told of the waiver).
    pub action: Action,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub fix: Option<String>,
    /// Why the action is not simply the configured one.
    pub note: Option<Note>,
}

/// Why a finding's action differs from the configured one.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// An exception of the configuration waived the finding.
    Waived {
        /// The exception's name.
        exception: String,
        /// When it expires (RFC 3339), if it does.
        expires: Option<String>,
    },
    /// Staged enforcement: the rule warns until it denies.
    Staged {
        /// From when the rule denies (RFC 3339).
        deny_from: String,
    },
}

impl Finding {
    /// The exception that waived this finding, if one did.
    pub fn exception(&self) -> Option<&str> {
        match &self.note {
            Some(Note::Waived { exception, .. }) => Some(exception),
            _ => None,
        }
    }

    /// The finding as the one-line warning admission sends: `rule: text`,
    /// with the waiver or the date enforcement starts.
    pub fn warning(&self) -> String {
        match &self.note {
            None => format!("{}: {}", self.rule, self.message),
            Some(Note::Waived { exception, expires }) => format!(
                "{}: waived by exception {exception} ({}): {}",
                self.rule,
                match expires {
                    Some(t) => format!("expires {t}"),
                    None => "no expiry".to_string(),
                },
                self.message
            ),
            Some(Note::Staged { deny_from }) => format!(
                "{}: {} (staged: this will be denied from {deny_from})",
                self.rule, self.message
            ),
        }
    }

    /// [`Finding::warning`] followed by `. Fix: …` when the finding has a
    /// fix: for warnings whose reader has nowhere else to learn it.
    pub fn warning_with_fix(&self) -> String {
        let mut w = self.warning();
        if let Some(fix) = &self.fix {
            w.push_str(". Fix: ");
            w.push_str(fix);
        }
        w
    }
}
