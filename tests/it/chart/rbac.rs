//! Who may do what: the chart's RBAC, exactly the least privilege listed
//! (no create on Secrets, the audit role from values.yaml and its modes);
//! the webhooks' match conditions (exempt users, only MRs); the namespace
//! of the providers' ServiceAccounts; the network policy; and the values
//! schema refusing what the API server would.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::{flag, port_named, render, render_in, set, strs, webhook, Manifests};
use crate::support::fixtures;
use crate::support::helm::{chart, helm, NS, RELEASE};

type Rule = (
    BTreeSet<String>,
    BTreeSet<String>,
    BTreeSet<String>,
    BTreeSet<String>,
);

fn rules_of(role: &Value) -> Vec<Rule> {
    role["rules"]
        .as_array()
        .unwrap_or_else(|| panic!("no rules: {role}"))
        .iter()
        .map(|r| {
            let opt = |k: &str| r.get(k).map(set).unwrap_or_default();
            (
                opt("apiGroups"),
                opt("resources"),
                opt("resourceNames"),
                opt("verbs"),
            )
        })
        .collect()
}

fn rule(groups: &[&str], resources: &[&str], names: &[&str], verbs: &[&str]) -> Rule {
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
    (s(groups), s(resources), s(names), s(verbs))
}

/// The API groups the default values grant to the audit, computed from
/// values.yaml independently of the template.
fn audit_groups_from_values() -> BTreeSet<String> {
    let text = std::fs::read_to_string(chart().join("values.yaml")).unwrap();
    let values: Value = serde_saphyr::from_str(&text).unwrap();
    let audit = &values["rbac"]["audit"];
    let mut groups = set(&audit["apiGroups"]);
    for fam in audit["providerFamilies"].as_array().unwrap() {
        for svc in strs(&fam["services"]) {
            groups.insert(format!("{svc}.{}", fam["group"].as_str().unwrap()));
            if let Some(ns) = fam["namespacedGroup"].as_str() {
                groups.insert(format!("{svc}.{ns}"));
            }
        }
    }
    groups
}

#[test]
fn rbac_is_exactly_the_least_privilege_listed() {
    let m = render(&[]);
    let core = rules_of(m.one("ClusterRole", "mrguard"));
    assert_eq!(
        core,
        [
            rule(
                &["apiextensions.k8s.io"],
                &["customresourcedefinitions"],
                &[],
                &["get", "list", "watch"]
            ),
            rule(
                &["pkg.crossplane.io"],
                &["providerrevisions", "deploymentruntimeconfigs"],
                &[],
                &["get", "list", "watch"]
            ),
            rule(
                &["apiextensions.crossplane.io"],
                &["compositeresourcedefinitions"],
                &[],
                &["get", "list", "watch"]
            ),
            rule(
                &["apiextensions.crossplane.io"],
                &[
                    "managedresourcedefinitions",
                    "managedresourceactivationpolicies"
                ],
                &[],
                &["get", "list", "watch"]
            ),
            rule(
                &["admissionregistration.k8s.io"],
                &[
                    "mutatingwebhookconfigurations",
                    "validatingwebhookconfigurations"
                ],
                &["mrguard"],
                &["get", "list", "watch", "patch"]
            ),
            rule(
                &["events.k8s.io"],
                &["events"],
                &[],
                &["create", "patch", "list"]
            ),
        ]
    );
    let role = rules_of(m.one("Role", "mrguard"));
    assert_eq!(
        role,
        [
            rule(
                &[""],
                &["secrets"],
                &["mrguard-tls"],
                &["get", "list", "watch", "update"]
            ),
            rule(&["discovery.k8s.io"], &["endpointslices"], &[], &["list"]),
            rule(&["coordination.k8s.io"], &["leases"], &[], &["create"]),
            rule(
                &["coordination.k8s.io"],
                &["leases"],
                &["mrguard-leader"],
                &["get", "update", "patch"]
            ),
        ]
    );
    assert_eq!(m.one("Role", "mrguard")["metadata"]["namespace"], NS);

    let audit_role = m.one("ClusterRole", "mrguard-audit");
    assert!(audit_role.get("aggregationRule").is_none());
    let audit = rules_of(audit_role);
    assert_eq!(audit.len(), 2);
    let (groups, resources, names, verbs) = &audit[0];
    assert_eq!(groups, &audit_groups_from_values());
    assert_eq!(resources, &BTreeSet::from(["*".to_string()]));
    assert!(names.is_empty());
    assert_eq!(
        verbs,
        &BTreeSet::from(["list".to_string(), "watch".to_string()])
    );
    // The provider configs, in the families' own groups only.
    let (groups, resources, names, verbs) = &audit[1];
    assert_eq!(
        groups,
        &BTreeSet::from(
            [
                "aws.m.upbound.io",
                "aws.upbound.io",
                "azure.m.upbound.io",
                "azure.upbound.io",
                "gcp.m.upbound.io",
                "gcp.upbound.io",
            ]
            .map(String::from)
        )
    );
    assert_eq!(
        resources,
        &BTreeSet::from(["providerconfigs", "clusterproviderconfigs"].map(String::from))
    );
    assert!(names.is_empty());
    assert_eq!(
        verbs,
        &BTreeSet::from(["list".to_string(), "watch".to_string()])
    );

    // Nothing broader anywhere: no wildcard verbs or groups, no dangerous
    // verbs, Secrets only in the namespaced Role, and in the Role nothing
    // but create goes without a resourceName.
    for kind in ["ClusterRole", "Role"] {
        for r in m.all(kind) {
            // Its delete is tested in in_process_rbac_follows_the_mode.
            if r["metadata"]["name"] == "mrguard-in-process" {
                continue;
            }
            for (groups, resources, names, verbs) in rules_of(r) {
                assert!(!groups.contains("*"), "{kind} wildcard group");
                for v in &verbs {
                    assert!(
                        ["get", "list", "watch", "create", "update", "patch"].contains(&v.as_str()),
                        "{kind} grants {v}"
                    );
                }
                if kind == "ClusterRole" {
                    assert!(!resources.contains("secrets"), "Secrets cluster-wide");
                    assert!(
                        !groups.contains(""),
                        "core resources cluster-wide: {resources:?}"
                    );
                } else if names.is_empty() {
                    // Unnamed: create, listing the Service's own
                    // EndpointSlices, or patching Events (their names are
                    // generated) in "default" only.
                    let create = BTreeSet::from(["create".to_string()]);
                    let slices = BTreeSet::from(["endpointslices".to_string()]);
                    let list = BTreeSet::from(["list".to_string()]);
                    let events = BTreeSet::from(["events".to_string()]);
                    let create_patch = BTreeSet::from(["create".to_string(), "patch".to_string()]);
                    let in_default = r["metadata"]["namespace"] == "default";
                    assert!(
                        verbs == create
                            || (resources == slices && verbs == list)
                            || (in_default && resources == events && verbs == create_patch),
                        "{kind} grants {verbs:?} on {resources:?} without resourceNames"
                    );
                }
            }
        }
    }
}

/// A created `kubernetes.io/service-account-token` Secret is a
/// token for any ServiceAccount in the namespace. No rule of any rendered
/// role, under any RBAC or report mode, grants `create` (or a wildcard
/// verb) on Secrets; the chart renders the TLS Secret itself, empty and of
/// the type the controller writes.
#[test]
fn no_rendered_rule_grants_create_on_secrets() {
    for extra in [
        &[][..],
        &["--set", "rbac.audit.mode=crossplaneView"][..],
        &["--set", "rbac.audit.mode=all"][..],
        &["--set", "controller.policyReports=wgpolicyk8s"][..],
        &["--set", "controller.policyReports=openreports"][..],
    ] {
        let m = render(extra);
        for kind in ["ClusterRole", "Role"] {
            // An aggregated role has rules only in the cluster.
            for r in m.all(kind).into_iter().filter(|r| r.get("rules").is_some()) {
                for (groups, resources, _, verbs) in rules_of(r) {
                    let core = groups.contains("") || groups.contains("*");
                    let secrets = resources.contains("secrets") || resources.contains("*");
                    if core && secrets {
                        assert!(
                            !verbs.contains("create") && !verbs.contains("*"),
                            "{extra:?}: {kind} {} grants {verbs:?} on {resources:?}",
                            r["metadata"]["name"]
                        );
                    }
                }
            }
        }
        let secret = m.one("Secret", "mrguard-tls");
        assert_eq!(secret["type"], "kubernetes.io/tls");
        assert_eq!(secret["metadata"]["namespace"], NS);
        assert_eq!(secret["data"], json!({"tls.crt": "", "tls.key": ""}));
        assert_eq!(flag(&m, "tls-secret-name"), "mrguard-tls");
    }
}

/// `webhooks.matchConditions.enabled` (true by default: they are GA from
/// 1.30, the chart's floor) renders `is-managed-resource` on both admission
/// webhooks whatever the cluster's version; `false` leaves them out. The
/// chart installs on nothing older than 1.30.
#[test]
fn match_conditions_are_on_unless_turned_off() {
    let hooks = [
        ("MutatingWebhookConfiguration", "mutate.mrguard.io"),
        ("ValidatingWebhookConfiguration", "validate.mrguard.io"),
    ];
    let names = |m: &Manifests, kind: &str, name: &str| -> Option<Vec<String>> {
        webhook(m, kind, name).get("matchConditions").map(|c| {
            c.as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap().to_string())
                .collect()
        })
    };
    for (version, extra, on) in [
        ("1.30.0", None, true),
        ("v1.36.3", None, true),
        (
            "1.30.0",
            Some("webhooks.matchConditions.enabled=false"),
            false,
        ),
        (
            "1.36.0",
            Some("webhooks.matchConditions.enabled=true"),
            true,
        ),
    ] {
        let mut args = vec!["--kube-version", version];
        if let Some(set) = extra {
            args.extend(["--set", set]);
        }
        let m = render(&args);
        for (kind, name) in hooks {
            let got = names(&m, kind, name);
            if on {
                assert_eq!(
                    got,
                    Some(vec!["is-managed-resource".to_string()]),
                    "{version} {extra:?} {kind}"
                );
            } else {
                assert_eq!(got, None, "{version} {extra:?} {kind}");
            }
        }
        // The other webhooks judge objects that are not MRs.
        let v = m.only("ValidatingWebhookConfiguration");
        for w in v["webhooks"].as_array().unwrap() {
            if w["name"] != "validate.mrguard.io" {
                assert!(w.get("matchConditions").is_none(), "{}", w["name"]);
            }
        }
    }
    // Below the floor, and the value of earlier releases that followed
    // the version, are refused with the reason.
    let old = helm(&[
        "template",
        RELEASE,
        chart().to_str().unwrap(),
        "-n",
        NS,
        "--kube-version",
        "1.29.9",
    ]);
    assert!(!old.status.success());
    assert!(
        String::from_utf8_lossy(&old.stderr).contains("kubeVersion"),
        "{}",
        String::from_utf8_lossy(&old.stderr)
    );
    let out = helm(&[
        "template",
        RELEASE,
        chart().to_str().unwrap(),
        "-n",
        NS,
        "--set",
        "webhooks.matchConditions.enabled=auto",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("enabled"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `is-managed-resource`, evaluated with mrguard's own CEL engine: true
/// exactly for what mrguard judges (an object, the old one on DELETE, with
/// `spec.forProvider`), so skipping the rest changes no answer.
#[test]
fn the_managed_resource_match_condition_passes_exactly_the_mrs() {
    use mrguard_policy::admission::cel::{CelProgram, Scope};
    let m = render(&["--kube-version", "1.30.0"]);
    let program = |kind: &str, name: &str| {
        let conds = webhook(&m, kind, name)["matchConditions"].clone();
        let expr = conds[0]["expression"].as_str().unwrap().to_string();
        assert_eq!(conds[0]["name"], "is-managed-resource");
        // As the API server checks a webhook's match condition.
        use mrguard_policy::admission::cel::typecheck::{check, CelType, TypeEnv};
        check(&expr, &TypeEnv::admission_policy(), &CelType::Bool)
            .unwrap_or_else(|e| panic!("{kind}: the API server would refuse: {e}: {expr}"));
        CelProgram::compile_with(&expr, &["request", "object", "oldObject"])
            .unwrap_or_else(|e| panic!("{kind}: {e}: {expr}"))
    };
    let mutating = program("MutatingWebhookConfiguration", "mutate.mrguard.io");
    let validating = program("ValidatingWebhookConfiguration", "validate.mrguard.io");
    let mr = json!({"spec": {"forProvider": {"region": "eu-west-1"}}});
    let not_mr = json!({"spec": {"credentials": {"source": "Secret"}}});
    let no_spec = json!({"metadata": {"name": "x"}});
    let calls = |p: &CelProgram, op: &str, object: Option<&Value>, old: Option<&Value>| {
        let request = json!({"operation": op});
        let mut scope = Scope::new();
        scope.bind("request", Some(&request));
        scope.bind("object", object.or(Some(&Value::Null)));
        scope.bind("oldObject", old.or(Some(&Value::Null)));
        p.eval_bool(&scope)
            .unwrap_or_else(|e| panic!("{op} {object:?} {old:?}: {e}"))
    };
    for p in [&mutating, &validating] {
        assert!(calls(p, "CREATE", Some(&mr), None));
        assert!(calls(p, "UPDATE", Some(&mr), Some(&mr)));
        assert!(!calls(p, "CREATE", Some(&not_mr), None));
        assert!(!calls(p, "UPDATE", Some(&no_spec), Some(&no_spec)));
    }
    assert!(calls(&validating, "DELETE", None, Some(&mr)));
    assert!(!calls(&validating, "DELETE", None, Some(&not_mr)));
    assert!(!calls(&validating, "DELETE", None, None));
}

/// Both webhooks tell exempt users' writes apart with the CEL the chart
/// generates from `config.exemptUsernames`, evaluated here with mrguard's
/// own CEL engine against sample requests: a matching user skips the
/// mutating webhook always and the validating one except on DELETE.
#[test]
fn match_conditions_render_the_exempt_globs_as_cel() {
    use mrguard_policy::admission::cel::{CelProgram, Scope};
    // Without globs only the managed-resource condition is rendered.
    let m = render(&["--set", "webhooks.matchConditions.enabled=true"]);
    assert_eq!(
        webhook(&m, "MutatingWebhookConfiguration", "mutate.mrguard.io")["matchConditions"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );

    let m = render(&[
        "--set",
        "webhooks.matchConditions.enabled=true",
        "--set-json",
        r#"config.exemptUsernames=["system:serviceaccount:crossplane-system:provider-aws-*","ci.bot?","dots.and+plus[1]"]"#,
    ]);
    let condition = |kind: &str, name: &str| {
        let conds = webhook(&m, kind, name)["matchConditions"]
            .as_array()
            .unwrap_or_else(|| panic!("{kind}: no matchConditions"))
            .clone();
        assert_eq!(conds.len(), 2, "{conds:?}");
        let expr = conds[1]["expression"].as_str().unwrap();
        // As the API server checks a webhook's match condition.
        use mrguard_policy::admission::cel::typecheck::{check, CelType, TypeEnv};
        check(expr, &TypeEnv::admission_policy(), &CelType::Bool)
            .unwrap_or_else(|e| panic!("{kind}: the API server would refuse: {e}: {expr}"));
        let program = CelProgram::compile_with(expr, &["request"])
            .unwrap_or_else(|e| panic!("{kind}: {e}: {expr}"));
        (conds[1]["name"].as_str().unwrap().to_string(), program)
    };
    let calls = |p: &CelProgram, user: &str, op: &str| {
        // As the API server binds it: an empty username is left out.
        let request = if user.is_empty() {
            json!({"operation": op, "userInfo": {}})
        } else {
            json!({"operation": op, "userInfo": {"username": user}})
        };
        let mut scope = Scope::new();
        scope.bind("request", Some(&request));
        p.eval_bool(&scope).unwrap()
    };
    let (mname, mutating) = condition("MutatingWebhookConfiguration", "mutate.mrguard.io");
    let (vname, validating) = condition("ValidatingWebhookConfiguration", "validate.mrguard.io");
    assert_eq!(mname, "not-exempt-user");
    assert_eq!(vname, "not-exempt-user-or-delete");
    let exempt = [
        "system:serviceaccount:crossplane-system:provider-aws-s3-1a2b",
        "system:serviceaccount:crossplane-system:provider-aws-",
        "ci.bot1",
        "dots.and+plus[1]",
    ];
    let judged = [
        "system:serviceaccount:crossplane-system:crossplane",
        "system:serviceaccount:crossplane-system:rbac-manager",
        "system:serviceaccount:other:provider-aws-s3",
        "xsystem:serviceaccount:crossplane-system:provider-aws-s3",
        "ci.bot",
        "ci.bot12",
        "ciXbot1",
        "dotsXand+plus[1]",
        "dots.andplus1",
        "alice",
        "",
    ];
    for op in ["CREATE", "UPDATE", "DELETE"] {
        for u in exempt {
            assert!(
                !calls(&mutating, u, op),
                "mutating called for exempt {u} {op}"
            );
            assert_eq!(
                calls(&validating, u, op),
                op == "DELETE",
                "validating, exempt {u} {op}"
            );
        }
        for u in judged {
            assert!(calls(&mutating, u, op), "mutating skipped for {u:?} {op}");
            assert!(
                calls(&validating, u, op),
                "validating skipped for {u:?} {op}"
            );
        }
    }

    // A quote cannot go into the CEL string: the chart refuses it.
    let chart_dir = chart();
    let out = helm(&[
        "template",
        RELEASE,
        chart_dir.to_str().unwrap(),
        "-n",
        NS,
        "--set",
        "webhooks.matchConditions.enabled=true",
        "--set-json",
        r#"config.exemptUsernames=["it's"]"#,
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("contains a quote"));
}

/// The providers' ServiceAccounts live where Crossplane runs: the release
/// namespace unless `crossplane.namespace` says otherwise.
#[test]
fn crossplane_namespace_defaults_to_the_release_namespace() {
    let m = render_in(RELEASE, "upbound-system", &[]);
    assert_eq!(flag(&m, "crossplane-namespace"), "upbound-system");
    let m = render(&["--set", "crossplane.namespace=xp"]);
    assert_eq!(flag(&m, "crossplane-namespace"), "xp");
}

/// `networkPolicy.enabled`: ingress to the webhook port only from the
/// configured API server ranges, to the metrics port only from the
/// monitoring namespaces; nothing rendered by default, and no silent
/// lock-out when the ranges are missing.
#[test]
fn network_policy_admits_the_api_server_and_the_monitoring_namespace_only() {
    assert!(render(&[]).all("NetworkPolicy").is_empty());
    let m = render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set-json",
        r#"networkPolicy.apiServerCIDRs=["10.0.0.0/28","fd00::/64"]"#,
        "--set-json",
        r#"networkPolicy.metrics.namespaceSelector={"matchLabels":{"team":"obs"}}"#,
    ]);
    let np = m.one("NetworkPolicy", "mrguard");
    assert_eq!(np["metadata"]["namespace"], NS);
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress"]));
    let dep = m.one("Deployment", "mrguard");
    assert_eq!(
        np["spec"]["podSelector"]["matchLabels"],
        dep["spec"]["selector"]["matchLabels"]
    );
    let ingress = np["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 2);
    assert_eq!(
        ingress[0]["ports"],
        json!([{"port": "https", "protocol": "TCP"}])
    );
    assert_eq!(
        ingress[0]["from"],
        json!([{"ipBlock": {"cidr": "10.0.0.0/28"}}, {"ipBlock": {"cidr": "fd00::/64"}}])
    );
    assert_eq!(
        ingress[1]["ports"],
        json!([{"port": "metrics", "protocol": "TCP"}])
    );
    assert_eq!(
        ingress[1]["from"],
        json!([{"namespaceSelector": {"matchLabels": {"team": "obs"}}}])
    );
    // The named ports exist on the container.
    assert_eq!(port_named(&m, "https"), 9443);
    assert_eq!(port_named(&m, "metrics"), 8080);
    // The default selector is the namespace named "monitoring".
    let m = render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.apiServerCIDRs={10.0.0.0/28}",
    ]);
    assert_eq!(
        m.one("NetworkPolicy", "mrguard")["spec"]["ingress"][1]["from"],
        json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}])
    );
    // Enabled without ranges: refused, naming the value.
    let chart_dir = chart();
    let out = helm(&[
        "template",
        RELEASE,
        chart_dir.to_str().unwrap(),
        "-n",
        NS,
        "--set",
        "networkPolicy.enabled=true",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("networkPolicy.apiServerCIDRs"));
}

#[test]
fn audit_role_covers_the_fixture_providers_without_wildcards() {
    let m = render(&[]);
    let audit = rules_of(m.one("ClusterRole", "mrguard-audit"));
    let groups = &audit[0].0;
    assert!(groups.len() > 600, "{} groups", groups.len());
    assert!(groups.iter().all(|g| !g.contains('*')));
    // Every MR group of the fixture CRDs (the providers' real groups) is covered,
    // cluster-scoped and namespaced alike.
    let dir = fixtures::dir().join("crds");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let group = crd["spec"]["group"].as_str().unwrap();
        let managed = crd["spec"]["names"]["categories"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c == "managed"));
        if managed && group.ends_with(".upbound.io") {
            seen += 1;
            assert!(
                groups.contains(group),
                "{group} ({}) not covered",
                path.display()
            );
        }
    }
    assert!(
        seen >= 5,
        "only {seen} upbound MR CRDs in {}",
        dir.display()
    );
    for g in [
        "compute.gcp.upbound.io",
        "network.azure.m.upbound.io",
        "azure.upbound.io",
    ] {
        assert!(groups.contains(g), "{g}");
    }
    // ProviderConfigs' root groups are not MR groups.
    assert!(!groups.contains("aws.upbound.io") && !groups.contains("gcp.upbound.io"));
}

/// admission.inProcess auto grants, in a ClusterRole of its own that owns
/// what the leader writes, exactly the rights on the four policy kinds and
/// the read of that role's own uid; off grants nothing on them anywhere.
#[test]
fn in_process_rbac_follows_the_mode() {
    let kinds = [
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings",
    ];
    let m = render(&[]);
    assert_eq!(
        rules_of(m.one("ClusterRole", "mrguard-in-process")),
        [
            rule(
                &["admissionregistration.k8s.io"],
                &kinds,
                &[],
                &["get", "list", "watch", "create", "update", "patch", "delete"]
            ),
            rule(
                &["rbac.authorization.k8s.io"],
                &["clusterroles"],
                &["mrguard-in-process"],
                &["get"]
            ),
        ]
    );
    let b = m.one("ClusterRoleBinding", "mrguard-in-process");
    assert_eq!(b["roleRef"]["name"], "mrguard-in-process");
    assert_eq!(b["subjects"][0]["name"], "mrguard");

    // `off` unquoted in a values file is YAML 1.1's false: off too.
    let off = render(&["--set", "admission.inProcess=false"]);
    for kind in ["ClusterRole", "Role"] {
        for r in off.all(kind) {
            for (_, resources, _, _) in rules_of(r) {
                for k in kinds {
                    assert!(
                        !resources.contains(k),
                        "{kind} grants {k} with the mode off"
                    );
                }
            }
        }
    }
    assert!(off
        .all("ClusterRole")
        .iter()
        .all(|r| r["metadata"]["name"] != "mrguard-in-process"));
    let c = &off.one("Deployment", "mrguard")["spec"]["template"]["spec"]["containers"][0];
    let args = strs(&c["args"]);
    assert!(args.contains(&"--in-process=off".to_string()), "{args:?}");
    assert!(
        !args.iter().any(|a| a.starts_with("--in-process-")),
        "{args:?}"
    );
}

/// The validating webhook fails open with the mode on, closed with it off,
/// and as set when set; the configuration's other entries keep their own,
/// and the alert's description and the install notes say which applies.
#[test]
fn the_validating_failure_policy_follows_the_mode_unless_set() {
    // Every entry but validate.mrguard.io, with its failurePolicy.
    let others = |m: &Manifests| -> Vec<(String, String)> {
        m.only("ValidatingWebhookConfiguration")["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["name"] != "validate.mrguard.io")
            .map(|w| {
                (
                    w["name"].as_str().unwrap().to_string(),
                    w["failurePolicy"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let baseline = others(&render(&["--set", "admission.inProcess=off"]));
    assert!(
        baseline.iter().any(|(n, _)| n == "teardown.mrguard.io"),
        "{baseline:?}"
    );
    for (args, want) in [
        (vec![], "Ignore"),
        (vec!["--set", "admission.inProcess=off"], "Fail"),
        (
            vec!["--set", "webhooks.validating.failurePolicy=Fail"],
            "Fail",
        ),
        (
            vec![
                "--set",
                "admission.inProcess=off",
                "--set",
                "webhooks.validating.failurePolicy=Ignore",
            ],
            "Ignore",
        ),
    ] {
        let m = render(&args);
        assert_eq!(
            webhook(&m, "ValidatingWebhookConfiguration", "validate.mrguard.io")["failurePolicy"],
            want,
            "{args:?}"
        );
        assert_eq!(others(&m), baseline, "{args:?}");

        let with_alerts =
            render(&[&args[..], &["--set", "metrics.prometheusRule.enabled=true"]].concat());
        let rule = with_alerts.only("PrometheusRule")["spec"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap())
            .find(|r| r["alert"] == "MrguardWebhookErrors")
            .unwrap()
            .clone();
        let description = rule["annotations"]["description"].as_str().unwrap();
        let says = if want == "Fail" {
            "the validating webhook (Fail) rejects those writes."
        } else {
            "the validating webhook (Ignore) admits those writes unjudged by it."
        };
        assert!(description.ends_with(says), "{args:?}: {description}");

        // NOTES.txt, which `helm template` leaves out.
        let notes = helm(
            &[
                &[
                    "install",
                    RELEASE,
                    chart().to_str().unwrap(),
                    "-n",
                    NS,
                    "--dry-run=client",
                ][..],
                &args[..],
            ]
            .concat(),
        );
        let notes = String::from_utf8_lossy(&notes.stdout).into_owned();
        assert!(
            notes.contains(&format!("the validating webhook has\nfailurePolicy {want}")),
            "{args:?}: {notes}"
        );
        assert_eq!(
            notes.contains("--set webhooks.validating.failurePolicy=Ignore"),
            want == "Fail",
            "{args:?}: the softer step is offered only when failing closed"
        );
        assert_eq!(
            notes.contains("--set admission.inProcess=off"),
            !args.contains(&"admission.inProcess=off"),
            "{args:?}: turning the mode off is offered only when it is on"
        );
    }
    let e = helm(&[
        "template",
        "mrguard",
        chart().to_str().unwrap(),
        "--set",
        "admission.inProcess=on",
    ]);
    assert!(!e.status.success());
    assert!(
        String::from_utf8_lossy(&e.stderr).contains("inProcess"),
        "{e:?}"
    );
}

#[test]
fn audit_modes_and_switches() {
    let m = render(&["--set", "rbac.audit.mode=crossplaneView"]);
    let r = m.one("ClusterRole", "mrguard-audit");
    assert!(
        r.get("rules").is_none(),
        "the aggregation controller owns the rules"
    );
    assert_eq!(
        r["aggregationRule"]["clusterRoleSelectors"],
        json!([{"matchLabels": {"rbac.crossplane.io/aggregate-to-view": "true"}}])
    );

    let m = render(&["--set", "rbac.audit.mode=all"]);
    assert_eq!(
        rules_of(m.one("ClusterRole", "mrguard-audit")),
        [rule(&["*"], &["*"], &[], &["list", "watch"])]
    );

    let m = render(&["--set", "rbac.audit.enabled=false"]);
    assert_eq!(
        m.all("ClusterRole").len(),
        2,
        "the core role and in-process's"
    );
    assert_eq!(m.all("ClusterRoleBinding").len(), 2);

    let m = render(&[
        "--set",
        "rbac.create=false",
        "--set",
        "serviceAccount.name=existing",
    ]);
    for kind in ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"] {
        assert!(
            m.all(kind).is_empty(),
            "{kind} rendered with rbac.create=false"
        );
    }
    assert_eq!(
        m.only("Deployment")["spec"]["template"]["spec"]["serviceAccountName"],
        "existing"
    );
}

#[test]
fn the_schema_rejects_values_the_api_server_would() {
    let chart = chart();
    for (set, want) in [
        (
            "webhooks.validating.failurePolicy=Sometimes",
            "failurePolicy",
        ),
        ("webhooks.mutating.timeoutSeconds=31", "timeoutSeconds"),
        ("webhooks.validating.timeoutSeconds=0", "timeoutSeconds"),
        (
            "webhooks.mutating.reinvocationPolicy=Always",
            "reinvocationPolicy",
        ),
        ("rbac.audit.mode=everything", "mode"),
        ("webhooks.failurePolicy=Ignore", "failurePolicy"),
        ("replicaCount=0", "replicaCount"),
        ("controller.auditInterval=often", "auditInterval"),
    ] {
        let out = helm(&["template", "x", chart.to_str().unwrap(), "--set", set]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{set} accepted");
        assert!(err.contains(want), "{set}: {err}");
    }
}
