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

use serde::Serialize;
use serde_json::Value;
use wildmatch::WildMatch;

use crate::admission;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::fieldpath::{FieldPath, Segment};
use crate::managed_fields::{self, ManagedEntry, ManagedFieldsError, Step};
use crate::model::{Action, Finding};
use crate::mr::{self, DeletionOutcome, Mr, PolicyAction, PolicySet};
use crate::review::RequestBuilder;

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
    pub policies: Policies,
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
    pub identity: crate::identity::report::IdentityReport,
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
pub struct Policies {
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
                Some(crate::model::Note::Waived { exception, expires }) => Some(match expires {
                    Some(t) => format!("waived by exception {exception} (expires {t})"),
                    None => format!("waived by exception {exception}"),
                }),
                Some(crate::model::Note::Staged { deny_from }) => {
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

/// Explains one MR under `config`.
pub fn explain(
    object: &Value,
    config: &Config,
    options: &Options,
) -> Result<Explanation, ExplainError> {
    explain_in(object, config, options, Cluster::empty())
}

/// [`explain`] in a cluster: fields that the kind's CRD documents as
/// immutable are marked with their source, and rules that read the
/// cluster judge the changes.
pub fn explain_in(
    object: &Value,
    config: &Config,
    options: &Options,
    cluster: &Cluster,
) -> Result<Explanation, ExplainError> {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    if !mr::is_managed(object) {
        return Err(ExplainError::NotManaged(crate::offline::label(object)));
    }
    let m = Mr(object);
    let entries = managed_fields::entries(object)?;
    let globs: Vec<WildMatch> = options
        .provider_managers
        .iter()
        .map(|g| WildMatch::new(g))
        .collect();
    let is_provider = |e: &ManagedEntry| globs.iter().any(|g| g.matches(&e.manager));

    let policies = policies(&m);
    let deletion = deletion(object, config);
    let every_update_denied_by = denials(config, cluster, object, object);
    let findings = admission::validate_in(
        &RequestBuilder::create(object.clone()).build(),
        config,
        cluster,
    )
    .findings
    .iter()
    .map(FindingSummary::from)
    .collect();

    let (group, kind) = {
        let api_version = text("/apiVersion");
        let group = api_version
            .rsplit_once('/')
            .map(|(g, _)| g.to_string())
            .unwrap_or_default();
        (group, text("/kind"))
    };
    let immutable_paths: Vec<Vec<String>> = config
        .resource(&group, &kind)
        .immutable_fields
        .iter()
        .flat_map(|p| p.select(object))
        .filter_map(|(at, _)| FieldPath::parse(&at).ok())
        .map(|p| keys_of(&p))
        .collect();

    let documented = cluster.documented().get(&group, &kind);
    let api_version = text("/apiVersion");
    let version = api_version.rsplit_once('/').map_or("", |(_, v)| v);
    let mut fields = Vec::new();
    for root in ["forProvider", "initProvider"] {
        if let Some(v) = object.pointer(&format!("/spec/{root}")) {
            let mut keys = vec!["spec".to_string(), root.to_string()];
            collect_rows(v, &mut keys, &mut |keys, value| {
                let mut row = field_row(
                    object,
                    config,
                    cluster,
                    &entries,
                    &is_provider,
                    &immutable_paths,
                    &every_update_denied_by,
                    keys,
                    value,
                );
                row.documented = documented
                    .as_ref()
                    .and_then(|k| documented_mark(k, version, keys, row.list));
                fields.push(row);
            });
        }
    }

    let mut hints = Vec::new();
    let paused = paused(&m);
    if paused.value {
        hints.push(format!(
            "reconciliation is paused ({}): changes to spec.forProvider reach the external resource only once it is unpaused",
            paused.because
        ));
    }
    let creation = creation(&m);
    if creation.state == CreationState::Incomplete {
        hints.push(format!(
            "creation is incomplete since {}: check the external system for a leaked resource, then remove the {} annotation when safe",
            creation.since.as_deref().unwrap_or("?"),
            mr::CREATE_PENDING
        ));
    }
    if entries.is_empty() {
        hints.push(
            "the object has no managedFields, so who set each value is unknown: read it with `kubectl get -o yaml --show-managed-fields`"
                .to_string(),
        );
    }
    hints.extend(fields.iter().filter_map(|f| f.hint.clone()));
    let now = jiff::Timestamp::now();
    let subject = crate::config::Subject {
        group: &group,
        kind: &kind,
        name: m.name(),
        namespace: object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(""),
        user: "",
    };
    let exceptions = config
        .exceptions
        .iter()
        .filter(|x| x.matches_object(&subject))
        .map(|x| ExceptionSummary {
            name: x.name.clone(),
            rules: x.rules.clone(),
            reason: x.reason.clone(),
            expires: x.expires.map(|t| t.to_string()),
            expired: x.expired(now),
            only_some_users: x.has_users(),
        })
        .collect();

    Ok(Explanation {
        api_version: text("/apiVersion"),
        kind,
        namespace: text("/metadata/namespace"),
        name: text("/metadata/name"),
        created: created(&m),
        creation,
        paused,
        policies,
        deletion,
        every_update_denied_by,
        findings,
        exceptions,
        fields,
        has_managed_fields: !entries.is_empty(),
        hints,
        identity: {
            let index = cluster.identities();
            crate::identity::report::IdentityReport::of(object, config, index, !index.is_empty())
        },
    })
}

fn keys_of(p: &FieldPath) -> Vec<String> {
    p.segments()
        .iter()
        .map(|s| match s {
            Segment::Field(k) | Segment::Key(k) => k.clone(),
            Segment::Wildcard => "*".to_string(),
        })
        .collect()
}

/// Walks objects down to their values: scalars, lists (whole) and empty
/// objects are rows.
fn collect_rows(v: &Value, keys: &mut Vec<String>, row: &mut dyn FnMut(&[String], &Value)) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                keys.push(k.clone());
                collect_rows(child, keys, row);
                keys.pop();
            }
        }
        _ => row(keys, v),
    }
}

/// `spec.forProvider.tags[team]`: keys that hold dots, slashes, brackets or
/// spaces are written in brackets, as the configuration writes them.
pub fn display_path(keys: &[String]) -> String {
    let mut out = String::new();
    for k in keys {
        if k.contains(['.', '/', '[', ']', ' ']) || k.is_empty() {
            out.push('[');
            out.push_str(k);
            out.push(']');
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(k);
        }
    }
    out
}

fn shorten(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > VALUE_WIDTH {
        let cut: String = s.chars().take(VALUE_WIDTH - 1).collect();
        format!("{cut}…")
    } else {
        s
    }
}

#[allow(clippy::too_many_arguments)]
fn field_row(
    object: &Value,
    config: &Config,
    cluster: &Cluster,
    entries: &[ManagedEntry],
    is_provider: &dyn Fn(&ManagedEntry) -> bool,
    immutable_paths: &[Vec<String>],
    baseline: &[String],
    keys: &[String],
    value: &Value,
) -> FieldExplanation {
    let list = value.is_array();
    let steps: Vec<Step<'_>> = keys.iter().map(|k| Step::Field(k)).collect();
    let owners: Vec<&ManagedEntry> = entries
        .iter()
        .filter(|e| e.subresource.is_empty() && e.owns(&steps, list))
        .collect();
    let mut managers: Vec<String> = Vec::new();
    for e in &owners {
        if !managers.contains(&e.manager) {
            managers.push(e.manager.clone());
        }
    }
    let set_by = if owners.is_empty() {
        SetBy::Unknown
    } else if owners.iter().all(|e| is_provider(e)) {
        SetBy::Provider
    } else {
        SetBy::User
    };
    let immutable = immutable_paths.iter().any(|p| {
        let n = p.len().min(keys.len());
        p[..n] == keys[..n]
    });
    let mut changed = object.clone();
    if let Some(slot) = pointer_mut(&mut changed, keys) {
        *slot = perturb(slot);
    }
    let change_denied_by = denials(config, cluster, object, &changed)
        .into_iter()
        .filter(|r| !baseline.contains(r))
        .collect();
    let path = display_path(keys);
    let hint = (list && set_by == SetBy::Provider).then(|| {
        format!(
            "{path} is a list the provider late-initialized ({}): it is enforced from now on and fights changes made outside Crossplane; \
             leave LateInitialize out of spec.managementPolicies, or set the field yourself",
            managers.join(", ")
        )
    });
    FieldExplanation {
        path,
        value: shorten(value),
        list,
        managers,
        set_by,
        immutable,
        change_denied_by,
        hint,
        documented: None,
    }
}

/// The documented mark of a row at `keys`: the field itself, a documented
/// block that holds it, or (for a list row) documented fields inside it.
fn documented_mark(
    kind: &crate::documented::KindFields,
    version: &str,
    keys: &[String],
    list: bool,
) -> Option<DocumentedMark> {
    kind.in_version(version).find_map(|f| {
        let segs = f.path.segments();
        let names: Vec<Option<&str>> = segs
            .iter()
            .map(|s| match s {
                Segment::Field(n) | Segment::Key(n) => Some(n.as_str()),
                Segment::Wildcard => None,
            })
            .collect();
        let same_prefix = |n: usize| {
            names.len() >= n
                && keys.len() >= n
                && names[..n]
                    .iter()
                    .zip(&keys[..n])
                    .all(|(a, b)| *a == Some(b.as_str()))
        };
        // The field itself or a documented ancestor block.
        let holds = names.len() <= keys.len() && same_prefix(names.len());
        // A list row whose items hold documented fields.
        let inside = list
            && names.len() > keys.len()
            && same_prefix(keys.len())
            && names[keys.len()].is_none();
        (holds || inside).then(|| DocumentedMark {
            path: f.path.as_str().to_string(),
            crd: kind.crd.clone(),
            sentence: f.source.sentence.clone(),
            condition: f.source.condition.clone(),
        })
    })
}

fn pointer_mut<'a>(v: &'a mut Value, keys: &[String]) -> Option<&'a mut Value> {
    let mut cur = v;
    for k in keys {
        cur = cur.as_object_mut()?.get_mut(k)?;
    }
    Some(cur)
}

/// A different value of the same shape.
fn perturb(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(format!("{s}-changed")),
        Value::Bool(b) => Value::Bool(!b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Value::from(i.wrapping_add(1)),
            None => Value::from(n.as_f64().unwrap_or(0.0) + 1.0),
        },
        Value::Array(a) if a.is_empty() => Value::Array(vec![Value::from("changed")]),
        Value::Array(a) => Value::Array(a[..a.len() - 1].to_vec()),
        Value::Object(_) => serde_json::json!({"changed": "changed"}),
        Value::Null => Value::from("changed"),
    }
}

/// The rules that deny the UPDATE from `old` to `new`, by nobody exempt.
fn denials(config: &Config, cluster: &Cluster, old: &Value, new: &Value) -> Vec<String> {
    let req = RequestBuilder::update(old.clone(), new.clone()).build();
    let mut rules: Vec<String> = admission::validate_in(&req, config, cluster)
        .findings
        .iter()
        .filter(|f| f.action == Action::Deny)
        .map(|f| f.rule.to_string())
        .collect();
    rules.dedup();
    rules
}

fn created(m: &Mr<'_>) -> Fact {
    if let Some(t) = m.annotation(mr::CREATE_SUCCEEDED) {
        return Fact {
            value: true,
            because: format!("{} is {t}", mr::CREATE_SUCCEEDED),
        };
    }
    if m.is_created() {
        return Fact {
            value: true,
            because: "the Ready condition is True".into(),
        };
    }
    Fact {
        value: false,
        because: format!(
            "no {} annotation and no True Ready condition",
            mr::CREATE_SUCCEEDED
        ),
    }
}

fn creation(m: &Mr<'_>) -> Creation {
    let get = |k| m.annotation(k).map(str::to_string);
    let (pending, succeeded, failed) = (
        get(mr::CREATE_PENDING),
        get(mr::CREATE_SUCCEEDED),
        get(mr::CREATE_FAILED),
    );
    let time = |s: &Option<String>| s.as_deref().and_then(|s| s.parse::<jiff::Timestamp>().ok());
    let (state, since) = if m.creation_incomplete() {
        (CreationState::Incomplete, pending.clone())
    } else if !m.creation_attempted() {
        (CreationState::NotAttempted, None)
    } else {
        match (time(&succeeded), time(&failed)) {
            (Some(s), Some(f)) if f > s => (CreationState::Failed, failed.clone()),
            (Some(_), _) => (CreationState::Succeeded, succeeded.clone()),
            (None, Some(_)) => (CreationState::Failed, failed.clone()),
            (None, None) if succeeded.is_some() => (CreationState::Succeeded, succeeded.clone()),
            (None, None) => (CreationState::Attempted, pending.clone()),
        }
    };
    Creation {
        state,
        since,
        pending,
        succeeded,
        failed,
    }
}

fn paused(m: &Mr<'_>) -> Fact {
    let annotation = m.annotation(mr::PAUSED);
    if annotation == Some("true") {
        return Fact {
            value: true,
            because: format!("the annotation {}: \"true\"", mr::PAUSED),
        };
    }
    if m.is_paused() {
        return Fact {
            value: true,
            because: "spec.managementPolicies is [] (the paused set)".into(),
        };
    }
    Fact {
        value: false,
        because: match annotation {
            Some(v) => format!(
                "the annotation {} is {v:?}; only \"true\" pauses",
                mr::PAUSED
            ),
            None => "no pause annotation and a non-empty policy set".into(),
        },
    }
}

fn policies(m: &Mr<'_>) -> Policies {
    let defaulted = m.spec("managementPolicies").is_none();
    match m.policies() {
        Ok(set) => Policies {
            set: set.to_string(),
            defaulted,
            valid: true,
            late_initialize: set.can_late_initialize(),
        },
        Err(e) => Policies {
            set: e.to_string(),
            defaulted,
            valid: false,
            late_initialize: false,
        },
    }
}

fn deletion(object: &Value, config: &Config) -> Deletion {
    let m = Mr(object);
    let policy = m.deletion_policy().and_then(Value::as_str);
    let shown_policy = match (policy, m.deletion_policy()) {
        (Some(p), _) => format!("deletionPolicy {p}"),
        (None, Some(v)) => format!("deletionPolicy {v} (not a string)"),
        (None, None) => "deletionPolicy absent (Delete)".to_string(),
    };
    let outcome = m.deletion_outcome();
    let because = match m.policies() {
        Err(e) => format!("managementPolicies cannot be read ({e}); mrguard assumes Delete"),
        Ok(set) if set.is_default() => format!("{shown_policy} with managementPolicies [*]"),
        Ok(set) if set.has(PolicyAction::Delete) => {
            if policy == Some("Orphan") {
                format!("managementPolicies {set} contains Delete, which overrides deletionPolicy Orphan")
            } else {
                format!("managementPolicies {set} contains Delete")
            }
        }
        Ok(set) if set == PolicySet::PAUSED => {
            format!("managementPolicies [] (paused) lacks Delete, so {shown_policy} has no effect")
        }
        Ok(set) => {
            format!("managementPolicies {set} lacks Delete, so {shown_policy} has no effect")
        }
    };
    let (group, kind) = {
        let av = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        (
            av.rsplit_once('/').map(|(g, _)| g).unwrap_or(""),
            object.get("kind").and_then(Value::as_str).unwrap_or(""),
        )
    };
    let mut protected_by = Vec::new();
    if m.annotation(mr::DELETION_PROTECTION) == Some("true") {
        protected_by.push(format!(
            "the annotation {}: \"true\"",
            mr::DELETION_PROTECTION
        ));
    }
    if config.resource(group, kind).deletion_protection {
        protected_by.push("deletionProtection in mrguard's configuration".to_string());
    }
    let decision = admission::validate(&RequestBuilder::delete(object.clone()).build(), config);
    let mut denied_by: Vec<String> = decision
        .findings
        .iter()
        .filter(|f| f.action == Action::Deny)
        .map(|f| f.rule.to_string())
        .collect();
    denied_by.dedup();
    Deletion {
        outcome: match outcome {
            DeletionOutcome::Delete => "Delete",
            DeletionOutcome::Orphan => "Orphan",
        }
        .to_string(),
        because,
        protection_applies: !protected_by.is_empty() && outcome == DeletionOutcome::Delete,
        protected_by,
        denied_by,
        warnings: decision
            .findings
            .iter()
            .filter(|f| f.action == Action::Warn)
            .map(|f| format!("{}: {}", f.rule, f.message))
            .collect(),
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The explanation as text for a terminal.
pub fn render_text(e: &Explanation) -> String {
    let mut out = String::new();
    let scope = if e.namespace.is_empty() {
        "cluster-scoped".to_string()
    } else {
        format!("namespace {}", e.namespace)
    };
    out.push_str(&format!(
        "{}/{} ({}, {scope})\n",
        e.kind, e.name, e.api_version
    ));
    let c = &e.creation;
    let creation = match c.state {
        CreationState::NotAttempted => "not attempted".to_string(),
        CreationState::Succeeded => format!("succeeded at {}", c.since.as_deref().unwrap_or("?")),
        CreationState::Failed => format!(
            "last attempt failed at {}",
            c.since.as_deref().unwrap_or("?")
        ),
        CreationState::Incomplete => format!(
            "INCOMPLETE since {} (pending is later than succeeded/failed; the provider stopped)",
            c.since.as_deref().unwrap_or("?")
        ),
        CreationState::Attempted => "attempted (times unreadable)".to_string(),
    };
    let d = &e.deletion;
    let protection = if d.protected_by.is_empty() {
        "none".to_string()
    } else if d.protection_applies {
        format!(
            "{} (applies: the outcome is Delete)",
            d.protected_by.join(" and ")
        )
    } else {
        format!(
            "{} (does not apply: the outcome is Orphan)",
            d.protected_by.join(" and ")
        )
    };
    let verdict = |denied: &[String]| {
        if denied.is_empty() {
            "allowed".to_string()
        } else {
            format!("denied by {}", denied.join(", "))
        }
    };
    let rows: [(&str, String); 10] = [
        (
            "created",
            format!("{} ({})", yes_no(e.created.value), e.created.because),
        ),
        ("creation", creation),
        (
            "paused",
            format!("{} ({})", yes_no(e.paused.value), e.paused.because),
        ),
        (
            "policies",
            if e.policies.defaulted {
                format!(
                    "{} (managementPolicies absent: the default)",
                    e.policies.set
                )
            } else if e.policies.valid {
                e.policies.set.clone()
            } else {
                format!("INVALID: {}", e.policies.set)
            },
        ),
        ("on delete", format!("{} ({})", d.outcome, d.because)),
        ("protection", protection),
        ("delete now", verdict(&d.denied_by)),
        (
            "update now",
            if e.every_update_denied_by.is_empty() {
                "allowed unless a field below says otherwise".to_string()
            } else {
                format!(
                    "every update denied by {}",
                    e.every_update_denied_by.join(", ")
                )
            },
        ),
        (
            "findings",
            if e.findings.is_empty() {
                "none".to_string()
            } else {
                e.findings
                    .iter()
                    .map(|f| match &f.note {
                        Some(n) => format!("{} {} [{n}]: {}", f.action, f.rule, f.message),
                        None => format!("{} {}: {}", f.action, f.rule, f.message),
                    })
                    .collect::<Vec<_>>()
                    .join("\n              ")
            },
        ),
        (
            "exceptions",
            if e.exceptions.is_empty() {
                "none".to_string()
            } else {
                e.exceptions
                    .iter()
                    .map(|x| {
                        let mut s = format!("{} waives {}", x.name, x.rules.join(", "));
                        match (&x.expires, x.expired) {
                            (Some(t), true) => {
                                s.push_str(&format!(" (EXPIRED at {t}: no longer applies)"))
                            }
                            (Some(t), false) => s.push_str(&format!(" until {t}")),
                            _ => {}
                        }
                        if x.only_some_users {
                            s.push_str(" for some users");
                        }
                        s.push_str(&format!(": {}", x.reason));
                        s
                    })
                    .collect::<Vec<_>>()
                    .join("\n              ")
            },
        ),
    ];
    for (k, v) in rows {
        out.push_str(&format!("  {k:<11} {v}\n"));
    }
    for w in &d.warnings {
        out.push_str(&format!("  {:<11} a delete would warn: {w}\n", ""));
    }
    for l in e.identity.lines() {
        let (k, v) = l.split_once(": ").unwrap_or(("", &l));
        out.push_str(&format!("  {k:<11} {v}\n"));
    }
    if !e.fields.is_empty() {
        out.push('\n');
        let header = ["FIELD", "VALUE", "SET BY", "IMMUTABLE", "CHANGE NOW"];
        let rows: Vec<[String; 5]> = e
            .fields
            .iter()
            .map(|f| {
                let by = match f.set_by {
                    SetBy::Unknown => "?".to_string(),
                    SetBy::Provider => format!("{} (late-init)", f.managers.join(", ")),
                    SetBy::User => f.managers.join(", "),
                };
                [
                    f.path.clone(),
                    f.value.clone(),
                    by,
                    match (&f.documented, f.immutable) {
                        (_, true) => "yes".to_string(),
                        (Some(d), false) if d.condition.is_some() => "documented, if".to_string(),
                        (Some(_), false) => "documented".to_string(),
                        (None, false) => "no".to_string(),
                    },
                    verdict(&f.change_denied_by),
                ]
            })
            .collect();
        let mut widths = header.map(|h| h.chars().count());
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r.iter()) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: [&str; 5]| {
            let mut s = String::from(" ");
            for (i, c) in cells.iter().enumerate() {
                let pad = widths[i].saturating_sub(c.chars().count());
                s.push(' ');
                s.push_str(c);
                if i + 1 < cells.len() {
                    s.push_str(&" ".repeat(pad + 2));
                }
            }
            s.trim_end().to_string() + "\n"
        };
        out.push_str(&line(header));
        for r in &rows {
            out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4]]));
        }
    }
    let documented: Vec<&FieldExplanation> = e
        .fields
        .iter()
        .filter(|f| f.documented.is_some() && !f.immutable)
        .collect();
    if !documented.is_empty() {
        out.push_str(
            "\ndocumented immutable (the CRD's descriptions; rule documented-immutable-field):\n",
        );
        for f in documented {
            let Some(d) = &f.documented else { continue };
            out.push_str(&format!("  {}: {:?} ({})\n", f.path, d.sentence, d.crd));
            if let Some(c) = &d.condition {
                out.push_str(&format!("    condition: {c:?}\n"));
            }
        }
    }
    if !e.hints.is_empty() {
        out.push_str("\nhints:\n");
        for h in &e.hints {
            out.push_str(&format!("  - {h}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CFG: &str = "resources:\n  - apiGroups: ['ec2.aws.upbound.io']\n    kinds: ['VPC', 'Subnet']\n    externalName: IdentifierFromProvider\n    immutableFields: [spec.forProvider.region, 'spec.forProvider.subnets[*].zone']\n    deletionProtection: true\n";

    fn vpc() -> Value {
        json!({
            "apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC",
            "metadata": {
                "name": "sample-vpc",
                "annotations": {
                    "crossplane.io/external-name": "vpc-0abc",
                    "crossplane.io/external-create-pending": "2024-05-01T10:00:00Z",
                    "crossplane.io/external-create-succeeded": "2024-05-01T10:00:02Z"
                },
                "managedFields": [
                    {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "ec2.aws.upbound.io/v1beta1",
                     "time": "2024-05-01T09:59:58Z", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": {".": {}, "f:forProvider": {".": {}, "f:cidrBlock": {}, "f:region": {},
                                   "f:tags": {".": {}, "f:Name": {}}}}}},
                    {"manager": "provider", "operation": "Update", "apiVersion": "ec2.aws.upbound.io/v1beta1",
                     "time": "2024-05-01T10:00:05Z", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:annotations": {"f:crossplane.io/external-name": {}}},
                                  "f:spec": {"f:forProvider": {"f:instanceTenancy": {}, "f:ipv6Pools": {},
                                             "f:tags": {"f:crossplane-kind": {}}}}}},
                    {"manager": "provider", "operation": "Update", "subresource": "status",
                     "fieldsV1": {"f:status": {"f:atProvider": {".": {}}}}}
                ]
            },
            "spec": {
                "deletionPolicy": "Delete",
                "forProvider": {
                    "cidrBlock": "172.16.0.0/16", "region": "us-west-1",
                    "instanceTenancy": "default", "ipv6Pools": ["pool-1"],
                    "tags": {"Name": "DemoVpc", "crossplane-kind": "vpc.ec2.aws.upbound.io"}
                },
                "managementPolicies": ["*"]
            }
        })
    }

    fn row<'a>(e: &'a Explanation, path: &str) -> &'a FieldExplanation {
        e.fields
            .iter()
            .find(|f| f.path == path)
            .unwrap_or_else(|| panic!("no row {path}: {:?}", e.fields))
    }

    #[test]
    fn a_created_vpc() {
        let cfg = Config::from_yaml(CFG).unwrap();
        let e = explain(&vpc(), &cfg, &Options::default()).unwrap();
        assert!(e.created.value);
        assert_eq!(e.creation.state, CreationState::Succeeded);
        assert_eq!(e.creation.since.as_deref(), Some("2024-05-01T10:00:02Z"));
        assert!(!e.paused.value);
        assert_eq!(e.policies.set, "[*]");
        assert_eq!(e.deletion.outcome, "Delete");
        assert!(e.deletion.protection_applies);
        assert_eq!(e.deletion.denied_by, ["deletion-protection"]);
        assert!(e.every_update_denied_by.is_empty());
        assert!(e.has_managed_fields);

        let region = row(&e, "spec.forProvider.region");
        assert_eq!(region.value, "\"us-west-1\"");
        assert_eq!(region.managers, ["kubectl-client-side-apply"]);
        assert_eq!(region.set_by, SetBy::User);
        assert!(region.immutable);
        assert_eq!(region.change_denied_by, ["immutable-field"]);

        let cidr = row(&e, "spec.forProvider.cidrBlock");
        assert!(!cidr.immutable && cidr.change_denied_by.is_empty());

        let tenancy = row(&e, "spec.forProvider.instanceTenancy");
        assert_eq!(tenancy.set_by, SetBy::Provider);
        assert!(tenancy.hint.is_none(), "scalars are not flagged");

        let pools = row(&e, "spec.forProvider.ipv6Pools");
        assert!(pools.list);
        assert_eq!(pools.set_by, SetBy::Provider);
        let hint = pools.hint.as_deref().unwrap();
        assert!(hint.contains("LateInitialize") && hint.contains("set the field yourself"));
        assert!(e.hints.iter().any(|h| h == hint));

        assert_eq!(row(&e, "spec.forProvider.tags.Name").set_by, SetBy::User);
        assert_eq!(
            row(&e, "spec.forProvider.tags.crossplane-kind").set_by,
            SetBy::Provider
        );

        let text = render_text(&e);
        assert!(text.starts_with("VPC/sample-vpc (ec2.aws.upbound.io/v1beta1, cluster-scoped)\n"));
        assert!(text.contains("denied by immutable-field"), "{text}");
        assert!(text.contains("provider (late-init)"), "{text}");
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["fields"][0]["setBy"], "user");
        assert_eq!(json["creation"]["state"], "succeeded");
    }

    #[test]
    fn before_creation_nothing_is_immutable_yet() {
        let cfg = Config::from_yaml(CFG).unwrap();
        let mut o = vpc();
        let a = o["metadata"]["annotations"].as_object_mut().unwrap();
        a.remove("crossplane.io/external-create-succeeded");
        let e = explain(&o, &cfg, &Options::default()).unwrap();
        assert!(!e.created.value);
        assert_eq!(e.creation.state, CreationState::Incomplete);
        assert_eq!(e.creation.since.as_deref(), Some("2024-05-01T10:00:00Z"));
        let region = row(&e, "spec.forProvider.region");
        assert!(region.immutable);
        assert!(region.change_denied_by.is_empty());
        assert!(
            e.hints.iter().any(|h| h.contains("leaked")),
            "{:?}",
            e.hints
        );
    }

    #[test]
    fn deletion_reasons_follow_the_table() {
        let cfg = Config::builtin();
        let mut o = vpc();
        o["spec"]["deletionPolicy"] = json!("Orphan");
        o["spec"]["managementPolicies"] = json!(["Observe", "Delete"]);
        let e = explain(&o, &cfg, &Options::default()).unwrap();
        assert_eq!(e.deletion.outcome, "Delete");
        assert!(e
            .deletion
            .because
            .contains("overrides deletionPolicy Orphan"));
        assert!(e.deletion.protected_by.is_empty());
        o["spec"]["managementPolicies"] = json!(["Observe", "Create", "Update"]);
        o["spec"]["deletionPolicy"] = json!("Delete");
        let e = explain(&o, &cfg, &Options::default()).unwrap();
        assert_eq!(e.deletion.outcome, "Orphan");
        assert!(e.deletion.because.contains("lacks Delete"));
        o["spec"]["managementPolicies"] = json!([]);
        o["metadata"]["finalizers"] = json!(["finalizer.managedresource.crossplane.io"]);
        let e = explain(&o, &cfg, &Options::default()).unwrap();
        assert!(e.paused.value && e.paused.because.contains("[]"));
        assert_eq!(e.deletion.denied_by, ["paused-delete"]);
        o["spec"]["managementPolicies"] = json!(["Observe", "Observe"]);
        let e = explain(&o, &cfg, &Options::default()).unwrap();
        assert!(!e.policies.valid);
        assert_eq!(e.every_update_denied_by, ["management-policies"]);
        // A rule that denies every update is not blamed on each field; the
        // built-in configuration still makes the region immutable.
        for f in &e.fields {
            let want: &[&str] = if f.path == "spec.forProvider.region" {
                &["immutable-field"]
            } else {
                &[]
            };
            assert_eq!(f.change_denied_by, want, "{}", f.path);
        }
    }

    #[test]
    fn paused_annotation_values() {
        let cfg = Config::builtin();
        let mut o = vpc();
        o["metadata"]["annotations"]["crossplane.io/paused"] = json!("True");
        let e = explain(&o, &cfg, &Options::default()).unwrap();
        assert!(!e.paused.value);
        assert!(e.paused.because.contains("only \"true\""));
        assert!(e.findings.iter().any(|f| f.rule == "paused-value"));
        o["metadata"]["annotations"]["crossplane.io/paused"] = json!("true");
        let e = explain(&o, &cfg, &Options::default()).unwrap();
        assert!(e.paused.value);
    }

    #[test]
    fn without_managed_fields_owners_are_unknown() {
        let mut o = vpc();
        o["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        let e = explain(&o, &Config::builtin(), &Options::default()).unwrap();
        assert!(!e.has_managed_fields);
        assert!(e.fields.iter().all(|f| f.set_by == SetBy::Unknown));
        assert!(e.hints.iter().any(|h| h.contains("--show-managed-fields")));
        let e = explain(
            &json!({"kind": "ProviderConfig", "metadata": {"name": "x"}, "spec": {}}),
            &Config::builtin(),
            &Options::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("ProviderConfig/x"), "{e}");
    }

    #[test]
    fn paths_bracket_keys_with_dots() {
        let k = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            display_path(&k(&["spec", "forProvider", "tags", "example.com/team"])),
            "spec.forProvider.tags[example.com/team]"
        );
        assert_eq!(display_path(&k(&["spec", "a-b"])), "spec.a-b");
    }

    #[test]
    fn perturbations_differ() {
        for v in [
            json!("a"),
            json!(1),
            json!(1.5),
            json!(true),
            json!([]),
            json!([1]),
            json!({}),
            json!(null),
        ] {
            assert_ne!(perturb(&v), v);
        }
    }
}
