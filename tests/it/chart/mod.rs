//! The Helm chart (charts/mrguard) and the Dockerfile, checked with a real
//! helm binary: `helm lint`, `helm template` with the default values and
//! with tests/fixtures/values-ha-off.yaml, the rendered YAML parsed and held
//! to the chart's requirements (RBAC, probes, security context, HA), and `helm template --dry-run=server`
//! against a fake API server to prove that an upgrade carries the live
//! caBundle and rules over.
//!
//! helm comes from $HELM_BIN or .tools/bin/helm; `scripts/install-tools.sh`
//! installs the latter. Without it these tests fail, on purpose.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::support::bin::mrguard;
use crate::support::helm::{self, chart, helm, helm_with_kubeconfig, ok, NS, RELEASE};
use crate::support::{self, fixtures, root};

const BINARY: &str = "/usr/local/bin/mrguard";

// ---------------------------------------------------------------- helm

/// The objects of a rendered chart.
struct Manifests(Vec<Value>);

impl Manifests {
    fn all(&self, kind: &str) -> Vec<&Value> {
        self.0.iter().filter(|o| o["kind"] == kind).collect()
    }

    fn one(&self, kind: &str, name: &str) -> &Value {
        let found: Vec<_> = self
            .all(kind)
            .into_iter()
            .filter(|o| o["metadata"]["name"] == name)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "expected one {kind} {name}, found {}",
            found.len()
        );
        found[0]
    }

    fn only(&self, kind: &str) -> &Value {
        let found = self.all(kind);
        assert_eq!(found.len(), 1, "expected one {kind}, found {}", found.len());
        found[0]
    }

    fn kinds(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for o in &self.0 {
            *m.entry(o["kind"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        m
    }
}

fn render_in(release: &str, ns: &str, extra: &[&str]) -> Manifests {
    Manifests(helm::template(release, ns, extra))
}

fn render(extra: &[&str]) -> Manifests {
    render_in(RELEASE, NS, extra)
}

/// The values file of an install with high availability off.
fn ha_off() -> String {
    fixtures::path("values-ha-off.yaml")
}

fn render_ha_off() -> Manifests {
    render(&["-f", &ha_off()])
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| {
            s.as_str()
                .unwrap_or_else(|| panic!("not a string: {s}"))
                .to_string()
        })
        .collect()
}

fn set(v: &Value) -> BTreeSet<String> {
    strs(v).into_iter().collect()
}

fn container(m: &Manifests) -> &Value {
    let containers = m.only("Deployment")["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 1);
    &containers[0]
}

fn args_of(m: &Manifests) -> Vec<String> {
    strs(&container(m)["args"])
}

/// The value of `--name=value` in the container's arguments.
fn flag(m: &Manifests, name: &str) -> String {
    let prefix = format!("--{name}=");
    let found: Vec<String> = args_of(m)
        .into_iter()
        .filter_map(|a| a.strip_prefix(&prefix).map(str::to_string))
        .collect();
    assert_eq!(found.len(), 1, "--{name} appears {} times", found.len());
    found[0].clone()
}

fn port_named(m: &Manifests, name: &str) -> u64 {
    let ports = container(m)["ports"].as_array().unwrap();
    let p: Vec<_> = ports.iter().filter(|p| p["name"] == name).collect();
    assert_eq!(p.len(), 1, "container port {name}");
    p[0]["containerPort"].as_u64().unwrap()
}

// ---------------------------------------------------------------- lint

#[test]
fn helm_lint_is_clean_with_both_values_files() {
    let chart = chart();
    let c = chart.to_str().unwrap();
    let ha_off = ha_off();
    for extra in [&[][..], &["-f", ha_off.as_str()][..]] {
        let mut args = vec!["lint", "--strict", c, "-n", NS];
        args.extend_from_slice(extra);
        let out = ok(&helm(&args), "helm lint");
        assert!(out.contains("0 chart(s) failed"), "{out}");
        assert!(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            "{out}"
        );
    }
}

// ---------------------------------------------------------------- objects

#[test]
fn default_install_renders_every_object_with_zero_values() {
    let m = render(&[]);
    let want: BTreeMap<String, usize> = [
        ("ClusterRole", 2),
        ("ClusterRoleBinding", 2),
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

fn webhook<'a>(m: &'a Manifests, kind: &str, name: &str) -> &'a Value {
    let cfg = m.only(kind);
    let hooks = cfg["webhooks"].as_array().unwrap();
    // The admission webhook comes first: the controller and the harness
    // look for it by name and manage its rules; the others (Compositions,
    // the teardown guard) have fixed rules.
    assert_eq!(hooks[0]["name"], name);
    &hooks[0]
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
    assert_eq!(validating["failurePolicy"], "Fail");
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

// ---------------------------------------------------------------- RBAC

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
    use mrguard_policy::cel::{CelProgram, Scope};
    let m = render(&["--kube-version", "1.30.0"]);
    let program = |kind: &str, name: &str| {
        let conds = webhook(&m, kind, name)["matchConditions"].clone();
        let expr = conds[0]["expression"].as_str().unwrap().to_string();
        assert_eq!(conds[0]["name"], "is-managed-resource");
        // As the API server checks a webhook's match condition.
        use mrguard_policy::cel::typecheck::{check, CelType, TypeEnv};
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
    use mrguard_policy::cel::{CelProgram, Scope};
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
        use mrguard_policy::cel::typecheck::{check, CelType, TypeEnv};
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
    assert_eq!(m.all("ClusterRole").len(), 1);
    assert_eq!(m.all("ClusterRoleBinding").len(), 1);

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

// ---------------------------------------------------------------- config

fn configmap_config(m: &Manifests) -> String {
    m.only("ConfigMap")["data"]["config.yaml"]
        .as_str()
        .unwrap()
        .to_string()
}

fn config_check(text: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, text).unwrap();
    mrguard()
        .args(["config", "check"])
        .arg(&file)
        .output()
        .unwrap()
}

#[test]
fn the_configmap_config_passes_mrguard_config_check() {
    for m in [render(&[]), render_ha_off()] {
        let text = configmap_config(&m);
        let out = config_check(&text);
        assert!(
            out.status.success(),
            "config check failed:\n{}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Neither exempts Crossplane core.
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("Crossplane's own service account"), "{err}");
    }
    // The check can fail: a typo in a key is caught.
    let bad = render(&["--set", "config.rulez.paused-delete=Warn"]);
    let out = config_check(&configmap_config(&bad));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rulez"));

    let ha = configmap_config(&render_ha_off());
    let v: Value = serde_saphyr::from_str(&ha).unwrap();
    assert_eq!(v["providerConfig"]["defaultName"], "aws-default");
    assert_eq!(
        v["resources"][0]["celRules"][0]["name"],
        "require-team-label"
    );
}

#[test]
fn the_default_config_value_is_the_builtin_configuration() {
    let out = mrguard().args(["config", "default"]).output().unwrap();
    assert!(out.status.success());
    let builtin: Value = serde_saphyr::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let rendered: Value = serde_saphyr::from_str(&configmap_config(&render(&[]))).unwrap();
    assert_eq!(
        rendered, builtin,
        "values.yaml `config` drifted from crates/policy/src/config/builtin.yaml"
    );
}

/// Flags the chart passes that the controller work (issue "companion
/// controller") adds to `mrguard serve`. Remove each once it lands.
const PENDING_CONTROLLER_FLAGS: &[&str] = &[];

#[test]
fn every_flag_the_chart_passes_is_known_to_mrguard_serve() {
    let out = mrguard().args(["serve", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let known = |f: &str| {
        help.lines()
            .any(|l| l.trim_start().split([' ', ',']).any(|w| w == f))
    };
    assert!(
        known("--listen") && known("--config"),
        "help parsing works:\n{help}"
    );
    for m in [render(&[]), render_ha_off()] {
        for arg in args_of(&m) {
            let name = arg.split('=').next().unwrap();
            if known(name) {
                continue;
            }
            assert!(
                PENDING_CONTROLLER_FLAGS.contains(&name),
                "the chart passes {arg}, which `mrguard serve` does not know"
            );
        }
    }
    let env_names = ["MRGUARD_LOG", "MRGUARD_LOG_FORMAT"];
    let top = mrguard().arg("--help").output().unwrap();
    let top = String::from_utf8(top.stdout).unwrap();
    for e in env_names {
        assert!(
            top.contains(e),
            "{e} is not an environment variable of mrguard"
        );
    }
}

// ---------------------------------------------------------------- upgrade

/// A fake kube-apiserver: enough discovery for helm to map the chart's
/// kinds, the live objects it is given, and 404 for everything else.
struct FakeApiServer {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

/// (plural, kind, namespaced)
type Resource = (&'static str, &'static str, bool);

fn discovery(path: &str) -> Option<Value> {
    let groups: &[(&str, &[Resource])] = &[
        (
            "admissionregistration.k8s.io",
            &[
                (
                    "mutatingwebhookconfigurations",
                    "MutatingWebhookConfiguration",
                    false,
                ),
                (
                    "validatingwebhookconfigurations",
                    "ValidatingWebhookConfiguration",
                    false,
                ),
            ],
        ),
        ("apps", &[("deployments", "Deployment", true)]),
        (
            "policy",
            &[("poddisruptionbudgets", "PodDisruptionBudget", true)],
        ),
        (
            "rbac.authorization.k8s.io",
            &[
                ("clusterroles", "ClusterRole", false),
                ("clusterrolebindings", "ClusterRoleBinding", false),
                ("roles", "Role", true),
                ("rolebindings", "RoleBinding", true),
            ],
        ),
        (
            "monitoring.coreos.com",
            &[("servicemonitors", "ServiceMonitor", true)],
        ),
    ];
    let core: &[Resource] = &[
        ("configmaps", "ConfigMap", true),
        ("secrets", "Secret", true),
        ("serviceaccounts", "ServiceAccount", true),
        ("services", "Service", true),
    ];
    let list = |gv: &str, rs: &[Resource]| {
        json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": rs.iter().map(|(n, k, ns)| json!({
                "name": n, "singularName": k.to_lowercase(), "namespaced": ns, "kind": k,
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]
            })).collect::<Vec<_>>()
        })
    };
    match path {
        "/version" => Some(json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0"})),
        "/api" => Some(json!({"kind": "APIVersions", "versions": ["v1"]})),
        "/api/v1" => Some(list("v1", core)),
        "/apis" => Some(json!({
            "kind": "APIGroupList", "apiVersion": "v1",
            "groups": groups.iter().map(|(g, _)| json!({
                "name": g,
                "versions": [{"groupVersion": format!("{g}/v1"), "version": "v1"}],
                "preferredVersion": {"groupVersion": format!("{g}/v1"), "version": "v1"}
            })).collect::<Vec<_>>()
        })),
        _ => groups.iter().find_map(|(g, rs)| {
            (path == format!("/apis/{g}/v1")).then(|| list(&format!("{g}/v1"), rs))
        }),
    }
}

impl FakeApiServer {
    fn start(objects: BTreeMap<String, Value>) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let objects = Arc::new(objects);
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let log = seen.clone();
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let objects = objects.clone();
            let log = log.clone();
            async move {
                let path = uri.path().to_string();
                log.lock().unwrap().push(path.clone());
                let (status, body) = match discovery(&path).or_else(|| objects.get(&path).cloned())
                {
                    Some(v) => (axum::http::StatusCode::OK, v),
                    None => (
                        axum::http::StatusCode::NOT_FOUND,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "NotFound", "code": 404, "message": "not found"}),
                    ),
                };
                (status, axum::Json(body))
            }
        });
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url,
            seen,
            _runtime: runtime,
        }
    }

    fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"{}\"}}\n\
             users:\n- name: u\n  user: {{token: test}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: u}}\n\
             current-context: fake\n",
            self.url
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `helm template --dry-run=server`: renders with `lookup` answered by
    /// this server, as `helm upgrade` would.
    fn render(&self, extra: &[&str]) -> Manifests {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = self.kubeconfig(dir.path());
        let chart = chart();
        let mut args = vec![
            "template",
            RELEASE,
            chart.to_str().unwrap(),
            "-n",
            NS,
            "--dry-run=server",
            "--disable-openapi-validation",
        ];
        args.extend_from_slice(extra);
        let out = helm_with_kubeconfig(&args, &kubeconfig);
        Manifests(support::documents(&ok(
            &out,
            "helm template --dry-run=server",
        )))
    }
}

fn live_config(kind: &str, hook: &str, ca: Option<&str>, rules: Value) -> Value {
    let mut client =
        json!({"service": {"name": "mrguard", "namespace": NS, "path": "/x", "port": 443}});
    if let Some(ca) = ca {
        client["caBundle"] = json!(ca);
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        // Owned by the release, as on an upgrade.
        "metadata": {
            "name": "mrguard", "resourceVersion": "7",
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": RELEASE, "meta.helm.sh/release-namespace": NS}
        },
        "webhooks": [{
            "name": hook, "clientConfig": client, "rules": rules,
            "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": 9
        }]
    })
}

const MWC_PATH: &str =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/mrguard";
const VWC_PATH: &str =
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/mrguard";

#[test]
fn an_upgrade_keeps_the_live_ca_bundle_and_rules() {
    // What the controller wrote: its CA and the exact GVRs of the MR CRDs.
    let controller_rules = json!([
        {"apiGroups": ["ec2.aws.upbound.io"], "apiVersions": ["v1beta1"],
         "operations": ["CREATE", "UPDATE"], "resources": ["vpcs", "subnets"], "scope": "*"},
        {"apiGroups": ["s3.aws.upbound.io"], "apiVersions": ["v1beta1", "v1beta2"],
         "operations": ["CREATE", "UPDATE"], "resources": ["buckets"], "scope": "*"}
    ]);
    let validate_rules = json!([
        {"apiGroups": ["ec2.aws.upbound.io"], "apiVersions": ["v1beta1"],
         "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["vpcs"], "scope": "*"}
    ]);
    let server = FakeApiServer::start(BTreeMap::from([
        (
            MWC_PATH.to_string(),
            live_config(
                "MutatingWebhookConfiguration",
                "mutate.mrguard.io",
                Some("TElWRS1DQS1N"),
                controller_rules.clone(),
            ),
        ),
        (
            VWC_PATH.to_string(),
            live_config(
                "ValidatingWebhookConfiguration",
                "validate.mrguard.io",
                Some("TElWRS1DQS1W"),
                validate_rules.clone(),
            ),
        ),
    ]));
    // Initial rules in values must not win over what the controller set.
    let m = server.render(&[
        "--set-json",
        r#"webhooks.initialRules=[{"apiGroups":["nop.crossplane.io"],"apiVersions":["*"],"operations":["CREATE"],"resources":["*"]}]"#,
    ]);
    let seen = server.seen.lock().unwrap().clone();
    assert!(
        seen.iter().any(|p| p == MWC_PATH) && seen.iter().any(|p| p == VWC_PATH),
        "{seen:?}"
    );

    let mutating = webhook(&m, "MutatingWebhookConfiguration", "mutate.mrguard.io");
    assert_eq!(mutating["clientConfig"]["caBundle"], "TElWRS1DQS1N");
    assert_eq!(mutating["rules"], controller_rules);
    let validating = webhook(&m, "ValidatingWebhookConfiguration", "validate.mrguard.io");
    assert_eq!(validating["clientConfig"]["caBundle"], "TElWRS1DQS1W");
    assert_eq!(validating["rules"], validate_rules);
    // Only the controller's fields come from the cluster; the rest is values.
    assert_eq!(mutating["timeoutSeconds"], 2);
    assert_eq!(validating["failurePolicy"], "Fail");
    assert_eq!(validating["timeoutSeconds"], 5);
    assert_eq!(validating["clientConfig"]["service"]["path"], "/validate");
}

/// The TLS Secret is the chart's now (no `create` on Secrets for the
/// controller): an upgrade renders the live certificates back, so Helm's
/// patch cannot empty them.
#[test]
fn an_upgrade_keeps_the_live_tls_secret() {
    let live_data = json!({"ca.crt": "TElWRS1DQQ==", "ca.key": "S0VZ", "tls.crt": "Q1JU", "tls.key": "S0VZMg=="});
    // Helm's ownership metadata: what the chart created, or what
    // docs/upgrading.md tells users to add to an old controller's Secret.
    let server = FakeApiServer::start(BTreeMap::from([(
        format!("/api/v1/namespaces/{NS}/secrets/mrguard-tls"),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "mrguard-tls", "namespace": NS,
                            "labels": {"app.kubernetes.io/managed-by": "Helm"},
                            "annotations": {"mrguard.io/ca-rotation-started": "2025-01-01T00:00:00Z",
                                            "meta.helm.sh/release-name": RELEASE,
                                            "meta.helm.sh/release-namespace": NS}},
               "type": "kubernetes.io/tls", "data": live_data.clone()}),
    )]));
    let m = server.render(&[]);
    let secret = m.one("Secret", "mrguard-tls");
    assert_eq!(secret["data"], live_data);
    assert_eq!(secret["type"], "kubernetes.io/tls");
    // The controller's annotations are its own: the chart does not render them.
    assert!(secret["metadata"].get("annotations").is_none(), "{secret}");
}

#[test]
fn an_upgrade_falls_back_to_values_where_nothing_live_applies() {
    let initial = json!([{"apiGroups": ["nop.crossplane.io"], "apiVersions": ["v1alpha1"],
                          "operations": ["CREATE", "UPDATE"], "resources": ["nopresources"]}]);
    let server = FakeApiServer::start(BTreeMap::from([
        // Live, but the controller has not filled it in yet.
        (
            MWC_PATH.to_string(),
            live_config(
                "MutatingWebhookConfiguration",
                "mutate.mrguard.io",
                None,
                json!([]),
            ),
        ),
        // Live, but holding some other webhook: nothing to carry over.
        (
            VWC_PATH.to_string(),
            live_config(
                "ValidatingWebhookConfiguration",
                "someone-else.example.com",
                Some("T1RIRVI="),
                initial.clone(),
            ),
        ),
    ]));
    let m = server.render(&["--set-json", &format!("webhooks.initialRules={initial}")]);
    for (kind, name) in [
        ("MutatingWebhookConfiguration", "mutate.mrguard.io"),
        ("ValidatingWebhookConfiguration", "validate.mrguard.io"),
    ] {
        let hook = webhook(&m, kind, name);
        assert!(
            hook["clientConfig"].get("caBundle").is_none(),
            "{kind}: {hook}"
        );
        assert_eq!(hook["rules"], initial, "{kind}");
    }

    // First install: nothing live at all.
    let server = FakeApiServer::start(BTreeMap::new());
    let m = server.render(&[]);
    let hook = webhook(&m, "ValidatingWebhookConfiguration", "validate.mrguard.io");
    assert!(hook["clientConfig"].get("caBundle").is_none());
    assert_eq!(hook["rules"], json!([]));
    assert!(server.seen.lock().unwrap().iter().any(|p| p == VWC_PATH));
}

// ---------------------------------------------------------------- Dockerfile

struct Stage {
    from: String,
    name: Option<String>,
    instructions: Vec<(String, String)>,
}

/// Splits a Dockerfile into stages of (INSTRUCTION, arguments), joining
/// continuation lines and dropping comments.
fn dockerfile_stages(text: &str) -> Vec<Stage> {
    let mut logical = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(body) = t.strip_suffix('\\') {
            cur.push_str(body);
            cur.push(' ');
        } else {
            cur.push_str(t);
            logical.push(std::mem::take(&mut cur));
        }
    }
    let mut stages: Vec<Stage> = Vec::new();
    for l in logical {
        let (ins, rest) = l.split_once(char::is_whitespace).unwrap_or((&l, ""));
        let ins = ins.to_uppercase();
        let rest = rest.trim().to_string();
        if ins == "FROM" {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
                _ => None,
            };
            stages.push(Stage {
                from: words[0].to_string(),
                name,
                instructions: Vec::new(),
            });
        } else if let Some(s) = stages.last_mut() {
            s.instructions.push((ins, rest));
        }
    }
    stages
}

#[test]
fn the_dockerfile_builds_the_binary_the_chart_runs_as_non_root() {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let stages = dockerfile_stages(&text);
    assert!(stages.len() >= 2, "multi-stage");
    let build = &stages[0];
    let runtime = stages.last().unwrap();
    let build_name = build.name.clone().expect("the build stage is named");
    assert!(
        build.from.starts_with("rust:"),
        "built in a Rust image: {}",
        build.from
    );
    let run = build
        .instructions
        .iter()
        .filter(|(i, _)| i == "RUN")
        .map(|(_, a)| a.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        run.contains("cargo build --release --locked --bin mrguard"),
        "{run}"
    );

    assert!(
        runtime.from.starts_with("gcr.io/distroless/") || runtime.from == "scratch",
        "minimal runtime image: {}",
        runtime.from
    );
    let get = |ins: &str| -> Vec<&String> {
        runtime
            .instructions
            .iter()
            .filter(|(i, _)| i == ins)
            .map(|(_, a)| a)
            .collect()
    };
    // The binary comes from the build stage, from the path the build wrote.
    let copies = get("COPY");
    let copy = copies
        .iter()
        .find(|c| c.starts_with(&format!("--from={build_name} ")))
        .expect("COPY --from=<build stage>");
    let parts: Vec<&str> = copy.split_whitespace().collect();
    let (src, dst) = (parts[1], parts[2]);
    assert!(run.contains(src), "the build writes {src}");
    assert_eq!(dst, BINARY);

    // Non-root, numerically, so that runAsNonRoot can verify it.
    let user = get("USER");
    let user = user.last().expect("USER in the runtime stage");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("numeric USER");
    assert_ne!(uid, 0);

    let entry = get("ENTRYPOINT");
    let entry: Vec<String> = serde_json::from_str(entry.last().unwrap()).expect("exec form");
    assert_eq!(entry, [dst, "serve"]);

    // The chart runs the same binary as the same user.
    let m = render(&[]);
    assert_eq!(strs(&container(&m)["command"]), entry);
    assert_eq!(container(&m)["securityContext"]["runAsUser"], uid);
    let exposed = get("EXPOSE")
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    for port in [port_named(&m, "https"), port_named(&m, "metrics")] {
        assert!(
            exposed.split_whitespace().any(|p| p == port.to_string()),
            "EXPOSE {port}"
        );
    }

    // Every base image is pinned by digest, next to the tag it came from.
    for stage in &stages {
        let (tag, digest) = stage
            .from
            .split_once("@sha256:")
            .unwrap_or_else(|| panic!("{} is not pinned by digest", stage.from));
        assert!(tag.contains(':'), "{} names its tag", stage.from);
        assert!(
            digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
            "{}",
            stage.from
        );
    }

    // scripts/image.sh builds the same image without a registry: same
    // user, entrypoint and ports.
    let script = std::fs::read_to_string(root().join("scripts/image.sh")).unwrap();
    let var = |name: &str| -> String {
        let line = script
            .lines()
            .find(|l| l.starts_with(&format!("{name}=")))
            .unwrap_or_else(|| panic!("scripts/image.sh sets no {name}"));
        line[name.len() + 1..].trim_matches(['"', '\'']).to_string()
    };
    assert_eq!(&&var("IMAGE_USER"), user);
    let image_entry: Vec<String> = serde_json::from_str(&var("IMAGE_ENTRYPOINT")).unwrap();
    assert_eq!(image_entry, entry);
    assert_eq!(
        var("IMAGE_PORTS").split_whitespace().collect::<Vec<_>>(),
        exposed.split_whitespace().collect::<Vec<_>>()
    );

    let ignore = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    let ignored: BTreeSet<&str> = ignore.lines().map(str::trim).collect();
    for p in ["target", ".git", ".tools", "**/*.key"] {
        assert!(ignored.contains(p), ".dockerignore lacks {p}");
    }
    for needed in ["src", "Cargo.toml", "Cargo.lock"] {
        assert!(!ignored.contains(needed), ".dockerignore drops {needed}");
    }
}
