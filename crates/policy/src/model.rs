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

/// The stable names of the built-in rules (docs/rules.md), in the order findings
/// are reported. They name rules in messages, metrics and the
/// configuration, which checks its `rules` keys against this list below
/// the rules themselves; `rules::RULES` implements one rule per name, in
/// this order, and a test keeps the two equal.
pub const RULE_NAMES: [&str; 17] = [
    "deletion-policy",
    "management-policies",
    "deletion-policy-conflict",
    "init-provider-late-init",
    "init-provider-change",
    "immutable-field",
    "external-name-change",
    "observe-only-external-name",
    "paused-value",
    "paused-delete",
    "deletion-protection",
    "creation-incomplete",
    "connection-secret-ref",
    "reference",
    "external-identity",
    "adoption",
    "provider-config-exists",
];

/// What a rule does when it finds something; ordered `Off < Warn < Deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum Action {
    /// The rule is not evaluated.
    Off,
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

/// A violation with its rule name and effective action (Warn or Deny).
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// The rule's stable name, e.g. `immutable-field` or `cel:team-label`.
    pub rule: Cow<'static, str>,
    /// Warn or Deny, never Off.
    pub action: Action,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub fix: Option<String>,
}
