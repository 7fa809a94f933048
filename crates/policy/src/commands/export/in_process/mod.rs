//! `--in-process auto` (docs/in-process.md): the policies the leader keeps
//! in the API server, the steps that bring the live ones to them, and the
//! configuration the webhooks judge with once those policies are in force.
//!
//! The webhooks skip a rule for some MRs only while every policy that
//! enforces it there is live, labelled as this release's and unchanged
//! (its spec hash is the one written). Anything else (a policy not yet
//! written, one that another owner holds, a reload the leader has not
//! caught up with) leaves the rule in the webhook: a check made twice, never
//! one made by nobody.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::vap::{Covered, Scope};
use super::{map, vap};
use crate::admission::config::{Config, ResourceConfig, RuleAction};
use crate::admission::kube_version::KubeVersion;
use crate::admission::model::{Action, Operation};

/// The label naming the release whose leader wrote a policy: the name of
/// its ValidatingWebhookConfiguration.
pub const OWNER_LABEL: &str = "mrguard.io/in-process";
/// The annotation holding the hash of the spec written, which tells a
/// configuration change (another hash) from a hand edit (the same hash,
/// another spec).
pub const HASH_ANNOTATION: &str = "mrguard.io/spec-hash";

/// ValidatingAdmissionPolicy and its binding are GA, and served, from 1.30.
pub const VAP_SINCE: KubeVersion = KubeVersion::new(1, 30);
/// MutatingAdmissionPolicy (`admissionregistration.k8s.io/v1`) from 1.36.
pub const MAP_SINCE: KubeVersion = KubeVersion::new(1, 36);

/// The four kinds the leader writes, with their plural resource names.
pub const KINDS: [(&str, &str); 4] = [
    ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    (
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    ),
    ("MutatingAdmissionPolicy", "mutatingadmissionpolicies"),
    (
        "MutatingAdmissionPolicyBinding",
        "mutatingadmissionpolicybindings",
    ),
];

/// The kinds of [`KINDS`] a server at `server` serves: the validating pair
/// from [`VAP_SINCE`], the mutating pair from [`MAP_SINCE`].
pub fn served_kinds(server: KubeVersion) -> Vec<(&'static str, &'static str)> {
    KINDS
        .into_iter()
        .filter(|(kind, _)| {
            server
                >= if kind.starts_with("Mutating") {
                    MAP_SINCE
                } else {
                    VAP_SINCE
                }
        })
        .collect()
}

/// The label selector of the policies the release `owner` wrote.
pub fn selector(owner: &str) -> String {
    format!("{OWNER_LABEL}={owner}")
}

/// What the leader keeps in the API server for one configuration.
#[derive(Debug, Default)]
pub struct Plan {
    /// The policies and bindings, labelled, owned and hashed.
    pub objects: Vec<Value>,
    /// The rules the ValidatingAdmissionPolicies enforce in full.
    pub covered: Vec<Covered>,
    /// Whether the MutatingAdmissionPolicy is among the objects.
    pub mutating: bool,
    /// Its name, and its binding's.
    pub mutating_name: String,
    /// When to plan again: a staged action starts denying, or an exception
    /// expires.
    pub changes_at: Option<jiff::Timestamp>,
    /// What stays with the webhooks, and why: one line each.
    pub skipped: Vec<String>,
}

/// The release whose leader writes the policies: who owns them, and which
/// requests its webhooks see.
#[derive(Debug, Clone, Default)]
pub struct Owner {
    /// [`OWNER_LABEL`]'s value.
    pub name: String,
    /// The ownerReference every object carries, when there is one: the
    /// chart's ClusterRole for the mode, whose deletion has the garbage
    /// collector remove them.
    pub reference: Option<Value>,
    /// The webhooks' `namespaceSelector` and `objectSelector`: a policy
    /// judges what the webhook it stands in for would have been sent, and
    /// nothing else.
    pub namespace_selector: Option<Value>,
    /// See `namespace_selector`.
    pub object_selector: Option<Value>,
}

impl Owner {
    /// The name a policy of `export vap`/`export map` (`mrguard-…`) gets in
    /// the cluster: unchanged for the release named `mrguard`, else
    /// prefixed with the release's name instead, so that two releases'
    /// policies never share a name.
    pub fn policy_name(&self, exported: &str) -> String {
        match exported.strip_prefix("mrguard-") {
            Some(rest) if !self.name.is_empty() && self.name != "mrguard" => {
                format!("{}-{rest}", self.name)
            }
            _ => exported.to_string(),
        }
    }
}

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The MutatingAdmissionPolicy would be refused.
    #[error("failed to plan the in-process policies: {0}")]
    Mutating(#[from] map::ExportError),
}

/// The objects for `config` at `now` on an API server at `server`.
///
/// Only policies that say all the webhook says for their rule and scope
/// are written: one that leaves a part out would judge that rule twice,
/// and warn twice.
pub fn plan(
    config: &Config,
    now: jiff::Timestamp,
    server: KubeVersion,
    owner: &Owner,
) -> Result<Plan, PlanError> {
    let mut out = Plan::default();
    if server >= VAP_SINCE {
        let export = vap::export(config, now);
        let partial: BTreeSet<&str> = export
            .coverage
            .iter()
            .filter(|c| !c.complete)
            .flat_map(|c| c.policies.iter().map(String::as_str))
            .collect();
        for c in export.coverage.iter().filter(|c| !c.complete) {
            out.skipped.push(format!(
                "{} ({}): exported in part, so the webhook keeps it",
                c.rule,
                scope_text(c.scope)
            ));
        }
        out.objects.extend(
            export
                .objects
                .into_iter()
                .filter(|o| !partial.contains(name_of(o))),
        );
        out.covered = export.coverage.into_iter().filter(|c| c.complete).collect();
        out.changes_at = export.changes_at;
    } else {
        out.skipped.push(format!(
            "ValidatingAdmissionPolicies: the API server is {}.{}; they are served from {}.{}",
            server.major, server.minor, VAP_SINCE.major, VAP_SINCE.minor
        ));
    }
    if server >= MAP_SINCE {
        out.objects.extend(map::export(config)?.objects);
        out.mutating = true;
    } else {
        out.skipped.push(format!(
            "MutatingAdmissionPolicy: the API server is {}.{}; it is served from {}.{}",
            server.major, server.minor, MAP_SINCE.major, MAP_SINCE.minor
        ));
    }
    for o in &mut out.objects {
        own(o, owner);
    }
    for c in &mut out.covered {
        for p in &mut c.policies {
            *p = owner.policy_name(p);
        }
    }
    out.mutating_name = owner.policy_name(map::POLICY_NAME);
    Ok(out)
}

fn scope_text(scope: Scope) -> String {
    match scope {
        Scope::All => "every MR".into(),
        Scope::Entry(i) => format!("resources[{i}]"),
        Scope::NoEntry => "MRs no entry selects".into(),
    }
}

fn name_of(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or_default()
}

fn kind_of(o: &Value) -> &str {
    o["kind"].as_str().unwrap_or_default()
}

/// Name, selectors, labels, owner reference and spec hash of one object to
/// write.
fn own(o: &mut Value, owner: &Owner) {
    let name = owner.policy_name(name_of(o));
    o["metadata"]["name"] = json!(name);
    if let Some(p) = o["spec"]["policyName"].as_str() {
        o["spec"]["policyName"] = json!(owner.policy_name(p));
    }
    if o["kind"].as_str().is_some_and(|k| !k.ends_with("Binding")) {
        let constraints = &mut o["spec"]["matchConstraints"];
        for (key, selector) in [
            ("namespaceSelector", &owner.namespace_selector),
            ("objectSelector", &owner.object_selector),
        ] {
            if let Some(s) = selector.as_ref().filter(|s| !is_empty_selector(s)) {
                constraints[key] = s.clone();
            }
        }
    }
    let hash = spec_hash(&o["spec"]);
    let meta = &mut o["metadata"];
    meta["labels"][OWNER_LABEL] = json!(owner.name);
    meta["annotations"][HASH_ANNOTATION] = json!(hash);
    if let Some(r) = &owner.reference {
        meta["ownerReferences"] = json!([r]);
    }
}

/// A selector that selects everything: `{}`, or one without terms.
fn is_empty_selector(s: &Value) -> bool {
    let none = |k: &str| {
        s.get(k).is_none_or(|v| {
            v.as_object().is_some_and(|m| m.is_empty())
                || v.as_array().is_some_and(|a| a.is_empty())
        })
    };
    none("matchLabels") && none("matchExpressions")
}

/// FNV-1a over the spec's JSON text: stable across releases and
/// platforms, which the standard library's hasher is not promised to be.
pub fn spec_hash(spec: &Value) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in spec.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A live object as the steps need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveObject {
    /// Its kind, one of [`KINDS`].
    pub kind: String,
    /// Its name.
    pub name: String,
    /// [`OWNER_LABEL`]'s value, if any.
    pub owner: Option<String>,
    /// [`HASH_ANNOTATION`]'s value, if any.
    pub hash: Option<String>,
}

impl LiveObject {
    /// Reads one object of one of [`KINDS`].
    pub fn of(o: &Value) -> Self {
        let meta = &o["metadata"];
        let text = |v: &Value| v.as_str().map(str::to_string);
        LiveObject {
            kind: kind_of(o).to_string(),
            name: name_of(o).to_string(),
            owner: text(&meta["labels"][OWNER_LABEL]),
            hash: text(&meta["annotations"][HASH_ANNOTATION]),
        }
    }
}

/// One write that brings the live objects to the plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Not there: create it.
    Create(Value),
    /// Ours: write it whole. `same_hash` says the live one claims to be
    /// what is written, so a write that changes it puts back a hand edit.
    Replace {
        /// The object to write.
        object: Value,
        /// Whether the live object carries the spec hash written.
        same_hash: bool,
    },
    /// Ours and no longer planned.
    Delete {
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
    /// Planned, but held by someone else: left alone, and the webhook
    /// keeps its rule.
    NotOwned {
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
}

/// The steps from `live` (every object of [`KINDS`] with the planned names
/// or `owner`'s label) to `plan`.
pub fn steps(plan: &Plan, live: &[LiveObject], owner: &str) -> Vec<Step> {
    let by_key: BTreeMap<(&str, &str), &LiveObject> = live
        .iter()
        .map(|l| ((l.kind.as_str(), l.name.as_str()), l))
        .collect();
    let mut planned = BTreeSet::new();
    let mut out = Vec::new();
    for o in &plan.objects {
        let key = (kind_of(o), name_of(o));
        planned.insert(key);
        out.push(match by_key.get(&key) {
            None => Step::Create(o.clone()),
            Some(l) if l.owner.as_deref() != Some(owner) => Step::NotOwned {
                kind: key.0.to_string(),
                name: key.1.to_string(),
            },
            Some(l) => Step::Replace {
                object: o.clone(),
                same_hash: l.hash.as_deref()
                    == o["metadata"]["annotations"][HASH_ANNOTATION].as_str(),
            },
        });
    }
    for l in live {
        if l.owner.as_deref() == Some(owner)
            && !planned.contains(&(l.kind.as_str(), l.name.as_str()))
        {
            out.push(Step::Delete {
                kind: l.kind.clone(),
                name: l.name.clone(),
            });
        }
    }
    out
}

/// What the live objects enforce of `plan`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InForce {
    /// The rules, and the MRs for which, a ValidatingAdmissionPolicy
    /// enforces them.
    pub rules: BTreeSet<(String, Scope)>,
    /// Whether the MutatingAdmissionPolicy gives the defaults.
    pub mutating: bool,
}

/// What of `plan` is live: a policy counts when it and its binding are
/// there, `owner`'s, with the hash planned.
pub fn in_force(plan: &Plan, live: &[LiveObject], owner: &str) -> InForce {
    let live: BTreeMap<(&str, &str), Option<&str>> = live
        .iter()
        .filter(|l| l.owner.as_deref() == Some(owner))
        .map(|l| ((l.kind.as_str(), l.name.as_str()), l.hash.as_deref()))
        .collect();
    let planned: BTreeMap<(&str, &str), Option<&str>> = plan
        .objects
        .iter()
        .map(|o| {
            (
                (kind_of(o), name_of(o)),
                o["metadata"]["annotations"][HASH_ANNOTATION].as_str(),
            )
        })
        .collect();
    let holds = |kind: &str, name: &str| {
        planned
            .get(&(kind, name))
            .is_some_and(|h| live.get(&(kind, name)) == Some(h))
    };
    let both =
        |policy: &str, binding: &str, name: &str| holds(policy, name) && holds(binding, name);
    InForce {
        rules: plan
            .covered
            .iter()
            .filter(|c| {
                c.policies.iter().all(|p| {
                    both(
                        "ValidatingAdmissionPolicy",
                        "ValidatingAdmissionPolicyBinding",
                        p,
                    )
                })
            })
            .map(|c| (c.rule.clone(), c.scope))
            .collect(),
        mutating: plan.mutating
            && both(
                "MutatingAdmissionPolicy",
                "MutatingAdmissionPolicyBinding",
                &plan.mutating_name,
            ),
    }
}

/// The configuration the validating webhook judges with while `in_force`
/// holds: each rule a policy enforces is off where that policy judges, and
/// every other rule keeps the action it had.
pub fn webhook_config(config: &Config, in_force: &InForce) -> Config {
    if in_force.rules.is_empty() {
        return config.clone();
    }
    let off = RuleAction::from(Action::Off);
    let mut out = config.clone();
    let enforced = |rule: &str, scope: Scope| {
        in_force.rules.contains(&(rule.to_string(), scope))
            || in_force.rules.contains(&(rule.to_string(), Scope::All))
    };
    let rules: BTreeSet<&str> = in_force.rules.iter().map(|(r, _)| r.as_str()).collect();
    for rule in rules {
        for (i, entry) in out.resources.iter_mut().enumerate() {
            let action = if enforced(rule, Scope::Entry(i)) {
                off
            } else {
                // The rule's own default, as the webhook would apply it.
                let default = default_action(&config.resources[i], rule);
                config.rule_action(&config.resources[i], rule, default)
            };
            entry.rules.insert(rule.to_string(), action);
        }
        if enforced(rule, Scope::NoEntry) {
            out.rules.insert(rule.to_string(), off);
        }
    }
    out
}

/// A rule's action when nothing configures it: a built-in rule's default,
/// or a CEL rule's own `action`.
fn default_action(entry: &ResourceConfig, rule: &str) -> Action {
    if let Some(name) = rule.strip_prefix("cel:") {
        return entry
            .cel_rules
            .iter()
            .find(|c| c.name == name)
            .map_or(Action::Deny, |c| c.action);
    }
    crate::admission::rules::RULES
        .iter()
        .find(|r| r.name() == rule)
        .map_or(Action::Deny, |r| r.default_action())
}

/// The name of the matchCondition the leader adds to a webhook while
/// in-process policies take over what it did.
pub const CONDITION: &str = "mrguard-in-process";

/// The matchCondition expressions the leader sets on mrguard's two MR
/// webhooks (`None`: no condition of its own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookConditions {
    /// `mutate.mrguard.io`: never called while the MutatingAdmissionPolicy
    /// gives the defaults.
    pub mutating: Option<String>,
    /// `validate.mrguard.io`: called only for the operations some rule
    /// left to it judges.
    pub validating: Option<String>,
}

/// The conditions while `in_force` holds; `webhook` is
/// [`webhook_config`]'s configuration for it.
pub fn webhook_conditions(webhook: &Config, in_force: &InForce) -> WebhookConditions {
    let ops = webhook_operations(webhook);
    let validating = (ops.len() < 3).then(|| {
        if ops.is_empty() {
            "false".to_string()
        } else {
            let list: Vec<String> = ops.iter().map(|o| format!("'{}'", o.as_str())).collect();
            format!("request.operation in [{}]", list.join(", "))
        }
    });
    WebhookConditions {
        mutating: in_force.mutating.then(|| "false".to_string()),
        validating,
    }
}

/// The operations on which some MR rule may still find something with
/// `webhook`: a rule whose action is not Off for some entry, or for kinds
/// no entry selects, brings its operations.
pub fn webhook_operations(webhook: &Config) -> BTreeSet<Operation> {
    let fallback = ResourceConfig::default();
    let scopes: Vec<&ResourceConfig> = webhook
        .resources
        .iter()
        .chain(std::iter::once(&fallback))
        .collect();
    let mut ops = BTreeSet::new();
    for rule in crate::admission::rules::RULES {
        if scopes.iter().any(|e| {
            webhook
                .rule_action(e, rule.name(), rule.default_action())
                .action
                != Action::Off
        }) {
            ops.extend(rule.operations().iter().copied());
        }
    }
    for e in &webhook.resources {
        for c in e.cel_rules.iter() {
            if webhook
                .rule_action(e, &format!("cel:{}", c.name), c.action)
                .action
                != Action::Off
            {
                ops.extend(c.operations.iter().copied());
            }
        }
    }
    ops
}

#[cfg(test)]
mod tests;
