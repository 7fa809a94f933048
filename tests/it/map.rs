//! `mrguard export map`: the exported MutatingAdmissionPolicy, applied as
//! the API server applies it (`mrguard_policy::commands::export::map::Policies`, with the
//! project's CEL engine extended by JSONPatch and Object construction),
//! against `/mutate`'s JSON patch (the Decider's mutate) for the same
//! requests: every recorded review, a generated set, hostile variants of
//! both, and the examples of the third-party fixtures as creates. Both
//! must leave the same object. Where they differ, the request must be one
//! the export names as inexpressible. Offline: `tests/e2e/server_features.rs`
//! applies the export to an API server of 1.36 or later.

use std::collections::BTreeMap;

use mrguard_policy::admission::config::Config;
use mrguard_policy::admission::decider::{Decider, Outcome};
use mrguard_policy::admission::model::Operation;
use mrguard_policy::admission::review::{Request, RequestBuilder};
use mrguard_policy::cluster::Cluster;
use mrguard_policy::commands::export::map;
use serde_json::{json, Value};

use crate::support::bin::mrguard;
use crate::support::{self, fixtures, review};

const PROVIDER: &str = "system:serviceaccount:crossplane-system:provider-aws-s3";

/// The configurations compared: the built-in one, and one with a default
/// name, per-namespace names, exempt users, kinds with each external-name
/// strategy and tags fields at several depths, one with a key to escape.
fn configs() -> Vec<(&'static str, Config)> {
    let custom = r#"
providerConfig:
  defaultName: prod
  namespaceProviderConfigs: {team-a: aws-team-a, "team-b": b}
exemptUsernames: ["system:serviceaccount:crossplane-system:*", "admin-?"]
resources:
  - apiGroups: ["ec2.aws.upbound.io", "ec2.aws.m.upbound.io"]
    kinds: ["VPC"]
    externalName: IdentifierFromProvider
    tagsField: spec.forProvider.tags
  - apiGroups: ["s3.aws.upbound.io", "s3.aws.m.upbound.io"]
    kinds: ["Bucket"]
    tagsField: spec.forProvider.tagging.tags
  - apiGroups: ["*.aws.upbound.io"]
    kinds: ["Sub*"]
    tagsField: "spec.forProvider.labels[example.com/t~x]"
  - apiGroups: ["*.aws.upbound.io"]
    kinds: ["*"]
    externalName: IdentifierFromProvider
"#;
    vec![
        ("built-in", Config::builtin()),
        ("custom", Config::from_yaml(custom).unwrap()),
    ]
}

/// A generated set: every value the steps read, in rotation, on both
/// scopes, both operations and each kind of user.
fn generated() -> Vec<Request> {
    let kinds = [
        ("ec2.aws.upbound.io", "VPC"),
        ("s3.aws.upbound.io", "Bucket"),
        ("s3.aws.m.upbound.io", "Bucket"),
        ("ec2.aws.upbound.io", "Subnet"),
        ("example.org", "Widget"),
    ];
    let namespaces = ["", "team-a", "team-c", "team-b"];
    let refs: [Option<Value>; 14] = [
        None,
        Some(Value::Null),
        Some(json!("default")),
        Some(json!("")),
        Some(json!("aws")),
        Some(json!({"name": "default"})),
        Some(json!({"name": "x"})),
        Some(json!({"name": ""})),
        Some(json!({"name": 5})),
        Some(json!({})),
        Some(json!({"name": "default", "kind": "ProviderConfig"})),
        Some(json!({"kind": null, "name": "y"})),
        Some(json!(7)),
        Some(json!(["a"])),
    ];
    let old_refs: [Option<Value>; 3] = [None, Some(json!({"name": "default"})), Some(Value::Null)];
    let annotations: [Option<Value>; 6] = [
        None,
        Some(Value::Null),
        Some(json!({})),
        Some(json!({"crossplane.io/external-name": "e"})),
        Some(json!({"crossplane.io/external-name": null, "a": "b"})),
        Some(json!("text")),
    ];
    let deletion: [Option<Value>; 3] = [None, Some(Value::Null), Some(json!("Orphan"))];
    let policies: [Option<Value>; 10] = [
        None,
        Some(Value::Null),
        Some(json!(["Observe"])),
        Some(json!(["Observe", "Create"])),
        Some(json!(["*"])),
        Some(json!(["Observe", "Observe", "Create"])),
        Some(json!(["Create", "Bogus"])),
        Some(json!("Create")),
        Some(json!([1, "Create"])),
        Some(json!([
            "LateInitialize",
            "Delete",
            "Update",
            "Observe",
            "Create"
        ])),
    ];
    let tags: [Option<Value>; 6] = [
        None,
        Some(Value::Null),
        Some(json!({})),
        Some(json!({"crossplane-name": "mine", "team": "a"})),
        Some(json!(["a"])),
        Some(json!({"crossplane-kind": null})),
    ];
    let users = ["alice", PROVIDER, "admin-1", "", "bob"];
    let mut out = Vec::new();
    for n in 0..2400usize {
        let (group, kind) = kinds[n % kinds.len()];
        let ns = namespaces[(n / 5) % namespaces.len()];
        let mut o = json!({
            "apiVersion": format!("{group}/v1beta1"),
            "kind": kind,
            "metadata": {"name": "res-1"},
            "spec": {"forProvider": {"region": "us-east-1"}},
        });
        if n % 11 == 3 {
            o["metadata"] = json!({"generateName": "res-"});
        }
        if !ns.is_empty() {
            o["metadata"]["namespace"] = json!(ns);
        }
        if let Some(a) = &annotations[(n / 3) % annotations.len()] {
            o["metadata"]["annotations"] = a.clone();
        }
        if let Some(r) = &refs[(n / 2) % refs.len()] {
            o["spec"]["providerConfigRef"] = r.clone();
        }
        if let Some(d) = &deletion[(n / 7) % deletion.len()] {
            o["spec"]["deletionPolicy"] = d.clone();
        }
        if let Some(p) = &policies[(n / 13) % policies.len()] {
            o["spec"]["managementPolicies"] = p.clone();
        }
        if let Some(t) = &tags[(n / 17) % tags.len()] {
            // Every tags field of the custom configuration, with the
            // steps on the way present, absent or null in rotation.
            match n % 3 {
                0 => o["spec"]["forProvider"]["tags"] = t.clone(),
                1 => o["spec"]["forProvider"]["tagging"] = json!({"tags": t}),
                _ => o["spec"]["forProvider"]["labels"] = json!({"example.com/t~x": t}),
            }
        } else if n % 4 == 1 {
            o["spec"]["forProvider"]["tagging"] = Value::Null;
        }
        let user = users[(n / 19) % users.len()];
        let req = if n % 2 == 0 {
            RequestBuilder::create(o)
        } else {
            let mut old = o.clone();
            match &old_refs[(n / 23) % old_refs.len()] {
                Some(r) => old["spec"]["providerConfigRef"] = r.clone(),
                None => {
                    old["spec"]
                        .as_object_mut()
                        .unwrap()
                        .remove("providerConfigRef");
                }
            }
            RequestBuilder::update(old, o)
        };
        out.push(req.username(user).build());
    }
    // Deletes and subresource writes: neither mutates.
    let b = json!({"apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket",
                   "metadata": {"name": "d"}, "spec": {"forProvider": {}}});
    out.push(RequestBuilder::delete(b.clone()).build());
    let mut status = RequestBuilder::update(b.clone(), b).build();
    status.sub_resource = Some("status".into());
    out.push(status);
    out
}

/// The examples of the third-party fixtures (`differential/examples`), each
/// as a create in its scope: `.m.` groups in a namespace.
fn examples() -> Option<Vec<Request>> {
    let root = fixtures::third_party("map_examples")?.join("differential/examples");
    let mut files = Vec::new();
    let mut dirs = vec![root];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let Ok(docs) = serde_saphyr::from_multiple::<Value>(&text) else {
            continue;
        };
        for mut d in docs.into_iter().filter(Value::is_object) {
            let group = d["apiVersion"]
                .as_str()
                .unwrap_or("")
                .split('/')
                .next()
                .unwrap_or("")
                .to_string();
            if group.contains(".m.") && d["metadata"]["namespace"].is_null() {
                d["metadata"]["namespace"] = json!("team-a");
            }
            out.push(RequestBuilder::create(d).username("alice").build());
        }
    }
    Some(out)
}

/// The object after `/mutate`: the Decider's mutated object, or the
/// request's own when it answered without a patch (or failed to build one).
fn after_mutate(decider: &Decider<'_>, req: &Request) -> Option<Value> {
    let d = decider.mutate(req);
    match d.outcome {
        Outcome::Patched => d.mutated,
        _ => None,
    }
}

/// Which step changed what, for the coverage assertion.
fn changes(before: &Value, after: &Value, into: &mut BTreeMap<&'static str, usize>) {
    let at = |v: &Value, p: &str| v.pointer(p).cloned();
    for (step, p) in [
        ("provider-config-ref", "/spec/providerConfigRef"),
        ("external-name", "/metadata/annotations"),
        ("deletion-policy", "/spec/deletionPolicy"),
        ("management-policies", "/spec/managementPolicies"),
        ("tags", "/spec/forProvider/tags"),
        ("tags (nested)", "/spec/forProvider/tagging"),
        ("tags (escaped key)", "/spec/forProvider/labels"),
    ] {
        if at(before, p) != at(after, p) {
            *into.entry(step).or_default() += 1;
        }
    }
}

#[test]
fn exported_policy_agrees_with_mutate_on_every_review() {
    let recorded = fixtures::recorded_reviews();
    let generated = generated();
    let mut base = recorded.clone();
    base.extend(generated.iter().cloned());
    // Each value on the paths the steps read replaced by the wrong type,
    // and objects that are not MRs.
    let hostile = review::hostile(
        &base,
        5,
        &[
            &["metadata", "name"],
            &["spec", "providerConfigRef"],
            &["spec", "forProvider", "tagging"],
            &["spec", "managementPolicies"],
        ],
        |i| i / 5,
    );
    let examples = examples().unwrap_or_default();
    let mut report = Vec::new();
    let mut disagreements = Vec::new();
    let mut by_step = BTreeMap::new();
    for (cname, config) in configs() {
        let export = map::export(&config).unwrap_or_else(|e| panic!("{cname}: {e}"));
        let policies =
            map::Policies::compile(&export.objects).expect("the exported policy compiles");
        let decider = Decider::offline(&config, jiff::Timestamp::now());
        for (set, reqs) in [
            ("recorded", &recorded),
            ("generated", &generated),
            ("hostile", &hostile),
            ("examples", &examples),
        ] {
            let (mut agree, mut mutated) = (0, 0);
            for req in reqs.iter() {
                let want = after_mutate(&decider, req);
                let got = policies.mutate(req).expect("failurePolicy is Ignore");
                assert!(
                    got.ignored.is_empty(),
                    "{cname}/{set}: an expression failed: {:?}",
                    got.ignored
                );
                if let (Some(before), Some(after)) = (req.object.as_ref(), &want) {
                    changes(&before.value, after, &mut by_step);
                }
                mutated += usize::from(want.is_some());
                // reinvocationPolicy IfNeeded: a second run over its own
                // output changes nothing.
                if let Some(once) = &got.object {
                    let mut again = req.clone();
                    if let Some(o) = again.object.as_mut() {
                        o.value = once.clone();
                    }
                    let twice = policies.mutate(&again).expect("failurePolicy is Ignore");
                    assert_eq!(
                        twice.object, None,
                        "{cname}/{set}: a second run changed {once}"
                    );
                }
                if want == got.object {
                    agree += 1;
                } else if disagreements.len() < 10 {
                    disagreements.push(format!(
                        "{cname}/{set}: {} {}/{} ns={:?} user={:?}\n  object: {}\n  old: {}\n  /mutate: {}\n  policy:  {}",
                        Operation::from(&req.operation).as_str(),
                        req.kind.group,
                        req.kind.kind,
                        req.namespace,
                        req.user_info.username,
                        req.object.as_ref().map(|o| o.value.to_string()).unwrap_or_default(),
                        req.old_object.as_ref().map(|o| o.value.to_string()).unwrap_or_default(),
                        want.map(|v| v.to_string()).unwrap_or_else(|| "unchanged".into()),
                        got.object.map(|v| v.to_string()).unwrap_or_else(|| "unchanged".into()),
                    ));
                }
            }
            report.push(format!(
                "{cname:<9} {set:<10} {agree}/{} agree, {mutated} mutated",
                reqs.len()
            ));
        }
    }
    eprintln!("{}", report.join("\n"));
    eprintln!("changes by step: {by_step:?}");
    assert!(
        disagreements.is_empty(),
        "{}\n{}",
        report.join("\n"),
        disagreements.join("\n")
    );
    for step in [
        "provider-config-ref",
        "external-name",
        "deletion-policy",
        "management-policies",
        "tags",
        "tags (nested)",
        "tags (escaped key)",
    ] {
        assert!(
            by_step.get(step).is_some_and(|n| *n > 0),
            "{step} never changed anything: {by_step:?}"
        );
    }
}

/// Where the policy cannot follow `/mutate`, the requests are the ones the
/// export lists: with a cluster whose provider index names the Bucket
/// provider's account, `/mutate` leaves that account's writes alone and the
/// policy, which cannot read the index, mutates them. Every other request
/// still agrees.
#[test]
fn disagreements_are_the_listed_inexpressible_cases() {
    let config = Config::builtin();
    let export = map::export(&config).unwrap();
    assert!(
        export
            .skipped
            .iter()
            .any(|s| s.starts_with("provider accounts: ")),
        "{:?}",
        export.skipped
    );
    let cluster = Cluster::default();
    let mut accounts = mrguard_policy::cluster::providers::ProviderAccounts::new();
    accounts
        .entry("s3.aws.upbound.io".to_string())
        .or_default()
        .entry("Bucket".to_string())
        .or_default()
        .insert(PROVIDER.to_string());
    cluster.providers().replace(accounts);
    let decider = Decider::new(&config, &cluster, jiff::Timestamp::now());
    let policies = map::Policies::compile(&export.objects).unwrap();
    let (mut listed, mut agree) = (0, 0);
    for req in generated() {
        let want = after_mutate(&decider, &req);
        let got = policies.mutate(&req).unwrap().object;
        if want == got {
            agree += 1;
            continue;
        }
        let provider_write = cluster.is_provider_of(
            &req.kind.group,
            &req.kind.kind,
            req.user_info.username.as_deref().unwrap_or(""),
        );
        assert!(
            provider_write && want.is_none(),
            "a disagreement outside the listed cases: {} {}/{} by {:?}",
            Operation::from(&req.operation).as_str(),
            req.kind.group,
            req.kind.kind,
            req.user_info.username
        );
        listed += 1;
    }
    assert!(listed > 0, "no request exercised the provider-account case");
    assert!(agree > listed, "{agree} agree, {listed} listed");
}

/// Through the binary: the policy and binding on stdout, each valid
/// against the v1 API's structure, and what cannot be expressed on stderr.
#[test]
fn export_map_writes_valid_objects_and_names_what_it_cannot_express() {
    let out = mrguard().args(["export", "map"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (what, _) in map::NOT_EXPRESSIBLE {
        assert!(
            stderr.contains(&format!("not exported: {what}: ")),
            "{stderr}"
        );
    }
    let objects = support::documents(&String::from_utf8_lossy(&out.stdout));
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
    );
    for o in &objects {
        assert_eq!(map::schema::check(o), Vec::<String>::new(), "{o}");
    }
    // What the binary wrote defaults a new namespaced Bucket as /mutate does.
    let bucket = json!({"apiVersion": "s3.aws.m.upbound.io/v1beta1", "kind": "Bucket",
                        "metadata": {"name": "b", "namespace": "team-a"},
                        "spec": {"forProvider": {"region": "eu-west-1"}}});
    let req = RequestBuilder::create(bucket).username("alice").build();
    let got = map::Policies::compile(&objects)
        .unwrap()
        .mutate(&req)
        .unwrap()
        .object
        .unwrap();
    assert_eq!(
        got["spec"]["providerConfigRef"],
        json!({"kind": "ClusterProviderConfig", "name": "default"})
    );
    assert_eq!(
        got["metadata"]["annotations"]["crossplane.io/external-name"],
        "b"
    );
    assert_eq!(got["spec"]["managementPolicies"], json!(["*"]));
    assert!(got["spec"].get("deletionPolicy").is_none());
    assert_eq!(
        Some(got),
        after_mutate(
            &Decider::offline(&Config::builtin(), jiff::Timestamp::now()),
            &req
        )
    );
    // A configuration file is read as `serve` reads it; a bad one is an error.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "providerConfig: {defaultName: 5}\nbogus: 1\n").unwrap();
    let out = mrguard()
        .args(["export", "map", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
    assert!(out.stdout.is_empty());
}
