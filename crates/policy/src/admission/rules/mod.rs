//! Validation rules (docs/rules.md). Each rule is a unit struct in its own file with
//! a stable name, the operations it judges, a default action and its tests.
//! Adding a rule is one file plus one line in [`RULES`].

use std::borrow::Cow;

use serde_json::Value;

use crate::admission::cel::{CelTiming, RuleClock};
use crate::admission::config::Subject;
use crate::admission::config::{Config, ResourceConfig};
use crate::admission::judging::Judging;
use crate::admission::model::{Action, Finding, Operation, Violation};
use crate::admission::review::Request;
use crate::cluster::Cluster;

mod adoption;
mod composition_immutable_patch;
mod connection_secret_ref;
mod creation_incomplete;
mod deletion_policy;
mod deletion_policy_conflict;
mod deletion_protection;
mod documented_immutable_field;
mod external_identity;
mod external_name_change;
mod immutable_field;
mod init_provider_change;
mod init_provider_late_init;
mod management_policies;
mod observe_only_external_name;
mod paused_delete;
mod paused_value;
mod provider_config_exists;
mod provider_config_kind;
mod reconcile_annotations;
mod reference;

/// Every built-in rule, in the order findings are reported.
pub static RULES: &[&dyn Rule] = &[
    &deletion_policy::DeletionPolicy,
    &management_policies::ManagementPolicies,
    &deletion_policy_conflict::DeletionPolicyConflict,
    &init_provider_late_init::InitProviderLateInit,
    &init_provider_change::InitProviderChange,
    &immutable_field::ImmutableField,
    &documented_immutable_field::DocumentedImmutableField,
    &external_name_change::ExternalNameChange,
    &observe_only_external_name::ObserveOnlyExternalName,
    &paused_value::PausedValue,
    &paused_delete::PausedDelete,
    &deletion_protection::DeletionProtection,
    &creation_incomplete::CreationIncomplete,
    &connection_secret_ref::ConnectionSecretRef,
    &reference::Reference,
    &composition_immutable_patch::CompositionImmutablePatch,
    &external_identity::ExternalIdentity,
    &adoption::Adoption,
    &provider_config_exists::ProviderConfigExists,
    &provider_config_kind::ProviderConfigKind,
    &reconcile_annotations::ReconcileAnnotations,
];

pub use adoption::ADOPT;
pub use reconcile_annotations::{POLL_INTERVAL, RECONCILE_REQUESTED_AT};

/// Everything a rule may read. The object under judgment is the new object
/// on CREATE and UPDATE and the old one on DELETE; derived states come from
/// `state`, which is the old object on UPDATE and DELETE.
pub struct RuleContext<'a> {
    pub(crate) request: &'a Request,
    pub(crate) operation: Operation,
    pub(crate) kind: &'a str,
    pub(crate) name: &'a str,
    pub(crate) namespace: &'a str,
    pub(crate) username: &'a str,
    pub(crate) object: &'a Value,
    pub(crate) old_object: Option<&'a Value>,
    pub(crate) config: &'a Config,
    pub(crate) resource: &'a ResourceConfig,
    pub(crate) cluster: &'a Cluster,
    /// When the request is judged: staged actions and exceptions expire.
    /// The caller's clock: the crate is pure, and a what-if tool or a test
    /// judges at a chosen time.
    pub(crate) now: jiff::Timestamp,
}

impl<'a> RuleContext<'a> {
    /// The only way to make one: from the request being judged. `None` when
    /// nothing is to be judged: CONNECT, a subresource, no object, or an
    /// object that is not a managed resource. Judged at `now`.
    pub(crate) fn new(
        req: &'a Request,
        config: &'a Config,
        cluster: &'a Cluster,
        now: jiff::Timestamp,
    ) -> Option<Self> {
        let op = Operation::from(&req.operation);
        if op == Operation::Connect || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
            return None;
        }
        let (object, old) = crate::admission::review::objects(req);
        // On DELETE only the old object is sent.
        let subject = if op == Operation::Delete {
            old.or(object)
        } else {
            object
        }?;
        if !crate::admission::mr::is_managed(subject) {
            return None;
        }
        Some(RuleContext {
            request: req,
            operation: op,
            kind: &req.kind.kind,
            name: &req.name,
            namespace: req.namespace.as_deref().unwrap_or(""),
            username: req.user_info.username.as_deref().unwrap_or(""),
            object: subject,
            old_object: old,
            config,
            resource: config.resource(&req.kind.group, &req.kind.kind),
            cluster,
            now,
        })
    }

    /// What the findings are judged against: this MR and this request.
    pub(crate) fn judging(&self) -> Judging<'_> {
        Judging {
            config: self.config,
            subject: self.subject(),
            now: self.now,
        }
    }

    /// What exceptions are matched against.
    fn subject(&self) -> Subject<'_> {
        Subject {
            group: &self.request.kind.group,
            kind: self.kind,
            name: if self.name.is_empty() {
                crate::admission::mr::Mr(self.object).name()
            } else {
                self.name
            },
            namespace: self.namespace,
            user: self.username,
        }
    }

    /// Whether the MR is namespaced (Crossplane v2 style).
    pub fn namespaced(&self) -> bool {
        !self.namespace.is_empty()
    }

    /// The object derived states are read from (docs/managed-resources.md).
    pub fn state(&self) -> crate::admission::mr::Mr<'a> {
        crate::admission::mr::Mr(self.old_object.unwrap_or(self.object))
    }

    /// The object under judgment.
    pub fn mr(&self) -> crate::admission::mr::Mr<'a> {
        crate::admission::mr::Mr(self.object)
    }
}

/// A built-in validation rule. `docs/rules.md` is generated from these
/// methods (the rule reference table), so the texts are written for users.
pub trait Rule: Sync {
    /// The stable name used in messages, metrics and the configuration.
    fn name(&self) -> &'static str;
    /// The operations the rule judges.
    fn operations(&self) -> &'static [Operation];
    /// The action when the configuration does not override it.
    fn default_action(&self) -> Action;
    /// One line: what the rule catches and why it matters.
    fn summary(&self) -> &'static str;
    /// One line: how a user resolves a finding in general; each finding's
    /// message carries the specific fix.
    fn fix(&self) -> &'static str;
    /// True for rules that `exemptUsernames` skips.
    fn honours_exemptions(&self) -> bool {
        false
    }
    /// Judges one request; one violation per problem found.
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation>;
}

pub(crate) const CU: &[Operation] = &[Operation::Create, Operation::Update];
pub(crate) const U: &[Operation] = &[Operation::Update];
pub(crate) const D: &[Operation] = &[Operation::Delete];

/// What [`evaluate`] found on one request.
pub struct Evaluated {
    /// Every finding whose action is not Off.
    pub findings: Vec<Finding>,
    /// How long each configured CEL rule evaluated took, in order; empty
    /// without a clock.
    pub cel_timings: Vec<CelTiming>,
}

/// Runs every built-in rule and every configured CEL rule; returns all
/// findings whose action is not Off and, given the caller's `clock`, how
/// long each CEL rule took.
pub fn evaluate(ctx: &RuleContext<'_>, clock: Option<RuleClock<'_>>) -> Evaluated {
    let mut findings = Vec::new();
    let judging = ctx.judging();
    let exempt = ctx.config.is_exempt(ctx.username)
        || ctx
            .cluster
            .is_provider_of(&ctx.request.kind.group, ctx.kind, ctx.username);
    for rule in RULES {
        if !rule.operations().contains(&ctx.operation) || (exempt && rule.honours_exemptions()) {
            continue;
        }
        let configured = ctx
            .config
            .rule_action(ctx.resource, rule.name(), rule.default_action());
        if configured.action == Action::Off {
            continue;
        }
        for v in rule.check(ctx) {
            findings.extend(judging.decide(Cow::Borrowed(rule.name()), configured, v));
        }
    }
    let mut cel_timings = Vec::new();
    if ctx.resource.cel_rules.is_empty() {
        return Evaluated {
            findings,
            cel_timings,
        };
    }
    let inputs = crate::admission::cel::Inputs {
        request: ctx.request,
        object: ctx.object,
        old: ctx.old_object,
    };
    // The interpreter's scope is built only if a rule needs it.
    let scope = crate::admission::cel::RuleScope::new(inputs, &ctx.resource.cel_rules);
    // One clock read per rule timed: each rule's end starts the next one
    // (a skipped rule's few ns go to the next rule).
    let mut last = clock.map(|c| c());
    for (cel, name) in ctx.resource.cel_rules.named() {
        if !cel.operations.contains(&ctx.operation) {
            continue;
        }
        let configured = ctx.config.rule_action(ctx.resource, name, cel.action);
        if configured.action == Action::Off {
            continue;
        }
        if let Some(v) = crate::admission::cel::check_configured(cel, &scope) {
            findings.extend(judging.decide(Cow::Owned(name.to_string()), configured, v));
        }
        if let (Some(clock), Some(start)) = (clock, &mut last) {
            let now = clock();
            cel_timings.push(CelTiming {
                rule: name.to_string(),
                took: now - *start,
            });
            *start = now;
        }
    }
    Evaluated {
        findings,
        cel_timings,
    }
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

    pub(crate) struct Case {
        pub operation: Operation,
        pub object: Value,
        pub old: Option<Value>,
        pub namespace: String,
        pub username: String,
        pub config: Config,
        pub group: String,
        pub kind: String,
        pub cluster: Option<std::sync::Arc<Cluster>>,
    }

    impl Case {
        pub(crate) fn create(object: Value) -> Self {
            Self {
                operation: Operation::Create,
                object,
                old: None,
                namespace: String::new(),
                username: "alice".into(),
                config: Config::builtin(),
                group: "s3.aws.upbound.io".into(),
                kind: "Bucket".into(),
                cluster: None,
            }
        }

        pub(crate) fn update(old: Value, object: Value) -> Self {
            Self {
                operation: Operation::Update,
                old: Some(old),
                ..Self::create(object)
            }
        }

        pub(crate) fn delete(old: Value) -> Self {
            Self {
                operation: Operation::Delete,
                old: Some(old.clone()),
                ..Self::create(old)
            }
        }

        pub(crate) fn namespaced(mut self, ns: &str) -> Self {
            self.namespace = ns.into();
            self
        }

        pub(crate) fn user(mut self, u: &str) -> Self {
            self.username = u.into();
            self
        }

        pub(crate) fn kind(mut self, group: &str, kind: &str) -> Self {
            self.group = group.into();
            self.kind = kind.into();
            self
        }

        pub(crate) fn cluster(mut self, c: std::sync::Arc<Cluster>) -> Self {
            self.cluster = Some(c);
            self
        }

        pub(crate) fn config(mut self, yaml: &str) -> Self {
            self.config = Config::from_yaml(yaml).unwrap();
            self
        }

        /// A cluster where `user` runs the provider of `group`/`kind`.
        pub(crate) fn provider(mut self, group: &str, kind: &str, user: &str) -> Self {
            let cluster = Cluster::default();
            let mut a = crate::cluster::providers::ProviderAccounts::new();
            a.entry(group.into())
                .or_default()
                .entry(kind.into())
                .or_default()
                .insert(user.into());
            cluster.providers().replace(a);
            self.cluster = Some(std::sync::Arc::new(cluster));
            self
        }

        /// The request this case describes, built as every caller builds one.
        pub(crate) fn request(&self) -> crate::admission::review::Request {
            let place = |v: &Value| {
                let mut v = v.clone();
                if let Some(o) = v.as_object_mut() {
                    o.insert(
                        "apiVersion".into(),
                        format!("{}/v1beta1", self.group).into(),
                    );
                    o.insert("kind".into(), self.kind.clone().into());
                }
                if !self.namespace.is_empty() && v["metadata"].is_object() {
                    v["metadata"]["namespace"] = self.namespace.clone().into();
                }
                v
            };
            let b = crate::admission::review::RequestBuilder::new(self.operation);
            let b = match self.operation {
                Operation::Delete => b,
                _ => b.object(place(&self.object)),
            };
            let b = match &self.old {
                Some(old) => b.old_object(place(old)),
                None => b,
            };
            b.username(self.username.clone()).build()
        }

        pub(crate) fn run<R>(&self, f: impl FnOnce(&RuleContext<'_>) -> R) -> R {
            let req = self.request();
            let cluster = self.cluster.as_deref().unwrap_or(Cluster::empty());
            let ctx = RuleContext::new(&req, &self.config, cluster, jiff::Timestamp::now())
                .expect("the case judges a managed resource");
            f(&ctx)
        }

        pub(crate) fn check(&self, rule: &dyn Rule) -> Vec<Violation> {
            self.run(|ctx| rule.check(ctx))
        }

        pub(crate) fn evaluate(&self) -> Vec<Finding> {
            self.run(|ctx| evaluate(ctx, None).findings)
        }
    }

    pub(crate) fn mr(spec: Value) -> Value {
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

    pub(crate) fn with_annotations(mut obj: Value, a: Value) -> Value {
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
    fn the_registry_implements_every_name_once_in_order() {
        let names: Vec<_> = RULES.iter().map(|r| r.name()).collect();
        assert_eq!(names, crate::admission::model::RULE_NAMES);
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
    }

    /// The texts go into a Markdown table in docs/rules.md: one line each,
    /// no table separators.
    #[test]
    fn every_rule_explains_itself_in_one_line() {
        for r in RULES {
            for text in [r.summary(), r.fix()] {
                assert!(!text.trim().is_empty(), "{}", r.name());
                assert!(!text.contains(['\n', '|']), "{}: {text}", r.name());
                assert!(!text.ends_with('.'), "{}: {text}", r.name());
            }
        }
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
        let provider = "system:serviceaccount:crossplane-system:provider-aws-s3";
        let only_the_three_skipped = vec!["deletion-policy", "init-provider-late-init"];
        // By a configured glob.
        let exempt = rules(
            Case::update(old.clone(), new.clone())
                .config(
                    "exemptUsernames: ['system:serviceaccount:crossplane-system:provider-aws-*']\n",
                )
                .user(provider)
                .evaluate(),
        );
        assert_eq!(exempt, only_the_three_skipped);
        // By the derived provider account of this kind.
        let derived = rules(
            Case::update(old.clone(), new.clone())
                .provider("s3.aws.upbound.io", "Bucket", provider)
                .user(provider)
                .evaluate(),
        );
        assert_eq!(derived, only_the_three_skipped);
        // The built-in configuration exempts no one by name: not the
        // provider's account without the derivation, not Crossplane core.
        for user in [
            provider,
            "system:serviceaccount:crossplane-system:crossplane",
        ] {
            let judged = rules(
                Case::update(old.clone(), new.clone())
                    .provider(
                        "s3.aws.upbound.io",
                        "Bucket",
                        "system:serviceaccount:crossplane-system:other",
                    )
                    .user(user)
                    .evaluate(),
            );
            assert!(
                judged.iter().any(|r| r == "immutable-field"),
                "{user}: {judged:?}"
            );
        }
        // A provider's account is exempt only for the kinds it serves.
        let other_kind = rules(
            Case::update(old, new)
                .provider("s3.aws.upbound.io", "Object", provider)
                .user(provider)
                .evaluate(),
        );
        assert!(
            other_kind.iter().any(|r| r == "immutable-field"),
            "{other_kind:?}"
        );
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

/// The effective action of a finding (Audit, staged Deny, exceptions),
/// decided in one place.
#[cfg(test)]
mod policy_operations {
    use super::testing::*;
    use super::*;
    use serde_json::json;

    fn region_change() -> (Value, Value) {
        let created = json!({"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"});
        let old = with_annotations(
            mr(json!({"forProvider": {"region": "us-east-1"}})),
            created.clone(),
        );
        let mut new =
            with_annotations(mr(json!({"forProvider": {"region": "eu-west-1"}})), created);
        new["metadata"]["name"] = json!("sample-vpc");
        let mut old = old;
        old["metadata"]["name"] = json!("sample-vpc");
        (old, new)
    }

    fn at(case: &Case, now: &str) -> Vec<Finding> {
        case.run(|ctx| {
            let req = ctx.request;
            let ctx = RuleContext::new(req, ctx.config, ctx.cluster, now.parse().unwrap()).unwrap();
            evaluate(&ctx, None).findings
        })
    }

    fn immutable(f: &[Finding]) -> &Finding {
        f.iter()
            .find(|f| f.rule == "immutable-field")
            .expect("immutable-field finding")
    }

    #[test]
    fn audit_findings_are_kept_but_neither_warn_nor_deny() {
        let (old, new) = region_change();
        let f = Case::update(old, new)
            .config("rules: {immutable-field: Audit}\nresources:\n  - {apiGroups: ['*'], kinds: ['*'], immutableFields: [spec.forProvider.region]}\n")
            .evaluate();
        assert_eq!(immutable(&f).action, Action::Audit);
        assert_eq!(immutable(&f).note, None);
    }

    #[test]
    fn a_staged_deny_warns_with_its_date_until_then_denies() {
        let (old, new) = region_change();
        let case = Case::update(old, new).config(
            "rules: {immutable-field: {action: Deny, warnUntil: '2027-01-31T00:00:00Z'}}\nresources:\n  - {apiGroups: ['*'], kinds: ['*'], immutableFields: [spec.forProvider.region]}\n",
        );
        let before = at(&case, "2027-01-30T00:00:00Z");
        let f = immutable(&before);
        assert_eq!(f.action, Action::Warn);
        assert!(
            f.warning().contains("denied from 2027-01-31T00:00:00Z"),
            "{}",
            f.warning()
        );
        let after = at(&case, "2027-01-31T00:00:00Z");
        assert_eq!(immutable(&after).action, Action::Deny);
        assert_eq!(immutable(&after).note, None);
    }

    #[test]
    fn warn_only_violations_are_not_staged() {
        let obj = mr(json!({"deletionPolicy": "Delete"}));
        let f = Case::create(obj)
            .namespaced("team-a")
            .config("rules: {deletion-policy: {action: Deny, warnUntil: '2999-01-01T00:00:00Z'}}\n")
            .evaluate();
        assert_eq!(f[0].action, Action::Warn);
        assert_eq!(f[0].note, None);
    }

    const EXCEPTION: &str = "resources:\n  - {apiGroups: ['*'], kinds: ['*'], immutableFields: [spec.forProvider.region]}\nexceptions:\n  - name: vpc-migration\n    rules: [immutable-field]\n    match: {names: ['sample-*']USERS}\n    reason: NET-42\n    expires: '2027-01-31T00:00:00Z'\n";

    #[test]
    fn an_exception_waives_its_rule_for_what_it_matches_until_it_expires() {
        let (old, new) = region_change();
        let case = Case::update(old.clone(), new.clone()).config(&EXCEPTION.replace("USERS", ""));
        let f = at(&case, "2027-01-30T00:00:00Z");
        let w = immutable(&f);
        assert_eq!(w.action, Action::Warn);
        assert_eq!(w.exception(), Some("vpc-migration"));
        assert!(
            w.warning().starts_with("immutable-field: waived by exception vpc-migration (expires 2027-01-31T00:00:00Z): "),
            "{}",
            w.warning()
        );
        // Expired: denied again.
        let f = at(&case, "2027-02-01T00:00:00Z");
        assert_eq!(immutable(&f).action, Action::Deny);
        assert_eq!(immutable(&f).exception(), None);
        // Another name: not matched.
        let (mut old2, mut new2) = (old.clone(), new.clone());
        old2["metadata"]["name"] = json!("prod-vpc");
        new2["metadata"]["name"] = json!("prod-vpc");
        let other = Case::update(old2, new2).config(&EXCEPTION.replace("USERS", ""));
        assert_eq!(
            immutable(&at(&other, "2027-01-30T00:00:00Z")).action,
            Action::Deny
        );
        // Every given key must match: a user list that leaves alice out.
        let bob = Case::update(old, new).config(&EXCEPTION.replace("USERS", ", users: [bob]"));
        assert_eq!(
            immutable(&at(&bob, "2027-01-30T00:00:00Z")).action,
            Action::Deny
        );
    }
}
