//! Mutation (docs/rules.md). Each step edits the object as a `serde_json::Value`
//! and returns its warnings; [`super::patch::build`] turns the result into
//! the JSON Patch. Steps only add what is missing, so running them over
//! their own output changes nothing.

use serde_json::{json, Map, Value};

use crate::admission::config::{Config, ExternalNameStrategy, ResourceConfig};
use crate::admission::model::Operation;
use crate::admission::mr::{Mr, PolicySet, EXTERNAL_NAME};

use crate::admission::review::Request;

/// What a mutation step may read besides the object.
pub(crate) struct MutateContext<'a> {
    pub(crate) operation: Operation,
    pub(crate) group: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) namespace: &'a str,
    pub(crate) config: &'a Config,
    pub(crate) resource: &'a ResourceConfig,
    /// The object before an UPDATE; `None` on CREATE.
    pub(crate) old: Option<&'a Value>,
    /// The requesting user, matched against `exemptUsernames`.
    pub(crate) username: &'a str,
    /// What the runtime knows of the cluster.
    pub(crate) cluster: &'a crate::cluster::Cluster,
}

impl<'a> MutateContext<'a> {
    /// The only way to make one: from the request being judged.
    pub(crate) fn new(
        req: &'a Request,
        config: &'a Config,
        cluster: &'a crate::cluster::Cluster,
    ) -> Self {
        Self {
            operation: Operation::from(&req.operation),
            group: &req.kind.group,
            kind: &req.kind.kind,
            namespace: req.namespace.as_deref().unwrap_or(""),
            config,
            resource: config.resource(&req.kind.group, &req.kind.kind),
            old: req.old_object.as_ref().map(|o| &o.value),
            username: req.user_info.username.as_deref().unwrap_or(""),
            cluster,
        }
    }

    fn namespaced(&self) -> bool {
        !self.namespace.is_empty()
    }

    /// Requests from `exemptUsernames` (the providers' own accounts) are
    /// never mutated: a provider writing its MR gets back what it sent.
    pub(crate) fn exempt(&self) -> bool {
        self.config.is_exempt(self.username)
            || self
                .cluster
                .is_provider_of(self.group, self.kind, self.username)
    }

    /// Whether the name `default` stands for "unset": only on CREATE, where
    /// CRD defaulting makes the two indistinguishable. On UPDATE it is the
    /// name the live MR uses.
    fn default_means_unset(&self) -> bool {
        self.operation == Operation::Create
    }

    /// On UPDATE, whether the old object already had a reference, whose
    /// name and kind are then never changed (docs/rules.md).
    fn old_had_reference(&self) -> bool {
        self.operation == Operation::Update
            && self
                .old
                .and_then(|o| o.pointer("/spec/providerConfigRef"))
                .is_some_and(|r| !r.is_null())
    }
}

/// Runs every step in order on `obj`; returns the warnings. Exempt users'
/// objects are left exactly as they are.
pub(crate) fn apply(obj: &mut Value, ctx: &MutateContext<'_>) -> Vec<String> {
    let mut warnings = Vec::new();
    if !obj.is_object() || ctx.exempt() {
        return warnings;
    }
    provider_config_ref(obj, ctx, &mut warnings);
    external_name(obj, ctx);
    policy_defaults(obj, ctx);
    tags(obj, ctx, &mut warnings);
    warnings
}

fn spec_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    obj.get_mut("spec")?.as_object_mut()
}

/// Step 1: `provider-config-ref`.
fn provider_config_ref(obj: &mut Value, ctx: &MutateContext<'_>, warnings: &mut Vec<String>) {
    let default = ctx.config.provider_config.name_for(ctx.namespace);
    let namespaced = ctx.namespaced();
    let default_means_unset = ctx.default_means_unset();
    // A live MR keeps its credentials: neither the name nor the kind of a
    // reference the old object had is touched (a label change or a
    // provider's finalizer removal must not move it).
    let keep_reference = ctx.old_had_reference();
    let Some(spec) = spec_mut(obj) else { return };
    let fresh = || {
        if namespaced {
            json!({"kind": "ClusterProviderConfig", "name": default})
        } else {
            json!({"name": default})
        }
    };
    match spec.get_mut("providerConfigRef") {
        None | Some(Value::Null) => {
            spec.insert("providerConfigRef".into(), fresh());
        }
        Some(Value::String(s)) => {
            // "default" counts as unset here too, as in the object form
            // below; otherwise a second pass would rename it (found by fuzzing).
            let name = if s.is_empty() || (s == "default" && default_means_unset) {
                default.to_string()
            } else {
                s.clone()
            };
            warnings.push(format!(
                "provider-config-ref: spec.providerConfigRef was the string {s:?}; rewritten as {{name: {name}}}"
            ));
            let mut r = json!({"name": name});
            if namespaced {
                r["kind"] = json!("ClusterProviderConfig");
            }
            spec.insert("providerConfigRef".into(), r);
        }
        Some(Value::Object(_)) if keep_reference => {}
        Some(Value::Object(r)) => {
            // CRD defaulting writes "default" before we run, so on CREATE
            // "default" is indistinguishable from unset and takes the
            // configured name.
            let name = r.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() || (name == "default" && default_means_unset) {
                r.insert("name".into(), json!(default));
            }
            if namespaced && r.get("kind").is_none_or(Value::is_null) {
                r.insert("kind".into(), json!("ClusterProviderConfig"));
                warnings.push(
                    "provider-config-ref: spec.providerConfigRef had no kind; set to ClusterProviderConfig"
                        .into(),
                );
            }
        }
        Some(_) => {}
    }
}

/// Step 2: `external-name`.
fn external_name(obj: &mut Value, ctx: &MutateContext<'_>) {
    if ctx.operation != Operation::Create
        || ctx.resource.external_name != ExternalNameStrategy::NameAsIdentifier
        || Mr(obj).has_annotation(EXTERNAL_NAME)
    {
        return;
    }
    let name = Mr(obj).name().to_string();
    if name.is_empty() {
        // generateName: the name is assigned after mutating admission.
        return;
    }
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if annotations.is_null() {
        *annotations = Value::Object(Map::new());
    }
    if let Some(a) = annotations.as_object_mut() {
        a.insert(EXTERNAL_NAME.into(), json!(name));
    }
}

/// Step 3: `policy-defaults`.
fn policy_defaults(obj: &mut Value, ctx: &MutateContext<'_>) {
    let namespaced = ctx.namespaced();
    let Some(spec) = spec_mut(obj) else { return };
    if !namespaced && spec.get("deletionPolicy").is_none_or(Value::is_null) {
        spec.insert("deletionPolicy".into(), json!("Delete"));
    }
    if spec.get("managementPolicies").is_none_or(Value::is_null) {
        spec.insert("managementPolicies".into(), json!(["*"]));
    }
}

/// Step 4: `tags`.
fn tags(obj: &mut Value, ctx: &MutateContext<'_>, warnings: &mut Vec<String>) {
    let Some(field) = &ctx.resource.tags_field else {
        return;
    };
    // Without Create the provider never creates, so there is nothing to tag.
    match PolicySet::parse(crate::admission::mr::at(
        obj,
        &["spec", "managementPolicies"],
    )) {
        Ok(set) if set.can_create() => {}
        _ => return,
    }
    let mr = Mr(obj);
    let mut wanted = vec![(
        "crossplane-kind",
        format!("{}.{}", ctx.kind, ctx.group).to_lowercase(),
    )];
    if !mr.name().is_empty() {
        wanted.push(("crossplane-name", mr.name().to_string()));
    }
    if let Some(pc) = crate::admission::mr::at(obj, &["spec", "providerConfigRef", "name"])
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        wanted.push(("crossplane-providerconfig", pc.to_string()));
    }
    match field.get_or_create_object(obj) {
        Ok(map) => {
            for (k, v) in wanted {
                map.entry(k).or_insert_with(|| json!(v));
            }
        }
        Err(at) => warnings.push(format!(
            "tags: {at} is not a map, so no tags were added; {} should be a map of strings",
            field
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::review::RequestBuilder;

    fn run(
        obj: &mut Value,
        op: Operation,
        ns: &str,
        cfg: &Config,
        group: &str,
        kind: &str,
    ) -> Vec<String> {
        let mut subject =
            json!({"apiVersion": format!("{group}/v1"), "kind": kind, "metadata": {}});
        if !ns.is_empty() {
            subject["metadata"]["namespace"] = json!(ns);
        }
        let req = match op {
            Operation::Update => RequestBuilder::update(subject.clone(), subject),
            _ => RequestBuilder::create(subject),
        }
        .build();
        apply(
            obj,
            &MutateContext::new(&req, cfg, crate::cluster::Cluster::empty()),
        )
    }

    fn bucket(spec: Value) -> Value {
        json!({"metadata": {"name": "b1"}, "spec": spec})
    }

    fn create(obj: &mut Value, ns: &str, cfg: &Config) -> Vec<String> {
        run(
            obj,
            Operation::Create,
            ns,
            cfg,
            "s3.aws.upbound.io",
            "Bucket",
        )
    }

    #[test]
    fn cluster_scoped_defaults() {
        let cfg = Config::builtin();
        let mut o = bucket(json!({"forProvider": {}}));
        assert!(create(&mut o, "", &cfg).is_empty());
        assert_eq!(o["spec"]["providerConfigRef"], json!({"name": "default"}));
        assert_eq!(o["spec"]["deletionPolicy"], "Delete");
        assert_eq!(o["spec"]["managementPolicies"], json!(["*"]));
        assert_eq!(o["metadata"]["annotations"][EXTERNAL_NAME], "b1");
    }

    #[test]
    fn namespaced_defaults_have_kind_and_no_deletion_policy() {
        let cfg = Config::from_yaml(
            "providerConfig: {defaultName: main, namespaceProviderConfigs: {team-a: aws-team-a}}\n",
        )
        .unwrap();
        let mut o = bucket(json!({"forProvider": {}}));
        create(&mut o, "team-a", &cfg);
        assert_eq!(
            o["spec"]["providerConfigRef"],
            json!({"kind": "ClusterProviderConfig", "name": "aws-team-a"})
        );
        assert!(o["spec"].get("deletionPolicy").is_none());
        let mut o = bucket(json!({"forProvider": {}}));
        create(&mut o, "team-b", &cfg);
        assert_eq!(o["spec"]["providerConfigRef"]["name"], "main");
        let mut o = bucket(json!({"forProvider": {}}));
        create(&mut o, "", &cfg);
        assert_eq!(o["spec"]["providerConfigRef"], json!({"name": "main"}));
    }

    #[test]
    fn the_name_default_counts_as_unset_only_when_another_is_configured() {
        let cfg = Config::from_yaml("providerConfig: {defaultName: prod}\n").unwrap();
        let mut o = bucket(json!({"forProvider": {}, "providerConfigRef": {"name": "default"}}));
        create(&mut o, "", &cfg);
        assert_eq!(o["spec"]["providerConfigRef"]["name"], "prod");
        let mut o = bucket(json!({"forProvider": {}, "providerConfigRef": {"name": "mine"}}));
        create(&mut o, "", &cfg);
        assert_eq!(o["spec"]["providerConfigRef"]["name"], "mine");
        let builtin = Config::builtin();
        let mut o = bucket(json!({"forProvider": {}, "providerConfigRef": {"name": "default"}}));
        create(&mut o, "", &builtin);
        assert_eq!(o["spec"]["providerConfigRef"], json!({"name": "default"}));
    }

    /// Regression (fuzz/review_structured): a bare-string reference to
    /// "default" was kept, and a second pass then renamed it.
    #[test]
    fn a_bare_string_default_takes_the_configured_name_and_is_idempotent() {
        let cfg = Config::from_yaml("providerConfig: {defaultName: fallback}\n").unwrap();
        for ns in ["", "team-b"] {
            let mut o = bucket(json!({"forProvider": {}, "providerConfigRef": "default"}));
            create(&mut o, ns, &cfg);
            assert_eq!(o["spec"]["providerConfigRef"]["name"], "fallback");
            let once = o.clone();
            create(&mut o, ns, &cfg);
            assert_eq!(o, once, "a second pass changed the object");
        }
    }

    fn bucket_at(ns: &str, spec: Value) -> Value {
        let mut o = json!({"apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket",
                           "metadata": {"name": "b1"}, "spec": spec});
        if !ns.is_empty() {
            o["metadata"]["namespace"] = json!(ns);
        }
        o
    }

    /// Bug: a label change on a live MR whose reference was `{name:
    /// default}` moved it to the configured default's credentials.
    #[test]
    fn an_update_never_changes_a_reference_the_old_object_had() {
        let cfg = Config::from_yaml(&format!(
            "providerConfig: {{defaultName: aws-default}}\n{TAGS}"
        ))
        .unwrap();
        for (ns, old_ref) in [
            ("", json!({"name": "default"})),
            ("team", json!({"name": "default"})),
            ("team", json!({"name": "default", "kind": "ProviderConfig"})),
        ] {
            let old = bucket_at(ns, json!({"forProvider": {}, "providerConfigRef": old_ref}));
            let mut new = old.clone();
            new["metadata"]["labels"] = json!({"team": "x"});
            let req = RequestBuilder::update(old.clone(), new.clone())
                .username("alice")
                .build();
            let mut o = new.clone();
            apply(
                &mut o,
                &MutateContext::new(&req, &cfg, crate::cluster::Cluster::empty()),
            );
            assert_eq!(o["spec"]["providerConfigRef"], old_ref, "{ns:?}");
            // Tags describe the reference the MR really uses.
            assert_eq!(
                o["spec"]["forProvider"]["tags"]["crossplane-providerconfig"],
                "default"
            );
        }
        // The same object on CREATE takes the configured name.
        let new = bucket_at(
            "",
            json!({"forProvider": {}, "providerConfigRef": {"name": "default"}}),
        );
        let req = RequestBuilder::create(new.clone()).build();
        let mut o = new;
        apply(
            &mut o,
            &MutateContext::new(&req, &cfg, crate::cluster::Cluster::empty()),
        );
        assert_eq!(o["spec"]["providerConfigRef"]["name"], "aws-default");
    }

    #[test]
    fn an_update_without_an_old_reference_still_gets_the_default() {
        let cfg = Config::from_yaml("providerConfig: {defaultName: aws-default}\n").unwrap();
        let old = bucket_at("", json!({"forProvider": {}}));
        let req = RequestBuilder::update(old.clone(), old.clone()).build();
        let mut o = old;
        apply(
            &mut o,
            &MutateContext::new(&req, &cfg, crate::cluster::Cluster::empty()),
        );
        assert_eq!(
            o["spec"]["providerConfigRef"],
            json!({"name": "aws-default"})
        );
        // A bare-string "default" on UPDATE keeps its name.
        let old = bucket_at(
            "",
            json!({"forProvider": {}, "providerConfigRef": "default"}),
        );
        let req = RequestBuilder::update(old.clone(), old.clone()).build();
        let mut o = old;
        apply(
            &mut o,
            &MutateContext::new(&req, &cfg, crate::cluster::Cluster::empty()),
        );
        assert_eq!(o["spec"]["providerConfigRef"], json!({"name": "default"}));
    }

    #[test]
    fn exempt_users_are_never_mutated() {
        let cfg = Config::from_yaml(&format!(
            "providerConfig: {{defaultName: aws-default}}\nexemptUsernames: [\"system:serviceaccount:crossplane-system:*\"]\n{TAGS}"
        ))
        .unwrap();
        let new = bucket_at(
            "",
            json!({"forProvider": {}, "providerConfigRef": {"name": "default"}}),
        );
        for req in [
            RequestBuilder::create(new.clone()),
            RequestBuilder::update(new.clone(), new.clone()),
        ] {
            let req = req
                .username("system:serviceaccount:crossplane-system:provider-aws-s3")
                .build();
            let mut o = new.clone();
            assert!(apply(
                &mut o,
                &MutateContext::new(&req, &cfg, crate::cluster::Cluster::empty())
            )
            .is_empty());
            assert_eq!(o, new);
            let d = crate::admission::decider::Decider::offline(&cfg, jiff::Timestamp::now())
                .mutate(&req);
            assert!(d.response.allowed);
            assert!(d.response.patch.is_none());
            assert_eq!(d.outcome, crate::admission::decider::Outcome::Allowed);
        }
    }

    #[test]
    fn bare_string_and_missing_kind_are_normalised_with_warnings() {
        let cfg = Config::builtin();
        let mut o = bucket(json!({"forProvider": {}, "providerConfigRef": "aws"}));
        let w = create(&mut o, "", &cfg);
        assert_eq!(o["spec"]["providerConfigRef"], json!({"name": "aws"}));
        assert!(w[0].starts_with("provider-config-ref: "), "{w:?}");
        let mut o = bucket(json!({"forProvider": {}, "providerConfigRef": "aws"}));
        create(&mut o, "ns", &cfg);
        assert_eq!(
            o["spec"]["providerConfigRef"],
            json!({"name": "aws", "kind": "ClusterProviderConfig"})
        );
        let mut o = bucket(json!({"forProvider": {}, "providerConfigRef": {"name": "aws"}}));
        let w = create(&mut o, "ns", &cfg);
        assert_eq!(
            o["spec"]["providerConfigRef"]["kind"],
            "ClusterProviderConfig"
        );
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("provider-config-ref: "));
        // A ProviderConfig kind the user chose is kept.
        let mut o = bucket(
            json!({"forProvider": {}, "providerConfigRef": {"name": "aws", "kind": "ProviderConfig"}}),
        );
        assert!(create(&mut o, "ns", &cfg).is_empty());
        assert_eq!(o["spec"]["providerConfigRef"]["kind"], "ProviderConfig");
    }

    #[test]
    fn external_name_only_on_create_for_name_based_kinds_with_a_name() {
        let cfg = Config::builtin();
        let mut o = bucket(json!({"forProvider": {}}));
        run(
            &mut o,
            Operation::Update,
            "",
            &cfg,
            "s3.aws.upbound.io",
            "Bucket",
        );
        assert!(o["metadata"].get("annotations").is_none());
        let mut o = bucket(json!({"forProvider": {}}));
        run(
            &mut o,
            Operation::Create,
            "",
            &cfg,
            "ec2.aws.upbound.io",
            "VPC",
        );
        assert!(o["metadata"].get("annotations").is_none());
        let mut o = json!({"metadata": {"generateName": "b-"}, "spec": {"forProvider": {}}});
        create(&mut o, "", &cfg);
        assert!(o["metadata"].get("annotations").is_none());
        let mut o = bucket(json!({"forProvider": {}}));
        o["metadata"]["annotations"] = json!({EXTERNAL_NAME: "existing"});
        create(&mut o, "", &cfg);
        assert_eq!(o["metadata"]["annotations"][EXTERNAL_NAME], "existing");
    }

    #[test]
    fn user_values_are_never_overwritten() {
        let cfg = Config::builtin();
        let mut o = bucket(
            json!({"forProvider": {}, "deletionPolicy": "Orphan", "managementPolicies": ["Observe"]}),
        );
        create(&mut o, "", &cfg);
        assert_eq!(o["spec"]["deletionPolicy"], "Orphan");
        assert_eq!(o["spec"]["managementPolicies"], json!(["Observe"]));
    }

    const TAGS: &str = "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    tagsField: spec.forProvider.tags\n";

    #[test]
    fn tags_are_added_without_overwriting() {
        let cfg = Config::from_yaml(TAGS).unwrap();
        let mut o =
            bucket(json!({"forProvider": {"tags": {"crossplane-name": "mine", "team": "a"}}}));
        let w = run(
            &mut o,
            Operation::Create,
            "",
            &cfg,
            "s3.aws.upbound.io",
            "Bucket",
        );
        assert!(w.is_empty());
        assert_eq!(
            o["spec"]["forProvider"]["tags"],
            json!({"crossplane-name": "mine", "team": "a", "crossplane-kind": "bucket.s3.aws.upbound.io",
                   "crossplane-providerconfig": "default"})
        );
    }

    #[test]
    fn tags_field_is_created_and_skipped_without_create() {
        let cfg = Config::from_yaml(TAGS).unwrap();
        let mut o = bucket(json!({"forProvider": {}}));
        run(
            &mut o,
            Operation::Create,
            "",
            &cfg,
            "ec2.aws.upbound.io",
            "VPC",
        );
        assert_eq!(
            o["spec"]["forProvider"]["tags"]["crossplane-kind"],
            "vpc.ec2.aws.upbound.io"
        );
        assert_eq!(o["spec"]["forProvider"]["tags"]["crossplane-name"], "b1");
        let mut o = bucket(json!({"forProvider": {}, "managementPolicies": ["Observe"]}));
        create(&mut o, "", &cfg);
        assert!(o["spec"]["forProvider"].get("tags").is_none());
        let mut o = bucket(json!({"forProvider": {}, "managementPolicies": ["Observe", "Create"]}));
        create(&mut o, "", &cfg);
        assert!(o["spec"]["forProvider"].get("tags").is_some());
    }

    #[test]
    fn tags_field_that_is_not_a_map_is_left_with_a_warning() {
        let cfg = Config::from_yaml(TAGS).unwrap();
        let mut o = bucket(json!({"forProvider": {"tags": ["a"]}}));
        let w = create(&mut o, "", &cfg);
        assert_eq!(o["spec"]["forProvider"]["tags"], json!(["a"]));
        assert!(w[0].starts_with("tags: "), "{w:?}");
    }

    #[test]
    fn mutation_is_idempotent() {
        let cfg =
            Config::from_yaml(&format!("providerConfig: {{defaultName: prod}}\n{TAGS}")).unwrap();
        for ns in ["", "team"] {
            for spec in [
                json!({"forProvider": {}}),
                json!({"forProvider": {}, "providerConfigRef": "x"}),
                json!({"forProvider": {}, "providerConfigRef": {"name": "default"}}),
                json!({"forProvider": {"tags": null}, "managementPolicies": null}),
            ] {
                let mut once = bucket(spec);
                create(&mut once, ns, &cfg);
                let mut twice = once.clone();
                let w = create(&mut twice, ns, &cfg);
                assert_eq!(once, twice);
                assert!(w.is_empty(), "{w:?}");
            }
        }
    }
}
