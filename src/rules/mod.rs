//! Validation rules (SPEC §4). Each rule is a unit struct in its own file with
//! a stable name, the operations it judges, a default action and its tests.
//! Adding a rule is one file plus one line in [`RULES`].

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use crate::config::{Config, Operation, ResourceConfig};

mod connection_secret_ref;
mod creation_incomplete;
mod deletion_policy;
mod deletion_policy_conflict;
mod deletion_protection;
mod external_name_change;
mod immutable_field;
mod init_provider_change;
mod init_provider_late_init;
mod management_policies;
mod observe_only_external_name;
mod paused_delete;
mod paused_value;
mod reference;

/// Every built-in rule, in the order findings are reported.
pub static RULES: &[&dyn Rule] = &[
    &deletion_policy::DeletionPolicy,
    &management_policies::ManagementPolicies,
    &deletion_policy_conflict::DeletionPolicyConflict,
    &init_provider_late_init::InitProviderLateInit,
    &init_provider_change::InitProviderChange,
    &immutable_field::ImmutableField,
    &external_name_change::ExternalNameChange,
    &observe_only_external_name::ObserveOnlyExternalName,
    &paused_value::PausedValue,
    &paused_delete::PausedDelete,
    &deletion_protection::DeletionProtection,
    &creation_incomplete::CreationIncomplete,
    &connection_secret_ref::ConnectionSecretRef,
    &reference::Reference,
];

pub fn names() -> impl Iterator<Item = &'static str> {
    RULES.iter().map(|r| r.name())
}

pub fn is_known(name: &str) -> bool {
    names().any(|n| n == name)
}

/// What a rule does when it finds something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum Action {
    Off,
    Warn,
    Deny,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Off => "Off",
            Action::Warn => "Warn",
            Action::Deny => "Deny",
        }
    }
}

/// What one rule found wrong, before the action is applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub message: String,
    pub fix: Option<String>,
    /// Never more than a warning, whatever the configured action.
    pub warn_only: bool,
}

impl Violation {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            fix: None,
            warn_only: false,
        }
    }

    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    pub fn warn_only(mut self) -> Self {
        self.warn_only = true;
        self
    }
}

/// A violation with its rule name and effective action (Warn or Deny).
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub rule: Cow<'static, str>,
    pub action: Action,
    pub message: String,
    pub fix: Option<String>,
}

/// Everything a rule may read. The object under judgment is the new object
/// on CREATE and UPDATE and the old one on DELETE; derived states come from
/// `state`, which is the old object on UPDATE and DELETE.
pub struct RuleContext<'a> {
    pub operation: Operation,
    pub group: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
    pub username: &'a str,
    pub groups: &'a [String],
    pub dry_run: bool,
    pub object: &'a Value,
    pub old_object: Option<&'a Value>,
    pub config: &'a Config,
    pub resource: &'a ResourceConfig,
}

impl<'a> RuleContext<'a> {
    pub fn namespaced(&self) -> bool {
        !self.namespace.is_empty()
    }

    /// The object derived states are read from (SPEC §1).
    pub fn state(&self) -> crate::mr::Mr<'a> {
        crate::mr::Mr(self.old_object.unwrap_or(self.object))
    }

    pub fn mr(&self) -> crate::mr::Mr<'a> {
        crate::mr::Mr(self.object)
    }
}

pub trait Rule: Sync {
    fn name(&self) -> &'static str;
    fn operations(&self) -> &'static [Operation];
    fn default_action(&self) -> Action;
    /// Rules that `exemptUsernames` skips.
    fn honours_exemptions(&self) -> bool {
        false
    }
    fn check(&self, ctx: &RuleContext) -> Vec<Violation>;
}

pub(crate) const CU: &[Operation] = &[Operation::Create, Operation::Update];
pub(crate) const U: &[Operation] = &[Operation::Update];
pub(crate) const D: &[Operation] = &[Operation::Delete];

fn effective(configured: Action, v: &Violation) -> Action {
    if v.warn_only {
        configured.min(Action::Warn)
    } else {
        configured
    }
}

/// Runs every built-in rule and every configured CEL rule; returns all
/// findings whose action is not Off.
pub fn evaluate(ctx: &RuleContext) -> Vec<Finding> {
    let mut findings = Vec::new();
    let exempt = ctx.config.is_exempt(ctx.username);
    for rule in RULES {
        if !rule.operations().contains(&ctx.operation) || (exempt && rule.honours_exemptions()) {
            continue;
        }
        let configured = ctx
            .config
            .action(ctx.resource, rule.name(), rule.default_action());
        if configured == Action::Off {
            continue;
        }
        for v in rule.check(ctx) {
            let action = effective(configured, &v);
            if action != Action::Off {
                findings.push(Finding {
                    rule: Cow::Borrowed(rule.name()),
                    action,
                    message: v.message,
                    fix: v.fix,
                });
            }
        }
    }
    // Built once per request, only when a CEL rule applies.
    let mut scope = None;
    for cel in &ctx.resource.cel_rules {
        if !cel.operations.contains(&ctx.operation) {
            continue;
        }
        let name = format!("cel:{}", cel.name);
        let action = ctx.config.action(ctx.resource, &name, cel.action);
        if action == Action::Off {
            continue;
        }
        let scope = scope.get_or_insert_with(|| crate::cel::Scope::for_request(ctx));
        if let Some(v) = crate::cel::check_rule(cel, scope) {
            findings.push(Finding {
                rule: Cow::Owned(name),
                action,
                message: v.message,
                fix: v.fix,
            });
        }
    }
    findings
}

/// Compact JSON for messages, cut to a readable length.
pub(crate) fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        let cut: String = s.chars().take(57).collect();
        format!("{cut}...")
    } else {
        s
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Builds rule contexts from JSON for the unit tests of each rule.
    use super::*;

    pub struct Case {
        pub operation: Operation,
        pub object: Value,
        pub old: Option<Value>,
        pub namespace: String,
        pub username: String,
        pub config: Config,
        pub group: String,
        pub kind: String,
    }

    impl Case {
        pub fn create(object: Value) -> Self {
            Self {
                operation: Operation::Create,
                object,
                old: None,
                namespace: String::new(),
                username: "alice".into(),
                config: Config::builtin(),
                group: "s3.aws.upbound.io".into(),
                kind: "Bucket".into(),
            }
        }

        pub fn update(old: Value, object: Value) -> Self {
            Self {
                operation: Operation::Update,
                old: Some(old),
                ..Self::create(object)
            }
        }

        pub fn delete(old: Value) -> Self {
            Self {
                operation: Operation::Delete,
                old: Some(old.clone()),
                ..Self::create(old)
            }
        }

        pub fn namespaced(mut self, ns: &str) -> Self {
            self.namespace = ns.into();
            self
        }

        pub fn user(mut self, u: &str) -> Self {
            self.username = u.into();
            self
        }

        pub fn kind(mut self, group: &str, kind: &str) -> Self {
            self.group = group.into();
            self.kind = kind.into();
            self
        }

        pub fn config(mut self, yaml: &str) -> Self {
            self.config = Config::from_yaml(yaml).unwrap();
            self
        }

        pub fn run<R>(&self, f: impl FnOnce(&RuleContext) -> R) -> R {
            let resource = self.config.resource(&self.group, &self.kind);
            let ctx = RuleContext {
                operation: self.operation,
                group: &self.group,
                kind: &self.kind,
                name: "test",
                namespace: &self.namespace,
                username: &self.username,
                groups: &[],
                dry_run: false,
                object: &self.object,
                old_object: self.old.as_ref(),
                config: &self.config,
                resource,
            };
            f(&ctx)
        }

        pub fn check(&self, rule: &dyn Rule) -> Vec<Violation> {
            self.run(|ctx| rule.check(ctx))
        }

        pub fn evaluate(&self) -> Vec<Finding> {
            self.run(evaluate)
        }
    }

    pub fn mr(spec: Value) -> Value {
        let mut spec = spec;
        if spec.get("forProvider").is_none() {
            spec["forProvider"] = serde_json::json!({});
        }
        serde_json::json!({
            "apiVersion": "s3.aws.upbound.io/v1beta1",
            "kind": "Bucket",
            "metadata": {"name": "b"},
            "spec": spec,
        })
    }

    pub fn with_annotations(mut obj: Value, a: Value) -> Value {
        obj["metadata"]["annotations"] = a;
        obj
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_unique_and_stable() {
        let mut n: Vec<_> = names().collect();
        assert_eq!(n.len(), 14);
        n.sort();
        n.dedup();
        assert_eq!(n.len(), 14);
    }

    #[test]
    fn overrides_change_and_silence_actions() {
        let obj =
            mr(json!({"deletionPolicy": "Orphan", "managementPolicies": ["Observe", "Delete"]}));
        let f = Case::create(obj.clone()).evaluate();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].rule, "deletion-policy-conflict");
        assert_eq!(f[0].action, Action::Warn);

        let f = Case::create(obj.clone())
            .config("rules: {deletion-policy-conflict: Deny}\n")
            .evaluate();
        assert_eq!(f[0].action, Action::Deny);

        let f = Case::create(obj.clone())
            .config("rules: {deletion-policy-conflict: Deny}\nresources:\n  - apiGroups: ['*.aws.upbound.io']\n    kinds: [Bucket]\n    rules: {deletion-policy-conflict: Off}\n")
            .evaluate();
        assert!(f.is_empty());
        // The per-kind override only applies to kinds it matches.
        let f = Case::create(obj)
            .kind("ec2.aws.upbound.io", "VPC")
            .config("rules: {deletion-policy-conflict: Deny}\nresources:\n  - apiGroups: ['*.aws.upbound.io']\n    kinds: [Bucket]\n    rules: {deletion-policy-conflict: Off}\n")
            .evaluate();
        assert_eq!(f[0].action, Action::Deny);
    }

    #[test]
    fn warn_only_findings_never_deny() {
        let obj = mr(json!({"deletionPolicy": "Delete"}));
        let f = Case::create(obj.clone()).namespaced("team-a").evaluate();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].action, Action::Warn);
        let f = Case::create(obj)
            .namespaced("team-a")
            .config("rules: {deletion-policy: Off}\n")
            .evaluate();
        assert!(f.is_empty());
    }

    #[test]
    fn exempt_users_skip_only_the_three_rules() {
        let created = json!({"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z",
                              "crossplane.io/external-name": "a"});
        let old = with_annotations(
            mr(json!({"forProvider": {"region": "us-east-1"}, "initProvider": {"x": 1}})),
            created.clone(),
        );
        let mut new_annotations = created;
        new_annotations["crossplane.io/external-name"] = json!("b");
        let new = with_annotations(
            mr(
                json!({"forProvider": {"region": "us-west-1"}, "initProvider": {"x": 2},
                      "deletionPolicy": "Nope"}),
            ),
            new_annotations,
        );
        let rules = |f: Vec<Finding>| {
            f.into_iter()
                .map(|f| f.rule.into_owned())
                .collect::<Vec<_>>()
        };
        let all = rules(Case::update(old.clone(), new.clone()).evaluate());
        for r in [
            "immutable-field",
            "external-name-change",
            "init-provider-change",
            "deletion-policy",
        ] {
            assert!(all.iter().any(|x| x == r), "{r} in {all:?}");
        }
        let exempt = rules(
            Case::update(old, new)
                .user("system:serviceaccount:crossplane-system:provider-aws-s3")
                .evaluate(),
        );
        assert_eq!(exempt, vec!["deletion-policy", "init-provider-late-init"]);
    }
}

#[cfg(test)]
mod warning_length {
    use super::testing::*;
    use super::*;
    use serde_json::json;

    /// Warnings are one short line: at most 120 characters with the rule name.
    #[test]
    fn default_warnings_fit_on_one_line() {
        let created = json!({"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"});
        let pending = json!({"crossplane.io/external-create-pending": "2024-01-02T00:00:00Z",
                             "crossplane.io/paused": "True"});
        let cases = vec![
            Case::create(mr(json!({"deletionPolicy": "Orphan",
                "managementPolicies": ["Observe", "Create", "Update", "LateInitialize", "Delete"],
                "initProvider": {"a": 1}}))),
            Case::create(mr(json!({"deletionPolicy": "Delete"}))).namespaced("team-a"),
            Case::update(
                with_annotations(mr(json!({"initProvider": {"a": 1}})), created.clone()),
                with_annotations(mr(json!({"initProvider": {"a": 2}})), created),
            ),
            Case::update(
                with_annotations(mr(json!({})), pending.clone()),
                with_annotations(mr(json!({})), pending),
            ),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for c in cases {
            for f in c
                .evaluate()
                .into_iter()
                .filter(|f| f.action == Action::Warn)
            {
                let line = format!("{}: {}", f.rule, f.message);
                assert!(line.len() <= 120, "{} chars: {line}", line.len());
                seen.insert(f.rule.into_owned());
            }
        }
        let want = [
            "creation-incomplete",
            "deletion-policy",
            "deletion-policy-conflict",
            "init-provider-change",
            "init-provider-late-init",
            "paused-value",
        ];
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), want);
    }
}
