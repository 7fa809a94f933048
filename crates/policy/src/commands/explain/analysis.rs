//! What [`Decider::explain`] finds in one MR: its derived states, what a
//! delete would do, and for every value who set it and what a change to
//! it would meet, judged by the validating webhook itself.

use serde_json::Value;
use wildmatch::WildMatch;

use crate::admission::config::Config;
use crate::admission::decider::Decider;
use crate::admission::fieldpath::{FieldPath, Segment};
use crate::admission::model::{Action, Finding};
use crate::admission::mr::{self, DeletionOutcome, Mr, PolicyAction, PolicySet};
use crate::admission::review::RequestBuilder;
use crate::commands::managed_fields::{self, ManagedEntry, Step};

use super::{
    Creation, CreationState, Deletion, DocumentedMark, ExceptionSummary, ExplainError, Explanation,
    Fact, FieldExplanation, FindingSummary, ManagementPolicies, Options, SetBy, VALUE_WIDTH,
};

/// What [`Decider::explain`] says of `object`.
pub(super) fn explain(
    decider: &Decider<'_>,
    object: &Value,
    options: &Options,
) -> Result<Explanation, ExplainError> {
    let (config, cluster) = (decider.config(), decider.cluster());
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    if !mr::is_managed(object) {
        return Err(ExplainError::NotManaged(
            crate::admission::api_server::label(object),
        ));
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
    let deletion = deletion(object, config, decider.now());
    let every_update_denied_by = denials(decider, object, object);
    let findings = decider
        .validate(&RequestBuilder::create(object.clone()).build())
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
    let rows = Rows {
        decider,
        object,
        entries: &entries,
        is_provider: &is_provider,
        immutable_paths: &immutable_paths,
        baseline: &every_update_denied_by,
    };
    let mut fields = Vec::new();
    for root in ["forProvider", "initProvider"] {
        if let Some(v) = object.pointer(&format!("/spec/{root}")) {
            let mut keys = vec!["spec".to_string(), root.to_string()];
            collect_rows(v, &mut keys, &mut |keys, value| {
                let mut row = rows.row(keys, value);
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
    let now = decider.now();
    let subject = crate::admission::config::Subject {
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
            crate::cluster::identity::report::IdentityReport::of(
                object,
                config,
                index,
                !index.is_empty(),
            )
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

/// What every row of one explanation is read against.
struct Rows<'a> {
    decider: &'a Decider<'a>,
    object: &'a Value,
    entries: &'a [ManagedEntry],
    is_provider: &'a dyn Fn(&ManagedEntry) -> bool,
    /// The configured immutable fields present in the object.
    immutable_paths: &'a [Vec<String>],
    /// The rules that deny every UPDATE, changed or not: a row names only
    /// what its own change adds.
    baseline: &'a [String],
}

impl Rows<'_> {
    /// The row of the value at `keys`: who set it, whether it is
    /// immutable, and which rules a change to it meets.
    fn row(&self, keys: &[String], value: &Value) -> FieldExplanation {
        let (object, entries, is_provider) = (self.object, self.entries, self.is_provider);
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
        let immutable = self.immutable_paths.iter().any(|p| {
            let n = p.len().min(keys.len());
            p[..n] == keys[..n]
        });
        let mut changed = object.clone();
        if let Some(slot) = pointer_mut(&mut changed, keys) {
            *slot = perturb(slot);
        }
        let change_denied_by = denials(self.decider, object, &changed)
            .into_iter()
            .filter(|r| !self.baseline.contains(r))
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
}

/// The documented mark of a row at `keys`: the field itself, a documented
/// block that holds it, or (for a list row) documented fields inside it.
fn documented_mark(
    kind: &crate::cluster::documented::KindFields,
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
pub(super) fn perturb(v: &Value) -> Value {
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
fn denials(decider: &Decider<'_>, old: &Value, new: &Value) -> Vec<String> {
    let req = RequestBuilder::update(old.clone(), new.clone()).build();
    let mut rules: Vec<String> = decider
        .validate(&req)
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

fn policies(m: &Mr<'_>) -> ManagementPolicies {
    let defaulted = m.spec("managementPolicies").is_none();
    match m.policies() {
        Ok(set) => ManagementPolicies {
            set: set.to_string(),
            defaulted,
            valid: true,
            late_initialize: set.can_late_initialize(),
        },
        Err(e) => ManagementPolicies {
            set: e.to_string(),
            defaulted,
            valid: false,
            late_initialize: false,
        },
    }
}

fn deletion(object: &Value, config: &Config, now: jiff::Timestamp) -> Deletion {
    let m = Mr(object);
    // A namespaced MR has no deletionPolicy: its policies alone decide.
    let namespaced = m.is_namespaced();
    let policy = m
        .deletion_policy()
        .and_then(Value::as_str)
        .filter(|_| !namespaced);
    let shown_policy = match (policy, m.deletion_policy()) {
        _ if namespaced => "a namespaced MR has no deletionPolicy".to_string(),
        (Some(p), _) => format!("deletionPolicy {p}"),
        (None, Some(v)) => format!("deletionPolicy {v} (not a string)"),
        (None, None) => "deletionPolicy absent (Delete)".to_string(),
    };
    let outcome = m.deletion_outcome();
    let because = match m.policies() {
        Err(e) => format!("managementPolicies cannot be read ({e}); mrguard assumes Delete"),
        Ok(set) if set.is_default() && namespaced => {
            format!("{shown_policy}; managementPolicies [*] includes Delete")
        }
        Ok(set) if set.is_default() => format!("{shown_policy} with managementPolicies [*]"),
        Ok(set) if namespaced && set.has(PolicyAction::Delete) => {
            format!("managementPolicies {set} contains Delete ({shown_policy})")
        }
        Ok(set) if namespaced => {
            format!("managementPolicies {set} lacks Delete ({shown_policy})")
        }
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
    // Judged with no cluster: what the configuration alone makes of a delete.
    let decision =
        Decider::offline(config, now).validate(&RequestBuilder::delete(object.clone()).build());
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
            .map(Finding::warning)
            .collect(),
    }
}
