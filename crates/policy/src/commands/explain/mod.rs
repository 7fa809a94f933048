//! `mrguard explain`: everything mrguard knows about one MR, as pure
//! functions over the object (with its `managedFields`) and the active
//! configuration.
//!
//! - derived states (docs/managed-resources.md): created, the creation attempt, paused;
//! - the effective management-policy set and what a delete would do to the
//!   external resource now, and whether deletion protection applies;
//! - every value under `spec.forProvider` and `spec.initProvider`: who set it
//!   (from `managedFields`), whether it is immutable under the configuration,
//!   and whether a change to it would be denied now.
//!
//! "Denied now" is not guessed: the change is made to a copy of the object
//! and judged by the validation rules as the UPDATE the API server would
//! send, so CEL rules and per-kind overrides count too.
//!
//! [`analysis`] reads the object; [`render`] writes the text.

mod analysis;
mod render;
#[cfg(test)]
mod tests;

use serde::Serialize;

use crate::admission::decider::Decider;
use crate::admission::model::Finding;
use crate::commands::managed_fields::ManagedFieldsError;

pub use analysis::display_path;
pub use render::render_text;

/// Field managers taken for the provider's own writes. The API server names
/// a manager after the client's user agent; Crossplane providers run a
/// binary called `provider`.
pub const DEFAULT_PROVIDER_MANAGERS: &[&str] = &["provider", "provider-*", "crossplane-*-provider"];

/// Values longer than this many characters are shortened.
const VALUE_WIDTH: usize = 60;

/// How to read the object.
#[derive(Debug, Clone)]
pub struct Options {
    /// Globs (`*`, `?`) of the field managers that are the provider.
    pub provider_managers: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            provider_managers: DEFAULT_PROVIDER_MANAGERS
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

/// Why an object cannot be explained.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExplainError {
    /// `spec.forProvider` is not an object.
    #[error(
        "failed to explain {0}: it is not a managed resource (spec.forProvider is not an object)"
    )]
    NotManaged(String),
    /// `managedFields` is malformed.
    #[error(transparent)]
    ManagedFields(#[from] ManagedFieldsError),
}

/// Everything `mrguard explain` says about one MR.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// The namespace; empty for a cluster-scoped MR.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// Whether the external resource was created, and why mrguard thinks so.
    pub created: Fact,
    /// The state of the creation attempt.
    pub creation: Creation,
    /// Whether reconciliation is paused, and by what.
    pub paused: Fact,
    /// The effective management-policy set.
    pub policies: ManagementPolicies,
    /// What a delete would do to the external resource now.
    pub deletion: Deletion,
    /// Rules that would deny any UPDATE now, whatever it changes.
    pub every_update_denied_by: Vec<String>,
    /// What the validation rules find on the object as it is (as the audit
    /// judges it: a CREATE of this shape).
    pub findings: Vec<FindingSummary>,
    /// The configured exceptions that match this object.
    pub exceptions: Vec<ExceptionSummary>,
    /// Every value under `spec.forProvider` and `spec.initProvider`.
    pub fields: Vec<FieldExplanation>,
    /// Whether the object carried `managedFields` (without them nobody can
    /// tell who set what).
    pub has_managed_fields: bool,
    /// Things to act on.
    pub hints: Vec<String>,
    /// The external identity and the other live MRs that claim it (those
    /// the cluster view's identity index knows).
    pub identity: crate::cluster::identity::report::IdentityReport,
}

/// A yes/no with its reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fact {
    /// Yes or no.
    pub value: bool,
    /// Why.
    pub because: String,
}

/// Where the creation of the external resource stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CreationState {
    /// No create was attempted yet.
    NotAttempted,
    /// The last create succeeded.
    Succeeded,
    /// The last create failed.
    Failed,
    /// A create started and neither succeeded nor failed afterwards: the
    /// provider stops, because it may have leaked an external resource.
    Incomplete,
    /// Attempted, but the times cannot be read.
    Attempted,
}

/// The creation annotations and what they mean.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Creation {
    /// The state.
    pub state: CreationState,
    /// Since when (the time of the annotation that decides the state).
    pub since: Option<String>,
    /// `crossplane.io/external-create-pending`.
    pub pending: Option<String>,
    /// `crossplane.io/external-create-succeeded`.
    pub succeeded: Option<String>,
    /// `crossplane.io/external-create-failed`.
    pub failed: Option<String>,
}

/// The effective management-policy set.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagementPolicies {
    /// The set as mrguard reads it, e.g. `[Observe, Create]`, or the error.
    pub set: String,
    /// Whether `spec.managementPolicies` is absent (the default `[*]`).
    pub defaulted: bool,
    /// Whether the set is one of the 13 supported ones.
    pub valid: bool,
    /// Whether the provider may late-initialize fields.
    pub late_initialize: bool,
}

/// What a delete would do now.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Deletion {
    /// `Delete` or `Orphan`: what happens to the external resource.
    pub outcome: String,
    /// Why (docs/managed-resources.md).
    pub because: String,
    /// What protects the MR from deletion (the annotation, the
    /// configuration); empty when nothing does.
    pub protected_by: Vec<String>,
    /// Whether the protection applies: protected and the outcome is Delete.
    pub protection_applies: bool,
    /// Rules that would deny a DELETE now.
    pub denied_by: Vec<String>,
    /// Warnings a DELETE would get now.
    pub warnings: Vec<String>,
}

/// A rule finding, flattened.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FindingSummary {
    /// The rule.
    pub rule: String,
    /// Audit, Warn or Deny: the action in force now.
    pub action: String,
    /// The message, with the fix when the rule has one.
    pub message: String,
    /// Why the action is not the configured one: the exception that waived
    /// it, or the date a staged rule starts denying.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A configured exception whose `match` covers the object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExceptionSummary {
    /// Its name.
    pub name: String,
    /// The rules it waives.
    pub rules: Vec<String>,
    /// Why it was granted.
    pub reason: String,
    /// When it expires (RFC 3339), if it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// Whether it has expired (and so no longer applies).
    pub expired: bool,
    /// Whether it applies only to requests by some users.
    pub only_some_users: bool,
}

impl From<&Finding> for FindingSummary {
    fn from(f: &Finding) -> Self {
        FindingSummary {
            rule: f.rule.to_string(),
            action: f.action.as_str().to_string(),
            message: match &f.fix {
                Some(fix) => format!("{}. Fix: {fix}", f.message),
                None => f.message.clone(),
            },
            note: match &f.note {
                None => None,
                Some(crate::admission::model::Note::Waived { exception, expires }) => {
                    Some(match expires {
                        Some(t) => format!("waived by exception {exception} (expires {t})"),
                        None => format!("waived by exception {exception}"),
                    })
                }
                Some(crate::admission::model::Note::Staged { deny_from }) => {
                    Some(format!("staged: Deny from {deny_from}"))
                }
            },
        }
    }
}

/// Who set a value, from `managedFields`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SetBy {
    /// A user's field manager (kubectl, a GitOps tool, a composition).
    User,
    /// Only the provider: the value was late-initialized.
    Provider,
    /// No manager owns it (or the object has no `managedFields`).
    Unknown,
}

/// One value under `spec.forProvider` or `spec.initProvider`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldExplanation {
    /// The field path, e.g. `spec.forProvider.tags[team]`.
    pub path: String,
    /// The value as JSON, shortened.
    pub value: String,
    /// Whether the value is a list (shown as one value).
    pub list: bool,
    /// The field managers that own it.
    pub managers: Vec<String>,
    /// Who set it.
    pub set_by: SetBy,
    /// Whether it is, or contains, a configured immutable field.
    pub immutable: bool,
    /// Rules that would deny a change to it now (beyond those that deny any
    /// update).
    pub change_denied_by: Vec<String>,
    /// What to do about it, when something needs doing.
    pub hint: Option<String>,
    /// The CRD's documentation says a change replaces the resource
    /// (docs/documented-immutables.md); absent when the CRD is not known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub documented: Option<DocumentedMark>,
}

/// Where a field's documented immutability comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentedMark {
    /// The documented path, e.g. `spec.forProvider.network[*].subnetId`.
    pub path: String,
    /// The CRD it was derived from.
    pub crd: String,
    /// The sentence of the field's description.
    pub sentence: String,
    /// The case in which a change replaces the resource, if only some.
    pub condition: Option<String>,
}

impl Decider<'_> {
    /// Explains one MR (`mrguard explain`): fields that the kind's CRD
    /// documents as immutable are marked with their source when the
    /// cluster view knows the CRD, and rules that read the cluster judge
    /// the changes.
    pub fn explain(
        &self,
        object: &serde_json::Value,
        options: &Options,
    ) -> Result<Explanation, ExplainError> {
        analysis::explain(self, object, options)
    }
}
