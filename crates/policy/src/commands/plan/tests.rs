use serde_json::{json, Value};

use super::*;
use crate::admission::config::Config;
use crate::admission::crd::Crds;
use crate::commands::manifest::Manifest;
use crate::commands::merge::{with_last_applied, LAST_APPLIED};

const CURATED: &str = "resources:\n  - apiGroups: ['*']\n    kinds: ['Instance']\n    immutableFields: [spec.forProvider.region]\n";

/// The two scopes every case runs in: a legacy cluster-scoped MR and a
/// namespaced `.m.` MR (no deletionPolicy).
const SCOPES: [(&str, &str); 2] = [
    ("rds.aws.upbound.io/v1beta1", ""),
    ("rds.aws.m.upbound.io/v1beta1", "team-a"),
];

fn object(api_version: &str, ns: &str, fp: Value) -> Value {
    let mut o = json!({"apiVersion": api_version, "kind": "Instance",
        "metadata": {"name": "db"}, "spec": {"forProvider": fp}});
    if !ns.is_empty() {
        o["metadata"]["namespace"] = json!(ns);
    }
    o
}

fn manifest(o: &Value) -> Manifest {
    let text = serde_saphyr::to_string(o).unwrap();
    crate::commands::manifest::parse("gitops/db.yaml", &text, 10)
        .unwrap()
        .remove(0)
}

/// The live object kubectl would have left for `applied`, created.
fn live(applied: &Value) -> Value {
    let mut l = with_last_applied(applied);
    l["metadata"]["uid"] = json!("u");
    l["metadata"]["annotations"]["crossplane.io/external-create-succeeded"] =
        json!("2024-01-01T00:00:00Z");
    l["metadata"]["annotations"]["crossplane.io/external-name"] = json!("db");
    l
}

fn fp() -> Value {
    json!({"region": "eu-west-1", "instanceClass": "db.t3.micro"})
}

fn field<'a>(e: &'a Entry, path: &str) -> &'a FieldChange {
    e.fields
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| panic!("no {path} in {:?}", e.fields))
}

#[test]
fn no_live_object_is_a_create_with_every_field_in_place() {
    let cfg = Config::builtin();
    for (av, ns) in SCOPES {
        let m = manifest(&object(av, ns, fp()));
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .apply(&m, None)
            .unwrap();
        assert_eq!(e.action, PlanAction::Create, "{av}");
        assert_eq!(e.verdict, "allowed", "{av}: {:?}", e.findings);
        assert_eq!(field(&e, "spec.forProvider.region").mark, Mark::InPlace);
        assert_eq!(field(&e, "spec.forProvider.region").old, None);
        assert_eq!(e.file.as_deref(), Some("gitops/db.yaml"));
    }
}

#[test]
fn an_external_name_or_observe_only_policies_adopt() {
    let cfg = Config::builtin();
    for (av, ns) in SCOPES {
        let mut o = object(av, ns, fp());
        o["metadata"]["annotations"] = json!({"crossplane.io/external-name": "legacy-db"});
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .apply(&manifest(&o), None)
            .unwrap();
        assert_eq!(e.action, PlanAction::Adopt, "{av}");
        assert!(e.findings.iter().any(|f| f.rule == "adoption"), "{av}");
        let mut o = object(av, ns, fp());
        o["spec"]["managementPolicies"] = json!(["Observe"]);
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .apply(&manifest(&o), None)
            .unwrap();
        assert_eq!(e.action, PlanAction::Adopt, "{av}");
        assert!(matches!(
            &field(&e, "spec.forProvider.region").mark,
            Mark::Ignored { reason } if reason.contains("lack Create")
        ));
    }
}

#[test]
fn a_change_to_a_mutable_field_is_an_update_in_place() {
    let cfg = Config::from_yaml(CURATED).unwrap();
    for (av, ns) in SCOPES {
        let l = live(&object(av, ns, fp()));
        let mut new = fp();
        new["instanceClass"] = json!("db.t3.small");
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .apply(&manifest(&object(av, ns, new)), Some(&l))
            .unwrap();
        assert_eq!(e.action, PlanAction::UpdateInPlace, "{av}");
        assert_eq!(e.verdict, "allowed");
        let f = field(&e, "spec.forProvider.instanceClass");
        assert_eq!(
            (f.old.clone(), f.new.clone(), f.mark.clone()),
            (
                Some(json!("db.t3.micro")),
                Some(json!("db.t3.small")),
                Mark::InPlace
            )
        );
        assert_eq!(e.fields.len(), 1, "{:?}", e.fields);
    }
}

#[test]
fn the_same_manifest_is_no_change() {
    let cfg = Config::builtin();
    for (av, ns) in SCOPES {
        let o = object(av, ns, fp());
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .apply(&manifest(&o), Some(&live(&o)))
            .unwrap();
        assert_eq!(e.action, PlanAction::NoChange, "{av}");
        assert!(e.fields.is_empty());
        assert!(!e.action.is_change());
    }
}

#[test]
fn a_curated_immutable_change_is_a_denied_replacement() {
    let cfg = Config::from_yaml(CURATED).unwrap();
    for (av, ns) in SCOPES {
        let l = live(&object(av, ns, fp()));
        let mut new = fp();
        new["region"] = json!("us-east-1");
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .apply(&manifest(&object(av, ns, new)), Some(&l))
            .unwrap();
        assert_eq!(e.action, PlanAction::ReplaceDenied, "{av}");
        assert_eq!(e.verdict, "denied");
        assert!(e.is_denied());
        assert_eq!(
            field(&e, "spec.forProvider.region").mark,
            Mark::ForcesReplacement {
                source: "curated".into(),
                rule: "immutable-field".into()
            }
        );
        assert!(e.findings.iter().any(|f| f.rule == "immutable-field"));
    }
}

fn documented_crds(av: &str, ns: &str) -> Crds {
    let (group, version) = av.rsplit_once('/').unwrap();
    let scope = if ns.is_empty() {
        "Cluster"
    } else {
        "Namespaced"
    };
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("instances.{group}")},
        "spec": {"group": group, "scope": scope,
            "names": {"kind": "Instance", "plural": "instances", "singular": "instance", "listKind": "InstanceList"},
            "versions": [{"name": version, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
                        "forProvider": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
                            "engine": {"type": "string", "description": "Engine. Changing this forces a new resource to be created."}}}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}});
    let mut crds = Crds::default();
    crds.add("crd.yaml", &crd).unwrap();
    crds
}

#[test]
fn a_documented_immutable_change_is_a_warned_replacement() {
    let cfg = Config::builtin();
    for (av, ns) in SCOPES {
        let crds = documented_crds(av, ns);
        let mut old = fp();
        old["engine"] = json!("postgres");
        let l = live(&object(av, ns, old.clone()));
        let mut new = old;
        new["engine"] = json!("mysql");
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .crds(Some(&crds))
            .apply(&manifest(&object(av, ns, new)), Some(&l))
            .unwrap();
        assert_eq!(
            e.action,
            PlanAction::ReplaceWarned,
            "{av}: {:?}",
            e.findings
        );
        assert_eq!(e.verdict, "allowed");
        assert_eq!(
            field(&e, "spec.forProvider.engine").mark,
            Mark::ForcesReplacement {
                source: "documented".into(),
                rule: "documented-immutable-field".into()
            }
        );
    }
}

#[test]
fn before_creation_an_immutable_change_is_in_place() {
    let cfg = Config::from_yaml(CURATED).unwrap();
    let (av, ns) = SCOPES[0];
    let mut l = live(&object(av, ns, fp()));
    l["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("crossplane.io/external-create-succeeded");
    let mut new = fp();
    new["region"] = json!("us-east-1");
    let e = Planner::new(&cfg, jiff::Timestamp::now())
        .apply(&manifest(&object(av, ns, new)), Some(&l))
        .unwrap();
    assert_eq!(e.action, PlanAction::UpdateInPlace);
    assert_eq!(field(&e, "spec.forProvider.region").mark, Mark::InPlace);
    assert!(e.notes.iter().any(|n| n.contains("not created yet")));
}

#[test]
fn a_field_the_provider_late_initialized_names_its_field_manager() {
    let cfg = Config::builtin();
    for (av, ns) in SCOPES {
        let mut l = live(&object(av, ns, fp()));
        l["spec"]["forProvider"]["engineVersion"] = json!("16.1");
        l["metadata"]["managedFields"] = json!([
            {"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:forProvider": {"f:region": {}, "f:instanceClass": {}}}}},
            {"manager": "provider-aws-rds", "operation": "Apply", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:forProvider": {"f:engineVersion": {}}}}}
        ]);
        let mut new = fp();
        new["engineVersion"] = json!("15.4");
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .apply(&manifest(&object(av, ns, new)), Some(&l))
            .unwrap();
        assert_eq!(e.action, PlanAction::UpdateInPlace, "{av}");
        let f = field(&e, "spec.forProvider.engineVersion");
        assert_eq!(
            f.mark,
            Mark::OwnedByProvider {
                managers: vec!["provider-aws-rds".into()]
            }
        );
        assert_eq!(
            f.mark.text(),
            "owned by the provider (field manager provider-aws-rds)"
        );
        // The user's own manager is no provider.
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .provider_managers(&["kubectl-*".into()])
            .apply(&manifest(&object(av, ns, fp())), Some(&l))
            .unwrap();
        assert!(e
            .fields
            .iter()
            .all(|f| f.path != "spec.forProvider.engineVersion"));
    }
}

#[test]
fn without_update_in_the_policies_changes_are_ignored() {
    let cfg = Config::builtin();
    for (av, ns) in SCOPES {
        let mut o = object(av, ns, fp());
        o["spec"]["managementPolicies"] = json!(["Observe"]);
        let l = live(&o);
        o["spec"]["forProvider"]["instanceClass"] = json!("db.t3.large");
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .apply(&manifest(&o), Some(&l))
            .unwrap();
        assert_eq!(e.action, PlanAction::Ignored, "{av}");
        assert!(matches!(
            &field(&e, "spec.forProvider.instanceClass").mark,
            Mark::Ignored { reason } if reason.contains("lack Update")
        ));
        assert_eq!(
            field(&e, "spec.forProvider.instanceClass").mark.text(),
            "ignored"
        );
    }
}

#[test]
fn init_provider_changes_of_a_created_mr_are_ignored() {
    let cfg = Config::builtin();
    for (av, ns) in SCOPES {
        let mut o = object(av, ns, fp());
        o["spec"]["initProvider"] = json!({"storage": 20});
        let l = live(&o);
        o["spec"]["initProvider"]["storage"] = json!(50);
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .apply(&manifest(&o), Some(&l))
            .unwrap();
        assert_eq!(e.action, PlanAction::Ignored, "{av}");
        assert!(matches!(
            &field(&e, "spec.initProvider.storage").mark,
            Mark::Ignored { reason } if reason.contains("only when")
        ));
    }
}

#[test]
fn drift_says_what_the_cloud_has_and_what_the_provider_does() {
    let cfg = Config::builtin();
    for (av, ns) in SCOPES {
        for (policies, then) in [
            (json!(["Observe"]), "only reads"),
            (json!(["*"]), "will set it"),
        ] {
            let mut o = object(av, ns, fp());
            o["spec"]["managementPolicies"] = policies;
            let mut l = live(&o);
            l["status"] =
                json!({"atProvider": {"region": "eu-west-1", "instanceClass": "db.m5.large"}});
            let e = Planner::new(&cfg, jiff::Timestamp::now())
                .apply(&manifest(&o), Some(&l))
                .unwrap();
            assert_eq!(e.action, PlanAction::NoChange, "{av}");
            assert_eq!(e.fields.len(), 1, "{:?}", e.fields);
            let f = field(&e, "spec.forProvider.instanceClass");
            assert!(
                matches!(&f.mark, Mark::Drift { cloud, then: t } if cloud == &json!("db.m5.large") && t.contains(then)),
                "{:?}",
                f.mark
            );
            assert_eq!(f.mark.text(), "drift: cloud has \"db.m5.large\"");
        }
    }
}

/// A key of a map the spec sets that only the cloud has (`owner: ops` in
/// the cloud's tags) is drift the provider removes; a struct's field only
/// the cloud has (an ARN, an id) is not drift. With a CRD, its schema says
/// which objects are maps; without one, the conventional names do.
#[test]
fn a_key_only_the_cloud_has_in_a_map_the_spec_sets_is_drift() {
    let cfg = Config::builtin();
    for (av, ns) in SCOPES {
        for (policies, then) in [
            (json!(["Observe"]), "only reads"),
            (
                json!(["*"]),
                "the spec's map lacks the key: the provider will remove it",
            ),
        ] {
            let mut f = fp();
            f["tags"] = json!({"team": "data"});
            f["parameters"] = json!({"family": "postgres16"});
            let mut o = object(av, ns, f);
            o["spec"]["managementPolicies"] = policies;
            let mut l = live(&o);
            l["status"] = json!({"atProvider": {
                "region": "eu-west-1", "instanceClass": "db.t3.micro",
                "arn": "arn:aws:rds:eu-west-1:1:db:db",
                "tags": {"team": "data", "owner": "ops"},
                "parameters": {"family": "postgres16", "id": "p-1"},
            }});
            let e = Planner::new(&cfg, jiff::Timestamp::now())
                .apply(&manifest(&o), Some(&l))
                .unwrap();
            assert_eq!(e.action, PlanAction::NoChange, "{av}");
            assert_eq!(e.fields.len(), 1, "{av}: {:?}", e.fields);
            let f = field(&e, "spec.forProvider.tags.owner");
            assert!(
                matches!(&f.mark, Mark::Drift { cloud, then: t } if cloud == &json!("ops") && t.contains(then)),
                "{:?}",
                f.mark
            );
            assert_eq!((&f.old, &f.new), (&None, &None));

            // A schema that calls `parameters` a map and `tags` a struct.
            let group = av.split('/').next().unwrap();
            let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("instances.{group}")},
                "spec": {"group": group, "scope": if ns.is_empty() { "Cluster" } else { "Namespaced" },
                    "names": {"kind": "Instance", "plural": "instances", "singular": "instance", "listKind": "InstanceList"},
                    "versions": [{"name": "v1beta1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
                                "forProvider": {"type": "object", "properties": {
                                    "region": {"type": "string"}, "instanceClass": {"type": "string"},
                                    "tags": {"type": "object", "properties": {"team": {"type": "string"}}},
                                    "parameters": {"type": "object", "additionalProperties": {"type": "string"}}}}}},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}});
            let mut crds = Crds::default();
            crds.add("crd.yaml", &crd).unwrap();
            let e = Planner::new(&cfg, jiff::Timestamp::now())
                .crds(Some(&crds))
                .apply(&manifest(&o), Some(&l))
                .unwrap();
            let paths: Vec<&str> = e.fields.iter().map(|f| f.path.as_str()).collect();
            assert_eq!(paths, ["spec.forProvider.parameters.id"], "{av}");
        }
    }
    // A provider that merges maps (cloudOnlyMapKeys: Keep) keeps the key.
    let keep = Config::from_yaml(
        "resources:\n  - apiGroups: ['*']\n    kinds: [Instance]\n    cloudOnlyMapKeys: Keep\n",
    )
    .unwrap();
    let mut f = fp();
    f["tags"] = json!({"team": "data"});
    let o = object(SCOPES[0].0, "", f);
    let mut l = live(&o);
    l["status"] = json!({"atProvider": {"tags": {"team": "data", "owner": "ops"}}});
    let e = Planner::new(&keep, jiff::Timestamp::now())
        .apply(&manifest(&o), Some(&l))
        .unwrap();
    assert!(
        matches!(&field(&e, "spec.forProvider.tags.owner").mark, Mark::Drift { then, .. } if then.contains("the provider keeps it")),
        "{:?}",
        e.fields
    );
    let err = Config::from_yaml(
        "resources:\n  - apiGroups: ['*']\n    kinds: [Instance]\n    cloudOnlyMapKeys: Merge\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("Keep") && err.contains("Remove"), "{err}");
}

#[test]
fn annotations_and_policies_are_diffed_without_kubectls_bookkeeping() {
    let cfg = Config::builtin();
    for (av, ns) in SCOPES {
        let o = object(av, ns, fp());
        let l = live(&o);
        let mut new = o.clone();
        new["metadata"]["annotations"] = json!({"team": "data"});
        new["spec"]["managementPolicies"] =
            json!(["Observe", "Create", "Update", "LateInitialize"]);
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .apply(&manifest(&new), Some(&l))
            .unwrap();
        assert_eq!(e.action, PlanAction::UpdateInPlace, "{av}");
        assert_eq!(field(&e, "metadata.annotations.team").mark, Mark::InPlace);
        assert_eq!(
            field(&e, "spec.managementPolicies").old,
            None,
            "absent before"
        );
        assert!(e.fields.iter().all(|f| !f.path.contains(LAST_APPLIED)));
    }
}

#[test]
fn deletion_outcomes_follow_the_policies() {
    let cfg = Config::builtin();
    let cases = [
        // (scope index, deletionPolicy, managementPolicies, action)
        (0, Some("Delete"), None, PlanAction::DeleteExternal),
        (0, Some("Orphan"), None, PlanAction::OrphanExternal),
        (
            0,
            Some("Orphan"),
            Some(json!(["Observe", "Create", "Update", "Delete"])),
            PlanAction::DeleteExternal,
        ),
        // `.m.`: no deletionPolicy, the policies alone decide.
        (1, None, None, PlanAction::DeleteExternal),
        (
            1,
            None,
            Some(json!(["Observe", "Create", "Update", "LateInitialize"])),
            PlanAction::OrphanExternal,
        ),
    ];
    for (scope, policy, policies, want) in cases {
        let (av, ns) = SCOPES[scope];
        let mut o = live(&object(av, ns, fp()));
        if let Some(p) = policy {
            o["spec"]["deletionPolicy"] = json!(p);
        }
        if let Some(p) = policies {
            o["spec"]["managementPolicies"] = p;
        }
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .delete(&o, "--delete")
            .unwrap();
        assert_eq!(e.action, want, "{av} {policy:?}");
        assert_eq!(e.verdict, "allowed");
        assert!(e.notes[0].starts_with("--delete: "), "{:?}", e.notes);
        assert_eq!(e.file, None);
    }
}

#[test]
fn a_protected_deletion_is_denied() {
    let cfg = Config::builtin();
    for (av, ns) in SCOPES {
        let mut o = live(&object(av, ns, fp()));
        o["metadata"]["annotations"]["mrguard.io/deletion-protection"] = json!("true");
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .delete(&o, "pruned")
            .unwrap();
        assert_eq!(e.action, PlanAction::DeleteExternal);
        assert_eq!(e.verdict, "denied", "{av}: {:?}", e.findings);
        assert!(e
            .findings
            .iter()
            .any(|f| f.rule == "deletion-protection" && f.action == "Deny"));
    }
}

#[test]
fn skipped_and_rejected_manifests_say_why() {
    let m = manifest(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
    let e = Planner::skipped(&m, "not a managed resource");
    assert_eq!(
        (e.action, e.verdict.as_str()),
        (PlanAction::Skipped, "skipped")
    );
    let e = Planner::rejected(&m, "no matches for kind".into());
    assert!(e.is_denied());
    assert_eq!(e.invalid.as_deref(), Some("no matches for kind"));
}

fn example_plan() -> Plan {
    let cfg = Config::from_yaml(CURATED).unwrap();
    let (av, ns) = SCOPES[0];
    let l = live(&object(av, ns, fp()));
    let mut new = fp();
    new["region"] = json!("us-east-1");
    new["instanceClass"] = json!("db|t3");
    let p = Planner::new(&cfg, jiff::Timestamp::now());
    let cm = manifest(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
    Plan::new(vec![
        p.apply(&manifest(&object(av, ns, new)), Some(&l)).unwrap(),
        p.apply(&manifest(&object(SCOPES[1].0, SCOPES[1].1, fp())), None)
            .unwrap(),
        Planner::skipped(&cm, "not a managed resource"),
        p.delete(&l, "--delete").unwrap(),
    ])
}

#[test]
fn the_summary_counts_actions_denials_and_changes() {
    let plan = example_plan();
    assert_eq!(
        plan.summary,
        Summary {
            create: 1,
            replace: 1,
            delete: 1,
            skipped: 1,
            denied: 1,
            changes: 3,
            ..Summary::default()
        }
    );
    assert!(plan.any_denied() && plan.any_change());
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["schema"], SCHEMA);
    assert_eq!(json["entries"][0]["action"], "replace required (denied)");
    assert_eq!(
        json["entries"][0]["fields"][1]["mark"],
        json!({"kind": "forces-replacement", "source": "curated", "rule": "immutable-field"})
    );
}

#[test]
fn text_is_coloured_only_when_asked() {
    let plan = example_plan();
    let plain = render_text(&plan, false);
    assert!(!plain.contains('\x1b'));
    assert!(
        plain.starts_with(
            "-/+ Instance/db: replace required (denied) [denied]\n    gitops/db.yaml:1\n"
        ),
        "{plain}"
    );
    assert!(
        plain.contains("    spec.forProvider.region: \"eu-west-1\" → \"us-east-1\"  forces replacement (curated)\n"),
        "{plain}"
    );
    assert!(plain.contains("    deny immutable-field: "), "{plain}");
    assert!(
        plain.contains("+ Instance/team-a/db: create [allowed]"),
        "{plain}"
    );
    assert!(plain.ends_with("Plan: 1 to create, 0 to adopt, 0 to update in place, 1 to replace, 1 to delete, 0 to orphan, 0 ignored, 0 unchanged, 1 skipped; 1 denied.\n"), "{plain}");
    let coloured = render_text(&plan, true);
    assert!(coloured.contains("\x1b[31mreplace required (denied)\x1b[0m"));
}

#[test]
fn markdown_has_a_table_row_and_a_section_per_entry() {
    let md = render_markdown(&example_plan());
    assert!(md.contains(
        "| Object | Action | Verdict | Fields | Findings | Manifest |\n|---|---|---|---|---|---|\n"
    ));
    assert!(md.contains("| `Instance/db` | replace required (denied) | **denied** | 2 | 1 | `gitops/db.yaml:1` |"), "{md}");
    assert_eq!(md.matches("<details>").count(), 4);
    assert_eq!(md.matches("</details>").count(), 4);
    // A pipe in a value does not split the cell.
    assert!(md.contains("`\"db\\|t3\"`"), "{md}");
}

#[test]
fn only_kubectls_bookkeeping_is_no_change() {
    let cfg = Config::builtin();
    for (av, ns) in SCOPES {
        let o = object(av, ns, fp());
        let mut l = live(&o);
        // Created by hand: kubectl would only add its annotation.
        l["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(LAST_APPLIED);
        let e = Planner::new(&cfg, jiff::Timestamp::now())
            .apply(&manifest(&o), Some(&l))
            .unwrap();
        assert_eq!(e.action, PlanAction::NoChange, "{av}: {:?}", e.fields);
        assert!(e
            .notes
            .iter()
            .any(|n| n.contains("no kubectl.kubernetes.io/last-applied-configuration")));
    }
}
