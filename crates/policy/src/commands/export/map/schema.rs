//! The structure of `admissionregistration.k8s.io/v1` MutatingAdmissionPolicy
//! and MutatingAdmissionPolicyBinding objects, checked without an API
//! server: every field the API knows, its type, the required ones and the
//! enumerations, and the rules the API server's validation adds that an
//! export could break (a mutation per patch type, unique condition names,
//! no DELETE in a policy's rules), and the CEL type check the API server
//! runs on every expression before it stores a policy
//! ([`crate::admission::cel::typecheck`]): a JSON Patch mutation must be a
//! `list(JSONPatch)` whose literals are homogeneous, a match condition a
//! `bool`.
//!
//! Written from the Go types of `k8s.io/api/admissionregistration/v1`
//! (`MutatingAdmissionPolicy`, `MutatingAdmissionPolicySpec`, `Mutation`,
//! `ApplyConfiguration`, `JSONPatch`, `MatchResources`,
//! `NamedRuleWithOperations`, `MatchCondition`, `Variable`, `ParamKind`,
//! `MutatingAdmissionPolicyBinding`, `MutatingAdmissionPolicyBindingSpec`,
//! `ParamRef`) and their API reference, as no OpenAPI document of the v1
//! kinds is among the fixtures.

use serde_json::{Map, Value};

use crate::admission::cel::typecheck::{self, CelType, TypeEnv};

const API_VERSION: &str = "admissionregistration.k8s.io/v1";

/// The problems of `obj` as a v1 MutatingAdmissionPolicy or
/// MutatingAdmissionPolicyBinding, one line each (`spec.mutations[0]: ...`);
/// empty when it is valid.
pub fn check(obj: &Value) -> Vec<String> {
    let mut c = Checker::default();
    let Some(o) = c.object(obj, "") else {
        return c.problems;
    };
    c.known(o, "", &["apiVersion", "kind", "metadata", "spec"]);
    if o.get("apiVersion").and_then(Value::as_str) != Some(API_VERSION) {
        c.problem("apiVersion", format!("must be {API_VERSION}"));
    }
    c.metadata(o.get("metadata"));
    match o.get("kind").and_then(Value::as_str) {
        Some("MutatingAdmissionPolicy") => c.policy_spec(o.get("spec")),
        Some("MutatingAdmissionPolicyBinding") => c.binding_spec(o.get("spec")),
        _ => c.problem(
            "kind",
            "must be MutatingAdmissionPolicy or MutatingAdmissionPolicyBinding".into(),
        ),
    }
    c.problems
}

#[derive(Default)]
struct Checker {
    problems: Vec<String>,
}

fn join(at: &str, field: &str) -> String {
    if at.is_empty() {
        field.to_string()
    } else {
        format!("{at}.{field}")
    }
}

impl Checker {
    fn problem(&mut self, at: &str, why: String) {
        self.problems.push(format!("{at}: {why}"));
    }

    fn object<'v>(&mut self, v: &'v Value, at: &str) -> Option<&'v Map<String, Value>> {
        match v {
            Value::Object(m) => Some(m),
            _ => {
                self.problem(
                    if at.is_empty() { "(root)" } else { at },
                    "must be an object".into(),
                );
                None
            }
        }
    }

    /// Fields of `o` the type does not have.
    fn known(&mut self, o: &Map<String, Value>, at: &str, fields: &[&str]) {
        for k in o.keys().filter(|k| !fields.contains(&k.as_str())) {
            self.problem(&join(at, k), "unknown field".into());
        }
    }

    fn string(
        &mut self,
        o: &Map<String, Value>,
        at: &str,
        field: &str,
        required: bool,
    ) -> Option<String> {
        match o.get(field) {
            None | Some(Value::Null) if required => {
                self.problem(&join(at, field), "required".into());
                None
            }
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => {
                if required && s.is_empty() {
                    self.problem(&join(at, field), "must not be empty".into());
                }
                Some(s.clone())
            }
            Some(_) => {
                self.problem(&join(at, field), "must be a string".into());
                None
            }
        }
    }

    fn one_of(
        &mut self,
        o: &Map<String, Value>,
        at: &str,
        field: &str,
        required: bool,
        allowed: &[&str],
    ) {
        if let Some(s) = self.string(o, at, field, required) {
            if !allowed.contains(&s.as_str()) {
                self.problem(
                    &join(at, field),
                    format!("{s:?} is not one of {}", allowed.join(", ")),
                );
            }
        }
    }

    fn strings(&mut self, o: &Map<String, Value>, at: &str, field: &str) -> Vec<String> {
        match o.get(field) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item.as_str() {
                        Some(s) => out.push(s.to_string()),
                        None => self.problem(
                            &format!("{}[{i}]", join(at, field)),
                            "must be a string".into(),
                        ),
                    }
                }
                out
            }
            Some(_) => {
                self.problem(&join(at, field), "must be a list of strings".into());
                Vec::new()
            }
        }
    }

    fn list<'v>(
        &mut self,
        o: &'v Map<String, Value>,
        at: &str,
        field: &str,
    ) -> Vec<(String, &'v Map<String, Value>)> {
        match o.get(field) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| {
                    let here = format!("{}[{i}]", join(at, field));
                    self.object(item, &here).map(|m| (here, m))
                })
                .collect(),
            Some(_) => {
                self.problem(&join(at, field), "must be a list".into());
                Vec::new()
            }
        }
    }

    fn string_map(&mut self, o: &Map<String, Value>, at: &str, field: &str) {
        match o.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    if !v.is_string() {
                        self.problem(
                            &format!("{}[{k}]", join(at, field)),
                            "must be a string".into(),
                        );
                    }
                }
            }
            Some(_) => self.problem(&join(at, field), "must be a map of strings".into()),
        }
    }

    /// The expression at `at` type-checks in `env` to `want`, as the API
    /// server's compiler requires (`at.expression: compilation failed:
    /// ERROR: <input>:1:579: ...`, as it says it).
    fn typed(&mut self, at: &str, expression: &str, env: &TypeEnv, want: &CelType) {
        if let Err(e) = typecheck::check(expression, env, want) {
            let why = if e.0.iter().all(|m| m.starts_with("must evaluate")) {
                e.to_string()
            } else {
                format!("compilation failed: {e}")
            };
            self.problem(&join(at, "expression"), why);
        }
    }

    /// The ObjectMeta fields an export sets: a name that is a DNS
    /// subdomain, and string maps of labels and annotations.
    fn metadata(&mut self, v: Option<&Value>) {
        let Some(v) = v else {
            self.problem("metadata", "required".into());
            return;
        };
        let Some(m) = self.object(v, "metadata") else {
            return;
        };
        if let Some(name) = self.string(m, "metadata", "name", true) {
            let ok = name.len() <= 253
                && name.split('.').all(|part| {
                    !part.is_empty()
                        && part
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                        && !part.starts_with('-')
                        && !part.ends_with('-')
                });
            if !ok {
                self.problem("metadata.name", format!("{name:?} is not a DNS subdomain"));
            }
        }
        self.string_map(m, "metadata", "labels");
        self.string_map(m, "metadata", "annotations");
    }

    fn policy_spec(&mut self, v: Option<&Value>) {
        let Some(v) = v else {
            self.problem("spec", "required".into());
            return;
        };
        let Some(s) = self.object(v, "spec") else {
            return;
        };
        self.known(
            s,
            "spec",
            &[
                "paramKind",
                "matchConstraints",
                "variables",
                "mutations",
                "failurePolicy",
                "matchConditions",
                "reinvocationPolicy",
            ],
        );
        self.one_of(s, "spec", "failurePolicy", false, &["Ignore", "Fail"]);
        self.one_of(
            s,
            "spec",
            "reinvocationPolicy",
            true,
            &["Never", "IfNeeded"],
        );
        if let Some(pk) = s.get("paramKind") {
            if let Some(pk) = self.object(pk, "spec.paramKind") {
                self.known(pk, "spec.paramKind", &["apiVersion", "kind"]);
                self.string(pk, "spec.paramKind", "apiVersion", true);
                self.string(pk, "spec.paramKind", "kind", true);
            }
        }
        match s.get("matchConstraints") {
            None | Some(Value::Null) => self.problem("spec.matchConstraints", "required".into()),
            Some(m) => self.match_resources(m, "spec.matchConstraints", true),
        }
        let conditions = self.list(s, "spec", "matchConditions");
        if conditions.len() > 64 {
            self.problem("spec.matchConditions", "at most 64 are allowed".into());
        }
        let mut names = std::collections::BTreeSet::new();
        for (at, c) in conditions {
            self.known(c, &at, &["name", "expression"]);
            if let Some(n) = self.string(c, &at, "name", true) {
                if !names.insert(n.clone()) {
                    self.problem(&format!("{at}.name"), format!("{n:?} is used twice"));
                }
            }
            if let Some(e) = self.string(c, &at, "expression", true) {
                self.typed(&at, &e, &TypeEnv::admission_policy(), &CelType::Bool);
            }
        }
        for (at, var) in self.list(s, "spec", "variables") {
            self.known(var, &at, &["name", "expression"]);
            self.string(var, &at, "name", true);
            self.string(var, &at, "expression", true);
        }
        let mutations = self.list(s, "spec", "mutations");
        if mutations.is_empty() {
            self.problem("spec.mutations", "at least one mutation is required".into());
        }
        for (at, m) in mutations {
            self.known(m, &at, &["patchType", "applyConfiguration", "jsonPatch"]);
            self.one_of(
                m,
                &at,
                "patchType",
                true,
                &["ApplyConfiguration", "JSONPatch"],
            );
            let kind = m.get("patchType").and_then(Value::as_str).unwrap_or("");
            for (field, patch_type) in [
                ("applyConfiguration", "ApplyConfiguration"),
                ("jsonPatch", "JSONPatch"),
            ] {
                let here = join(&at, field);
                match (m.get(field), kind == patch_type) {
                    (Some(p), true) => {
                        if let Some(p) = self.object(p, &here) {
                            self.known(p, &here, &["expression"]);
                            let e = self.string(p, &here, "expression", true);
                            // An apply configuration builds `Object{...}`
                            // values of the matched kind's schema, which
                            // the type check does not model; the export
                            // writes none.
                            if let (Some(e), "jsonPatch") = (e, field) {
                                self.typed(
                                    &here,
                                    &e,
                                    &TypeEnv::json_patch_mutation(),
                                    &typecheck::json_patch_list(),
                                );
                            }
                        }
                    }
                    (None, true) => {
                        self.problem(&here, format!("required when patchType is {patch_type}"))
                    }
                    (Some(_), false) => self.problem(
                        &here,
                        format!("only allowed when patchType is {patch_type}"),
                    ),
                    (None, false) => {}
                }
            }
        }
    }

    fn binding_spec(&mut self, v: Option<&Value>) {
        let Some(v) = v else {
            self.problem("spec", "required".into());
            return;
        };
        let Some(s) = self.object(v, "spec") else {
            return;
        };
        self.known(s, "spec", &["policyName", "paramRef", "matchResources"]);
        self.string(s, "spec", "policyName", true);
        if let Some(p) = s.get("paramRef") {
            if let Some(p) = self.object(p, "spec.paramRef") {
                self.known(
                    p,
                    "spec.paramRef",
                    &["name", "namespace", "selector", "parameterNotFoundAction"],
                );
                self.string(p, "spec.paramRef", "name", false);
                self.string(p, "spec.paramRef", "namespace", false);
                self.one_of(
                    p,
                    "spec.paramRef",
                    "parameterNotFoundAction",
                    false,
                    &["Allow", "Deny"],
                );
            }
        }
        if let Some(m) = s.get("matchResources") {
            self.match_resources(m, "spec.matchResources", false);
        }
    }

    /// MatchResources; a policy's `matchConstraints` must have resource rules.
    fn match_resources(&mut self, v: &Value, at: &str, rules_required: bool) {
        let Some(m) = self.object(v, at) else { return };
        self.known(
            m,
            at,
            &[
                "namespaceSelector",
                "objectSelector",
                "resourceRules",
                "excludeResourceRules",
                "matchPolicy",
            ],
        );
        self.one_of(m, at, "matchPolicy", false, &["Exact", "Equivalent"]);
        for selector in ["namespaceSelector", "objectSelector"] {
            if let Some(sel) = m.get(selector) {
                let here = join(at, selector);
                if let Some(sel) = self.object(sel, &here) {
                    self.known(sel, &here, &["matchLabels", "matchExpressions"]);
                    self.string_map(sel, &here, "matchLabels");
                }
            }
        }
        let rules = self.list(m, at, "resourceRules");
        if rules_required && rules.is_empty() {
            self.problem(&join(at, "resourceRules"), "required".into());
        }
        let excluded = self.list(m, at, "excludeResourceRules");
        for (here, r) in rules.into_iter().chain(excluded) {
            self.known(
                r,
                &here,
                &[
                    "resourceNames",
                    "operations",
                    "apiGroups",
                    "apiVersions",
                    "resources",
                    "scope",
                ],
            );
            for field in ["apiGroups", "apiVersions", "resources", "operations"] {
                let values = self.strings(r, &here, field);
                if values.is_empty() {
                    self.problem(&join(&here, field), "required".into());
                }
                if values.len() > 1 && values.iter().any(|v| v == "*") && field != "resources" {
                    self.problem(&join(&here, field), "'*' must be the only entry".into());
                }
                if field == "operations" {
                    for op in &values {
                        // A mutating policy cannot match DELETE.
                        if !["CREATE", "UPDATE", "CONNECT", "*"].contains(&op.as_str()) {
                            self.problem(
                                &join(&here, field),
                                format!("{op:?} is not one of CREATE, UPDATE, CONNECT, *"),
                            );
                        }
                    }
                }
            }
            self.strings(r, &here, "resourceNames");
            self.one_of(r, &here, "scope", false, &["Cluster", "Namespaced", "*"]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_export_is_valid_and_breakage_is_named() {
        let export = super::super::export(&crate::admission::config::Config::builtin()).unwrap();
        for o in &export.objects {
            assert_eq!(check(o), Vec::<String>::new(), "{o}");
        }
        let mut p = export.objects[0].clone();
        p["spec"]["reinvocationPolicy"] = json!("Sometimes");
        p["spec"]["mutations"][0]["patchType"] = json!("ApplyConfiguration");
        p["spec"]["matchConstraints"]["resourceRules"][0]["operations"] = json!(["DELETE"]);
        let first = p["spec"]["matchConditions"][0].clone();
        p["spec"]["matchConditions"]
            .as_array_mut()
            .unwrap()
            .push(first);
        p["spec"]["bogus"] = json!(1);
        let problems = check(&p);
        for want in [
            "spec.bogus: unknown field",
            "spec.reinvocationPolicy: \"Sometimes\" is not one of Never, IfNeeded",
            "spec.mutations[0].applyConfiguration: required when patchType is ApplyConfiguration",
            "spec.mutations[0].jsonPatch: only allowed when patchType is JSONPatch",
            "spec.matchConstraints.resourceRules[0].operations: \"DELETE\" is not one of CREATE, UPDATE, CONNECT, *",
            "spec.matchConditions[2].name: \"managed\" is used twice",
        ] {
            assert!(problems.iter().any(|p| p == want), "{want} not in {problems:#?}");
        }
        let mut b = export.objects[1].clone();
        b["spec"] = json!({"validationActions": ["Deny"]});
        b["metadata"]["name"] = json!("Not_A_Name");
        let problems = check(&b);
        assert!(
            problems.contains(&"spec.validationActions: unknown field".to_string()),
            "{problems:?}"
        );
        assert!(
            problems.contains(&"spec.policyName: required".to_string()),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.starts_with("metadata.name: ")),
            "{problems:?}"
        );
    }

    /// The provider-config-ref step as `export map` wrote it before, which
    /// kube-apiserver 1.36 refused, verbatim.
    const REFUSED: &str = "(!('providerConfigRef' in object['spec']) || object['spec']['providerConfigRef'] == null) ? [JSONPatch{op: 'add', path: '/spec/providerConfigRef', value: (request.namespace != '' ? {'kind': 'ClusterProviderConfig', 'name': 'default'} : {'name': 'default'})}] : type(object['spec']['providerConfigRef']) == string ? [JSONPatch{op: 'add', path: '/spec/providerConfigRef', value: (request.namespace != '' ? {'kind': 'ClusterProviderConfig', 'name': ((object['spec']['providerConfigRef'] == '' || (object['spec']['providerConfigRef'] == 'default' && request.operation == 'CREATE')) ? 'default' : object['spec']['providerConfigRef'])} : {'name': ((object['spec']['providerConfigRef'] == '' || (object['spec']['providerConfigRef'] == 'default' && request.operation == 'CREATE')) ? 'default' : object['spec']['providerConfigRef'])})}] : (type(object['spec']['providerConfigRef']) == map && !(request.operation == 'UPDATE' && (type(oldObject) == map && 'spec' in oldObject && type(oldObject['spec']) == map && 'providerConfigRef' in oldObject['spec']) && oldObject['spec']['providerConfigRef'] != null)) ? (((!('name' in object['spec']['providerConfigRef']) || type(object['spec']['providerConfigRef']['name']) != string || object['spec']['providerConfigRef']['name'] == '' || (object['spec']['providerConfigRef']['name'] == 'default' && request.operation == 'CREATE')) ? [JSONPatch{op: 'add', path: '/spec/providerConfigRef/name', value: 'default'}] : []) + ((request.namespace != '' && (!('kind' in object['spec']['providerConfigRef']) || object['spec']['providerConfigRef']['kind'] == null)) ? [JSONPatch{op: 'add', path: '/spec/providerConfigRef/kind', value: 'ClusterProviderConfig'}] : [])) : []";

    /// The policy `export map` wrote before its fix, which a 1.36 API
    /// server refused (`spec.mutations[0].jsonPatch.expression: ...
    /// compilation failed: ERROR: <input>:1:579: expected type 'string'
    /// but found 'dyn'`): the same check refuses it here, at the same place.
    #[test]
    fn the_expression_the_api_server_refused_is_refused_here() {
        let export = super::super::export(&crate::admission::config::Config::builtin()).unwrap();
        let mut p = export.objects[0].clone();
        let at = "/spec/mutations/0/jsonPatch/expression";
        *p.pointer_mut(at).unwrap() = json!(REFUSED);
        assert_eq!(
            check(&p),
            ["spec.mutations[0].jsonPatch.expression: compilation failed: ERROR: <input>:1:579: expected type 'string' but found 'dyn'"]
        );
        *p.pointer_mut(at).unwrap() = json!("object.spec");
        assert_eq!(
            check(&p),
            ["spec.mutations[0].jsonPatch.expression: must evaluate to list(JSONPatch) but got dyn"]
        );
        p["spec"]["matchConditions"][0]["expression"] = json!("object");
        assert!(check(&p).contains(
            &"spec.matchConditions[0].expression: must evaluate to bool but got dyn".to_string()
        ));
    }
}
