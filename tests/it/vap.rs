//! `mrguard export vap`: the exported ValidatingAdmissionPolicies,
//! evaluated as the API server evaluates them (`mrguard_policy::commands::export::vap::evaluate`
//! with the project's CEL engine, which follows the Kubernetes CEL
//! environment), against mrguard's own verdict for the same rules, on every
//! recorded review, a generated set and hostile variants of both. Offline:
//! `tests/e2e/server_features.rs` applies the export to an API server of
//! 1.30 or later.

use std::collections::BTreeSet;

use mrguard_policy::admission::config::Config;
use mrguard_policy::admission::model::Operation;
use mrguard_policy::admission::review::{Request, RequestBuilder};
use mrguard_policy::commands::export::vap;
use serde_json::{json, Value};

use crate::support::bin::mrguard;
use crate::support::{self, fixtures, review, root};

/// The rules the export covers.
fn exported(rule: &str) -> bool {
    matches!(
        rule,
        "immutable-field"
            | "management-policies"
            | "paused-value"
            | "deletion-policy-conflict"
            | "paused-delete"
            | "connection-secret-ref"
            | "observe-only-external-name"
            | "deletion-protection"
    ) || rule.starts_with("cel:")
}

/// mrguard's verdict on the exported rules at `now`, the instant the
/// policies were exported at: (rule, action) of every finding not waived
/// by an exception.
fn mrguard_verdict(
    req: &Request,
    config: &Config,
    now: jiff::Timestamp,
) -> BTreeSet<(String, String)> {
    mrguard_policy::admission::decider::Decider::offline(config, now)
        .validate(req)
        .findings
        .iter()
        .filter(|f| exported(&f.rule) && f.exception().is_none())
        .map(|f| (f.rule.to_string(), f.action.as_str().to_string()))
        .collect()
}

fn vap_verdict(policies: &vap::Policies, req: &Request) -> BTreeSet<(String, String)> {
    policies
        .evaluate(req)
        .into_iter()
        .map(|j| (j.rule, j.action))
        .collect()
}

/// The configurations compared: the built-in one, and one with per-kind
/// actions, an exception, exemptions and CEL rules reading self, oldSelf
/// and request.
fn configs() -> Vec<(&'static str, Config)> {
    let custom = r#"
exemptUsernames: ["system:serviceaccount:crossplane-system:*", "admin-?"]
rules:
  paused-value: Deny
resources:
  - apiGroups: ["ec2.aws.upbound.io"]
    kinds: ["VPC", "Sub*"]
    immutableFields: [spec.forProvider.region, spec.forProvider.cidrBlock, "metadata.labels[team]"]
    rules: {management-policies: Warn, paused-value: Off, deletion-policy-conflict: Deny}
    celRules:
      - name: team-label
        expression: "has(self.metadata.labels) && 'team' in self.metadata.labels"
        message: every VPC needs a team label
      - name: cidr-stays
        expression: "oldSelf == null || !has(oldSelf.spec.forProvider.cidrBlock) || self.spec.forProvider.cidrBlock == oldSelf.spec.forProvider.cidrBlock"
        action: Warn
      - name: no-delete-by-bob
        expression: "request.userInfo.username != 'bob' || self.metadata.name.startsWith('tmp-')"
        operations: [DELETE]
  - apiGroups: ["*.aws.upbound.io"]
    kinds: ["*"]
    immutableFields: [spec.forProvider.region]
    deletionProtection: true
    rules: {immutable-field: Audit}
exceptions:
  - name: vpc-migration
    rules: [immutable-field, "cel:team-label"]
    match: {names: ["sample-*"], kinds: ["ec2.aws.upbound.io/VPC"]}
    reason: NET-42
    expires: "2099-01-31T00:00:00Z"
  - name: carol-only
    rules: [management-policies]
    match: {users: [carol]}
    reason: NET-43
  - name: gone
    rules: [paused-value]
    reason: expired
    expires: "2020-01-01T00:00:00Z"
"#;
    vec![
        ("built-in", Config::builtin()),
        ("custom", Config::from_yaml(custom).unwrap()),
    ]
}

fn vpc(name: &str) -> Value {
    let mut v = fixtures::example_object("aws_ec2_cluster_v1beta1_vpc.yaml");
    v["metadata"]["name"] = json!(name);
    v
}

/// A generated set: every combination of what the exported rules read.
fn generated() -> Vec<Request> {
    let mut out = Vec::new();
    let users = [
        "alice",
        "bob",
        "carol",
        "admin-1",
        "system:serviceaccount:crossplane-system:provider-aws-ec2",
        "",
    ];
    let created: [Option<Value>; 4] = [
        None,
        Some(
            json!({"metadata": {"annotations": {"crossplane.io/external-create-succeeded": "2026-01-01T00:00:00Z"}}}),
        ),
        Some(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
        Some(json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, "junk", 3]}})),
    ];
    let regions = [
        json!("us-west-1"),
        json!("eu-central-1"),
        Value::Null,
        json!(5),
        json!({"a": 1}),
    ];
    let policies = [
        None,
        Some(json!(["*"])),
        Some(json!([])),
        Some(json!(["Observe"])),
        Some(json!(["Observe", "Observe"])),
        Some(json!(["Observe", "Create", "Update", "Delete"])),
        Some(json!(["Observe", "Delete"])),
        Some(json!([
            "Observe",
            "Create",
            "Update",
            "LateInitialize",
            "Delete"
        ])),
        Some(json!(["Delete", "Update", "Create", "Observe"])),
        Some(json!(["*", "Observe"])),
        Some(json!(["Observe", "Bogus"])),
        Some(json!("Observe")),
        Some(json!([1])),
        Some(Value::Null),
    ];
    let paused = [
        None,
        Some(json!("true")),
        Some(json!("false")),
        Some(json!("yes")),
        Some(json!("")),
        Some(Value::Null),
    ];
    let kinds = [
        ("ec2.aws.upbound.io", "VPC"),
        ("ec2.aws.upbound.io", "Subnet"),
        ("s3.aws.upbound.io", "Bucket"),
        ("example.org", "Widget"),
    ];
    let merge = |base: &mut Value, extra: &Value| {
        if let Value::Object(e) = extra {
            for (k, v) in e {
                match (base.get_mut(k), v) {
                    (Some(b @ Value::Object(_)), Value::Object(_)) => {
                        let mut b2 = b.clone();
                        for (k2, v2) in v.as_object().unwrap() {
                            b2[k2] = v2.clone();
                        }
                        *b = b2;
                    }
                    _ => base[k] = v.clone(),
                }
            }
        }
    };
    let mut n = 0usize;
    for (ki, (group, kind)) in kinds.iter().enumerate() {
        for (ci, c) in created.iter().enumerate() {
            for (ri, region) in regions.iter().enumerate() {
                n += 1;
                let name = if n.is_multiple_of(3) {
                    "prod-vpc"
                } else if n % 3 == 1 {
                    "sample-vpc"
                } else {
                    "tmp-vpc"
                };
                let mut old = vpc(name);
                old["apiVersion"] = json!(format!("{group}/v1beta1"));
                old["kind"] = json!(kind);
                if let Some(c) = c {
                    merge(&mut old, c);
                }
                if (ki + ci) % 2 == 0 {
                    old["metadata"]["labels"] = json!({"team": "net"});
                }
                let mut new = old.clone();
                if region.is_null() && ri == 2 {
                    new["spec"]["forProvider"]
                        .as_object_mut()
                        .unwrap()
                        .remove("region");
                } else {
                    new["spec"]["forProvider"]["region"] = region.clone();
                }
                if ri == 4 {
                    new["spec"]["forProvider"]["cidrBlock"] = json!("10.0.0.0/8");
                    new["metadata"]["labels"] = json!({"team": "other"});
                }
                let user = users[n % users.len()];
                let p = &policies[n % policies.len()];
                let pa = &paused[n % paused.len()];
                let dp = [json!("Orphan"), json!("Delete"), json!(1)][n % 3].clone();
                let secret = [
                    None,
                    Some(json!({"name": "s", "namespace": "crossplane-system"})),
                    Some(json!({"name": "s"})),
                    Some(json!({"name": ""})),
                    Some(json!("s")),
                    Some(Value::Null),
                    Some(json!({"name": "s", "namespace": null})),
                ][n % 7]
                    .clone();
                let finalizers = [json!(["f"]), json!([]), json!("f")][n % 3].clone();
                for obj in [&mut new, &mut old] {
                    if let Some(s) = &secret {
                        obj["spec"]["writeConnectionSecretToRef"] = s.clone();
                    }
                    if !n.is_multiple_of(4) {
                        obj["metadata"]["finalizers"] = finalizers.clone();
                    }
                    match n % 6 {
                        0 => {
                            obj["metadata"]["annotations"]["crossplane.io/external-name"] =
                                json!("vpc-1")
                        }
                        1 => {
                            obj["metadata"]["annotations"]["crossplane.io/external-name"] =
                                json!("")
                        }
                        2 => {
                            obj["metadata"]["annotations"]["mrguard.io/deletion-protection"] =
                                json!("true")
                        }
                        3 => {
                            obj["metadata"]["annotations"]["mrguard.io/deletion-protection"] =
                                json!("yes")
                        }
                        _ => {}
                    }
                    // Every fifth request is for a namespaced MR.
                    if n.is_multiple_of(5) {
                        obj["metadata"]["namespace"] = json!("team-a");
                    }
                    if n.is_multiple_of(2) {
                        obj["spec"]["deletionPolicy"] = dp.clone();
                    }
                    if let Some(p) = p {
                        obj["spec"]["managementPolicies"] = p.clone();
                    }
                    if let Some(pa) = pa {
                        obj["metadata"]["annotations"]["crossplane.io/paused"] = pa.clone();
                    }
                }
                let req = |b: RequestBuilder| b.username(user).build();
                out.push(req(RequestBuilder::update(old.clone(), new.clone())));
                out.push(req(RequestBuilder::create(new.clone())));
                out.push(req(RequestBuilder::delete(old.clone())));
            }
        }
    }
    // Every policy set and paused value on a create, by every user.
    for (i, p) in policies.iter().enumerate() {
        for (j, pa) in paused.iter().enumerate() {
            let mut o = vpc("x");
            if j.is_multiple_of(2) {
                o["spec"]["deletionPolicy"] = json!("Orphan");
            }
            if let Some(p) = p {
                o["spec"]["managementPolicies"] = p.clone();
            }
            if let Some(pa) = pa {
                o["metadata"]["annotations"]["crossplane.io/paused"] = pa.clone();
            }
            out.push(
                RequestBuilder::create(o)
                    .username(users[(i + j) % users.len()])
                    .build(),
            );
        }
    }
    out.extend(scoped_deletion_policies(&policies));
    out
}

/// Every deletionPolicy with every policy set on a protected, created MR,
/// cluster-scoped and namespaced: a namespaced MR's deletionPolicy counts
/// for nothing, so its protection and conflict follow the set alone.
fn scoped_deletion_policies(policies: &[Option<Value>]) -> Vec<Request> {
    let deletion_policies = [
        None,
        Some(json!("Orphan")),
        Some(json!("Delete")),
        Some(json!("orphan")),
        Some(json!(1)),
        Some(Value::Null),
    ];
    let mut out = Vec::new();
    for namespace in [None, Some("team-a")] {
        for dp in &deletion_policies {
            for p in policies {
                let mut old = vpc("prod-vpc");
                old["metadata"]["annotations"]["crossplane.io/external-create-succeeded"] =
                    json!("2026-01-01T00:00:00Z");
                old["metadata"]["annotations"]["mrguard.io/deletion-protection"] = json!("true");
                if let Some(ns) = namespace {
                    old["metadata"]["namespace"] = json!(ns);
                }
                if let Some(dp) = dp {
                    old["spec"]["deletionPolicy"] = dp.clone();
                }
                if let Some(p) = p {
                    old["spec"]["managementPolicies"] = p.clone();
                }
                let mut new = old.clone();
                new["metadata"]["labels"] = json!({"team": "net"});
                out.push(
                    RequestBuilder::create(new.clone())
                        .username("alice")
                        .build(),
                );
                out.push(
                    RequestBuilder::update(old.clone(), new)
                        .username("alice")
                        .build(),
                );
                out.push(RequestBuilder::delete(old).username("alice").build());
            }
        }
    }
    out
}

#[test]
fn exported_policies_agree_with_mrguard_on_every_review() {
    let now = jiff::Timestamp::now();
    let recorded = fixtures::recorded_reviews();
    let generated = generated();
    let mut hostile_base = recorded.clone();
    hostile_base.extend(generated.iter().cloned());
    // Each value on the paths the rules read replaced by the wrong type,
    // and objects that are not MRs.
    let hostile = review::hostile(
        &hostile_base,
        7,
        &[
            &["metadata", "labels"],
            &["status"],
            &["status", "conditions"],
            &["spec", "forProvider", "region"],
        ],
        |i| i,
    );
    let mut report = Vec::new();
    let mut disagreements = Vec::new();
    let mut by_rule: std::collections::BTreeMap<String, usize> = Default::default();
    for (cname, config) in configs() {
        let export = vap::export(&config, now);
        let policies =
            vap::Policies::compile(&export.objects).expect("the exported policies compile");
        for (set, reqs) in [
            ("recorded", &recorded),
            ("generated", &generated),
            ("hostile", &hostile),
        ] {
            let (mut agree, mut fired) = (0, 0);
            for req in reqs.iter() {
                let want = mrguard_verdict(req, &config, now);
                let got = vap_verdict(&policies, req);
                fired += usize::from(!want.is_empty());
                for (rule, action) in &want {
                    let rule = if rule.starts_with("cel:") {
                        "cel:*"
                    } else {
                        rule
                    };
                    *by_rule.entry(format!("{rule} {action}")).or_default() += 1;
                }
                if want == got {
                    agree += 1;
                } else if disagreements.len() < 10 {
                    disagreements.push(format!(
                        "{cname}/{set}: {} {} {}: mrguard {want:?}, policies {got:?}\n  object: {}\n  old: {}",
                        Operation::from(&req.operation).as_str(),
                        req.kind.kind,
                        req.name,
                        req.object.as_ref().map(|o| o.value.to_string()).unwrap_or_default(),
                        req.old_object.as_ref().map(|o| o.value.to_string()).unwrap_or_default(),
                    ));
                }
            }
            report.push(format!(
                "{cname:<9} {set:<10} {agree}/{} agree, {fired} with findings",
                reqs.len()
            ));
        }
    }
    eprintln!("{}", report.join("\n"));
    eprintln!("findings by rule and action: {by_rule:?}");
    // Every exported rule, and each action, was exercised.
    for want in [
        "immutable-field Deny",
        "immutable-field Audit",
        "management-policies Deny",
        "management-policies Warn",
        "deletion-policy-conflict Warn",
        "deletion-policy-conflict Deny",
        "paused-value Warn",
        "paused-value Deny",
        "cel:* Deny",
        "cel:* Warn",
        "paused-delete Deny",
        "connection-secret-ref Deny",
        "observe-only-external-name Deny",
        "deletion-protection Deny",
    ] {
        assert!(
            by_rule.contains_key(want),
            "{want} never fired: {by_rule:?}"
        );
    }
    assert!(
        disagreements.is_empty(),
        "{}\n{}",
        report.join("\n"),
        disagreements.join("\n")
    );
}

/// The issue's scenario through the binary: the exported policies deny the
/// region change of a created VPC and allow the same update without it.
#[test]
fn exported_policies_deny_the_region_change_and_allow_the_rest() {
    let out = mrguard().args(["export", "vap"]).output().unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not exported: reference: "), "{stderr}");
    let objects = support::documents(&String::from_utf8_lossy(&out.stdout));
    assert!(objects
        .iter()
        .all(|o| o["apiVersion"] == "admissionregistration.k8s.io/v1"));
    let mut old = vpc("sample-vpc");
    old["metadata"]["annotations"]["crossplane.io/external-create-succeeded"] =
        json!("2026-01-01T00:00:00Z");
    let mut moved = old.clone();
    moved["spec"]["forProvider"]["region"] = json!("eu-central-1");
    let mut retagged = old.clone();
    retagged["spec"]["forProvider"]["tags"]["Name"] = json!("Other");
    let judge = |new: &Value| {
        vap::evaluate(
            &objects,
            &RequestBuilder::update(old.clone(), new.clone())
                .username("alice")
                .build(),
        )
        .unwrap()
    };
    let denied = judge(&moved);
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0].rule, "immutable-field");
    assert_eq!(denied[0].action, "Deny");
    assert!(denied[0]
        .failure
        .contains("spec.forProvider.region is immutable"));
    assert!(judge(&retagged).is_empty());
    // The export is what the docs show.
    let _ = root();
}

/// Every rule mrguard has is, with the built-in configuration, either in a
/// policy (`mrguard.io/rule`) or on a `not exported:` line with its reason,
/// and the rules in policies are the ones the differential test compares.
#[test]
fn export_vap_exports_or_lists_every_rule() {
    let out = mrguard().args(["export", "vap"]).output().unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let objects = support::documents(&String::from_utf8_lossy(&out.stdout));
    let in_policies: BTreeSet<&str> = objects
        .iter()
        .filter_map(|o| o["metadata"]["annotations"]["mrguard.io/rule"].as_str())
        .collect();
    for rule in mrguard_policy::admission::rules::RULES {
        let name = rule.name();
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&format!("not exported: {name}: ")));
        match (in_policies.contains(name), line) {
            (true, None) => assert!(exported(name), "{name} is exported but not compared"),
            (false, Some(l)) => {
                assert!(!exported(name), "{name} is compared but not exported");
                assert!(
                    l.len() > format!("not exported: {name}: ").len() + 10,
                    "{name} is listed without a reason: {l}"
                );
            }
            (true, Some(l)) => panic!("{name} is both exported and listed: {l}"),
            (false, None) => panic!("{name} is neither exported nor listed:\n{stderr}"),
        }
    }
    assert!(
        stderr.contains("not exported: provider-config-kind: it needs cluster state"),
        "{stderr}"
    );
    assert!(
        stderr.contains("not exported: reconcile-annotations: "),
        "{stderr}"
    );
}

/// `--in-process auto`: with every policy the leader writes in force, the
/// webhook (judging with the rules those enforce turned off) and the
/// policies together find, on every recorded, generated and hostile
/// review, exactly what the webhook finds alone: the same rules with the
/// same actions (Deny, Warn and Audit alike), and no rule from both.
#[test]
fn in_process_mode_answers_every_review_as_the_webhook_alone() {
    use mrguard_policy::admission::kube_version::KubeVersion;
    use mrguard_policy::commands::export::in_process::{self, LiveObject, Owner};
    let now = jiff::Timestamp::now();
    let mut reqs = fixtures::recorded_reviews();
    reqs.extend(generated());
    let hostile = review::hostile(
        &reqs,
        7,
        &[
            &["metadata", "labels"],
            &["status", "conditions"],
            &["spec", "forProvider", "region"],
        ],
        |i| i,
    );
    reqs.extend(hostile);
    let findings = |config: &Config, req: &Request| -> BTreeSet<(String, String)> {
        mrguard_policy::admission::decider::Decider::offline(config, now)
            .validate(req)
            .findings
            .iter()
            .filter(|f| f.exception().is_none())
            .map(|f| (f.rule.to_string(), f.action.as_str().to_string()))
            .collect()
    };
    let owner = Owner {
        name: "mrguard".into(),
        ..Owner::default()
    };
    let mut disagreements = Vec::new();
    let mut split = 0;
    for (cname, config) in configs() {
        let plan = in_process::plan(&config, now, KubeVersion::new(1, 36), &owner).unwrap();
        let live: Vec<LiveObject> = plan.objects.iter().map(LiveObject::of).collect();
        let in_force = in_process::in_force(&plan, &live, "mrguard");
        let webhook = in_process::webhook_config(&config, &in_force);
        let validating: Vec<Value> = plan
            .objects
            .iter()
            .filter(|o| {
                o["kind"]
                    .as_str()
                    .is_some_and(|k| k.starts_with("Validating"))
            })
            .cloned()
            .collect();
        let policies = vap::Policies::compile(&validating).unwrap();
        for req in &reqs {
            let alone = findings(&config, req);
            let from_webhook = findings(&webhook, req);
            let from_policies = vap_verdict(&policies, req);
            split += usize::from(!from_webhook.is_empty() && !from_policies.is_empty());
            let twice: Vec<&String> = from_webhook
                .iter()
                .filter(|(r, _)| from_policies.iter().any(|(p, _)| p == r))
                .map(|(r, _)| r)
                .collect();
            let together: BTreeSet<(String, String)> =
                from_webhook.union(&from_policies).cloned().collect();
            if (alone != together || !twice.is_empty()) && disagreements.len() < 10 {
                disagreements.push(format!(
                    "{cname}: {} {} {}: alone {alone:?}, in-process {together:?}, from both {twice:?}",
                    Operation::from(&req.operation).as_str(),
                    req.kind.kind,
                    req.name
                ));
            }
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
    assert!(
        split > 0,
        "some review is judged by both the webhook and the policies"
    );
}
