//! `mrguard plan --live` against a real API server (any supported one,
//! 1.30 or newer: it needs nothing newer). A stand-in provider (this test code) writes
//! `status.atProvider`, late-initializes a field by server-side apply
//! under its own field manager, and sets the creation annotations; the
//! plan then says, per MR, the action and the mark of each field. No
//! mrguard release is installed: the plan judges locally.

use std::path::Path;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::check_live::{ensure_namespace, kubectl_apply_create, mrguard_in, provider_patch, text};
use crate::support::{self, Cluster};

/// The oldest API server the plan needs: every supported one.
const NEEDS: (u32, u32) = support::version::OLDEST_SUPPORTED;

const GROUP: &str = "plan.aws.upbound.io";
const M_GROUP: &str = "plan.aws.m.upbound.io";
const KIND: &str = "PlanDatabase";
const PLURAL: &str = "plandatabases";
const NS: &str = "plan-e2e";

const CONFIG: &str = "\
resources:
  - apiGroups: [\"plan.aws.upbound.io\", \"plan.aws.m.upbound.io\"]
    kinds: [\"PlanDatabase\"]
    immutableFields: [spec.forProvider.region]
";

/// An MR CRD whose `engine` the description documents as replacing the
/// resource when changed, as upjet writes it.
fn crd(group: &str, scope: &str) -> CustomResourceDefinition {
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{group}")},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"kind": KIND, "listKind": format!("{KIND}List"), "plural": PLURAL,
                      "singular": "plandatabase", "categories": ["crossplane", "managed"]},
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {"forProvider": {"type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                            "properties": {"engine": {"type": "string",
                                "description": "The database engine. Changing this forces a new resource to be created."}}}}},
                    "status": open,
                }}},
            }],
        },
    }))
    .unwrap()
}

async fn install_crds(admin: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for (group, scope) in [(GROUP, "Cluster"), (M_GROUP, "Namespaced")] {
        let name = format!("{PLURAL}.{group}");
        if crds.get_opt(&name).await.unwrap().is_none() {
            support::cluster::create_crd(admin, &crd(group, scope))
                .await
                .unwrap();
        }
    }
}

fn db(group: &str, name: &str, spec: Value) -> Value {
    let mut o = json!({"apiVersion": format!("{group}/v1beta1"), "kind": KIND,
        "metadata": {"name": name}, "spec": spec});
    if group == M_GROUP {
        o["metadata"]["namespace"] = json!(NS);
    }
    o
}

fn fp() -> Value {
    json!({"region": "eu-west-1", "instanceClass": "db.t3.micro", "engine": "postgres"})
}

fn apis(admin: &kube::Client) -> (Api<DynamicObject>, Api<DynamicObject>) {
    (
        Api::all_with(
            admin.clone(),
            &support::resource(GROUP, "v1beta1", KIND, PLURAL),
        ),
        Api::namespaced_with(
            admin.clone(),
            NS,
            &support::resource(M_GROUP, "v1beta1", KIND, PLURAL),
        ),
    )
}

/// The stand-in provider created the external resource.
async fn provider_created(api: &Api<DynamicObject>, name: &str) {
    provider_patch(
        api,
        name,
        json!({"metadata": {"annotations": {
            "crossplane.io/external-name": name,
            "crossplane.io/external-create-pending": "2024-05-01T10:00:00Z",
            "crossplane.io/external-create-succeeded": "2024-05-01T10:00:02Z"}}}),
        false,
    )
    .await;
}

/// Creates `o` as kubectl apply would, then as the provider would.
async fn live(api: &Api<DynamicObject>, o: &Value) {
    kubectl_apply_create(api, o).await;
    let name = o["metadata"]["name"].as_str().unwrap();
    provider_created(api, name).await;
}

fn entry<'a>(plan: &'a Value, object: &str) -> &'a Value {
    plan["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["object"] == object)
        .unwrap_or_else(|| panic!("no entry {object} in {plan:#}"))
}

fn mark<'a>(e: &'a Value, path: &str) -> &'a Value {
    e["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .map(|f| &f["mark"])
        .unwrap_or_else(|| panic!("no field {path} in {e:#}"))
}

fn run_plan(dir: &Path, kubeconfig: &Path, extra: &[&str]) -> std::process::Output {
    let kc = kubeconfig.display().to_string();
    let mut args = vec![
        "plan",
        "--live",
        "-f",
        "gitops",
        "--kubeconfig",
        &kc,
        "--config",
        "config.yaml",
    ];
    args.extend_from_slice(extra);
    mrguard_in(dir, &args)
}

/// Every action and field mark the issue names, on a cluster-scoped and a
/// `.m.` kind: an update in place, a denied (curated) and a warned
/// (documented) replacement, a late-initialized field named with its field
/// manager, Observe-only drift, deletions under Delete and under an
/// orphaning policy (by --delete and by --prune), an adoption, a create
/// and a skipped manifest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_says_what_applying_does_to_each_mr() {
    let test = "plan_says_what_applying_does_to_each_mr";
    let Some(cluster) = support::require_cluster_at(test, NEEDS).await else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    install_crds(&admin).await;
    ensure_namespace(&admin, NS).await;
    let (dbs, mdbs) = apis(&admin);

    // Live objects, as an earlier apply and the provider left them.
    for (api, group) in [(&dbs, GROUP), (&mdbs, M_GROUP)] {
        live(api, &db(group, "update", json!({"forProvider": fp()}))).await;
        live(api, &db(group, "curated", json!({"forProvider": fp()}))).await;
        live(api, &db(group, "documented", json!({"forProvider": fp()}))).await;
        live(api, &db(group, "late-init", json!({"forProvider": fp()}))).await;
        // The provider late-initializes engineVersion by server-side apply.
        let patch = json!({"apiVersion": format!("{group}/v1beta1"), "kind": KIND,
            "metadata": {"name": "late-init"},
            "spec": {"forProvider": {"engineVersion": "16.1"}}});
        api.patch(
            "late-init",
            &PatchParams::apply(crate::check_live::PROVIDER),
            &Patch::Apply(&patch),
        )
        .await
        .unwrap();
        let observe = json!({"managementPolicies": ["Observe"], "forProvider": fp()});
        live(api, &db(group, "observe", observe)).await;
        provider_patch(
            api,
            "observe",
            json!({"status": {"atProvider": {"region": "eu-west-1", "instanceClass": "db.m5.large"}}}),
            true,
        )
        .await;
    }
    // Deletions: cluster-scoped by deletionPolicy, `.m.` by the policies.
    let pruned = |mut o: Value| {
        o["metadata"]["labels"] = json!({"plan-e2e": "prune"});
        o
    };
    live(
        &dbs,
        &db(
            GROUP,
            "gone-delete",
            json!({"deletionPolicy": "Delete", "forProvider": fp()}),
        ),
    )
    .await;
    live(
        &dbs,
        &pruned(db(
            GROUP,
            "gone-orphan",
            json!({"deletionPolicy": "Orphan", "forProvider": fp()}),
        )),
    )
    .await;
    live(
        &mdbs,
        &pruned(db(M_GROUP, "gone-delete", json!({"forProvider": fp()}))),
    )
    .await;
    live(
        &mdbs,
        &db(
            M_GROUP,
            "gone-orphan",
            json!({"managementPolicies": ["Observe", "Create", "Update", "LateInitialize"], "forProvider": fp()}),
        ),
    )
    .await;

    // The manifests of the pull request.
    let with = |k: &str, v: &str| {
        let mut f = fp();
        f[k] = json!(v);
        json!({"forProvider": f})
    };
    let mut docs = Vec::new();
    for group in [GROUP, M_GROUP] {
        docs.push(db(group, "update", with("instanceClass", "db.t3.small")));
        docs.push(db(group, "curated", with("region", "us-east-1")));
        docs.push(db(group, "documented", with("engine", "mysql")));
        docs.push(db(group, "late-init", with("engineVersion", "15.4")));
        docs.push(db(
            group,
            "observe",
            json!({"managementPolicies": ["Observe"], "forProvider": fp()}),
        ));
        let mut adopt = db(group, "adopt", json!({"forProvider": fp()}));
        adopt["metadata"]["annotations"] = json!({"crossplane.io/external-name": "legacy-db"});
        docs.push(adopt);
        docs.push(db(group, "new", json!({"forProvider": fp()})));
    }
    docs.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": NS}, "data": {}}));
    let yaml: Vec<String> = docs
        .iter()
        .map(|d| serde_saphyr::to_string(d).unwrap())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("gitops")).unwrap();
    std::fs::write(dir.path().join("gitops/dbs.yaml"), yaml.join("---\n")).unwrap();
    std::fs::write(dir.path().join("config.yaml"), CONFIG).unwrap();
    let deletions = [
        "--delete",
        "PlanDatabase.plan.aws.upbound.io/gone-delete",
        "--delete",
        "PlanDatabase.plan.aws.m.upbound.io/plan-e2e/gone-orphan",
        "--prune",
        "-l",
        "plan-e2e=prune",
    ];
    let before: Vec<_> = dbs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| o.metadata.resource_version)
        .collect();

    let mut extra = deletions.to_vec();
    extra.extend(["-o", "json"]);
    let out = run_plan(dir.path(), cluster.admin_kubeconfig(), &extra);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", text(&out.stdout), text(&out.stderr)));

    for (group, prefix) in [
        (GROUP, "PlanDatabase/"),
        (M_GROUP, "PlanDatabase/plan-e2e/"),
    ] {
        let e = |n: &str| entry(&plan, &format!("{prefix}{n}"));
        let at = |what: &str| format!("{group}: {what}");

        let u = e("update");
        assert_eq!(u["action"], "update in place", "{}", at("update"));
        assert_eq!(
            mark(u, "spec.forProvider.instanceClass"),
            &json!({"kind": "in-place"})
        );
        assert_eq!(u["verdict"], "allowed");

        let c = e("curated");
        assert_eq!(
            c["action"],
            "replace required (denied)",
            "{}",
            at("curated")
        );
        assert_eq!(c["verdict"], "denied");
        assert_eq!(
            mark(c, "spec.forProvider.region"),
            &json!({"kind": "forces-replacement", "source": "curated", "rule": "immutable-field"})
        );

        let d = e("documented");
        assert_eq!(
            d["action"],
            "replace required (documented, warned)",
            "{}: {d:#}",
            at("documented")
        );
        assert_eq!(d["verdict"], "allowed");
        assert_eq!(
            mark(d, "spec.forProvider.engine"),
            &json!({"kind": "forces-replacement", "source": "documented", "rule": "documented-immutable-field"})
        );

        let l = e("late-init");
        assert_eq!(l["action"], "update in place", "{}", at("late-init"));
        assert_eq!(
            mark(l, "spec.forProvider.engineVersion"),
            &json!({"kind": "owned-by-provider", "managers": ["provider"]}),
            "{l:#}"
        );

        let o = e("observe");
        assert_eq!(o["action"], "no change", "{}: {o:#}", at("observe"));
        let m = mark(o, "spec.forProvider.instanceClass");
        assert_eq!(m["kind"], "drift");
        assert_eq!(m["cloud"], "db.m5.large");
        assert!(m["then"].as_str().unwrap().contains("only reads"), "{m}");

        let a = e("adopt");
        assert_eq!(a["action"], "adopt", "{}", at("adopt"));
        assert!(a["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["rule"] == "adoption"));
        assert_eq!(e("new")["action"], "create", "{}", at("new"));
        assert_eq!(
            mark(e("new"), "spec.forProvider.region"),
            &json!({"kind": "in-place"})
        );
    }
    let action = |o: &str| entry(&plan, o)["action"].as_str().unwrap().to_string();
    assert_eq!(action("PlanDatabase/gone-delete"), "delete external");
    assert_eq!(action("PlanDatabase/gone-orphan"), "orphan external");
    assert_eq!(
        action("PlanDatabase/plan-e2e/gone-delete"),
        "delete external"
    );
    assert_eq!(
        action("PlanDatabase/plan-e2e/gone-orphan"),
        "orphan external"
    );
    assert!(entry(&plan, "PlanDatabase/gone-orphan")["notes"][0]
        .as_str()
        .unwrap()
        .starts_with("pruned by -l plan-e2e=prune: deletionPolicy Orphan"));
    assert!(
        entry(&plan, "PlanDatabase/plan-e2e/gone-delete")["notes"][0]
            .as_str()
            .unwrap()
            .contains("no deletionPolicy, managementPolicies [*]"),
        "{plan:#}"
    );
    assert_eq!(
        entry(&plan, "ConfigMap/plan-e2e/settings")["action"],
        "skipped"
    );
    assert_eq!(plan["summary"]["denied"], 2);

    // The same plan as text and markdown, and Terraform's exit codes.
    let t = run_plan(dir.path(), cluster.admin_kubeconfig(), &deletions);
    assert_eq!(t.status.code(), Some(1));
    let t = text(&t.stdout);
    assert!(!t.contains('\x1b'), "no colour off a terminal");
    assert!(
        t.contains("-/+ PlanDatabase/curated: replace required (denied) [denied]\n"),
        "{t}"
    );
    assert!(
        t.contains("spec.forProvider.engineVersion: \"16.1\" → \"15.4\"  owned by the provider (field manager provider)"),
        "{t}"
    );
    let mut md = deletions.to_vec();
    md.extend(["-o", "markdown", "--detailed-exitcode"]);
    let m = run_plan(dir.path(), cluster.admin_kubeconfig(), &md);
    assert_eq!(m.status.code(), Some(1), "denied wins over changes");
    assert!(text(&m.stdout).contains("<summary><code>PlanDatabase/plan-e2e/observe</code>"));
    eprintln!("--- plan (text) ---\n{t}");
    eprintln!("--- plan (markdown) ---\n{}", text(&m.stdout));

    // Nothing was written.
    let after: Vec<_> = dbs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| o.metadata.resource_version)
        .collect();
    assert_eq!(before, after);
}

/// The RBAC a plan needs: list the planned kinds, get their CRDs.
async fn planner_account(cluster: &Cluster, ns: &str, may_list: bool) -> tempfile::TempPath {
    let admin = cluster.admin().await.unwrap();
    ensure_namespace(&admin, ns).await;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    if sas.get_opt("planner").await.unwrap().is_none() {
        sas.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "planner"}})).unwrap(),
        )
        .await
        .unwrap();
    }
    let name = format!("{ns}-planner");
    let mut rules = vec![json!({"apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"], "verbs": ["get"]})];
    if may_list {
        rules
            .push(json!({"apiGroups": [GROUP, M_GROUP], "resources": [PLURAL], "verbs": ["list"]}));
    }
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    roles
        .patch(
            &name,
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(
                &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": name}, "rules": rules}),
            ),
        )
        .await
        .unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    bindings
        .patch(
            &name,
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": "planner", "namespace": ns}]})),
        )
        .await
        .unwrap();
    let path = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    cluster
        .service_account_kubeconfig(ns, "planner", &path)
        .await
        .unwrap();
    path
}

/// A live plan of many MRs of two kinds lists each kind once and gets no
/// MR, as the API server's audit log records; a forbidden list exits 2
/// with the reason and prints no plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_plan_lists_each_kind_once_and_a_forbidden_read_is_no_plan() {
    let test = "a_live_plan_lists_each_kind_once_and_a_forbidden_read_is_no_plan";
    if !support::version_at_least(test, NEEDS) {
        return;
    }
    let release = "planaudit";
    let Some(cluster) = support::audited_cluster(test, release).await else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    install_crds(&admin).await;
    ensure_namespace(&admin, NS).await;
    let (dbs, mdbs) = apis(&admin);
    let mut docs = Vec::new();
    for i in 0..6 {
        let name = format!("db-{i}");
        for (api, group) in [(&dbs, GROUP), (&mdbs, M_GROUP)] {
            let o = db(group, &name, json!({"forProvider": fp()}));
            if i % 2 == 0 {
                live(api, &o).await;
            }
            docs.push(serde_saphyr::to_string(&o).unwrap());
        }
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("gitops")).unwrap();
    std::fs::write(dir.path().join("gitops/dbs.yaml"), docs.join("---\n")).unwrap();
    std::fs::write(dir.path().join("config.yaml"), CONFIG).unwrap();

    let ns = format!("{release}-system");
    let kubeconfig = planner_account(cluster, &ns, true).await;
    let out = run_plan(dir.path(), &kubeconfig, &["-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["summary"]["create"], 6, "{plan:#}");
    assert_eq!(plan["summary"]["noChange"], 6, "{plan:#}");

    let log = std::fs::read_to_string(cluster.audit_log()).unwrap();
    for group in [GROUP, M_GROUP] {
        let collection = format!("/apis/{group}/v1beta1/{PLURAL}");
        assert_eq!(
            support::requested(&log, "list", &collection).len(),
            1,
            "one list of {collection}"
        );
    }
    let gets: Vec<String> = support::audited(&log, "get")
        .filter_map(|v| v["requestURI"].as_str().map(str::to_string))
        .filter(|u| u.contains(PLURAL) && !u.contains("customresourcedefinitions"))
        .collect();
    assert!(gets.is_empty(), "no get per MR: {gets:?}");

    // Without list permission: exit 2, the reason, and no plan.
    let denied = planner_account(cluster, &format!("{release}-denied"), false).await;
    let out = run_plan(dir.path(), &denied, &["-o", "json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty(), "no plan: {}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("failed to list plandatabases.plan.aws.upbound.io in all namespaces")
            && err.contains("forbidden"),
        "{err}"
    );
}
