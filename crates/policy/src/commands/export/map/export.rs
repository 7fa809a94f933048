//! `mrguard export map`: the mutation steps of `/mutate` (docs/rules.md,
//! SPEC §3) as one MutatingAdmissionPolicy of JSON Patch mutations, in the
//! steps' order, and its binding.
//!
//! One policy, because its mutations run in order and each sees the object
//! as the one before left it, as the steps do: the tags read the reference
//! and the policy set the earlier steps defaulted. JSON Patch rather than
//! an apply configuration, because every step adds only what is missing,
//! and a patch is built from exactly what the object holds; an apply
//! configuration would set a field whatever it held.

use serde_json::{json, Value};

use crate::admission::config::{Config, ExternalNameStrategy};
use crate::admission::mr::EXTERNAL_NAME;
use crate::commands::export::vap::checks::{
    any_glob, entry_selected, keys, lit, managed, path, NAMESPACED, REQUEST_NAMESPACE,
    REQUEST_USERNAME,
};

/// What one export produced.
#[derive(Debug, Default)]
pub struct Export {
    /// The policy and its binding.
    pub objects: Vec<Value>,
    /// What `/mutate` does that the policy does not, and why: one line each.
    pub skipped: Vec<String>,
}

/// The name of the policy and of its binding.
pub const POLICY_NAME: &str = "mrguard-defaults";

/// The matchCondition that applies the policy only to objects missing a
/// default.
const DEFAULTS_NEEDED: &str = "defaults-needed";

/// The MR's provider config reference.
const REFERENCE: &str = "object['spec']['providerConfigRef']";

/// The request creates the object.
const CREATE: &str = "request.operation == 'CREATE'";

/// What no MutatingAdmissionPolicy can carry, one line each; the
/// differential test names these when the two disagree.
pub const NOT_EXPRESSIBLE: &[(&str, &str)] = &[
    (
        "provider accounts",
        "the providers' service accounts found in the cluster (the controller's provider index) are not exempted, as that is cluster state; exemptUsernames is",
    ),
    (
        "warnings",
        "a MutatingAdmissionPolicy cannot return warnings: the provider-config-ref warnings (a bare-string reference rewritten, a missing kind set) and the tags warning (the field is not a map) are not given; the objects are mutated as /mutate mutates them",
    ),
];

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The API server would refuse the policy written: its structure or
    /// the type check of its expressions ([`super::schema::check`]).
    #[error("failed to export the MutatingAdmissionPolicy: the API server would refuse it: {}", .0.join("; "))]
    Refused(Vec<String>),
}

/// Exports the mutation of `config`; Err when the API server would refuse
/// what was written (a defect of the export, named as the API server
/// would name it).
pub fn export(config: &Config) -> Result<Export, ExportError> {
    let out = write(config);
    let problems: Vec<String> = out.objects.iter().flat_map(super::schema::check).collect();
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(ExportError::Refused(problems))
    }
}

fn write(config: &Config) -> Export {
    // The first three steps add at paths none of them reads, so one
    // expression gives what the three give in turn; each mutation costs the
    // API server a pass of its own (three took 1.79 ms more per create than
    // none through kube-apiserver 1.36, one 1.02 ms; docs/benchmarks-history.md).
    let first = format!(
        "({}) + ({}) + ({})",
        provider_config_ref(config),
        external_name(config),
        policy_defaults()
    );
    let mut mutations = vec![mutation(first)];
    // The tags read the reference the first steps may default, so each
    // stays a mutation of its own after them.
    for (i, entry) in config.resources.iter().enumerate() {
        if let Some(field) = &entry.tags_field {
            // A tags field is concrete (the configuration checks it).
            mutations.push(mutation(tags(&entry_selected(config, i), &keys(field))));
        }
    }
    let mut conditions = vec![
        condition("managed", managed("object")),
        // Behind `managed` again: the API server evaluates every condition,
        // and on any other object this one would fail rather than be false.
        condition(
            DEFAULTS_NEEDED,
            format!("{} && {}", managed("object"), defaults_needed(config)),
        ),
    ];
    let exempt = config.exempt_username_globs();
    if !exempt.is_empty() {
        conditions.push(condition(
            "not-exempt",
            format!(
                "!({REQUEST_USERNAME} != '' && {})",
                any_glob(REQUEST_USERNAME, &exempt)
            ),
        ));
    }
    let labels = json!({"app.kubernetes.io/managed-by": "mrguard"});
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": labels},
        "spec": {
            // As the chart's mutating webhook: defaults are best effort.
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": ["*"],
                    "apiVersions": ["*"],
                    "resources": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                }],
            },
            "matchConditions": conditions,
            "mutations": mutations,
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": labels},
        "spec": {"policyName": POLICY_NAME},
    });
    Export {
        objects: vec![policy, binding],
        skipped: NOT_EXPRESSIBLE
            .iter()
            .map(|(what, why)| format!("{what}: {why}"))
            .collect(),
    }
}

fn condition(name: &str, expression: String) -> Value {
    json!({"name": name, "expression": expression})
}

fn mutation(expression: String) -> Value {
    json!({"patchType": "JSONPatch", "jsonPatch": {"expression": expression}})
}

/// A JSON Pointer to `keys` (RFC 6901: `~` as `~0`, `/` as `~1`), as
/// `jsonpatch.escapeKey` escapes a key; the keys are known here, so the
/// pointer is written out.
fn pointer(keys: &[&str]) -> String {
    keys.iter()
        .map(|k| format!("/{}", k.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// `[JSONPatch{op: 'add', ...}]` at `keys` with `value` (CEL text).
fn add(keys: &[&str], value: &str) -> String {
    format!(
        "[JSONPatch{{op: 'add', path: {}, value: {value}}}]",
        lit(&pointer(keys))
    )
}

/// The default reference name for the request's namespace.
fn default_name(config: &Config) -> String {
    let pc = &config.provider_config;
    let fallback = lit(&pc.default_name);
    if pc.namespace_provider_configs.is_empty() {
        return fallback;
    }
    let entries: Vec<String> = pc
        .namespace_provider_configs
        .iter()
        .map(|(ns, name)| format!("{}: {}", lit(ns), lit(name)))
        .collect();
    let map = format!("{{{}}}", entries.join(", "));
    let ns = REQUEST_NAMESPACE;
    format!("({ns} in {map} ? {map}[{ns}] : {fallback})")
}

/// The step provider-config-ref.
fn provider_config_ref(config: &Config) -> String {
    let d = default_name(config);
    let r = REFERENCE;
    let ns = NAMESPACED;
    let create = CREATE;
    let (old_has, old_r) = path("oldObject", &["spec", "providerConfigRef"]);
    // A live MR keeps the reference its old object had.
    let keep = format!("(request.operation == 'UPDATE' && {old_has} && {old_r} != null)");
    let reference = |name: &str| {
        format!("({ns} ? {{'kind': 'ClusterProviderConfig', 'name': {name}}} : {{'name': {name}}})")
    };
    // `string()`: the API server's type check types `{r}` as dyn, and a
    // map literal whose values are a string and a dyn is refused.
    let from_string =
        format!("(({r} == '' || ({r} == 'default' && {create})) ? {d} : string({r}))");
    // `default` on a CREATE is the CRD's default, which the namespace's own
    // default replaces; where that is `default` too, nothing is added, so
    // the policy's condition can tell the create needs nothing.
    let name_unset = format!(
        "(!('name' in {r}) || type({r}['name']) != string || {r}['name'] == '' || ({r}['name'] == 'default' && {create} && {d} != 'default'))"
    );
    let kind_unset = format!("({ns} && (!('kind' in {r}) || {r}['kind'] == null))");
    let at = ["spec", "providerConfigRef"];
    format!(
        "(!('providerConfigRef' in object['spec']) || {r} == null) ? {fresh} : type({r}) == string ? {rewritten} : (type({r}) == map && !{keep}) ? (({name_unset} ? {name} : []) + ({kind_unset} ? {kind} : [])) : []",
        fresh = add(&at, &reference(&d)),
        rewritten = add(&at, &reference(&from_string)),
        name = add(&["spec", "providerConfigRef", "name"], &d),
        kind = add(&["spec", "providerConfigRef", "kind"], "'ClusterProviderConfig'"),
    )
}

/// `metadata.name`, or `''`.
fn name() -> String {
    let (has, at) = path("object", &["metadata", "name"]);
    format!("(({has} && type({at}) == string) ? {at} : '')")
}

/// The step external-name: on CREATE, for kinds whose entry names them by
/// `metadata.name`.
fn external_name(config: &Config) -> String {
    let from_provider: Vec<String> = config
        .resources
        .iter()
        .enumerate()
        .filter(|(_, e)| e.external_name == ExternalNameStrategy::IdentifierFromProvider)
        .map(|(i, _)| format!("({})", entry_selected(config, i)))
        .collect();
    // Kinds no entry matches take the default strategy, NameAsIdentifier.
    let by_name = if from_provider.is_empty() {
        "true".to_string()
    } else {
        format!("!({})", from_provider.join(" || "))
    };
    let (has_ann, ann) = path("object", &["metadata", "annotations", EXTERNAL_NAME]);
    let (has_meta, meta) = path("object", &["metadata"]);
    let n = name();
    let annotations = format!("{meta}['annotations']");
    format!(
        "({CREATE} && {by_name} && !({has_ann} && {ann} != null) && {n} != '' && {has_meta} && type({meta}) == map) ? ((!('annotations' in {meta}) || {annotations} == null) ? {whole} : type({annotations}) == map ? {one} : []) : []",
        whole = add(
            &["metadata", "annotations"],
            &format!("{{{}: {n}}}", lit(EXTERNAL_NAME))
        ),
        one = add(&["metadata", "annotations", EXTERNAL_NAME], &n),
    )
}

/// Whether some step may add something: a cheap test, true wherever a step
/// adds (and sometimes where none does), for the policy's matchCondition.
/// A policy that matches costs the API server about 0.8 ms even when its
/// patch is empty, against 0.08 ms for one whose condition is false
/// (kube-apiserver 1.36; docs/benchmarks-history.md), and most writes to a live MR, its
/// provider's among them, have every default already. It reads only the
/// object, so its size does not grow with the entries.
fn defaults_needed(config: &Config) -> String {
    let r = REFERENCE;
    let ns = NAMESPACED;
    let create = CREATE;
    let pc = &config.provider_config;
    // A CREATE's `default` is replaced where another default applies.
    let replaced = if pc.default_name == "default" && pc.namespace_provider_configs.is_empty() {
        String::new()
    } else {
        format!(" || ({r}['name'] == 'default' && {create})")
    };
    let reference = format!(
        "(!('providerConfigRef' in object['spec']) || type({r}) != map || !('name' in {r}) || type({r}['name']) != string || {r}['name'] == ''{replaced} || ({ns} && (!('kind' in {r}) || {r}['kind'] == null)))"
    );
    let (has_ann, ann) = path("object", &["metadata", "annotations", EXTERNAL_NAME]);
    let external_name = format!("({create} && !({has_ann} && {ann} != null))");
    let policies = format!(
        "((!{ns} && {}) || {})",
        unset("deletionPolicy"),
        unset("managementPolicies")
    );
    let mut any = vec![reference, external_name, policies];
    let fields: std::collections::BTreeSet<Vec<&str>> = config
        .resources
        .iter()
        .filter_map(|e| e.tags_field.as_ref().map(keys))
        .collect();
    for field in fields {
        let missing: Vec<String> = [
            "crossplane-kind",
            "crossplane-name",
            "crossplane-providerconfig",
        ]
        .iter()
        .map(|k| {
            let mut full = field.clone();
            full.push(k);
            format!("!{}", path("object", &full).0)
        })
        .collect();
        any.push(format!("({})", missing.join(" || ")));
    }
    format!("({})", any.join(" || "))
}

/// `spec.<field>` is absent or null.
fn unset(field: &str) -> String {
    format!("(!('{field}' in object['spec']) || object['spec']['{field}'] == null)")
}

/// The step policy-defaults.
fn policy_defaults() -> String {
    format!(
        "((!{NAMESPACED} && {}) ? {} : []) + ({} ? {} : [])",
        unset("deletionPolicy"),
        add(&["spec", "deletionPolicy"], "'Delete'"),
        unset("managementPolicies"),
        add(&["spec", "managementPolicies"], "['*']"),
    )
}

/// The policy set (after policy-defaults) may create: a list of known
/// actions, each once, with `*` or `Create`; absent or null is `["*"]`.
/// Repeats are counted per known action, so the cost grows with the list
/// once, not with its square.
fn can_create() -> String {
    let mp = "object['spec']['managementPolicies']";
    let known: Vec<String> = [
        "*",
        "Observe",
        "Create",
        "Update",
        "LateInitialize",
        "Delete",
    ]
    .iter()
    .map(|a| lit(a))
    .collect();
    format!(
        "(!('managementPolicies' in object['spec']) || {mp} == null || (type({mp}) == list && {mp}.all(a, type(a) == string && a in [{known}]) && [{known}].all(n, {mp}.filter(b, b == n).size() <= 1) && ('*' in {mp} || 'Create' in {mp})))",
        known = known.join(", ")
    )
}

/// The step tags for the entry selected by `selected`, whose tags field is
/// at `keys`: the missing maps on the way are added empty, then each tag
/// that is not there yet.
fn tags(selected: &str, keys: &[&str]) -> String {
    // The map at keys[..i] of the object.
    let at = |i: usize| {
        let mut s = "object".to_string();
        for k in &keys[..i] {
            s.push_str(&format!("[{}]", lit(k)));
        }
        s
    };
    let missing = |i: usize| {
        format!(
            "(!({} in {}) || {} == null)",
            lit(keys[i]),
            at(i),
            at(i + 1)
        )
    };
    // Whether the field can be a map: every step up to the first missing
    // one is a map.
    let mut reachable = format!("type({}) == map", at(keys.len()));
    for i in (0..keys.len()).rev() {
        let step = format!("({} || {reachable})", missing(i));
        reachable = if i > 0 {
            format!("(type({}) == map && {step})", at(i))
        } else {
            step
        };
    }
    // The empty maps from the first missing step down.
    let mut create = "[]".to_string();
    for i in (0..keys.len()).rev() {
        let mut value = "{}".to_string();
        for k in keys[i + 1..].iter().rev() {
            value = format!("{{{}: {value}}}", lit(k));
        }
        create = format!("({} ? {} : {create})", missing(i), add(&keys[..=i], &value));
    }
    let n = name();
    let (has_pc, pc) = path("object", &["spec", "providerConfigRef", "name"]);
    let pc = format!("(({has_pc} && type({pc}) == string) ? {pc} : '')");
    let kind = "(request.kind.kind + '.' + request.kind.group).lowerAscii()";
    let tag = |key: &str, when: &str, value: &str| {
        let mut full: Vec<&str> = keys.to_vec();
        full.push(key);
        let (has, _) = path("object", &full);
        format!("(({when}!{has}) ? {} : [])", add(&full, value))
    };
    format!(
        "({selected}) && {} && {reachable} ? {create} + {} + {} + {} : []",
        can_create(),
        tag("crossplane-kind", "", kind),
        tag("crossplane-name", &format!("{n} != '' && "), &n),
        tag("crossplane-providerconfig", &format!("{pc} != '' && "), &pc),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::review::RequestBuilder;
    use crate::commands::export::map::Policies;

    #[test]
    fn pointers_escape_tilde_and_slash() {
        assert_eq!(
            pointer(&["metadata", "annotations", "crossplane.io/external-name"]),
            "/metadata/annotations/crossplane.io~1external-name"
        );
        assert_eq!(pointer(&["a~/b"]), "/a~0~1b");
    }

    fn mutated(config: &Config, req: &crate::admission::review::Request) -> Value {
        let policies = Policies::compile(&export(config).unwrap().objects).unwrap();
        let out = policies.mutate(req).unwrap();
        assert!(out.ignored.is_empty(), "{:?}", out.ignored);
        out.object
            .unwrap_or_else(|| req.object.as_ref().unwrap().value.clone())
    }

    #[test]
    fn a_namespaced_create_gets_its_namespaces_reference_and_an_update_keeps_the_old_one() {
        let cfg = Config::from_yaml(
            "providerConfig: {defaultName: main, namespaceProviderConfigs: {team-a: aws-team-a}}\n",
        )
        .unwrap();
        let bucket = |ns: &str, spec: Value| {
            json!({"apiVersion": "s3.aws.m.upbound.io/v1beta1", "kind": "Bucket",
                   "metadata": {"name": "b1", "namespace": ns}, "spec": spec})
        };
        let o = mutated(
            &cfg,
            &RequestBuilder::create(bucket("team-a", json!({"forProvider": {}}))).build(),
        );
        assert_eq!(
            o["spec"]["providerConfigRef"],
            json!({"kind": "ClusterProviderConfig", "name": "aws-team-a"})
        );
        assert!(o["spec"].get("deletionPolicy").is_none());
        assert_eq!(o["metadata"]["annotations"][EXTERNAL_NAME], "b1");
        let old = bucket(
            "team-b",
            json!({"forProvider": {}, "providerConfigRef": {"name": "default"}}),
        );
        let o = mutated(&cfg, &RequestBuilder::update(old.clone(), old).build());
        assert_eq!(o["spec"]["providerConfigRef"], json!({"name": "default"}));
        assert!(o["metadata"].get("annotations").is_none());
    }

    #[test]
    fn every_mutation_is_a_json_patch_and_what_cannot_be_expressed_is_listed() {
        let out = export(&Config::builtin()).unwrap();
        assert_eq!(out.objects.len(), 2);
        for m in out.objects[0]["spec"]["mutations"].as_array().unwrap() {
            assert_eq!(m["patchType"], "JSONPatch");
        }
        assert_eq!(out.skipped.len(), NOT_EXPRESSIBLE.len());
        assert!(out.skipped[0].starts_with("provider accounts: "));
    }

    /// The policy is applied only where a step adds something: with its
    /// mutations swapped for one that marks every object it runs on, the
    /// writes that carry every default come out unmarked.
    #[test]
    fn the_policy_is_applied_only_to_objects_missing_a_default() {
        let cfg = Config::from_yaml(
            "resources:\n- apiGroups: [s3.aws.upbound.io]\n  kinds: [Bucket]\n  tagsField: spec.forProvider.tags\n",
        )
        .unwrap();
        let mut objects = export(&cfg).unwrap().objects;
        objects[0]["spec"]["mutations"] = json!([{"patchType": "JSONPatch", "jsonPatch": {
            "expression": "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'applied': 'yes'}}]"}}]);
        let policies = Policies::compile(&objects).unwrap();
        let applied = |req: &crate::admission::review::Request| {
            let out = policies.mutate(req).unwrap();
            assert!(out.ignored.is_empty(), "{:?}", out.ignored);
            out.object.is_some()
        };
        let bucket = |annotations: Value, spec: Value| {
            json!({"apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket",
                   "metadata": {"name": "b1", "annotations": annotations}, "spec": spec})
        };
        let full = json!({
            "forProvider": {"tags": {"crossplane-kind": "bucket.s3.aws.upbound.io",
                                     "crossplane-name": "b1",
                                     "crossplane-providerconfig": "default"}},
            "providerConfigRef": {"name": "default"},
            "deletionPolicy": "Delete",
            "managementPolicies": ["*"],
        });
        let named = json!({"crossplane.io/external-name": "b1"});
        let complete = bucket(named.clone(), full.clone());
        assert!(!applied(&RequestBuilder::create(complete.clone()).build()));
        assert!(!applied(
            &RequestBuilder::update(complete.clone(), complete.clone()).build()
        ));
        // Each missing default on its own brings the policy in.
        assert!(applied(
            &RequestBuilder::create(bucket(json!({}), full.clone())).build()
        ));
        let mut no_policies = full.clone();
        no_policies
            .as_object_mut()
            .unwrap()
            .remove("managementPolicies");
        assert!(applied(
            &RequestBuilder::create(bucket(named.clone(), no_policies)).build()
        ));
        let mut no_tag = full.clone();
        no_tag["forProvider"]["tags"]
            .as_object_mut()
            .unwrap()
            .remove("crossplane-name");
        assert!(applied(
            &RequestBuilder::update(complete.clone(), bucket(named.clone(), no_tag)).build()
        ));
        // Not an MR: never.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert!(!applied(&RequestBuilder::create(cm).build()));
    }
}
