use super::*;
use crate::admission::decider::Decider;
use crate::admission::review::RequestBuilder;
use crate::cluster::Cluster;

fn owner() -> Owner {
    Owner {
        name: "mrguard".into(),
        reference: Some(json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole", "name": "mrguard-in-process", "uid": "u-1"})),
        namespace_selector: Some(
            json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
            "operator": "NotIn", "values": ["kube-system"]}]}),
        ),
        object_selector: Some(json!({})),
    }
}

fn now() -> jiff::Timestamp {
    "2026-11-29T00:00:00Z".parse().unwrap()
}

const CONFIG: &str = r#"
resources:
  - apiGroups: ["ec2.aws.upbound.io"]
    kinds: ["VPC"]
    immutableFields: ["spec.forProvider.region"]
    deletionProtection: true
    celRules:
      - name: team
        expression: "has(self.metadata.labels) && 'team' in self.metadata.labels"
        message: "every MR needs a team label"
  - apiGroups: ["ec2.aws.upbound.io"]
    kinds: ["Subnet"]
    immutableFields: ["spec.forProvider.region", "spec.forProvider.tags[*].key"]
"#;

fn live(plan: &Plan) -> Vec<LiveObject> {
    plan.objects.iter().map(LiveObject::of).collect()
}

#[test]
fn the_servers_version_picks_the_kinds() {
    let cfg = Config::from_yaml(CONFIG).unwrap();
    let old = plan(&cfg, now(), KubeVersion::new(1, 29), &owner()).unwrap();
    assert!(old.objects.is_empty() && !old.mutating, "{:?}", old.objects);
    assert_eq!(old.skipped.len(), 2, "{:?}", old.skipped);
    let p = plan(&cfg, now(), KubeVersion::new(1, 30), &owner()).unwrap();
    assert!(!p.mutating);
    assert!(p
        .objects
        .iter()
        .all(|o| kind_of(o).starts_with("Validating")));
    let p = plan(&cfg, now(), KubeVersion::new(1, 36), &owner()).unwrap();
    assert!(p.mutating);
    assert_eq!(
        p.objects
            .iter()
            .filter(|o| kind_of(o).starts_with("Mutating"))
            .count(),
        2
    );
}

/// Two releases' policies never share a name; the release named mrguard
/// writes the names `export vap` prints.
#[test]
fn a_release_names_its_policies_after_itself() {
    let cfg = Config::from_yaml(CONFIG).unwrap();
    let other = Owner {
        name: "team-b".into(),
        ..owner()
    };
    let p = plan(&cfg, now(), KubeVersion::new(1, 36), &other).unwrap();
    let names: Vec<&str> = p.objects.iter().map(name_of).collect();
    assert!(names.contains(&"team-b-defaults"), "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("team-b-")), "{names:?}");
    for o in p.objects.iter().filter(|o| kind_of(o).ends_with("Binding")) {
        assert_eq!(o["spec"]["policyName"], o["metadata"]["name"]);
    }
    let f = in_force(&p, &live(&p), "team-b");
    assert!(f.mutating);
    assert!(f.rules.contains(&("cel:team".to_string(), Scope::Entry(0))));
    let ours = plan(&cfg, now(), KubeVersion::new(1, 36), &owner()).unwrap();
    assert!(ours
        .objects
        .iter()
        .any(|o| name_of(o) == "mrguard-defaults"));
}

#[test]
fn every_object_is_labelled_owned_and_hashed() {
    let cfg = Config::from_yaml(CONFIG).unwrap();
    let p = plan(&cfg, now(), KubeVersion::new(1, 36), &owner()).unwrap();
    for o in &p.objects {
        let m = &o["metadata"];
        assert_eq!(m["labels"][OWNER_LABEL], "mrguard", "{o}");
        assert_eq!(m["labels"]["app.kubernetes.io/managed-by"], "mrguard");
        assert_eq!(m["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(m["annotations"][HASH_ANNOTATION], spec_hash(&o["spec"]));
        if !kind_of(o).ends_with("Binding") {
            let c = &o["spec"]["matchConstraints"];
            assert_eq!(
                c["namespaceSelector"]["matchExpressions"][0]["values"][0],
                "kube-system"
            );
            assert!(
                c.get("objectSelector").is_none(),
                "an empty selector is left out"
            );
        }
    }
    let again = plan(&cfg, now(), KubeVersion::new(1, 36), &owner()).unwrap();
    assert_eq!(
        p.objects, again.objects,
        "a plan is a function of its inputs"
    );
}

/// The Subnet's `[*]` field cannot be exported: its policy is left out
/// whole, so the webhook keeps the rule there, and says so.
#[test]
fn a_rule_exported_in_part_stays_with_the_webhook() {
    let cfg = Config::from_yaml(CONFIG).unwrap();
    let p = plan(&cfg, now(), KubeVersion::new(1, 30), &owner()).unwrap();
    let names: Vec<&str> = p.objects.iter().map(name_of).collect();
    assert!(names.contains(&"mrguard-immutable-field-0"), "{names:?}");
    assert!(!names.contains(&"mrguard-immutable-field-1"), "{names:?}");
    assert!(p
        .covered
        .iter()
        .all(|c| !(c.rule == "immutable-field" && c.scope == Scope::Entry(1))));
    assert!(
        p.skipped
            .iter()
            .any(|s| s.starts_with("immutable-field (resources[1])")),
        "{:?}",
        p.skipped
    );
}

#[test]
fn staged_actions_and_expiring_exceptions_say_when_to_plan_again() {
    let cfg = Config::from_yaml(
        r#"
rules:
  deletion-protection: {action: Deny, warnUntil: "2027-03-01T00:00:00Z"}
exceptions:
  - name: legacy
    rules: [management-policies]
    match: {namespaces: [legacy]}
    reason: migration
    expires: "2027-01-31T00:00:00Z"
"#,
    )
    .unwrap();
    let p = plan(&cfg, now(), KubeVersion::new(1, 30), &owner()).unwrap();
    assert_eq!(
        p.changes_at,
        Some("2027-01-31T00:00:00Z".parse().unwrap()),
        "the earlier of the two"
    );
    let later = plan(
        &cfg,
        "2027-02-01T00:00:00Z".parse().unwrap(),
        KubeVersion::new(1, 30),
        &owner(),
    )
    .unwrap();
    assert_eq!(
        later.changes_at,
        Some("2027-03-01T00:00:00Z".parse().unwrap())
    );
}

#[test]
fn steps_create_replace_and_delete_only_what_is_owned() {
    let cfg = Config::from_yaml(CONFIG).unwrap();
    let p = plan(&cfg, now(), KubeVersion::new(1, 36), &owner()).unwrap();
    // Nothing live: everything is created.
    let s = steps(&p, &[], "mrguard");
    assert_eq!(s.len(), p.objects.len());
    assert!(s.iter().all(|s| matches!(s, Step::Create(_))));

    let mut l = live(&p);
    // A hand edit keeps the hash; a configuration change does not.
    l[1].hash = Some("0".into());
    // Someone else's policy under a planned name.
    l[2].owner = None;
    // Ours, no longer planned; and someone else's, never planned.
    l.push(LiveObject {
        kind: "ValidatingAdmissionPolicy".into(),
        name: "mrguard-gone".into(),
        owner: Some("mrguard".into()),
        hash: None,
    });
    l.push(LiveObject {
        kind: "ValidatingAdmissionPolicy".into(),
        name: "team-policy".into(),
        owner: None,
        hash: None,
    });
    // Another release's.
    l.push(LiveObject {
        kind: "ValidatingAdmissionPolicy".into(),
        name: "mrguard-other".into(),
        owner: Some("mrguard-b".into()),
        hash: None,
    });
    let s = steps(&p, &l, "mrguard");
    assert!(
        matches!(
            &s[0],
            Step::Replace {
                same_hash: true,
                ..
            }
        ),
        "{:?}",
        s[0]
    );
    assert!(
        matches!(
            &s[1],
            Step::Replace {
                same_hash: false,
                ..
            }
        ),
        "{:?}",
        s[1]
    );
    assert!(matches!(&s[2], Step::NotOwned { .. }), "{:?}", s[2]);
    let deleted: Vec<&str> = s
        .iter()
        .filter_map(|s| match s {
            Step::Delete { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, ["mrguard-gone"]);

    // Mode off: an empty plan deletes all that is ours, and only that.
    let s = steps(&Plan::default(), &l, "mrguard");
    assert!(s.iter().all(|s| matches!(s, Step::Delete { .. })));
    assert_eq!(
        s.len(),
        p.objects.len() - 1 + 1,
        "all ours but the one not ours, plus mrguard-gone"
    );
}

#[test]
fn a_rule_is_in_force_only_while_its_policy_and_binding_are_there_as_written() {
    let cfg = Config::from_yaml(CONFIG).unwrap();
    let p = plan(&cfg, now(), KubeVersion::new(1, 36), &owner()).unwrap();
    let all = in_force(&p, &live(&p), "mrguard");
    assert!(all.mutating);
    assert!(all
        .rules
        .contains(&("immutable-field".to_string(), Scope::Entry(0))));
    assert!(all
        .rules
        .contains(&("cel:team".to_string(), Scope::Entry(0))));
    assert_eq!(all.rules.len(), p.covered.len());

    let without = |name: &str, kind: &str| {
        let l: Vec<LiveObject> = live(&p)
            .into_iter()
            .filter(|l| !(l.name == name && l.kind == kind))
            .collect();
        in_force(&p, &l, "mrguard")
    };
    let f = without(
        "mrguard-immutable-field-0",
        "ValidatingAdmissionPolicyBinding",
    );
    assert!(!f
        .rules
        .contains(&("immutable-field".to_string(), Scope::Entry(0))));
    assert!(!without("mrguard-defaults", "MutatingAdmissionPolicy").mutating);

    let mut l = live(&p);
    for o in &mut l {
        o.hash = Some("stale".into());
    }
    // What needs no policy (no field to check there) holds whatever is live.
    let vacuous = InForce {
        rules: p
            .covered
            .iter()
            .filter(|c| c.policies.is_empty())
            .map(|c| (c.rule.clone(), c.scope))
            .collect(),
        mutating: false,
    };
    assert!(vacuous
        .rules
        .contains(&("immutable-field".to_string(), Scope::NoEntry)));
    assert_eq!(in_force(&p, &l, "mrguard"), vacuous);
    assert_eq!(in_force(&p, &live(&p), "mrguard-b"), vacuous);
}

fn vpc(region: &str, labels: Value) -> Value {
    json!({"apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC",
        "metadata": {"name": "v", "labels": labels,
            "annotations": {"crossplane.io/external-name": "vpc-1",
                "crossplane.io/external-create-succeeded": "2026-11-01T00:00:00Z"}},
        "spec": {"forProvider": {"region": region}, "providerConfigRef": {"name": "default"}}})
}

fn denials(config: &Config, req: &crate::admission::review::Request) -> Vec<String> {
    let cluster = Cluster::default();
    let d = Decider::new(config, &cluster, now()).validate(req);
    d.findings
        .iter()
        .filter(|f| f.action == Action::Deny)
        .map(|f| f.rule.to_string())
        .collect()
}

/// While the policies are in force the webhook leaves their rules to
/// them, and what the two say together is what the webhook said alone.
#[test]
fn the_webhook_skips_what_the_policies_enforce_and_together_they_deny_the_same() {
    let cfg = Config::from_yaml(CONFIG).unwrap();
    let p = plan(&cfg, now(), KubeVersion::new(1, 36), &owner()).unwrap();
    let webhook = webhook_config(&cfg, &in_force(&p, &live(&p), "mrguard"));
    let req =
        RequestBuilder::update(vpc("us-east-1", json!({})), vpc("eu-west-1", json!({}))).build();
    let mut alone = denials(&cfg, &req);
    alone.sort();
    assert_eq!(alone, ["cel:team", "immutable-field"]);
    assert!(denials(&webhook, &req).is_empty());
    let validating: Vec<Value> = p
        .objects
        .iter()
        .filter(|o| kind_of(o).starts_with("Validating"))
        .cloned()
        .collect();
    let policies = vap::Policies::compile(&validating).unwrap();
    let mut by_policies: Vec<String> = policies
        .evaluate(&req)
        .into_iter()
        .filter(|j| j.action == "Deny")
        .map(|j| j.rule)
        .collect();
    by_policies.sort();
    assert_eq!(by_policies, alone);

    // Nothing in force: the webhook keeps every rule.
    assert_eq!(
        denials(&webhook_config(&cfg, &InForce::default()), &req).len(),
        2
    );
    // An exported rule's staged or per-entry action is kept where its
    // policy is not in force.
    let mut only_cel = in_force(&p, &live(&p), "mrguard");
    only_cel.rules.retain(|(r, _)| r == "cel:team");
    assert_eq!(
        denials(&webhook_config(&cfg, &only_cel), &req),
        ["immutable-field"]
    );
}

/// With every exported rule in force the validating webhook is needed only
/// for CREATE and UPDATE (the rules of DELETE are all exported), and the
/// mutating webhook not at all; with nothing in force, no condition.
#[test]
fn the_webhooks_are_called_only_for_what_is_left_to_them() {
    let cfg = Config::from_yaml(CONFIG).unwrap();
    let p = plan(&cfg, now(), KubeVersion::new(1, 36), &owner()).unwrap();
    let f = in_force(&p, &live(&p), "mrguard");
    let c = webhook_conditions(&webhook_config(&cfg, &f), &f);
    assert_eq!(c.mutating.as_deref(), Some("false"));
    assert_eq!(
        c.validating.as_deref(),
        Some("request.operation in ['CREATE', 'UPDATE']")
    );
    assert_eq!(
        webhook_conditions(&cfg, &InForce::default()),
        WebhookConditions::default()
    );
    // A CEL rule of DELETE whose policy is not in force keeps DELETE.
    let cfg = Config::from_yaml(
        r#"
resources:
  - apiGroups: ["*"]
    kinds: ["*"]
    celRules:
      - name: keep
        expression: "!has(oldSelf.metadata.labels)"
        messageExpression: "'keep ' + oldSelf.metadata.name"
        operations: [DELETE]
"#,
    )
    .unwrap();
    let p = plan(&cfg, now(), KubeVersion::new(1, 36), &owner()).unwrap();
    let f = in_force(&p, &live(&p), "mrguard");
    assert!(
        !f.rules.iter().any(|(r, _)| r == "cel:keep"),
        "exported in part"
    );
    assert_eq!(
        webhook_conditions(&webhook_config(&cfg, &f), &f).validating,
        None
    );
}

#[test]
fn the_kinds_served_follow_the_servers_version() {
    assert!(served_kinds(KubeVersion::new(1, 29)).is_empty());
    let names = |v| {
        served_kinds(v)
            .into_iter()
            .map(|(k, _)| k)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(KubeVersion::new(1, 30)),
        [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    assert_eq!(names(KubeVersion::new(1, 36)).len(), 4);
    assert_eq!(selector("mrguard"), "mrguard.io/in-process=mrguard");
}
