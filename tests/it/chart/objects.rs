//! The rendered objects: which ones, the Deployment (replicas, hardening,
//! probes), the Services and ServiceMonitor, the webhook configurations
//! and their failure policies, the high-availability-off values, and the
//! names the flags, RBAC, Service and webhooks share.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::{
    args_of, container, flag, port_named, render, render_ha_off, render_in, set, strs, webhook,
    BINARY,
};
use crate::support::helm::{NS, RELEASE};

#[test]
fn default_install_renders_every_object_with_zero_values() {
    let m = render(&[]);
    let want: BTreeMap<String, usize> = [
        // The core role, the audit's and admission.inProcess auto's.
        ("ClusterRole", 3),
        ("ClusterRoleBinding", 3),
        ("ConfigMap", 1),
        ("Deployment", 1),
        ("MutatingWebhookConfiguration", 1),
        ("PodDisruptionBudget", 1),
        ("Role", 1),
        ("RoleBinding", 1),
        ("Secret", 1),
        ("Service", 2),
        ("ServiceAccount", 1),
        ("ValidatingWebhookConfiguration", 1),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_string(), n))
    .collect();
    // The TLS Secret, empty (the controller fills it); no ServiceMonitor or
    // NetworkPolicy by default.
    assert_eq!(m.kinds(), want);

    let cluster_scoped = [
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ];
    for o in &m.0 {
        let kind = o["kind"].as_str().unwrap();
        if cluster_scoped.contains(&kind) {
            assert!(
                o["metadata"].get("namespace").is_none(),
                "{kind} has a namespace"
            );
        } else {
            assert_eq!(o["metadata"]["namespace"], NS, "{kind} namespace");
        }
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/name"], "mrguard",
            "{kind}"
        );
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/instance"], RELEASE,
            "{kind}"
        );
    }
}

#[test]
fn deployment_is_highly_available_hardened_and_probed() {
    let m = render(&[]);
    let d = m.one("Deployment", "mrguard");
    let spec = &d["spec"];
    assert_eq!(spec["replicas"], 2);
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
    let pod = &spec["template"]["spec"];
    let selector = &spec["selector"]["matchLabels"];
    for (k, v) in selector.as_object().unwrap() {
        assert_eq!(
            &spec["template"]["metadata"]["labels"][k], v,
            "pod label {k}"
        );
    }

    // PDB over the same pods.
    let pdb = m.one("PodDisruptionBudget", "mrguard");
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], selector);

    // Soft anti-affinity over nodes, soft spread over zones.
    let anti = &pod["affinity"]["podAntiAffinity"];
    assert!(anti
        .get("requiredDuringSchedulingIgnoredDuringExecution")
        .is_none());
    let preferred = anti["preferredDuringSchedulingIgnoredDuringExecution"]
        .as_array()
        .unwrap();
    assert_eq!(preferred.len(), 1);
    assert_eq!(
        preferred[0]["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert_eq!(
        &preferred[0]["podAffinityTerm"]["labelSelector"]["matchLabels"],
        selector
    );
    let spread = pod["topologySpreadConstraints"].as_array().unwrap();
    assert_eq!(spread.len(), 1);
    assert_eq!(spread[0]["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(spread[0]["whenUnsatisfiable"], "ScheduleAnyway");
    assert_eq!(spread[0]["maxSkew"], 1);
    assert_eq!(&spread[0]["labelSelector"]["matchLabels"], selector);

    // Security context, pod and container.
    let psc = &pod["securityContext"];
    assert_eq!(psc["runAsNonRoot"], true);
    assert_eq!(psc["runAsUser"], 65532);
    assert_eq!(psc["seccompProfile"]["type"], "RuntimeDefault");
    let c = container(&m);
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["runAsUser"], 65532);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(strs(&sc["capabilities"]["drop"]), ["ALL"]);
    assert!(sc["capabilities"].get("add").is_none());
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_ne!(sc["privileged"], true);

    // Resources: requests and a memory limit, no CPU limit.
    let res = &c["resources"];
    assert!(res["requests"]["cpu"].is_string() && res["requests"]["memory"].is_string());
    assert!(res["limits"]["memory"].is_string());
    assert!(
        res["limits"].get("cpu").is_none(),
        "no CPU limit by default: {res}"
    );

    // Probes on the HTTPS port.
    assert_eq!(port_named(&m, "https"), 9443);
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let g = &c[probe]["httpGet"];
        assert_eq!(g["path"], path, "{probe}");
        assert_eq!(g["port"], "https", "{probe}");
        assert_eq!(g["scheme"], "HTTPS", "{probe}");
        assert!(c[probe]["periodSeconds"].as_u64().unwrap() > 0);
    }

    // The command, the agreed flags, and the namespace from the downward API.
    assert_eq!(strs(&c["command"]), [BINARY, "serve"]);
    let args = args_of(&m);
    assert_eq!(
        args,
        [
            "--controller",
            "--namespace=$(POD_NAMESPACE)",
            "--crossplane-namespace=crossplane-system",
            "--service-name=mrguard",
            "--tls-secret-name=mrguard-tls",
            "--mutating-webhook-name=mrguard",
            "--validating-webhook-name=mrguard",
            "--lease-name=mrguard-leader",
            "--audit-interval=10m",
            "--in-process=auto",
            "--in-process-owner=mrguard-in-process",
            "--in-process-namespace-selector={\"matchExpressions\":[{\"key\":\"kubernetes.io/metadata.name\",\"operator\":\"NotIn\",\"values\":[\"kube-system\",\"crossplane-system\"]}]}",
            "--config=/etc/mrguard/config.yaml",
            "--listen=0.0.0.0:9443",
            "--metrics-listen=0.0.0.0:8080",
        ]
    );
    let env = c["env"].as_array().unwrap();
    let pod_ns = env.iter().find(|e| e["name"] == "POD_NAMESPACE").unwrap();
    assert_eq!(
        pod_ns["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(port_named(&m, "metrics"), 8080);

    // The ConfigMap as a directory (subPath would freeze it), and no
    // certificate volume: replicas read the TLS Secret through the API.
    let mounts = c["volumeMounts"].as_array().unwrap();
    let cfg = mounts.iter().find(|v| v["name"] == "config").unwrap();
    assert_eq!(cfg["mountPath"], "/etc/mrguard");
    assert!(cfg.get("subPath").is_none());
    let volumes = pod["volumes"].as_array().unwrap();
    let cfg_vol = volumes.iter().find(|v| v["name"] == "config").unwrap();
    assert_eq!(cfg_vol["configMap"]["name"], "mrguard");
    for v in volumes {
        assert!(
            v.get("secret").is_none() && v.get("projected").is_none(),
            "{v}"
        );
    }
    // Writable paths only where mounted.
    for v in volumes.iter().filter(|v| v["name"] != "config") {
        assert!(v.get("emptyDir").is_some(), "{v}");
    }
    // The reload is live: no checksum annotation rolls the pods.
    let annotations = &spec["template"]["metadata"]["annotations"];
    assert!(
        annotations
            .as_object()
            .is_none_or(|a| a.keys().all(|k| !k.contains("checksum"))),
        "{annotations}"
    );
    assert_eq!(pod["serviceAccountName"], "mrguard");
}

#[test]
fn the_webhook_service_exposes_only_443_and_metrics_have_their_own_service() {
    let m = render(&[]);
    let svc = m.one("Service", "mrguard");
    let ports = svc["spec"]["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1, "only the webhook port: {ports:?}");
    let https = &ports[0];
    assert_eq!(https["name"], "https");
    assert_eq!(https["port"], 443);
    assert_eq!(https["targetPort"], "https");
    assert_eq!(port_named(&m, "https"), 9443);
    assert!(svc["metadata"]["annotations"]
        .get("prometheus.io/scrape")
        .is_none());
    let msvc = m.one("Service", "mrguard-metrics");
    let ports = msvc["spec"]["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0]["name"], "metrics");
    assert_eq!(ports[0]["port"], 8080);
    assert_eq!(ports[0]["targetPort"], "metrics");
    let a = &msvc["metadata"]["annotations"];
    assert_eq!(a["prometheus.io/scrape"], "true");
    assert_eq!(a["prometheus.io/port"], "8080");
    assert_eq!(a["prometheus.io/path"], "/metrics");
    assert_eq!(a["prometheus.io/scheme"], "http");
    for s in [svc, msvc] {
        assert_eq!(
            &s["spec"]["selector"],
            &m.only("Deployment")["spec"]["selector"]["matchLabels"]
        );
    }
    assert!(!args_of(&m).contains(&"--metrics-tls".to_string()));
}

#[test]
fn metrics_over_tls_are_scraped_with_the_webhook_ca() {
    let m = render(&[
        "--set",
        "metrics.tls.enabled=true",
        "--set",
        "metrics.serviceMonitor.enabled=true",
    ]);
    assert!(args_of(&m).contains(&"--metrics-tls".to_string()));
    let msvc = m.one("Service", "mrguard-metrics");
    assert_eq!(
        msvc["metadata"]["annotations"]["prometheus.io/scheme"],
        "https"
    );
    let ep = &m.one("ServiceMonitor", "mrguard")["spec"]["endpoints"][0];
    assert_eq!(ep["scheme"], "https");
    assert_eq!(
        ep["tlsConfig"]["ca"]["secret"]["name"],
        flag(&m, "tls-secret-name").as_str()
    );
    assert_eq!(ep["tlsConfig"]["ca"]["secret"]["key"], "ca.crt");
    assert_eq!(ep["tlsConfig"]["serverName"], format!("mrguard.{NS}.svc"));
}

fn excluded_namespaces(hook: &Value) -> BTreeSet<String> {
    let exprs = hook["namespaceSelector"]["matchExpressions"]
        .as_array()
        .unwrap();
    let e: Vec<_> = exprs
        .iter()
        .filter(|e| e["key"] == "kubernetes.io/metadata.name")
        .collect();
    assert_eq!(e.len(), 1);
    assert_eq!(e[0]["operator"], "NotIn");
    set(&e[0]["values"])
}

/// Compositions reach /validate through a second webhook with fixed
/// rules that fails open: its rule only warns (docs/compositions.md).
#[test]
fn compositions_have_a_webhook_of_their_own_that_fails_open() {
    let m = render(&[]);
    let hooks = m.only("ValidatingWebhookConfiguration")["webhooks"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(
        hooks.len(),
        6,
        "the admission webhook, Compositions, three teardown entries, MRAPs"
    );
    let c = &hooks[1];
    assert_eq!(c["name"], "compositions.validate.mrguard.io");
    assert_eq!(c["clientConfig"]["service"]["path"], "/validate");
    assert!(c["clientConfig"].get("caBundle").is_none());
    assert_eq!(c["failurePolicy"], "Ignore");
    assert_eq!(
        c["rules"],
        json!([{"apiGroups": ["apiextensions.crossplane.io"], "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"], "resources": ["compositions"], "scope": "Cluster"}])
    );
    let off = render(&["--set", "webhooks.compositions.enabled=false"]);
    let names: Vec<Value> = off.only("ValidatingWebhookConfiguration")["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].clone())
        .collect();
    assert!(
        !names.contains(&json!("compositions.validate.mrguard.io")),
        "{names:?}"
    );
    assert_eq!(names.len(), 5, "{names:?}");
}

/// MRAPs reach /validate through a webhook of their own, last, with fixed
/// rules, that always fails open (docs/activation.md).
#[test]
fn activation_policies_have_a_webhook_of_their_own_that_fails_open() {
    let m = render(&["--set", "webhooks.activationPolicies.timeoutSeconds=7"]);
    let hooks = m.only("ValidatingWebhookConfiguration")["webhooks"]
        .as_array()
        .unwrap()
        .clone();
    let a = hooks.last().unwrap();
    assert_eq!(a["name"], "activationpolicies.validate.mrguard.io");
    assert_eq!(a["clientConfig"]["service"]["path"], "/validate");
    assert!(a["clientConfig"].get("caBundle").is_none());
    assert_eq!(a["failurePolicy"], "Ignore");
    assert_eq!(a["timeoutSeconds"], 7);
    assert_eq!(
        a["rules"],
        json!([{"apiGroups": ["apiextensions.crossplane.io"], "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"], "resources": ["managedresourceactivationpolicies"],
            "scope": "Cluster"}])
    );
    let off = render(&["--set", "webhooks.activationPolicies.enabled=false"]);
    let names: Vec<Value> = off.only("ValidatingWebhookConfiguration")["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].clone())
        .collect();
    assert!(
        !names.contains(&json!("activationpolicies.validate.mrguard.io")),
        "{names:?}"
    );
    assert_eq!(names.len(), 5, "{names:?}");
}

#[test]
fn webhook_configurations_have_the_agreed_shape_and_policies() {
    let m = render(&[]);
    let mutating = webhook(&m, "MutatingWebhookConfiguration", "mutate.mrguard.io");
    let validating = webhook(&m, "ValidatingWebhookConfiguration", "validate.mrguard.io");
    for (hook, path) in [(mutating, "/mutate"), (validating, "/validate")] {
        assert_eq!(strs(&hook["admissionReviewVersions"]), ["v1"]);
        assert_eq!(hook["sideEffects"], "None");
        let svc = &hook["clientConfig"]["service"];
        assert_eq!(svc["name"], "mrguard");
        assert_eq!(svc["namespace"], NS);
        assert_eq!(svc["path"], path);
        assert_eq!(svc["port"], 443);
        // The controller injects the CA; the chart has none to give on install.
        assert!(hook["clientConfig"].get("caBundle").is_none());
        assert_eq!(
            hook["rules"],
            json!([]),
            "initial rules from values (empty)"
        );
        assert_eq!(
            excluded_namespaces(hook),
            BTreeSet::from(["kube-system".to_string(), NS.to_string()])
        );
        assert!(hook.get("objectSelector").is_none());
    }
    assert_eq!(mutating["failurePolicy"], "Ignore");
    assert_eq!(mutating["timeoutSeconds"], 2);
    assert_eq!(mutating["reinvocationPolicy"], "IfNeeded");
    // admission.inProcess auto: the rules that must never be skipped run in
    // the API server, so the webhook left with the stateful ones fails open.
    assert_eq!(validating["failurePolicy"], "Ignore");
    assert_eq!(validating["timeoutSeconds"], 5);
    assert!(validating.get("reinvocationPolicy").is_none());

    // The release namespace follows the release.
    let other = render_in("mrguard", "platform", &[]);
    let hook = webhook(
        &other,
        "ValidatingWebhookConfiguration",
        "validate.mrguard.io",
    );
    assert!(excluded_namespaces(hook).contains("platform"));
    assert!(!excluded_namespaces(hook).contains(NS));
}

/// The teardown guard's entry must never hurt the cluster: it fails open
/// whatever the validating webhook's policy, matches only DELETE of
/// namespaces, and follows the same selectors (the release namespace and
/// kube-system are never judged).
#[test]
fn the_teardown_entry_fails_open_and_matches_only_namespace_deletes() {
    for m in [render(&[]), render_ha_off()] {
        let cfg = m.only("ValidatingWebhookConfiguration");
        let hooks = cfg["webhooks"].as_array().unwrap();
        assert_eq!(
            hooks.len(),
            6,
            "the admission webhook, Compositions, three teardown entries, MRAPs"
        );
        let t = &hooks[2];
        assert_eq!(t["name"], "teardown.mrguard.io");
        assert_eq!(t["failurePolicy"], "Ignore");
        assert_eq!(t["timeoutSeconds"], 2);
        assert_eq!(t["sideEffects"], "None");
        assert_eq!(t["clientConfig"]["service"]["path"], "/validate");
        assert_eq!(
            t["rules"],
            json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"],
                    "resources": ["namespaces"], "scope": "Cluster"}])
        );
        assert_eq!(t["namespaceSelector"], hooks[0]["namespaceSelector"]);
        assert_eq!(t.get("objectSelector"), hooks[0].get("objectSelector"));
        // Credentials Secrets: crossplane-system (the release namespace
        // here) is judged; only kube-system is left out.
        let s = &hooks[3];
        assert_eq!(s["name"], "teardown-secrets.mrguard.io");
        assert_eq!(s["failurePolicy"], "Ignore");
        assert_eq!(
            s["rules"],
            json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"],
                    "resources": ["secrets"], "scope": "Namespaced"}])
        );
        let excluded = excluded_namespaces(s);
        assert!(excluded.contains("kube-system"));
        assert!(!excluded.contains(NS), "{excluded:?}");
        assert_eq!(s.get("objectSelector"), hooks[0].get("objectSelector"));
        let p = &hooks[4];
        assert_eq!(p["name"], "teardown-providers.mrguard.io");
        assert_eq!(p["failurePolicy"], "Ignore");
        assert_eq!(
            p["rules"],
            json!([{"apiGroups": ["pkg.crossplane.io"], "apiVersions": ["v1"], "operations": ["DELETE"],
                    "resources": ["providers"], "scope": "Cluster"}])
        );
    }
    let off = render(&["--set", "webhooks.teardown.enabled=false"]);
    let cfg = off.only("ValidatingWebhookConfiguration");
    let names: Vec<&str> = cfg["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "validate.mrguard.io",
            "compositions.validate.mrguard.io",
            "activationpolicies.validate.mrguard.io"
        ]
    );
}

#[test]
fn ha_off_values_give_one_replica_a_service_monitor_and_custom_policies() {
    let m = render_ha_off();
    assert!(
        m.all("PodDisruptionBudget").is_empty(),
        "no PDB for one replica"
    );
    let d = m.one("Deployment", "guard");
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(
        d["spec"]["template"]["spec"]["priorityClassName"],
        "system-cluster-critical"
    );
    let c = container(&m);
    assert_eq!(
        c["resources"]["limits"]["cpu"], "500m",
        "a CPU limit when asked for"
    );
    assert_eq!(flag(&m, "audit-interval"), "30s");
    assert_eq!(flag(&m, "metrics-listen"), "0.0.0.0:9090");
    assert_eq!(port_named(&m, "metrics"), 9090);
    assert!(args_of(&m).contains(&"--max-concurrent-requests=64".to_string()));
    let env = c["env"].as_array().unwrap();
    let fmt = env
        .iter()
        .find(|e| e["name"] == "MRGUARD_LOG_FORMAT")
        .unwrap();
    assert_eq!(fmt["value"], "text");

    let svc = m.one("Service", "guard-metrics");
    assert!(
        svc["metadata"]["annotations"]
            .get("prometheus.io/scrape")
            .is_none(),
        "annotations off when asked"
    );
    let sm = m.one("ServiceMonitor", "guard");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(strs(&sm["spec"]["namespaceSelector"]["matchNames"]), [NS]);
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "ServiceMonitor selects the Service"
        );
    }
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(ep["port"], "metrics");
    assert_eq!(ep["path"], "/metrics");
    assert_eq!(ep["interval"], "15s");
    let metrics_port = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "metrics")
        .unwrap();
    assert_eq!(metrics_port["port"], 9090);

    let mutating = webhook(&m, "MutatingWebhookConfiguration", "mutate.mrguard.io");
    let validating = webhook(&m, "ValidatingWebhookConfiguration", "validate.mrguard.io");
    assert_eq!(mutating["failurePolicy"], "Fail");
    assert_eq!(mutating["timeoutSeconds"], 3);
    assert_eq!(mutating["reinvocationPolicy"], "Never");
    assert_eq!(validating["failurePolicy"], "Ignore");
    assert_eq!(validating["timeoutSeconds"], 10);
    let rules = json!([{
        "apiGroups": ["ec2.aws.upbound.io"], "apiVersions": ["v1beta1"],
        "operations": ["CREATE", "UPDATE"], "resources": ["vpcs"], "scope": "Cluster"
    }]);
    for hook in [mutating, validating] {
        assert_eq!(hook["rules"], rules);
        assert_eq!(hook["clientConfig"]["service"]["name"], "guard");
        assert_eq!(
            excluded_namespaces(hook),
            ["kube-system", NS, "team-sandbox"].map(String::from).into()
        );
        assert_eq!(
            hook["namespaceSelector"]["matchLabels"]["mrguard.io/enabled"],
            "true"
        );
        assert_eq!(
            hook["objectSelector"]["matchExpressions"][0]["operator"],
            "DoesNotExist"
        );
    }
}

#[test]
fn names_agree_between_flags_rbac_service_and_webhooks() {
    for (m, base) in [(render(&[]), "mrguard"), (render_ha_off(), "guard")] {
        let svc = m.one("Service", base);
        assert_eq!(svc["metadata"]["name"], base);
        assert_eq!(flag(&m, "service-name"), base);
        assert_eq!(flag(&m, "namespace"), "$(POD_NAMESPACE)");
        for (kind, flag_name) in [
            ("MutatingWebhookConfiguration", "mutating-webhook-name"),
            ("ValidatingWebhookConfiguration", "validating-webhook-name"),
        ] {
            let cfg = m.only(kind);
            assert_eq!(cfg["metadata"]["name"], flag(&m, flag_name).as_str());
            let svc_ref = &cfg["webhooks"][0]["clientConfig"]["service"];
            assert_eq!(svc_ref["name"], base);
            assert_eq!(svc_ref["namespace"], NS);
            let port = svc["spec"]["ports"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["port"] == svc_ref["port"])
                .unwrap_or_else(|| panic!("{kind} points at a port the Service lacks"));
            assert_eq!(port["targetPort"], "https");
        }
        assert_eq!(
            flag(&m, "listen"),
            format!("0.0.0.0:{}", port_named(&m, "https"))
        );

        // RBAC is restricted to exactly the objects the flags name.
        let role = m.one("Role", base);
        let named = |resource: &str| -> BTreeSet<String> {
            role["rules"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| set(&r["resources"]).contains(resource))
                .filter_map(|r| r.get("resourceNames"))
                .flat_map(strs)
                .collect()
        };
        assert_eq!(named("secrets"), [flag(&m, "tls-secret-name")].into());
        assert_eq!(named("leases"), [flag(&m, "lease-name")].into());
        let core = m.one("ClusterRole", base);
        let hooks: BTreeSet<String> = core["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["apiGroups"][0] == "admissionregistration.k8s.io")
            .flat_map(|r| strs(&r["resourceNames"]))
            .collect();
        assert_eq!(
            hooks,
            [
                flag(&m, "mutating-webhook-name"),
                flag(&m, "validating-webhook-name")
            ]
            .into()
        );

        // The ConfigMap is the file --config names.
        let config = flag(&m, "config");
        let (dir, file) = config.rsplit_once('/').unwrap();
        let c = container(&m);
        let mount = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["mountPath"] == dir)
            .unwrap();
        let vol = m.only("Deployment")["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        let cm = m.one("ConfigMap", vol["configMap"]["name"].as_str().unwrap());
        assert!(cm["data"][file].is_string(), "ConfigMap has {file}");

        // Every binding binds a rendered role to the rendered ServiceAccount.
        let sa = m.only("ServiceAccount");
        for kind in ["ClusterRoleBinding", "RoleBinding"] {
            for b in m.all(kind) {
                let role_kind = b["roleRef"]["kind"].as_str().unwrap();
                m.one(role_kind, b["roleRef"]["name"].as_str().unwrap());
                assert_eq!(
                    b["subjects"],
                    json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NS}])
                );
            }
        }
    }
}
