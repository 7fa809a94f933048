//! `mrguard export vap` (docs/policy-operations.md#mrguard-export-vap): the
//! rules of a configuration that CEL can express, as
//! `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicies and
//! bindings, so that an API server at 1.30 or later enforces them itself;
//! and [`evaluate`], which judges a request with such policies the way the
//! API server does, for the differential test against mrguard's verdict.
//!
//! Every expression keeps to the Kubernetes 1.30 CEL environment and is
//! written so that it cannot fail on any JSON: each step checks the type of
//! what it reads, as mrguard's rules do.

use serde_json::{json, Value};

use crate::cel::{CelProgram, Scope};
use crate::config::{Config, ResourceConfig};
use crate::fieldpath::Segment;
use crate::model::{Action, Operation};
use crate::review::Request;

/// What one export produced.
#[derive(Debug, Default)]
pub struct Export {
    /// The policies and bindings, in order.
    pub objects: Vec<Value>,
    /// What could not be exported, and why: one line each.
    pub skipped: Vec<String>,
}

/// Rules that cannot be exported, and why.
const NOT_EXPORTABLE: &[(&str, &str)] = &[
    ("deletion-policy", "its warning for namespaced MRs and its messages name the value; not exported yet"),
    ("init-provider-late-init", "not exported yet"),
    ("init-provider-change", "not exported yet"),
    ("external-name-change", "it judges whether creation was attempted from three annotations; not exported yet"),
    ("creation-incomplete", "it compares three annotations as instants, which needs timestamp parsing of arbitrary text"),
    ("reference", "it walks every *Ref/*Selector at any depth of forProvider and initProvider, which CEL cannot recurse into"),
];

/// The admission-time variables of a policy expression.
const VAP_VARS: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
];

/// A CEL string literal.
fn lit(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A glob (`*` any characters, `?` one) as an anchored RE2 pattern.
fn glob_regex(glob: &str) -> String {
    let mut re = String::from("^");
    for c in glob.chars() {
        match c {
            '*' => re.push_str(".*"),
            '?' => re.push('.'),
            c if "\\.+()[]{}|^$".contains(c) => {
                re.push('\\');
                re.push(c);
            }
            c => re.push(c),
        }
    }
    re.push('$');
    re
}

/// `expr` matches one of `globs` (`true` when there are none).
fn any_glob(expr: &str, globs: &[String]) -> String {
    if globs.is_empty() {
        return "true".into();
    }
    let alts: Vec<String> = globs
        .iter()
        .map(|g| format!("{expr}.matches({})", lit(&glob_regex(g))))
        .collect();
    format!("({})", alts.join(" || "))
}

/// `base[k1][k2]…` reached safely: every step is a map holding the key.
/// Returns (the condition that it is present, the access).
fn path(base: &str, keys: &[&str]) -> (String, String) {
    let mut cond = format!("type({base}) == map");
    let mut at = base.to_string();
    for (i, k) in keys.iter().enumerate() {
        cond.push_str(&format!(" && {} in {at}", lit(k)));
        at = format!("{at}[{}]", lit(k));
        if i + 1 < keys.len() {
            cond.push_str(&format!(" && type({at}) == map"));
        }
    }
    (format!("({cond})"), at)
}

/// The object under judgment is an MR: `spec.forProvider` is an object.
fn managed(subject: &str) -> String {
    let (has, at) = path(subject, &["spec", "forProvider"]);
    format!("({has} && type({at}) == map)")
}

/// The MR under judgment: the old object on DELETE.
const SUBJECT: &str = "(request.operation == 'DELETE' ? oldObject : object)";

/// Created, as mrguard judges it (docs/managed-resources.md): the
/// create-succeeded annotation, or a True Ready condition.
fn created(o: &str) -> String {
    let (ann, at) = path(o, &["metadata", "annotations", crate::mr::CREATE_SUCCEEDED]);
    let (conds, list) = path(o, &["status", "conditions"]);
    format!(
        "(({ann} && {at} != null) || ({conds} && type({list}) == list && {list}.exists(c, type(c) == map && 'type' in c && 'status' in c && c['type'] == 'Ready' && c['status'] == 'True')))"
    )
}

/// The request is judged by entry `i` of `resources`: it matches, and no
/// earlier entry does (first match wins).
fn entry_selected(config: &Config, i: usize) -> String {
    let matches = |r: &ResourceConfig| {
        let (groups, kinds) = r.globs();
        format!(
            "({} && {})",
            any_glob("request.kind.group", &groups),
            any_glob("request.kind.kind", &kinds)
        )
    };
    let mut parts = vec![matches(&config.resources[i])];
    for earlier in &config.resources[..i] {
        parts.push(format!("!{}", matches(earlier)));
    }
    parts.join(" && ")
}

/// No earlier entry matches: the request falls to the built-in fallback.
fn no_entry(config: &Config) -> Option<String> {
    if config.resources.is_empty() {
        return None;
    }
    let all: Vec<String> = (0..config.resources.len())
        .map(|i| {
            let (groups, kinds) = config.resources[i].globs();
            format!(
                "!({} && {})",
                any_glob("request.kind.group", &groups),
                any_glob("request.kind.kind", &kinds)
            )
        })
        .collect();
    Some(all.join(" && "))
}

/// The name exceptions match: the request's, else the object's.
const NAME: &str = "(request.name != '' ? request.name : ((type(object) == map && 'metadata' in object && type(object['metadata']) == map && 'name' in object['metadata'] && type(object['metadata']['name']) == string) ? object['metadata']['name'] : ''))";

/// Match conditions leaving out what an unexpired exception waives for `rule`.
fn exception_conditions(config: &Config, rule: &str, now: jiff::Timestamp) -> Vec<Value> {
    let mut out = Vec::new();
    for e in &config.exceptions {
        if e.expired(now) || !e.rules.iter().any(|r| r == rule) {
            continue;
        }
        let [names, namespaces, kinds, users] = e.match_globs();
        let users = if users.is_empty() {
            "true".to_string()
        } else {
            format!(
                "(request.userInfo.username != '' && {})",
                any_glob("request.userInfo.username", &users)
            )
        };
        let waived = format!(
            "{} && {} && {} && {users}",
            any_glob(NAME, &names),
            any_glob("request.namespace", &namespaces),
            any_glob("(request.kind.group + '/' + request.kind.kind)", &kinds),
        );
        out.push(json!({
            "name": format!("not-waived-by-{}", e.name),
            "expression": format!("!({waived})"),
        }));
    }
    out
}

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

/// Exports every rule of `config` that CEL can express, with the actions
/// and exceptions in force at `now`.
pub fn export(config: &Config, now: jiff::Timestamp) -> Export {
    let mut out = Export::default();
    let fallback = ResourceConfig::default();
    let action_of = |entry: &ResourceConfig, rule: &str, default: Action, out: &mut Export| {
        let a = config.rule_action(entry, rule, default);
        let (action, staged) = a.at(now);
        if let Some(t) = staged {
            out.skipped.push(format!(
                "{rule}: staged (Deny from {t}); exported as {}: export again after that date",
                action.as_str()
            ));
        }
        action
    };
    for e in &config.exceptions {
        if let Some(t) = e.expires.filter(|_| !e.expired(now)) {
            out.skipped.push(format!(
                "exception {}: exported as match conditions without its expiry ({t}); export again after that date",
                e.name
            ));
        }
    }
    let exempt = config.exempt_username_globs();
    let not_exempt = (!exempt.is_empty()).then(|| {
        condition(
            "not-exempt",
            format!(
                "!(request.userInfo.username != '' && {})",
                any_glob("request.userInfo.username", &exempt)
            ),
        )
    });

    // immutable-field: one policy per entry with immutable fields.
    for (i, entry) in config.resources.iter().enumerate() {
        if entry.immutable_fields.is_empty() {
            continue;
        }
        let action = action_of(entry, "immutable-field", Action::Deny, &mut out);
        if action == Action::Off {
            continue;
        }
        let mut validations = Vec::new();
        for f in &entry.immutable_fields {
            if !f.is_concrete() {
                out.skipped.push(format!(
                    "immutable-field: resources[{i}] {}: a [*] path compares list elements pairwise, which CEL cannot express",
                    f.as_str()
                ));
                continue;
            }
            let keys: Vec<&str> = f
                .segments()
                .iter()
                .filter_map(|s| match s {
                    Segment::Field(k) | Segment::Key(k) => Some(k.as_str()),
                    Segment::Wildcard => None,
                })
                .collect();
            let (old_has, old_at) = path("oldObject", &keys);
            let (new_has, new_at) = path("object", &keys);
            validations.push(json!({
                "expression": format!("!{old_has} || ({new_has} && {new_at} == {old_at})"),
                "message": format!("{} is immutable once the MR is created (mrguard rule immutable-field)", f.as_str()),
                "reason": "Forbidden",
            }));
        }
        if validations.is_empty() {
            continue;
        }
        let mut conditions = vec![
            condition("selected", entry_selected(config, i)),
            condition("managed", managed("object")),
            condition("created", created("oldObject")),
        ];
        conditions.extend(not_exempt.clone());
        conditions.extend(exception_conditions(config, "immutable-field", now));
        out.objects.extend(policy(
            &policy_name("immutable-field", Some(i)),
            "immutable-field",
            action,
            &[Operation::Update],
            conditions,
            validations,
        ));
    }

    // Rules of every MR, with per-entry actions: one policy per entry (and
    // one for kinds no entry matches) whose action is not Off.
    type Check = fn(&ResourceConfig) -> Option<(String, String)>;
    const CU: &[Operation] = &[Operation::Create, Operation::Update];
    const D: &[Operation] = &[Operation::Delete];
    let every_mr: [(&str, Action, Check, &[Operation], &str); 7] = [
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
    for (rule, default, check, operations, subject) in every_mr {
        let mut scopes: Vec<(Option<usize>, &ResourceConfig, Option<String>)> = config
            .resources
            .iter()
            .enumerate()
            .map(|(i, e)| (Some(i), e, Some(entry_selected(config, i))))
            .collect();
        scopes.push((None, &fallback, no_entry(config)));
        // One policy when no entry overrides the action or changes the check.
        let overridden = config.resources.iter().any(|e| e.rules.contains_key(rule));
        let uniform = scopes.iter().all(|(_, e, _)| check(e) == check(&fallback));
        if !overridden && uniform {
            scopes = vec![(None, &fallback, None)];
        }
        for (i, entry, selected) in scopes {
            let Some((expression, message)) = check(entry) else {
                continue;
            };
            let action = action_of(entry, rule, default, &mut out);
            if action == Action::Off {
                continue;
            }
            let mut conditions = Vec::new();
            if let Some(s) = selected {
                conditions.push(condition("selected", s));
            }
            conditions.push(condition("managed", managed(subject)));
            conditions.extend(exception_conditions(config, rule, now));
            out.objects.extend(policy(
                &policy_name(rule, i),
                rule,
                action,
                operations,
                conditions,
                vec![json!({"expression": expression, "message": message, "reason": "Forbidden"})],
            ));
        }
    }

    // CEL rules, rewritten from self/oldSelf to object/oldObject.
    for (i, entry) in config.resources.iter().enumerate() {
        for c in entry.cel_rules.iter() {
            let rule = format!("cel:{}", c.name);
            let action = action_of(entry, &rule, c.action, &mut out);
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
                out.skipped.push(format!(
                    "{rule}: its expression could not be rewritten for an admission policy"
                ));
                continue;
            };
            let mut v = json!({"expression": expression, "reason": "Forbidden"});
            match (&c.message, &c.message_program) {
                (_, Some(_)) => {
                    out.skipped.push(format!(
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
            conditions.extend(exception_conditions(config, &rule, now));
            out.objects.extend(policy(
                &policy_name(&format!("cel-{}", c.name), Some(i)),
                &rule,
                action,
                &c.operations,
                conditions,
                vec![v],
            ));
        }
    }

    for (rule, why) in NOT_EXPORTABLE {
        out.skipped.push(format!("{rule}: {why}"));
    }
    out.skipped.push(
        "the providers' service accounts found in the cluster (issue 18's index) are not exported; exemptUsernames is"
            .to_string(),
    );
    out.skipped
        .push("mutation (defaults) cannot be exported to a ValidatingAdmissionPolicy".to_string());
    out
}

fn management_policies(_: &ResourceConfig) -> Option<(String, String)> {
    let (has, l) = path("object", &["spec", "managementPolicies"]);
    let sets: Vec<String> = crate::mr::PolicySet::SUPPORTED
        .iter()
        .map(|s| is_set(&l, *s))
        .collect();
    Some((
        format!(
            "!{has} || {l} == null || (type({l}) == list && {l}.all(a, type(a) == string) && ({}))",
            sets.join(" || ")
        ),
        format!(
            "spec.managementPolicies must be one of the supported sets: {} (mrguard rule management-policies)",
            crate::mr::PolicySet::supported_list()
        ),
    ))
}

/// `list` holds exactly the actions of `set`, each once.
fn is_set(list: &str, set: crate::mr::PolicySet) -> String {
    let names = set.names();
    if names.is_empty() {
        return format!("{list}.size() == 0");
    }
    let items: Vec<String> = names.iter().map(|n| lit(n)).collect();
    format!(
        "({list}.size() == {} && [{}].all(a, a in {list}))",
        names.len(),
        items.join(", ")
    )
}

fn deletion_policy_conflict(_: &ResourceConfig) -> Option<(String, String)> {
    let (has_dp, dp) = path("object", &["spec", "deletionPolicy"]);
    let (has_mp, l) = path("object", &["spec", "managementPolicies"]);
    let with_delete: Vec<String> = crate::mr::PolicySet::SUPPORTED
        .iter()
        .filter(|s| !s.is_default() && s.has(crate::mr::PolicyAction::Delete))
        .map(|s| is_set(&l, *s))
        .collect();
    Some((
        format!(
            "!({has_dp} && {dp} == 'Orphan' && {has_mp} && type({l}) == list && {l}.all(a, type(a) == string) && ({}))",
            with_delete.join(" || ")
        ),
        "Orphan is ignored because managementPolicies has Delete: the external resource WILL be deleted (mrguard rule deletion-policy-conflict)".to_string(),
    ))
}

fn paused_delete(_: &ResourceConfig) -> Option<(String, String)> {
    let o = "oldObject";
    let (has_p, p) = path(o, &["metadata", "annotations", crate::mr::PAUSED]);
    let (has_mp, mp) = path(o, &["spec", "managementPolicies"]);
    let (has_f, f) = path(o, &["metadata", "finalizers"]);
    Some((
        format!(
            "!((({has_p} && {p} == 'true') || ({has_mp} && type({mp}) == list && {mp}.size() == 0)) && {has_f} && type({f}) == list && {f}.size() > 0)"
        ),
        "the MR is paused and still has finalizers, so the deletion would hang forever (mrguard rule paused-delete)".to_string(),
    ))
}

fn connection_secret_ref(_: &ResourceConfig) -> Option<(String, String)> {
    let (has, r) = path("object", &["spec", "writeConnectionSecretToRef"]);
    let text =
        |k: &str| format!("('{k}' in {r} && type({r}['{k}']) == string && {r}['{k}'] != '')");
    Some((
        format!(
            "!{has} || {r} == null || (type({r}) == map && {} && (request.namespace != '' ? (!('namespace' in {r}) || {r}['namespace'] == null) : {}))",
            text("name"),
            text("namespace")
        ),
        "spec.writeConnectionSecretToRef needs a non-empty name, and a namespace exactly when the MR is cluster-scoped (mrguard rule connection-secret-ref)".to_string(),
    ))
}

/// The old object's deletion outcome is Delete (docs/managed-resources.md):
/// an unreadable set counts as Delete; the default set follows
/// `deletionPolicy` (absent, not a string or `Delete`: Delete); any other
/// set deletes exactly when it has `Delete`.
fn deletes(o: &str) -> String {
    let (has_dp, dp) = path(o, &["spec", "deletionPolicy"]);
    let (has_mp, l) = path(o, &["spec", "managementPolicies"]);
    let supported: Vec<String> = crate::mr::PolicySet::SUPPORTED
        .iter()
        .map(|s| is_set(&l, *s))
        .collect();
    let absent = format!("(!{has_mp} || {l} == null)");
    let valid = format!(
        "({absent} || (type({l}) == list && {l}.all(a, type(a) == string) && ({})))",
        supported.join(" || ")
    );
    let star = format!(
        "({absent} || {})",
        is_set(&l, crate::mr::PolicySet::DEFAULT)
    );
    let with_delete: Vec<String> = crate::mr::PolicySet::SUPPORTED
        .iter()
        .filter(|s| !s.is_default() && s.has(crate::mr::PolicyAction::Delete))
        .map(|s| is_set(&l, *s))
        .collect();
    let policy_delete = format!("(!{has_dp} || type({dp}) != string || {dp} == 'Delete')");
    format!(
        "(!{valid} || ({star} && {policy_delete}) || (!{absent} && ({})))",
        with_delete.join(" || ")
    )
}

fn deletion_protection(entry: &ResourceConfig) -> Option<(String, String)> {
    let o = "oldObject";
    let (has_a, a) = path(
        o,
        &["metadata", "annotations", crate::mr::DELETION_PROTECTION],
    );
    let protected = if entry.deletion_protection {
        "true".to_string()
    } else {
        format!("({has_a} && {a} == 'true')")
    };
    Some((
        format!("!({protected} && {})", deletes(o)),
        "the MR is protected and deleting it would destroy the external resource: orphan it first (mrguard rule deletion-protection)".to_string(),
    ))
}

fn observe_only_external_name(entry: &ResourceConfig) -> Option<(String, String)> {
    use crate::config::ExternalNameStrategy;
    if entry.external_name != ExternalNameStrategy::IdentifierFromProvider {
        return None;
    }
    let (has_mp, l) = path("object", &["spec", "managementPolicies"]);
    let (has_n, n) = path(
        "object",
        &["metadata", "annotations", crate::mr::EXTERNAL_NAME],
    );
    // Valid sets that cannot create, other than the paused set [].
    let blind: Vec<String> = crate::mr::PolicySet::SUPPORTED
        .iter()
        .filter(|s| **s != crate::mr::PolicySet::PAUSED && !s.can_create())
        .map(|s| is_set(&l, *s))
        .collect();
    Some((
        format!(
            "!({has_mp} && type({l}) == list && {l}.all(a, type(a) == string) && ({}) && !({has_n} && type({n}) == string && {n} != ''))",
            blind.join(" || ")
        ),
        "a set that cannot create needs crossplane.io/external-name on a kind whose identifier the provider assigns (mrguard rule observe-only-external-name)".to_string(),
    ))
}

fn paused_value(_: &ResourceConfig) -> Option<(String, String)> {
    let (has, v) = path("object", &["metadata", "annotations", crate::mr::PAUSED]);
    Some((
        format!("!{has} || (type({v}) == string && ({v} == 'true' || {v} == 'false'))"),
        format!(
            "{} must be \"true\" or \"false\": only \"true\" pauses (mrguard rule paused-value)",
            crate::mr::PAUSED
        ),
    ))
}

/// `expr` with the identifiers `self` and `oldSelf` (not field names after
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

/// How one policy judged a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// The rule it exports (`mrguard.io/rule`).
    pub rule: String,
    /// The binding's action.
    pub action: String,
    /// Why it failed: a validation's message, or an evaluation error.
    pub failure: String,
}

/// Why a policy could not be evaluated.
#[derive(Debug, thiserror::Error)]
pub enum EvaluateError {
    /// An expression does not compile.
    #[error("failed to compile {policy} {what}: {reason}")]
    Compile {
        /// The policy.
        policy: String,
        /// Which expression.
        what: String,
        /// The compiler's message.
        reason: String,
    },
    /// The policy uses what this evaluator does not model.
    #[error(
        "failed to evaluate {0}: it has variables or params, which the exported policies never use"
    )]
    Unsupported(String),
}

/// One exported policy with its binding, compiled.
struct Compiled {
    rule: String,
    action: String,
    operations: Vec<String>,
    conditions: Vec<(String, CelProgram)>,
    validations: Vec<(String, CelProgram)>,
}

/// Exported policies and bindings, compiled once, to judge many requests.
pub struct Policies(Vec<Compiled>);

impl Policies {
    /// Compiles every policy that has a binding.
    pub fn compile(objects: &[Value]) -> Result<Self, EvaluateError> {
        let mut out = Vec::new();
        for p in objects
            .iter()
            .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
        {
            let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
            let spec = &p["spec"];
            if spec.get("variables").is_some() || spec.get("paramKind").is_some() {
                return Err(EvaluateError::Unsupported(name));
            }
            let Some(binding) = objects.iter().find(|b| {
                b["kind"] == "ValidatingAdmissionPolicyBinding"
                    && b["spec"]["policyName"] == name.as_str()
            }) else {
                continue;
            };
            let compile = |what: &str, src: &str| {
                CelProgram::compile_with(src, VAP_VARS).map_err(|e| EvaluateError::Compile {
                    policy: name.clone(),
                    what: what.to_string(),
                    reason: e.to_string(),
                })
            };
            let mut conditions = Vec::new();
            for c in spec["matchConditions"].as_array().into_iter().flatten() {
                let cname = c["name"].as_str().unwrap_or("").to_string();
                let program = compile(
                    &format!("matchCondition {cname}"),
                    c["expression"].as_str().unwrap_or(""),
                )?;
                conditions.push((cname, program));
            }
            let mut validations = Vec::new();
            for v in spec["validations"].as_array().into_iter().flatten() {
                let program = compile("validation", v["expression"].as_str().unwrap_or(""))?;
                validations.push((v["message"].as_str().unwrap_or("").to_string(), program));
            }
            out.push(Compiled {
                rule: p["metadata"]["annotations"]["mrguard.io/rule"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                action: binding["spec"]["validationActions"][0]
                    .as_str()
                    .unwrap_or("Deny")
                    .to_string(),
                operations: spec["matchConstraints"]["resourceRules"][0]["operations"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|o| o.as_str().map(str::to_string))
                    .collect(),
                conditions,
                validations,
            });
        }
        Ok(Self(out))
    }

    /// Judges `req` as the API server does: matchConstraints (operations;
    /// every exported policy matches all groups and resources, never
    /// subresources), matchConditions (all must be true; an error is a
    /// failure under `failurePolicy: Fail`), then each validation. Returns
    /// the failures, one per failing policy.
    pub fn evaluate(&self, req: &Request) -> Vec<Judgement> {
        let op = Operation::from(&req.operation);
        let mut out = Vec::new();
        if op == Operation::Connect || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
            return out;
        }
        let request = request_json(req);
        let (object, old) = crate::review::objects(req);
        let mut scope = Scope::new();
        scope.bind("object", object);
        scope.bind("oldObject", old);
        scope.bind("request", Some(&request));
        scope.bind("params", None);
        scope.bind("namespaceObject", None);
        for p in &self.0 {
            if !p.operations.iter().any(|o| o == op.as_str() || o == "*") {
                continue;
            }
            let mut failure = None;
            let mut applies = true;
            for (cname, program) in &p.conditions {
                match program.eval_bool(&scope) {
                    Ok(true) => {}
                    Ok(false) => {
                        applies = false;
                        break;
                    }
                    Err(e) => {
                        failure = Some(format!("matchCondition {cname} failed: {e}"));
                        break;
                    }
                }
            }
            if failure.is_none() && applies {
                for (message, program) in &p.validations {
                    match program.eval_bool(&scope) {
                        Ok(true) => {}
                        Ok(false) => {
                            failure = Some(message.clone());
                            break;
                        }
                        Err(e) => {
                            failure = Some(format!("validation failed: {e}"));
                            break;
                        }
                    }
                }
            }
            if let Some(failure) = failure {
                out.push(Judgement {
                    rule: p.rule.clone(),
                    action: p.action.clone(),
                    failure,
                });
            }
        }
        out
    }
}

/// Compiles `objects` and judges `req` with them ([`Policies::evaluate`]).
pub fn evaluate(objects: &[Value], req: &Request) -> Result<Vec<Judgement>, EvaluateError> {
    Ok(Policies::compile(objects)?.evaluate(req))
}

/// The `request` variable of an admission policy.
fn request_json(req: &Request) -> Value {
    json!({
        "kind": {"group": req.kind.group, "version": req.kind.version, "kind": req.kind.kind},
        "resource": {"group": req.resource.group, "version": req.resource.version, "resource": req.resource.resource},
        "name": req.name,
        "namespace": req.namespace.clone().unwrap_or_default(),
        "operation": Operation::from(&req.operation).as_str(),
        "userInfo": {
            "username": req.user_info.username.clone().unwrap_or_default(),
            "groups": req.user_info.groups.clone().unwrap_or_default(),
        },
        "dryRun": req.dry_run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn globs_become_anchored_regexes() {
        assert_eq!(glob_regex("*.aws.upbound.io"), "^.*\\.aws\\.upbound\\.io$");
        assert_eq!(glob_regex("V?C"), "^V.C$");
    }
}
