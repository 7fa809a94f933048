//! The CEL text of the exported policies: safe field access and glob
//! matching, the match conditions that select an entry or waive a rule,
//! and one validation (with its message) per rule of every MR.

use serde_json::{json, Value};

use crate::admission::config::{Config, ResourceConfig};
use crate::admission::fieldpath::{FieldPath, Segment};

/// A CEL string literal.
pub(crate) fn lit(s: &str) -> String {
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
pub(crate) fn any_glob(expr: &str, globs: &[String]) -> String {
    if globs.is_empty() {
        return "true".into();
    }
    // A glob without `*` or `?` is a plain name: an `in` list costs the API
    // server far less than a regular expression per name (a
    // MutatingAdmissionPolicy selecting 20 kinds by `matches` took 0.28 ms
    // more per create through kube-apiserver 1.36 than by `in`;
    // docs/benchmarks-history.md).
    let (plain, patterned): (Vec<&String>, Vec<&String>) =
        globs.iter().partition(|g| !g.contains(['*', '?']));
    let mut alts: Vec<String> = Vec::new();
    match plain.as_slice() {
        [] => {}
        [one] => alts.push(format!("{expr} == {}", lit(one))),
        many => {
            let names: Vec<String> = many.iter().map(|g| lit(g)).collect();
            alts.push(format!("{expr} in [{}]", names.join(", ")));
        }
    }
    alts.extend(
        patterned
            .iter()
            .map(|g| format!("{expr}.matches({})", lit(&glob_regex(g)))),
    );
    format!("({})", alts.join(" || "))
}

/// The keys `field` steps through, for [`path`]; a `[*]` step has none,
/// so callers export only concrete paths.
pub(crate) fn keys(field: &FieldPath) -> Vec<&str> {
    field
        .segments()
        .iter()
        .filter_map(|s| match s {
            Segment::Field(k) | Segment::Key(k) => Some(k.as_str()),
            Segment::Wildcard => None,
        })
        .collect()
}

/// `base[k1][k2]…` reached safely: every step is a map holding the key.
/// Returns (the condition that it is present, the access).
pub(crate) fn path(base: &str, keys: &[&str]) -> (String, String) {
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

/// The fields of `request` that the API server leaves out when they are
/// empty, read as `''` then. It binds `request` from the AdmissionRequest
/// converted to unstructured, where `name`, `namespace` and
/// `userInfo.username` are `omitempty`: a cluster-scoped request has no
/// `namespace` key, a create with `generateName` no `name` until the
/// name is generated, and reading an absent key is an evaluation error
/// (`no such key: namespace`, what kube-apiserver v1.36.3 answered).
pub(crate) const REQUEST_NAMESPACE: &str = "(has(request.namespace) ? request.namespace : '')";
/// `request.userInfo.username`, or `''`; see [`REQUEST_NAMESPACE`].
pub(crate) const REQUEST_USERNAME: &str =
    "(has(request.userInfo.username) ? request.userInfo.username : '')";
/// The request is for a namespaced object.
pub(crate) const NAMESPACED: &str = "(has(request.namespace) && request.namespace != '')";

/// The object under judgment is an MR: `spec.forProvider` is an object.
pub(crate) fn managed(subject: &str) -> String {
    let (has, at) = path(subject, &["spec", "forProvider"]);
    format!("({has} && type({at}) == map)")
}

/// The MR under judgment: the old object on DELETE.
pub(super) const SUBJECT: &str = "(request.operation == 'DELETE' ? oldObject : object)";

/// Created, as mrguard judges it (docs/managed-resources.md): the
/// create-succeeded annotation, or a True Ready condition.
pub(super) fn created(o: &str) -> String {
    let (ann, at) = path(
        o,
        &[
            "metadata",
            "annotations",
            crate::admission::mr::CREATE_SUCCEEDED,
        ],
    );
    let (conds, list) = path(o, &["status", "conditions"]);
    format!(
        "(({ann} && {at} != null) || ({conds} && type({list}) == list && {list}.exists(c, type(c) == map && 'type' in c && 'status' in c && c['type'] == 'Ready' && c['status'] == 'True')))"
    )
}

/// The request is judged by entry `i` of `resources`: it matches, and no
/// earlier entry does (first match wins).
pub(crate) fn entry_selected(config: &Config, i: usize) -> String {
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
pub(crate) fn no_entry(config: &Config) -> Option<String> {
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
const NAME: &str = "(has(request.name) ? request.name : ((type(object) == map && 'metadata' in object && type(object['metadata']) == map && 'name' in object['metadata'] && type(object['metadata']['name']) == string) ? object['metadata']['name'] : ''))";

/// Match conditions leaving out what an unexpired exception waives for `rule`.
pub(super) fn exception_conditions(
    config: &Config,
    rule: &str,
    now: jiff::Timestamp,
) -> Vec<Value> {
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
                "({REQUEST_USERNAME} != '' && {})",
                any_glob(REQUEST_USERNAME, &users)
            )
        };
        let waived = format!(
            "{} && {} && {} && {users}",
            any_glob(NAME, &names),
            any_glob(REQUEST_NAMESPACE, &namespaces),
            any_glob("(request.kind.group + '/' + request.kind.kind)", &kinds),
        );
        out.push(json!({
            "name": format!("not-waived-by-{}", e.name),
            "expression": format!("!({waived})"),
        }));
    }
    out
}

pub(super) fn management_policies(_: &ResourceConfig) -> Option<(String, String)> {
    let (has, l) = path("object", &["spec", "managementPolicies"]);
    let sets: Vec<String> = crate::admission::mr::PolicySet::SUPPORTED
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
            crate::admission::mr::PolicySet::supported_list()
        ),
    ))
}

/// `list` holds exactly the actions of `set`, each once.
fn is_set(list: &str, set: crate::admission::mr::PolicySet) -> String {
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

pub(super) fn deletion_policy_conflict(_: &ResourceConfig) -> Option<(String, String)> {
    let (has_dp, dp) = path("object", &["spec", "deletionPolicy"]);
    let (has_mp, l) = path("object", &["spec", "managementPolicies"]);
    let with_delete: Vec<String> = crate::admission::mr::PolicySet::SUPPORTED
        .iter()
        .filter(|s| !s.is_default() && s.has(crate::admission::mr::PolicyAction::Delete))
        .map(|s| is_set(&l, *s))
        .collect();
    Some((
        format!(
            // A namespaced MR has no `deletionPolicy`, so one written on it
            // counts for nothing, as the webhook judges it.
            "!(!{NAMESPACED} && {has_dp} && {dp} == 'Orphan' && {has_mp} && type({l}) == list && {l}.all(a, type(a) == string) && ({}))",
            with_delete.join(" || ")
        ),
        "Orphan is ignored because managementPolicies has Delete: the external resource WILL be deleted (mrguard rule deletion-policy-conflict)".to_string(),
    ))
}

pub(super) fn paused_delete(_: &ResourceConfig) -> Option<(String, String)> {
    let o = "oldObject";
    let (has_p, p) = path(
        o,
        &["metadata", "annotations", crate::admission::mr::PAUSED],
    );
    let (has_mp, mp) = path(o, &["spec", "managementPolicies"]);
    let (has_f, f) = path(o, &["metadata", "finalizers"]);
    Some((
        format!(
            "!((({has_p} && {p} == 'true') || ({has_mp} && type({mp}) == list && {mp}.size() == 0)) && {has_f} && type({f}) == list && {f}.size() > 0)"
        ),
        "the MR is paused and still has finalizers, so the deletion would hang forever (mrguard rule paused-delete)".to_string(),
    ))
}

pub(super) fn connection_secret_ref(_: &ResourceConfig) -> Option<(String, String)> {
    let (has, r) = path("object", &["spec", "writeConnectionSecretToRef"]);
    let text =
        |k: &str| format!("('{k}' in {r} && type({r}['{k}']) == string && {r}['{k}'] != '')");
    Some((
        format!(
            "!{has} || {r} == null || (type({r}) == map && {} && ({NAMESPACED} ? (!('namespace' in {r}) || {r}['namespace'] == null) : {}))",
            text("name"),
            text("namespace")
        ),
        "spec.writeConnectionSecretToRef needs a non-empty name, and a namespace exactly when the MR is cluster-scoped (mrguard rule connection-secret-ref)".to_string(),
    ))
}

/// The old object's deletion outcome is Delete (docs/managed-resources.md):
/// an unreadable set counts as Delete; the default set follows
/// `deletionPolicy` on a cluster-scoped MR (absent, not a string or
/// `Delete`: Delete) and deletes on a namespaced one; any other set deletes
/// exactly when it has `Delete`.
fn deletes(o: &str) -> String {
    let (has_dp, dp) = path(o, &["spec", "deletionPolicy"]);
    let (has_mp, l) = path(o, &["spec", "managementPolicies"]);
    let supported: Vec<String> = crate::admission::mr::PolicySet::SUPPORTED
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
        is_set(&l, crate::admission::mr::PolicySet::DEFAULT)
    );
    let with_delete: Vec<String> = crate::admission::mr::PolicySet::SUPPORTED
        .iter()
        .filter(|s| !s.is_default() && s.has(crate::admission::mr::PolicyAction::Delete))
        .map(|s| is_set(&l, *s))
        .collect();
    let policy_delete =
        format!("({NAMESPACED} || !{has_dp} || type({dp}) != string || {dp} == 'Delete')");
    format!(
        "(!{valid} || ({star} && {policy_delete}) || (!{absent} && ({})))",
        with_delete.join(" || ")
    )
}

pub(super) fn deletion_protection(entry: &ResourceConfig) -> Option<(String, String)> {
    let o = "oldObject";
    let (has_a, a) = path(
        o,
        &[
            "metadata",
            "annotations",
            crate::admission::mr::DELETION_PROTECTION,
        ],
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

pub(super) fn observe_only_external_name(entry: &ResourceConfig) -> Option<(String, String)> {
    use crate::admission::config::ExternalNameStrategy;
    if entry.external_name != ExternalNameStrategy::IdentifierFromProvider {
        return None;
    }
    let (has_mp, l) = path("object", &["spec", "managementPolicies"]);
    let (has_n, n) = path(
        "object",
        &[
            "metadata",
            "annotations",
            crate::admission::mr::EXTERNAL_NAME,
        ],
    );
    // Valid sets that cannot create, other than the paused set [].
    let blind: Vec<String> = crate::admission::mr::PolicySet::SUPPORTED
        .iter()
        .filter(|s| **s != crate::admission::mr::PolicySet::PAUSED && !s.can_create())
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

pub(super) fn paused_value(_: &ResourceConfig) -> Option<(String, String)> {
    let (has, v) = path(
        "object",
        &["metadata", "annotations", crate::admission::mr::PAUSED],
    );
    Some((
        format!("!{has} || (type({v}) == string && ({v} == 'true' || {v} == 'false'))"),
        format!(
            "{} must be \"true\" or \"false\": only \"true\" pauses (mrguard rule paused-value)",
            crate::admission::mr::PAUSED
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_become_anchored_regexes() {
        assert_eq!(glob_regex("*.aws.upbound.io"), "^.*\\.aws\\.upbound\\.io$");
        assert_eq!(glob_regex("V?C"), "^V.C$");
    }
}
