//! `mrguard plan`: what applying manifests (and deleting objects) will do
//! to the external resources, before anyone applies them (docs/plan.md).
//!
//! For each MR one [`Entry`]: a [`PlanAction`] in the words Terraform users
//! read, the field-level diff of `spec.forProvider`, `spec.initProvider`,
//! the annotations and the policies, each field with a [`Mark`] saying what
//! the change meets, and the findings as `check --live` gives them.
//!
//! Nothing here judges twice: the findings, the verdict and the replacement
//! marks come from [`crate::commands::check::judge_manifest`] (the admission chain of
//! `check --live`); the marks read the findings' fields, `managedFields`
//! ([`crate::commands::managed_fields`]), `status.atProvider` and the policy sets of
//! [`crate::admission::mr`].
//!
//! - [`fields`]: the diff and the mark of each field;
//! - [`action`]: one manifest's or one deletion's entry;
//! - [`select`]: label selectors and the objects a prune would delete;
//! - [`render`]: text and markdown (JSON is the serde form of [`Plan`]).

mod action;
mod fields;
mod render;
mod select;
#[cfg(test)]
mod tests;

use serde::Serialize;
use serde_json::Value;

pub use action::Planner;
pub use render::{render_markdown, render_text, summary_line};
pub use select::{prune_candidates, Selector, SelectorError};

use crate::commands::check::CheckFinding;

/// The schema identifier of `plan -o json` (docs/plan.schema.json).
pub const SCHEMA: &str = "mrguard.io/plan/v1";

/// What applying (or deleting) does to one MR and its external resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PlanAction {
    /// No live object: the provider creates the external resource.
    #[serde(rename = "create")]
    Create,
    /// The provider updates the external resource in place.
    #[serde(rename = "update in place")]
    UpdateInPlace,
    /// Applying changes nothing.
    #[serde(rename = "no change")]
    NoChange,
    /// A change the provider cannot make in place, denied by mrguard.
    #[serde(rename = "replace required (denied)")]
    ReplaceDenied,
    /// A change that replaces the resource, allowed with a warning.
    #[serde(rename = "replace required (documented, warned)")]
    ReplaceWarned,
    /// The management policies keep the provider from writing the change.
    #[serde(rename = "ignored (management policies)")]
    Ignored,
    /// Deleting the MR deletes the external resource.
    #[serde(rename = "delete external")]
    DeleteExternal,
    /// Deleting the MR leaves the external resource in place.
    #[serde(rename = "orphan external")]
    OrphanExternal,
    /// The MR takes over (or only observes) an existing external resource.
    #[serde(rename = "adopt")]
    Adopt,
    /// Not a managed resource: not planned.
    #[serde(rename = "skipped")]
    Skipped,
}

impl PlanAction {
    /// The words of the action, as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanAction::Create => "create",
            PlanAction::UpdateInPlace => "update in place",
            PlanAction::NoChange => "no change",
            PlanAction::ReplaceDenied => "replace required (denied)",
            PlanAction::ReplaceWarned => "replace required (documented, warned)",
            PlanAction::Ignored => "ignored (management policies)",
            PlanAction::DeleteExternal => "delete external",
            PlanAction::OrphanExternal => "orphan external",
            PlanAction::Adopt => "adopt",
            PlanAction::Skipped => "skipped",
        }
    }

    /// The Terraform-like sign of the action.
    pub fn sign(self) -> &'static str {
        match self {
            PlanAction::Create | PlanAction::Adopt => "+",
            PlanAction::UpdateInPlace => "~",
            PlanAction::ReplaceDenied | PlanAction::ReplaceWarned => "-/+",
            PlanAction::DeleteExternal => "-",
            PlanAction::OrphanExternal => "-(orphan)",
            PlanAction::NoChange | PlanAction::Ignored | PlanAction::Skipped => " ",
        }
    }

    /// Whether the action changes anything (for `--detailed-exitcode`).
    pub fn is_change(self) -> bool {
        !matches!(self, PlanAction::NoChange | PlanAction::Skipped)
    }
}

/// What a field's change meets.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Mark {
    /// The provider changes it in place.
    InPlace,
    /// The provider cannot change it in place.
    ForcesReplacement {
        /// `curated` (the configuration's `immutableFields`) or
        /// `documented` (the CRD's documentation).
        source: String,
        /// The rule that found it.
        rule: String,
    },
    /// The provider owns the live value (it late-initialized it, or its
    /// field manager applied it): the apply fights the provider.
    OwnedByProvider {
        /// The provider's field managers that own it.
        managers: Vec<String>,
    },
    /// The provider will not write it.
    Ignored {
        /// Why.
        reason: String,
    },
    /// The field is unchanged, but the external resource has another value.
    Drift {
        /// The value `status.atProvider` reports.
        cloud: Value,
        /// What the provider does about it.
        then: String,
    },
}

impl Mark {
    /// The mark as printed.
    pub fn text(&self) -> String {
        match self {
            Mark::InPlace => "in place".into(),
            Mark::ForcesReplacement { source, .. } => format!("forces replacement ({source})"),
            Mark::OwnedByProvider { managers } => format!(
                "owned by the provider (field manager {})",
                managers.join(", ")
            ),
            Mark::Ignored { .. } => "ignored".into(),
            Mark::Drift { cloud, .. } => format!("drift: cloud has {cloud}"),
        }
    }
}

/// One field of the diff.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldChange {
    /// The field, e.g. `spec.forProvider.tags[team]`.
    pub path: String,
    /// The live value; absent when the apply adds it.
    pub old: Option<Value>,
    /// The value after the apply; absent when the apply removes it.
    pub new: Option<Value>,
    /// What the change meets.
    pub mark: Mark,
}

/// The plan of one manifest or one deletion.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// `Kind/name` or `Kind/namespace/name`.
    pub object: String,
    /// `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// The namespace; empty for a cluster-scoped object.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// The manifest file; absent for a deletion.
    pub file: Option<String>,
    /// The line the manifest's object starts on.
    pub line: Option<usize>,
    /// What happens.
    pub action: PlanAction,
    /// `allowed`, `denied`, `invalid` (the API server would refuse it) or
    /// `skipped`.
    pub verdict: String,
    /// The field-level diff.
    pub fields: Vec<FieldChange>,
    /// mrguard's findings, as `check --live` gives them.
    pub findings: Vec<CheckFinding>,
    /// Warnings the API server would pass on.
    pub warnings: Vec<String>,
    /// Why the API server would refuse it.
    pub invalid: Option<String>,
    /// How it was planned.
    pub notes: Vec<String>,
}

impl Entry {
    /// Whether mrguard (or the API server) would refuse it.
    pub fn is_denied(&self) -> bool {
        self.verdict == "denied" || self.verdict == "invalid"
    }
}

/// How many entries of each kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// `create`.
    pub create: usize,
    /// `adopt`.
    pub adopt: usize,
    /// `update in place`.
    pub update: usize,
    /// Both `replace required` actions.
    pub replace: usize,
    /// `delete external`.
    pub delete: usize,
    /// `orphan external`.
    pub orphan: usize,
    /// `ignored (management policies)`.
    pub ignored: usize,
    /// `no change`.
    pub no_change: usize,
    /// `skipped`.
    pub skipped: usize,
    /// Entries denied or invalid.
    pub denied: usize,
    /// Entries whose action changes something.
    pub changes: usize,
}

/// Every entry, in input order: manifests, then deletions.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The counts.
    pub summary: Summary,
    /// The entries.
    pub entries: Vec<Entry>,
}

impl Plan {
    /// The plan of `entries`, counted.
    pub fn new(entries: Vec<Entry>) -> Self {
        let mut s = Summary::default();
        for e in &entries {
            match e.action {
                PlanAction::Create => s.create += 1,
                PlanAction::Adopt => s.adopt += 1,
                PlanAction::UpdateInPlace => s.update += 1,
                PlanAction::ReplaceDenied | PlanAction::ReplaceWarned => s.replace += 1,
                PlanAction::DeleteExternal => s.delete += 1,
                PlanAction::OrphanExternal => s.orphan += 1,
                PlanAction::Ignored => s.ignored += 1,
                PlanAction::NoChange => s.no_change += 1,
                PlanAction::Skipped => s.skipped += 1,
            }
            s.denied += usize::from(e.is_denied());
            s.changes += usize::from(e.action.is_change());
        }
        Plan {
            schema: SCHEMA,
            summary: s,
            entries,
        }
    }

    /// Whether anything is denied or invalid.
    pub fn any_denied(&self) -> bool {
        self.summary.denied > 0
    }

    /// Whether anything changes.
    pub fn any_change(&self) -> bool {
        self.summary.changes > 0
    }
}
