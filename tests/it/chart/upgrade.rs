//! An upgrade against a fake API server (`helm template --dry-run=server`):
//! the live caBundle, rules and TLS Secret carry over; the values apply
//! where nothing live does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::{webhook, Manifests};
use crate::support;
use crate::support::helm::{chart, helm_with_kubeconfig, ok, NS, RELEASE};

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
    assert_eq!(validating["failurePolicy"], "Ignore");
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
