//! `mrguard export vap`: a configuration's rules as policies and bindings,
//! each step of [`export`] one kind of rule.

use serde_json::{json, Value};

use super::checks::{
    any_glob, connection_secret_ref, created, deletion_policy_conflict, deletion_protection,
    entry_selected, exception_conditions, keys, managed, management_policies, no_entry,
    observe_only_external_name, path, paused_delete, paused_value, REQUEST_USERNAME, SUBJECT,
};
use crate::admission::config::{Config, ResourceConfig};
use crate::admission::model::{Action, Operation};

/// What one export produced.
#[derive(Debug, Default)]
pub struct Export {
    /// The policies and bindings, in order.
    pub objects: Vec<Value>,
    /// What could not be exported, and why: one line each.
    pub skipped: Vec<String>,
    /// Which rule each policy enforces, for which MRs, and whether it
    /// enforces all of it.
    pub coverage: Vec<Covered>,
    /// The first instant after which the export says something else: a
    /// staged action starts denying, or an exception expires.
    pub changes_at: Option<jiff::Timestamp>,
}

/// The MRs a policy judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Every MR.
    All,
    /// Those `resources[i]` selects (first match wins).
    Entry(usize),
    /// Those no entry selects.
    NoEntry,
}

/// What the export wrote for one rule and one scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Covered {
    /// The rule's name (`cel:NAME` for a CEL rule).
    pub rule: String,
    /// The MRs its policies judge.
    pub scope: Scope,
    /// The names of its policies (each with a binding of the same name);
    /// none when the rule has nothing to judge there.
    pub policies: Vec<String>,
    /// Whether the policies say all the webhook says for this rule and
    /// scope, message included: false when a part was left out (a `[*]`
    /// immutable field, a `messageExpression`).
    pub complete: bool,
}

/// Rules that cannot be exported, and why.
const NOT_EXPORTABLE: &[(&str, &str)] = &[
    ("deletion-policy", "its warning for namespaced MRs and its messages name the value; not exported yet"),
    ("init-provider-late-init", "not exported yet"),
    ("init-provider-change", "not exported yet"),
    ("external-name-change", "it judges whether creation was attempted from three annotations; not exported yet"),
    ("creation-incomplete", "it compares three annotations as instants, which needs timestamp parsing of arbitrary text"),
    ("reference", "it walks every *Ref/*Selector at any depth of forProvider and initProvider, which CEL cannot recurse into"),
    ("adoption", "it judges whether creation was attempted from three annotations; not exported yet"),
    ("composition-immutable-patch", "it judges Compositions, following each patch into the composed templates, which CEL cannot walk"),
    ("reconcile-annotations", "its poll interval must parse as a Go duration: CEL's duration() fails on other text instead of denying with the rule's message, and mrguard's own CEL evaluator does not parse Go durations the same way (it rejects 1µs, accepts 1e3s), so agreement with the webhook cannot be proven"),
];

/// Rules that judge an MR against what the cluster holds, which a policy
/// cannot read, and what they read.
const NEEDS_CLUSTER_STATE: &[(&str, &str)] = &[
    (
        "documented-immutable-field",
        "the immutable fields the CRDs' descriptions document",
    ),
    (
        "external-identity",
        "the external identities live MRs claim",
    ),
    ("provider-config-exists", "the provider configs that exist"),
    (
        "provider-config-kind",
        "the provider config kinds each provider family's CRDs serve",
    ),
];

fn policy_name(rule: &str, suffix: Option<usize>) -> String {
    let rule = rule.replace(':', "-");
    match suffix {
        Some(i) => format!("mrguard-{rule}-{i}"),
        None => format!("mrguard-{rule}"),
    }
}

/// One policy and its binding.
fn policy(
    name: &str,
    rule: &str,
    action: Action,
    operations: &[Operation],
    mut conditions: Vec<Value>,
    validations: Vec<Value>,
) -> [Value; 2] {
    // Conditions are limited to 64 by the API server; names must be unique.
    for (i, c) in conditions.iter_mut().enumerate() {
        let n = c["name"].as_str().unwrap_or("condition").to_string();
        c["name"] = json!(format!("{i:02}-{n}"));
    }
    let ops: Vec<&str> = operations.iter().map(|o| o.as_str()).collect();
    let p = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "mrguard"},
            "annotations": {"mrguard.io/rule": rule},
        },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": ["*"],
                    "apiVersions": ["*"],
                    "resources": ["*"],
                    "operations": ops,
                }],
            },
            "matchConditions": conditions,
            "validations": validations,
        },
    });
    let b = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "mrguard"},
        },
        "spec": {
            "policyName": name,
            "validationActions": [action.as_str()],
        },
    });
    [p, b]
}

fn condition(name: &str, expression: String) -> Value {
    json!({"name": name, "expression": expression})
}

/// The text of one rule's validation and its message, for an entry; `None`
/// when the entry has nothing to check.
type Check = fn(&ResourceConfig) -> Option<(String, String)>;

const CU: &[Operation] = &[Operation::Create, Operation::Update];
const D: &[Operation] = &[Operation::Delete];

/// The rules of every MR, with their default action, check, operations and
/// the object they judge.
const EVERY_MR: [(&str, Action, Check, &[Operation], &str); 7] = [
    (
        "observe-only-external-name",
        Action::Deny,
        observe_only_external_name,
        CU,
        "object",
    ),
    (
        "deletion-protection",
        Action::Deny,
        deletion_protection,
        D,
        "oldObject",
    ),
    (
        "management-policies",
        Action::Deny,
        management_policies,
        CU,
        "object",
    ),
    (
        "deletion-policy-conflict",
        Action::Warn,
        deletion_policy_conflict,
        CU,
        "object",
    ),
    ("paused-value", Action::Warn, paused_value, CU, "object"),
    ("paused-delete", Action::Deny, paused_delete, D, "oldObject"),
    (
        "connection-secret-ref",
        Action::Deny,
        connection_secret_ref,
        CU,
        "object",
    ),
];

/// Exports every rule of `config` that CEL can express, with the actions
/// and exceptions in force at `now`.
pub fn export(config: &Config, now: jiff::Timestamp) -> Export {
    let mut exporter = Exporter {
        config,
        now,
        out: Export::default(),
        not_exempt: not_exempt(config),
    };
    exporter.note_expiring_exceptions();
    exporter.immutable_fields();
    for rule in EVERY_MR {
        exporter.every_mr(rule);
    }
    exporter.cel_rules();
    exporter.not_exportable();
    exporter.out
}

/// One export under way: the configuration, the instant it is judged at,
/// and what has been produced so far.
struct Exporter<'a> {
    config: &'a Config,
    now: jiff::Timestamp,
    out: Export,
    /// The condition leaving out exempt users, when there are any.
    not_exempt: Option<Value>,
}

/// The match condition leaving out `exemptUsernames`, if any are set.
fn not_exempt(config: &Config) -> Option<Value> {
    let exempt = config.exempt_username_globs();
    (!exempt.is_empty()).then(|| {
        condition(
            "not-exempt",
            format!(
                "!({REQUEST_USERNAME} != '' && {})",
                any_glob(REQUEST_USERNAME, &exempt)
            ),
        )
    })
}

impl Exporter<'_> {
    fn changes_at(&mut self, t: jiff::Timestamp) {
        self.out.changes_at = Some(self.out.changes_at.map_or(t, |c| c.min(t)));
    }

    /// `rule` has nothing to judge for `scope` (no field to check, or its
    /// action is Off): no policy is needed there.
    fn vacuous(&mut self, rule: &str, scope: Scope) {
        self.out.coverage.push(Covered {
            rule: rule.to_string(),
            scope,
            policies: Vec::new(),
            complete: true,
        });
    }

    fn covered(&mut self, rule: &str, scope: Scope, policy: String, complete: bool) {
        self.out.coverage.push(Covered {
            rule: rule.to_string(),
            scope,
            policies: vec![policy],
            complete,
        });
    }

    /// The action of `rule` for `entry` at `now`; a staged action is
    /// exported as it is now, with a line saying when to export again.
    fn action(&mut self, entry: &ResourceConfig, rule: &str, default: Action) -> Action {
        let a = self.config.rule_action(entry, rule, default);
        let (action, staged) = a.at(self.now);
        if let Some(t) = staged {
            self.changes_at(t);
            self.out.skipped.push(format!(
                "{rule}: staged (Deny from {t}); exported as {}: export again after that date",
                action.as_str()
            ));
        }
        action
    }

    /// A policy has no expiry: an exception that expires is exported
    /// without one, and said so.
    fn note_expiring_exceptions(&mut self) {
        for e in &self.config.exceptions {
            if let Some(t) = e.expires.filter(|_| !e.expired(self.now)) {
                self.changes_at(t);
                self.out.skipped.push(format!(
                    "exception {}: exported as match conditions without its expiry ({t}); export again after that date",
                    e.name
                ));
            }
        }
    }

    /// immutable-field: one policy per entry with immutable fields.
    fn immutable_fields(&mut self) {
        let config = self.config;
        // Kinds no entry selects have no immutable fields.
        self.vacuous("immutable-field", Scope::NoEntry);
        for (i, entry) in config.resources.iter().enumerate() {
            if entry.immutable_fields.is_empty() {
                self.vacuous("immutable-field", Scope::Entry(i));
                continue;
            }
            let action = self.action(entry, "immutable-field", Action::Deny);
            if action == Action::Off {
                self.vacuous("immutable-field", Scope::Entry(i));
                continue;
            }
            let mut validations = Vec::new();
            let mut complete = true;
            for f in &entry.immutable_fields {
                if !f.is_concrete() {
                    complete = false;
                    self.out.skipped.push(format!(
                        "immutable-field: resources[{i}] {}: a [*] path compares list elements pairwise, which CEL cannot express",
                        f.as_str()
                    ));
                    continue;
                }
                let keys = keys(f);
                let (old_has, old_at) = path("oldObject", &keys);
                let (new_has, new_at) = path("object", &keys);
                validations.push(json!({
                    "expression": format!("!{old_has} || ({new_has} && {new_at} == {old_at})"),
                    "message": format!("{} is immutable once the MR is created (mrguard rule immutable-field)", f.as_str()),
                    "reason": "Forbidden",
                }));
            }
            if validations.is_empty() {
                self.out.coverage.push(Covered {
                    rule: "immutable-field".into(),
                    scope: Scope::Entry(i),
                    policies: Vec::new(),
                    complete: false,
                });
                continue;
            }
            let mut conditions = vec![
                condition("selected", entry_selected(config, i)),
                condition("managed", managed("object")),
                condition("created", created("oldObject")),
            ];
            conditions.extend(self.not_exempt.clone());
            conditions.extend(exception_conditions(config, "immutable-field", self.now));
            let name = policy_name("immutable-field", Some(i));
            self.covered("immutable-field", Scope::Entry(i), name.clone(), complete);
            self.out.objects.extend(policy(
                &name,
                "immutable-field",
                action,
                &[Operation::Update],
                conditions,
                validations,
            ));
        }
    }

    /// A rule of every MR, with per-entry actions: one policy per entry
    /// (and one for kinds no entry matches) whose action is not Off, or a
    /// single policy when no entry overrides the action or the check.
    fn every_mr(
        &mut self,
        (rule, default, check, operations, subject): (&str, Action, Check, &[Operation], &str),
    ) {
        let config = self.config;
        let fallback = ResourceConfig::default();
        let mut scopes: Vec<(Option<usize>, &ResourceConfig, Option<String>)> = config
            .resources
            .iter()
            .enumerate()
            .map(|(i, e)| (Some(i), e, Some(entry_selected(config, i))))
            .collect();
        scopes.push((None, &fallback, no_entry(config)));
        let overridden = config.resources.iter().any(|e| e.rules.contains_key(rule));
        let uniform = scopes.iter().all(|(_, e, _)| check(e) == check(&fallback));
        if !overridden && uniform {
            scopes = vec![(None, &fallback, None)];
        }
        let split = overridden || !uniform;
        let scope_of = |i: Option<usize>| match (i, split) {
            (Some(i), _) => Scope::Entry(i),
            (None, true) => Scope::NoEntry,
            (None, false) => Scope::All,
        };
        for (i, entry, selected) in scopes {
            let Some((expression, message)) = check(entry) else {
                self.vacuous(rule, scope_of(i));
                continue;
            };
            let action = self.action(entry, rule, default);
            if action == Action::Off {
                self.vacuous(rule, scope_of(i));
                continue;
            }
            let mut conditions = Vec::new();
            if let Some(s) = selected {
                conditions.push(condition("selected", s));
            }
            conditions.push(condition("managed", managed(subject)));
            conditions.extend(exception_conditions(config, rule, self.now));
            let name = policy_name(rule, i);
            self.covered(rule, scope_of(i), name.clone(), true);
            self.out.objects.extend(policy(
                &name,
                rule,
                action,
                operations,
                conditions,
                vec![json!({"expression": expression, "message": message, "reason": "Forbidden"})],
            ));
        }
    }

    /// CEL rules, rewritten from self/oldSelf to object/oldObject.
    fn cel_rules(&mut self) {
        let config = self.config;
        for (i, entry) in config.resources.iter().enumerate() {
            for c in entry.cel_rules.iter() {
                let rule = format!("cel:{}", c.name);
                let action = self.action(entry, &rule, c.action);
                if action == Action::Off {
                    continue;
                }
                let deletes = c.operations.contains(&Operation::Delete);
                let only_deletes = c.operations.iter().all(|o| *o == Operation::Delete);
                let this = if only_deletes {
                    "oldObject"
                } else if deletes {
                    SUBJECT
                } else {
                    "object"
                };
                let Some(expression) = rewrite(&c.expression, this) else {
                    self.out.skipped.push(format!(
                        "{rule}: its expression could not be rewritten for an admission policy"
                    ));
                    continue;
                };
                let mut v = json!({"expression": expression, "reason": "Forbidden"});
                let mut complete = true;
                match (&c.message, &c.message_program) {
                    (_, Some(_)) => {
                        complete = false;
                        self.out.skipped.push(format!(
                            "{rule}: messageExpression is not exported; the policy says message (or the expression) instead"
                        ));
                        if let Some(m) = &c.message {
                            v["message"] = json!(m);
                        }
                    }
                    (Some(m), None) => v["message"] = json!(m),
                    (None, None) => v["message"] = json!(format!("failed rule: {}", c.expression)),
                }
                let mut conditions = vec![
                    condition("selected", entry_selected(config, i)),
                    condition("managed", managed(this)),
                ];
                conditions.extend(exception_conditions(config, &rule, self.now));
                let name = policy_name(&format!("cel-{}", c.name), Some(i));
                self.covered(&rule, Scope::Entry(i), name.clone(), complete);
                self.out.objects.extend(policy(
                    &name,
                    &rule,
                    action,
                    &c.operations,
                    conditions,
                    vec![v],
                ));
            }
        }
    }

    /// What no policy can carry, one line each.
    fn not_exportable(&mut self) {
        for (rule, why) in NOT_EXPORTABLE {
            self.out.skipped.push(format!("{rule}: {why}"));
        }
        for (rule, what) in NEEDS_CLUSTER_STATE {
            self.out.skipped.push(format!(
                "{rule}: it needs cluster state ({what}), which a policy cannot read"
            ));
        }
        self.out.skipped.push(
            "the providers' service accounts found in the cluster (the controller's provider index) are not exported; exemptUsernames is"
                .to_string(),
        );
        self.out.skipped.push(
            "mutation (defaults) cannot be exported to a ValidatingAdmissionPolicy".to_string(),
        );
    }
}

/// a `.`, nor text in strings) replaced by `this` and `oldObject`.
pub fn rewrite(expr: &str, this: &str) -> Option<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let mut last_sig: Option<char> = None;
    while i < chars.len() {
        let c = chars[i];
        // String and bytes literals, raw or not, single or triple quoted.
        if c == '"' || c == '\'' {
            let raw = matches!(out.chars().last(), Some('r' | 'R'));
            let triple = i + 2 < chars.len() && chars[i + 1] == c && chars[i + 2] == c;
            let q = if triple { 3 } else { 1 };
            let start = i;
            i += q;
            loop {
                if i >= chars.len() {
                    return None;
                }
                if chars[i] == '\\' && !raw {
                    i += 2;
                    continue;
                }
                if chars[i] == c
                    && (!triple || (i + 2 < chars.len() && chars[i + 1] == c && chars[i + 2] == c))
                {
                    i += q;
                    break;
                }
                i += 1;
            }
            out.extend(&chars[start..i]);
            last_sig = Some(c);
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let selected = last_sig == Some('.');
            match word.as_str() {
                "self" if !selected => out.push_str(&format!("({this})")),
                "oldSelf" if !selected => out.push_str("oldObject"),
                _ => out.push_str(&word),
            }
            last_sig = Some('a');
            continue;
        }
        if !c.is_whitespace() {
            last_sig = Some(c);
        }
        out.push(c);
        i += 1;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rule is exported or said not to be: none is dropped unsaid.
    #[test]
    fn every_rule_is_exported_or_listed_with_its_reason() {
        let listed: Vec<&str> = NOT_EXPORTABLE
            .iter()
            .chain(NEEDS_CLUSTER_STATE)
            .map(|(r, _)| *r)
            .collect();
        let exported: Vec<&str> = EVERY_MR
            .iter()
            .map(|r| r.0)
            .chain(["immutable-field"])
            .collect();
        for rule in crate::admission::rules::RULES {
            let name = rule.name();
            let n = listed
                .iter()
                .chain(&exported)
                .filter(|r| **r == name)
                .count();
            assert_eq!(n, 1, "{name} is exported or listed {n} times, not once");
        }
        for r in listed.iter().chain(&exported) {
            assert!(
                crate::admission::rules::RULES
                    .iter()
                    .any(|rule| rule.name() == *r),
                "{r} is no rule"
            );
        }
    }

    #[test]
    fn rewrite_replaces_identifiers_only() {
        assert_eq!(
            rewrite("self.a == oldSelf.a && 'self' in self.b.self", "object").unwrap(),
            "(object).a == oldObject.a && 'self' in (object).b.self"
        );
        assert_eq!(
            rewrite(r#"self.x == "a\"self" || r'self\' == self.y"#, "o").unwrap(),
            r#"(o).x == "a\"self" || r'self\' == (o).y"#
        );
        assert_eq!(
            rewrite("selfish + myself", "o").unwrap(),
            "selfish + myself"
        );
        assert!(rewrite("'unterminated", "o").is_none());
    }
}
