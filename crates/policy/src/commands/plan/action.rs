//! One entry of the plan: a manifest applied over its live object (or
//! created), or a live object deleted.

use serde_json::Value;
use wildmatch::WildMatch;

use crate::admission::api_server::{identity, label};
use crate::admission::config::{CloudOnlyMapKeys, Config, ExternalNameStrategy};
use crate::admission::crd::{Crds, Lookup, NodeShape};
use crate::admission::decider::Decider;
use crate::admission::model::Operation;
use crate::admission::mr::{self, DeletionOutcome, Mr, PolicyAction, PolicySet};
use crate::cluster::identity::IdentityIndex;
use crate::commands::check::{judge_manifest, Applier, CheckError, CheckFinding, CheckResult};
use crate::commands::explain::DEFAULT_PROVIDER_MANAGERS;
use crate::commands::managed_fields;
use crate::commands::manifest::Manifest;
use crate::commands::merge;

use super::fields::{drift, Marks, Then};
use super::{Entry, Mark, PlanAction};

/// Plans manifests and deletions with one configuration.
pub struct Planner<'a> {
    config: &'a Config,
    /// When the plan is judged (the caller's clock: the crate is pure,
    /// and a what-if tool or a test judges at a chosen time).
    now: jiff::Timestamp,
    crds: Option<&'a Crds>,
    username: &'a str,
    provider_managers: Vec<WildMatch>,
    live_mrs: Option<&'a dyn Fn(&IdentityIndex)>,
}

/// An entry's identity fields, from an object.
fn blank(object: &Value, action: PlanAction, verdict: &str) -> Entry {
    let (api_version, kind, namespace, name) = identity(object);
    Entry {
        object: label(object),
        api_version,
        kind,
        namespace,
        name,
        file: None,
        line: None,
        action,
        verdict: verdict.into(),
        fields: vec![],
        findings: vec![],
        warnings: vec![],
        invalid: None,
        notes: vec![],
    }
}

fn from_result(m: &Manifest, r: CheckResult, action: PlanAction) -> Entry {
    let mut e = blank(&m.object, action, &r.verdict);
    if r.verdict == "unchanged" {
        e.verdict = "allowed".into();
    }
    e.file = Some(m.file.clone());
    e.line = Some(m.lines.start);
    e.findings = r.findings;
    e.warnings = r.warnings;
    e.invalid = r.invalid;
    e.notes = r.notes;
    e
}

/// Whether creating `object` takes over a resource that already exists:
/// its policies only observe, or it names the external resource itself
/// (as the `adoption` rule reads the external name).
fn adopts(object: &Value, set: Option<PolicySet>, config: &Config) -> bool {
    if set.is_some_and(|s| !s.can_create()) {
        return true;
    }
    let m = Mr(object);
    let Some(external) = m.external_name() else {
        return false;
    };
    let (api_version, kind, _, _) = identity(object);
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    match config.resource(group, &kind).external_name {
        ExternalNameStrategy::IdentifierFromProvider => true,
        ExternalNameStrategy::NameAsIdentifier => external != m.name(),
    }
}

fn writes_updates(set: PolicySet) -> bool {
    set.has(PolicyAction::All) || set.has(PolicyAction::Update)
}

impl<'a> Planner<'a> {
    /// A planner with the configuration, judging at `now` (when staged
    /// rules start to deny and exceptions expire), with no CRDs, the empty
    /// username and the default provider field managers.
    pub fn new(config: &'a Config, now: jiff::Timestamp) -> Self {
        Planner {
            config,
            now,
            crds: None,
            username: "",
            provider_managers: DEFAULT_PROVIDER_MANAGERS
                .iter()
                .map(|g| WildMatch::new(g))
                .collect(),
            live_mrs: None,
        }
    }

    /// The CRDs that give defaults, schema checks and documented immutable
    /// fields.
    pub fn crds(mut self, crds: Option<&'a Crds>) -> Self {
        self.crds = crds;
        self
    }

    /// The user the apply runs as (for exemptions).
    pub fn username(mut self, username: &'a str) -> Self {
        self.username = username;
        self
    }

    /// Globs of the field managers that are the provider; empty keeps the
    /// default.
    pub fn provider_managers(mut self, globs: &[String]) -> Self {
        if !globs.is_empty() {
            self.provider_managers = globs.iter().map(|g| WildMatch::new(g)).collect();
        }
        self
    }

    /// Records the live MRs whose identity can meet a planned one's.
    pub fn live_mrs(mut self, fill: &'a dyn Fn(&IdentityIndex)) -> Self {
        self.live_mrs = Some(fill);
        self
    }

    /// The entry of manifest `m` applied over `live` (kubectl's
    /// client-side apply), or created when there is no live object.
    pub fn apply(&self, m: &Manifest, live: Option<&Value>) -> Result<Entry, CheckError> {
        let result = judge_manifest(
            m,
            live,
            None,
            Applier {
                username: self.username,
                now: self.now,
            },
            self.config,
            self.crds,
            self.live_mrs,
        )?;
        let unchanged = result.verdict == "unchanged";
        let new = match live {
            Some(l) => {
                merge::client_side_apply(l, &m.object)
                    .map_err(|e| CheckError::Judge {
                        object: label(&m.object),
                        reason: e.to_string(),
                    })?
                    .object
            }
            None => m.object.clone(),
        };
        let set = Mr(&new).policies().ok();
        let created = live.is_some_and(|l| Mr(l).is_created());
        let shown = set.map(|s| s.to_string()).unwrap_or_default();
        let ignore_for_provider = match (live, set) {
            (None, Some(s)) if !s.can_create() => Some(format!(
                "managementPolicies {shown} lack Create: the provider only observes the resource"
            )),
            (Some(_), Some(s)) if !writes_updates(s) => Some(format!(
                "managementPolicies {shown} lack Update: the provider writes no change"
            )),
            _ => None,
        };
        let ignore_init_provider = if created {
            Some("spec.initProvider is read only when the external resource is created".into())
        } else {
            ignore_for_provider.clone()
        };
        let mut notes = Vec::new();
        let entries = match live.map(managed_fields::entries).transpose() {
            Ok(e) => e.unwrap_or_default(),
            Err(e) => {
                notes.push(format!("provider-owned fields unknown: {e}"));
                vec![]
            }
        };
        let is_provider = |manager: &str| self.provider_managers.iter().any(|g| g.matches(manager));
        let marks = Marks {
            entries: &entries,
            is_provider: &is_provider,
            findings: &result.findings,
            ignore_for_provider: ignore_for_provider.clone(),
            ignore_init_provider,
        };
        let empty = Value::Object(Default::default());
        let mut fields = if unchanged {
            vec![]
        } else {
            marks.changes(live.unwrap_or(&empty), &new)
        };
        let action = match live {
            None if adopts(&m.object, set, self.config) => PlanAction::Adopt,
            None => PlanAction::Create,
            // Only kubectl's bookkeeping, or nothing the provider reads.
            Some(_) if unchanged || fields.is_empty() => PlanAction::NoChange,
            Some(_) if ignore_for_provider.is_some() => PlanAction::Ignored,
            Some(_)
                if !fields.is_empty()
                    && fields
                        .iter()
                        .all(|f| matches!(f.mark, Mark::Ignored { .. })) =>
            {
                PlanAction::Ignored
            }
            Some(_) => match fields.iter().find_map(|f| match &f.mark {
                Mark::ForcesReplacement { .. } => Some(result.verdict == "denied"),
                _ => None,
            }) {
                Some(true) => PlanAction::ReplaceDenied,
                Some(false) => PlanAction::ReplaceWarned,
                None => PlanAction::UpdateInPlace,
            },
        };
        if let Some(l) = live {
            let (api_version, kind, _, _) = identity(&new);
            let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            let (set_then, remove_then) = match set {
                Some(s) if !writes_updates(s) => {
                    let t =
                        format!("the provider only reads it (managementPolicies {s} lack Update)");
                    (t.clone(), t)
                }
                _ => (
                    "the provider will set it to the spec's value".to_string(),
                    match self.config.resource(group, &kind).cloud_only_map_keys {
                        CloudOnlyMapKeys::Remove => "the spec's map lacks the key: the provider will remove it",
                        CloudOnlyMapKeys::Keep => "the spec's map lacks the key: the provider keeps it (it merges the spec's map into the resource's; cloudOnlyMapKeys: Keep)",
                    }
                    .to_string(),
                ),
            };
            let then = Then {
                set: &set_then,
                remove: &remove_then,
            };
            let version = match self.crds.map(|c| c.lookup(&api_version, &kind)) {
                Some(Lookup::Found(v)) => Some(v),
                _ => None,
            };
            let shape = |keys: &[String]| {
                let mut path = vec!["spec".to_string(), "forProvider".to_string()];
                path.extend(keys.iter().cloned());
                version.map_or(NodeShape::Unknown, |v| v.node_shape(&path))
            };
            let drifted = drift(&new, l, &fields, &then, &shape);
            fields.extend(drifted);
        }
        if Mr(&new).annotation(mr::PAUSED) == Some("true") {
            notes.push(format!(
                "the annotation {}: \"true\" pauses reconciliation: nothing reaches the external resource until it is removed",
                mr::PAUSED
            ));
        }
        let mut e = from_result(m, result, action);
        e.fields = fields;
        e.notes.extend(notes);
        Ok(e)
    }

    /// The entry of deleting `live`; `because` says why it is deleted
    /// (`--delete`, or the prune that chose it).
    pub fn delete(&self, live: &Value, because: &str) -> Result<Entry, CheckError> {
        let m = Mr(live);
        let outcome = m.deletion_outcome();
        let action = match outcome {
            DeletionOutcome::Delete => PlanAction::DeleteExternal,
            DeletionOutcome::Orphan => PlanAction::OrphanExternal,
        };
        let (api_version, kind, _, _) = identity(live);
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let cluster = self
            .crds
            .map(|c| c.cluster_for(group, &kind))
            .unwrap_or_default();
        let judged = Decider::new(self.config, &cluster, self.now)
            .judge(Operation::Delete, live, None, self.username, None)
            .map_err(|e| CheckError::Judge {
                object: label(live),
                reason: e.to_string(),
            })?;
        let verdict = if judged.denial.is_some() {
            "denied"
        } else {
            "allowed"
        };
        let mut e = blank(live, action, verdict);
        e.findings = judged.findings.iter().map(CheckFinding::unplaced).collect();
        e.warnings = judged.warnings;
        let policy = match m.deletion_policy().and_then(Value::as_str) {
            Some(p) => format!("deletionPolicy {p}"),
            None => "no deletionPolicy".to_string(),
        };
        let set = match m.policies() {
            Ok(s) => format!("managementPolicies {s}"),
            Err(err) => format!("managementPolicies unreadable ({err})"),
        };
        let what = match outcome {
            DeletionOutcome::Delete => "deleting the MR deletes the external resource",
            DeletionOutcome::Orphan => "deleting the MR leaves the external resource in place",
        };
        e.notes.push(format!("{because}: {policy}, {set}: {what}"));
        if !m.creation_attempted() && !m.is_created() {
            e.notes.push(format!(
                "no create was recorded (no {} annotation): there may be no external resource",
                mr::CREATE_SUCCEEDED
            ));
        }
        Ok(e)
    }

    /// The entry of a manifest that is not planned, and why.
    pub fn skipped(m: &Manifest, why: &str) -> Entry {
        let mut e = blank(&m.object, PlanAction::Skipped, "skipped");
        e.file = Some(m.file.clone());
        e.line = Some(m.lines.start);
        e.notes.push(why.to_string());
        e
    }

    /// The entry of a manifest the API server would refuse before any
    /// webhook (e.g. a kind it does not serve): planned as a create.
    pub fn rejected(m: &Manifest, reason: String) -> Entry {
        let mut e = blank(&m.object, PlanAction::Create, "invalid");
        e.file = Some(m.file.clone());
        e.line = Some(m.lines.start);
        e.invalid = Some(reason);
        e
    }
}
