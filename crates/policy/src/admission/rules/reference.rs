use serde_json::{Map, Value};

use super::{show, Rule, RuleContext, CU};
use crate::admission::model::{Action, Violation};

/// Crossplane references and selectors under forProvider and initProvider
/// must be resolvable. Only reference-shaped objects are judged, so maps that
/// merely end in "Selector" (a nodeSelector in an embedded manifest) pass.
pub(super) struct Reference;

const REF_KEYS: &[&str] = &["name", "policy"];
const SELECTOR_KEYS: &[&str] = &["matchLabels", "matchControllerRef", "policy"];

fn shaped(m: &Map<String, Value>, allowed: &[&str]) -> bool {
    m.keys().all(|k| allowed.contains(&k.as_str()))
}

fn check_policy(at: &str, m: &Map<String, Value>, out: &mut Vec<Violation>) {
    let Some(p) = m.get("policy").filter(|p| !p.is_null()) else {
        return;
    };
    let Some(p) = p.as_object() else {
        out.push(
            Violation::new(format!("{at}.policy must be an object"))
                .fix("write policy as {resolve: Always, resolution: Required}"),
        );
        return;
    };
    for (key, allowed) in [
        ("resolve", ["Always", "IfNotPresent"]),
        ("resolution", ["Required", "Optional"]),
    ] {
        if let Some(v) = p.get(key).filter(|v| !v.is_null()) {
            if !allowed.iter().any(|a| v.as_str() == Some(a)) {
                out.push(
                    Violation::new(format!(
                        "{at}.policy.{key} is {}; it must be {} or {}",
                        show(v),
                        allowed[0],
                        allowed[1]
                    ))
                    .fix(format!(
                        "set {at}.policy.{key} to {} or {}",
                        allowed[0], allowed[1]
                    )),
                );
            }
        }
    }
}

fn check_ref(at: &str, m: &Map<String, Value>, out: &mut Vec<Violation>) {
    if m.get("name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        out.push(
            Violation::new(format!("{at}.name is missing or empty"))
                .fix(format!("set {at}.name to the referenced object's name")),
        );
    }
    check_policy(at, m, out);
}

fn check_selector(at: &str, m: &Map<String, Value>, out: &mut Vec<Violation>) {
    let labels = m
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_some_and(|l| !l.is_empty());
    let controller = m.get("matchControllerRef").and_then(Value::as_bool) == Some(true);
    if !labels && !controller {
        out.push(
            Violation::new(format!(
                "{at} selects nothing: it needs non-empty matchLabels or matchControllerRef: true"
            ))
            .fix(format!(
                "add matchLabels to {at}, or use a *Ref with a name"
            )),
        );
    }
    check_policy(at, m, out);
}

/// One step of the path to the node being walked.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The path walked so far, rendered only when a violation names it: the
/// walk visits every node of forProvider, and formatting a path per node
/// was the rule's main cost on large objects.
struct Path<'a>(Vec<Step<'a>>);

impl Path<'_> {
    fn render(&self) -> String {
        let mut s = String::from("spec");
        for step in &self.0 {
            match step {
                Step::Key(k) => {
                    s.push('.');
                    s.push_str(k);
                }
                Step::Index(i) => s.push_str(&format!("[{i}]")),
            }
        }
        s
    }
}

fn walk<'a>(path: &mut Path<'a>, v: &'a Value, out: &mut Vec<Violation>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                path.0.push(Step::Key(k));
                match child {
                    Value::Object(c) if k.ends_with("Ref") && shaped(c, REF_KEYS) => {
                        check_ref(&path.render(), c, out)
                    }
                    Value::Object(c) if k.ends_with("Selector") && shaped(c, SELECTOR_KEYS) => {
                        check_selector(&path.render(), c, out)
                    }
                    Value::Array(items) if k.ends_with("Refs") => {
                        for (i, item) in items.iter().enumerate() {
                            path.0.push(Step::Index(i));
                            match item {
                                Value::Object(c) if shaped(c, REF_KEYS) => {
                                    check_ref(&path.render(), c, out)
                                }
                                other => walk(path, other, out),
                            }
                            path.0.pop();
                        }
                    }
                    other => walk(path, other, out),
                }
                path.0.pop();
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.0.push(Step::Index(i));
                walk(path, item, out);
                path.0.pop();
            }
        }
        _ => {}
    }
}

impl Rule for Reference {
    fn name(&self) -> &'static str {
        "reference"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Deny
    }
    fn summary(&self) -> &'static str {
        "Every `*Ref`/`*Refs` item under `forProvider`/`initProvider` names an object, every `*Selector` selects something, and `policy` values are valid: otherwise resolution fails"
    }
    fn fix(&self) -> &'static str {
        "Name the referenced object, give the selector `matchLabels` or `matchControllerRef: true`, or fix `policy.resolve`/`policy.resolution`"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let mut out = Vec::new();
        for field in ["forProvider", "initProvider"] {
            if let Some(v) = ctx.mr().spec(field) {
                walk(&mut Path(vec![Step::Key(field)]), v, &mut out);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::json;

    fn msgs(fp: Value) -> Vec<String> {
        Case::create(mr(json!({"forProvider": fp})))
            .check(&Reference)
            .into_iter()
            .map(|v| v.message)
            .collect()
    }

    #[test]
    fn good_references_pass() {
        assert!(msgs(json!({
            "vpcIdRef": {"name": "vpc", "policy": {"resolve": "Always", "resolution": "Optional"}},
            "subnetIdRefs": [{"name": "a"}, {"name": "b"}],
            "vpcIdSelector": {"matchLabels": {"a": "b"}},
            "roleSelector": {"matchControllerRef": true, "policy": {"resolve": "IfNotPresent"}},
        }))
        .is_empty());
    }

    #[test]
    fn empty_names_selectors_and_bad_policies_fail() {
        let m = msgs(json!({
            "vpcIdRef": {},
            "subnetIdRefs": [{"name": "a"}, {"name": ""}],
            "vpcIdSelector": {"matchLabels": {}},
            "roleSelector": {"matchControllerRef": false},
            "kmsKeyIdRef": {"name": "k", "policy": {"resolve": "Sometimes", "resolution": "required"}},
        }));
        assert_eq!(m.len(), 6, "{m:#?}");
        assert!(m
            .iter()
            .any(|s| s.starts_with("spec.forProvider.vpcIdRef.name is missing")));
        assert!(m
            .iter()
            .any(|s| s.starts_with("spec.forProvider.subnetIdRefs[1].name")));
        assert!(m
            .iter()
            .any(|s| s.starts_with("spec.forProvider.vpcIdSelector selects nothing")));
        assert!(m
            .iter()
            .any(|s| s.starts_with("spec.forProvider.roleSelector selects nothing")));
        assert!(m
            .iter()
            .any(|s| s.contains("policy.resolve is \"Sometimes\"")));
        assert!(m
            .iter()
            .any(|s| s.contains("policy.resolution is \"required\"")));
    }

    #[test]
    fn references_nested_in_lists_and_init_provider_are_found() {
        let m = msgs(
            json!({"subnetMapping": [{"subnetIdRef": {"name": "ok"}}, {"subnetIdRef": {"name": ""}}]}),
        );
        assert_eq!(
            m,
            vec!["spec.forProvider.subnetMapping[1].subnetIdRef.name is missing or empty"]
        );
        let v = Case::create(mr(json!({"initProvider": {"a": {"bRef": {}}}}))).check(&Reference);
        assert!(v[0].message.starts_with("spec.initProvider.a.bRef"));
    }

    #[test]
    fn non_reference_shapes_are_skipped() {
        assert!(msgs(json!({
            "manifest": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"}}},
            "secretRef": {"name": "x", "namespace": "y", "key": "z"},
            "imageRef": "registry/image:tag",
            "someRefs": ["a", "b"],
        }))
        .is_empty());
    }
}
