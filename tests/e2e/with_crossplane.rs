//! mrguard beside a real Crossplane: provider-kubernetes reconciles
//! `Object`s (cluster-scoped `kubernetes.crossplane.io` and namespaced
//! `kubernetes.m.crossplane.io`) whose external resources are ConfigMaps on
//! the same API server, and Crossplane core activates kinds from MRDs
//! (`support::crossplane::Crossplane`, built by `scripts/crossplane.sh`).
//!
//! Every scenario asserts what happened to the ConfigMaps, not only what
//! mrguard answered, and runs `mrguard plan --live` before each apply or
//! delete to compare the predicted action with what the provider then did
//! ([`Planned`]). Every wait is for a condition, bounded by
//! `support::crossplane::running::RECONCILE`, and names what it awaited.
//!
//! Needs: any supported server (1.30), and `MRGUARD_CROSSPLANE`.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::check_live::{mrguard_in, text};
use crate::support::crossplane::running::{self, RECONCILE};
use crate::support::crossplane::{Crossplane, CrossplaneOptions, ObjectKinds};
use crate::support::{self, cluster::ClusterOptions, wait_for, Cluster, Options, Release};

/// The chart's RBAC for provider-kubernetes' kinds and provider configs.
const VALUES: &str = "\
rbac:
  audit:
    apiGroups: [kubernetes.crossplane.io, kubernetes.m.crossplane.io]
    providerFamilies:
      - group: kubernetes.crossplane.io
        namespacedGroup: kubernetes.m.crossplane.io
        services: []
";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Cluster,
    Namespaced,
}

pub(crate) const BOTH: [Scope; 2] = [Scope::Cluster, Scope::Namespaced];

impl Scope {
    pub(crate) fn resource(self) -> ApiResource {
        match self {
            Scope::Cluster => {
                support::resource("kubernetes.crossplane.io", "v1alpha2", "Object", "objects")
            }
            Scope::Namespaced => support::resource(
                "kubernetes.m.crossplane.io",
                "v1alpha1",
                "Object",
                "objects",
            ),
        }
    }

    fn group(self) -> &'static str {
        match self {
            Scope::Cluster => "kubernetes.crossplane.io",
            Scope::Namespaced => "kubernetes.m.crossplane.io",
        }
    }

    /// How `mrguard plan` and `--delete` name an Object of this scope.
    fn plan_name(self, r: &Release, name: &str) -> String {
        match self {
            Scope::Cluster => format!("Object.{}/{name}", self.group()),
            Scope::Namespaced => format!("Object.{}/{}/{name}", self.group(), r.workload_ns),
        }
    }

    /// The entry of `plan --live -o json` for an Object of this scope.
    fn entry(self, r: &Release, name: &str) -> String {
        match self {
            Scope::Cluster => format!("Object/{name}"),
            Scope::Namespaced => format!("Object/{}/{name}", r.workload_ns),
        }
    }
}

/// A test's world: the Crossplane, its mrguard release, and the admin.
pub(crate) struct World {
    pub xp: &'static Crossplane,
    pub r: Release,
    pub admin: kube::Client,
    /// Each plan's prediction and what happened, for the report.
    pub planned: Vec<Planned>,
}

/// One `mrguard plan --live` prediction, and what the ConfigMap did.
#[derive(Debug)]
pub(crate) struct Planned {
    pub scenario: String,
    pub predicted: String,
    pub observed: String,
}

impl World {
    /// mrguard installed for `test` beside `xp`, its webhooks covering both
    /// Object kinds.
    /// mrguard runs its built-in configuration, which knows
    /// provider-kubernetes' Objects (their target is their identity and
    /// immutable), or `config`.
    pub(crate) async fn new(xp: &'static Crossplane, test: &str, config: Option<&str>) -> World {
        let w = World::install(xp, test, config).await;
        for scope in BOTH {
            w.covers(scope, support::WAIT).await;
        }
        w
    }

    /// Waits (up to `within`) until mrguard's webhooks cover the Objects of
    /// `scope`.
    pub(crate) async fn covers(&self, scope: Scope, within: std::time::Duration) {
        wait_for(
            &format!("mrguard's webhooks to cover {} Objects", scope.group()),
            within,
            || async {
                self.r
                    .webhooks_ready(scope.group(), "objects")
                    .await
                    .then_some(())
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{}", self.r.with_logs(e)));
    }

    /// [`World::new`] without waiting for the Object kinds (whose CRDs may
    /// not exist yet).
    pub(crate) async fn install(
        xp: &'static Crossplane,
        test: &str,
        config: Option<&str>,
    ) -> World {
        let r = support::install(
            xp.cluster,
            test,
            Options {
                config: config.map(str::to_string),
                values: Some(VALUES.into()),
                ..Options::default()
            },
        )
        .await;
        let admin = xp.cluster.admin().await.unwrap();
        World {
            xp,
            r,
            admin,
            planned: Vec::new(),
        }
    }

    /// The Objects of `scope` (namespaced ones in the test's namespace).
    pub(crate) fn objects(&self, scope: Scope) -> Api<DynamicObject> {
        let ar = scope.resource();
        match scope {
            Scope::Cluster => Api::all_with(self.admin.clone(), &ar),
            Scope::Namespaced => Api::namespaced_with(self.admin.clone(), &self.r.workload_ns, &ar),
        }
    }

    /// The API path of Object `name` of `scope`.
    pub(crate) fn path(&self, scope: Scope, name: &str) -> String {
        format!("{}/{name}", self.collection(scope))
    }

    /// The API path of the Objects of `scope` (in the test's namespace).
    pub(crate) fn collection(&self, scope: Scope) -> String {
        let ar = scope.resource();
        match scope {
            Scope::Cluster => format!("/apis/{}/objects", ar.api_version),
            Scope::Namespaced => format!(
                "/apis/{}/namespaces/{}/objects",
                ar.api_version, self.r.workload_ns
            ),
        }
    }

    /// Sets annotation `key` of Object `name` to `value`, as a user would
    /// (a merge patch through mrguard's webhooks); the response, with the
    /// warnings `kubectl` would print. Panics unless it was allowed.
    pub(crate) async fn annotate(
        &self,
        scope: Scope,
        name: &str,
        key: &str,
        value: &str,
    ) -> support::api::Response {
        let r = self
            .patch(
                scope,
                name,
                json!({"metadata": {"annotations": {key: value}}}),
            )
            .await;
        assert!(r.status < 300, "annotating {name} {key}={value}: {r:?}");
        r
    }

    /// A merge patch of Object `name` as a user would send it; the
    /// response, allowed or not.
    pub(crate) async fn patch(
        &self,
        scope: Scope,
        name: &str,
        patch: Value,
    ) -> support::api::Response {
        support::api::request(
            &self.admin,
            "PATCH",
            &self.path(scope, name),
            "application/merge-patch+json",
            Some(&patch),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }

    pub(crate) fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.admin.clone(), &self.r.workload_ns)
    }

    /// An Object of `scope` named `name` whose manifest is ConfigMap `cm`
    /// (in the test's namespace) with `data`; `spec` is merged into its
    /// spec. No providerConfigRef: mrguard defaults it.
    pub(crate) fn object(
        &self,
        scope: Scope,
        name: &str,
        cm: &str,
        data: Value,
        spec: Value,
    ) -> Value {
        let ar = scope.resource();
        let mut o = json!({
            "apiVersion": ar.api_version, "kind": "Object",
            "metadata": {"name": name},
            "spec": {"forProvider": {"manifest": {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": cm, "namespace": self.r.workload_ns},
                "data": data,
            }}},
        });
        if let (Some(s), Some(extra)) = (o["spec"].as_object_mut(), spec.as_object()) {
            for (k, v) in extra {
                s.insert(k.clone(), v.clone());
            }
        }
        let dynamic = match scope {
            Scope::Cluster => self.r.object(o),
            Scope::Namespaced => self.r.namespaced_object(o),
        };
        serde_json::to_value(dynamic).unwrap()
    }

    /// Creates `obj` (as a user would, through mrguard's webhooks).
    pub(crate) async fn create(
        &self,
        scope: Scope,
        obj: &Value,
    ) -> Result<DynamicObject, kube::Error> {
        let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
        self.objects(scope).create(&PostParams::default(), &o).await
    }

    /// Waits until the Object is Ready and Synced; the object then.
    pub(crate) async fn ready(&self, scope: Scope, name: &str) -> DynamicObject {
        let api = self.objects(scope);
        wait_for(
            &format!("{scope:?} Object {name} to be Ready and Synced"),
            RECONCILE,
            || async {
                let o = api.get_opt(name).await.ok()??;
                let conds = o.data["status"]["conditions"].as_array()?.clone();
                let is = |t: &str| {
                    conds
                        .iter()
                        .any(|c| c["type"] == t && c["status"] == "True")
                };
                (is("Ready") && is("Synced")).then_some(o)
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{}", self.xp.with_logs(e)))
    }

    /// Waits until ConfigMap `cm` holds `data`.
    pub(crate) async fn configmap_holds(&self, cm: &str, data: &Value) -> ConfigMap {
        let api = self.configmaps();
        wait_for(
            &format!("ConfigMap {cm} to hold {data}"),
            RECONCILE,
            || async {
                let c = api.get_opt(cm).await.ok()??;
                (serde_json::to_value(&c.data).ok()? == *data).then_some(c)
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{}", self.xp.with_logs(e)))
    }

    /// Waits until `what` is gone (a ConfigMap or an Object).
    pub(crate) async fn gone<K>(&self, api: &Api<K>, name: &str, what: &str)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        wait_for(&format!("{what} {name} to be gone"), RECONCILE, || async {
            api.get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("{}", self.xp.with_logs(e)))
    }

    /// `mrguard plan --live` of `manifests` (and `--delete` of `deletes`)
    /// with the test's configuration: the action predicted for `entry`.
    pub(crate) fn plan(&self, manifests: &[&Value], deletes: &[String], entry: &str) -> Value {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("manifests")).unwrap();
        let mut docs = String::new();
        for m in manifests {
            let mut m = (*m).clone();
            if let Some(meta) = m["metadata"].as_object_mut() {
                for k in [
                    "resourceVersion",
                    "uid",
                    "creationTimestamp",
                    "managedFields",
                    "generation",
                ] {
                    meta.remove(k);
                }
            }
            docs.push_str(&format!("---\n{}\n", serde_json::to_string(&m).unwrap()));
        }
        std::fs::write(dir.path().join("manifests/objects.yaml"), &docs).unwrap();
        let kc = self.xp.cluster.admin_kubeconfig().display().to_string();
        let mut args = vec!["plan", "--live", "--kubeconfig", &kc, "-o", "json"];
        // The release's configuration, or (as it) the built-in one.
        if let Some(config) = &self.r.options.config {
            std::fs::write(dir.path().join("config.yaml"), config).unwrap();
            args.extend(["--config", "config.yaml"]);
        }
        // Deletions only: no manifest.
        if !docs.is_empty() {
            args.extend(["-f", "manifests"]);
        }
        for d in deletes {
            args.extend(["--delete", d.as_str()]);
        }
        let out = mrguard_in(dir.path(), &args);
        let plan: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("plan: {e}: {}\n{}", text(&out.stdout), text(&out.stderr)));
        plan["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["object"] == entry)
            .cloned()
            .unwrap_or_else(|| panic!("plan has no entry {entry}: {plan:#}"))
    }

    /// Records and checks one prediction against what happened.
    pub(crate) fn expect(
        &mut self,
        scenario: String,
        entry: &Value,
        predicted: &str,
        observed: &str,
    ) {
        let got = entry["action"].as_str().unwrap_or("").to_string();
        self.planned.push(Planned {
            scenario: scenario.clone(),
            predicted: got.clone(),
            observed: observed.to_string(),
        });
        assert_eq!(
            got, predicted,
            "{scenario}: plan predicted {got:?}, but the ConfigMap {observed}: {entry:#}"
        );
    }

    /// The plan-vs-reality rows, printed past the test harness's capture
    /// so a run shows them.
    pub(crate) fn report(&self) {
        let mut s = String::new();
        for p in &self.planned {
            s.push_str(&format!(
                "plan-vs-reality: {} | predicted: {} | observed: {}\n",
                p.scenario, p.predicted, p.observed
            ));
        }
        say(s);
    }
}

/// Prints `s` (and a newline) past the test harness's capture, so that a
/// passing run shows what was measured.
fn say(s: String) {
    use std::io::Write;
    let s = if s.ends_with('\n') { s } else { s + "\n" };
    let _ = std::io::stderr().write_all(s.as_bytes());
}

/// A fresh API server whose audit log records the provider's requests
/// (Metadata: verb, object, user, response code), with its own Crossplane.
async fn audited_crossplane(
    test: &str,
    options: &CrossplaneOptions,
) -> Option<&'static Crossplane> {
    support::require_crossplane(test).await?;
    let policy = format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\n\
         rules:\n- level: Metadata\n  users: [\"{}\"]\n- level: None\n",
        running::PROVIDER_USER
    );
    let cluster = Cluster::start(&ClusterOptions {
        audit_policy: Some(policy),
        ..ClusterOptions::default()
    })
    .await
    .unwrap_or_else(|e| panic!("{test}: the API server did not start: {e}"));
    let cluster: &'static Cluster = Box::leak(Box::new(cluster));
    let xp = Crossplane::start(cluster, options)
        .await
        .unwrap_or_else(|e| panic!("{test}: Crossplane did not start: {e}"));
    Some(Box::leak(Box::new(xp)))
}

/// The provider's writes to Objects in an audit log: (verb, subresource,
/// name, response code).
fn provider_writes(log: &str) -> Vec<(String, String, String, u64)> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["user"]["username"] == running::PROVIDER_USER)
        .filter(|e| matches!(e["verb"].as_str(), Some("create" | "update" | "patch")))
        .filter(|e| e["objectRef"]["resource"] == "objects")
        .map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_string();
            (
                s(&e["verb"]),
                s(&e["objectRef"]["subresource"]),
                s(&e["objectRef"]["name"]),
                e["responseStatus"]["code"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Create (defaulted by mrguard), update, status writes, finalizer and
/// delete of an Object of each scope, with the real provider: the
/// ConfigMap follows, and mrguard denies none of the provider's writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_reconciles_through_mrguard_and_none_of_its_writes_is_denied() {
    let test = "the_provider_reconciles_through_mrguard_and_none_of_its_writes_is_denied";
    let Some(xp) = audited_crossplane(test, &CrossplaneOptions::default()).await else {
        return;
    };
    let mut w = World::new(xp, "xp-happy", None).await;
    for scope in BOTH {
        let name = format!("happy-{}", scope.group().split('.').nth(1).unwrap_or("x"));
        let cm = name.clone();
        let obj = w.object(scope, &name, &cm, json!({"a": "1"}), json!({}));
        let planned = w.plan(&[&obj], &[], &scope.entry(&w.r, &name));
        let created = w
            .create(scope, &obj)
            .await
            .unwrap_or_else(|e| panic!("{test}: {e}"));
        // mrguard's defaults, as the API server stored them.
        let pcr = &created.data["spec"]["providerConfigRef"];
        match scope {
            Scope::Cluster => assert_eq!(*pcr, json!({"name": "default"}), "{test}"),
            Scope::Namespaced => assert_eq!(
                *pcr,
                json!({"kind": "ClusterProviderConfig", "name": "default"}),
                "{test}"
            ),
        }
        assert_eq!(
            created.metadata.annotations.as_ref().unwrap()["crossplane.io/external-name"],
            name
        );
        w.configmap_holds(&cm, &json!({"a": "1"})).await;
        w.expect(
            format!("{scope:?} create"),
            &planned,
            "create",
            "was created",
        );
        let live = w.ready(scope, &name).await;
        assert!(
            live.metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == "finalizer.managedresource.crossplane.io"),
            "{test}: the provider added its finalizer: {live:?}"
        );

        // An update in place.
        let mut changed = obj.clone();
        changed["spec"]["forProvider"]["manifest"]["data"] = json!({"a": "2"});
        let planned = w.plan(&[&changed], &[], &scope.entry(&w.r, &name));
        w.objects(scope)
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"forProvider": {"manifest": {"data": {"a": "2"}}}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("{test}: {e}"));
        w.configmap_holds(&cm, &json!({"a": "2"})).await;
        w.expect(
            format!("{scope:?} update"),
            &planned,
            "update in place",
            "was updated in place",
        );

        // Delete: the default policies delete the external resource.
        let planned = w.plan(
            &[],
            &[scope.plan_name(&w.r, &name)],
            &scope.entry(&w.r, &name),
        );
        w.objects(scope)
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("{test}: {e}"));
        w.gone(&w.configmaps(), &cm, "ConfigMap").await;
        w.gone(&w.objects(scope), &name, "Object").await;
        w.expect(
            format!("{scope:?} delete"),
            &planned,
            "delete external",
            "was deleted",
        );
    }

    // What the provider wrote, by the API server's audit log: each write
    // kind there was, and no write refused.
    let log = std::fs::read_to_string(xp.cluster.audit_log()).unwrap_or_default();
    let writes = provider_writes(&log);
    // A 409 is the API server's optimistic concurrency (the provider
    // retries with the newer object); anything else 4xx/5xx is a refusal.
    let denied: Vec<_> = writes.iter().filter(|w| w.3 >= 400 && w.3 != 409).collect();
    assert!(
        denied.is_empty(),
        "{test}: the provider's writes refused: {denied:?}"
    );
    let conflicts = writes.iter().filter(|w| w.3 == 409).count();
    let status = writes.iter().filter(|w| w.1 == "status").count();
    let main = writes.iter().filter(|w| w.1.is_empty()).count();
    assert!(
        status >= 2 && main >= 4,
        "{test}: expected the provider's status, finalizer and annotation writes: {writes:?}"
    );
    // And by mrguard's own count: every request about an Object allowed.
    let mut allowed = 0.0;
    for replica in &w.r.replicas {
        let m = replica.metrics().await.unwrap();
        let denied = m.get(
            "mrguard_admission_requests_total",
            &[("kind", "Object"), ("result", "denied")],
        );
        assert_eq!(
            denied, 0.0,
            "{test}: mrguard denied a request about an Object"
        );
        allowed += m.get(
            "mrguard_admission_requests_total",
            &[("kind", "Object"), ("result", "allowed")],
        );
    }
    assert!(
        allowed >= writes.len() as f64,
        "{test}: mrguard allowed {allowed}, the provider wrote {}",
        writes.len()
    );
    say(format!(
        "{test}: the provider wrote {} times ({main} object, {status} status), 0 refused, {conflicts} conflicts retried; mrguard allowed {allowed} Object requests, denied 0",
        writes.len()
    ));
    w.report();
}

/// A user's change of a configured immutable field (the target's name) is
/// denied, and the ConfigMap is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_the_target_is_denied_and_the_configmap_stays() {
    let test = "a_change_of_the_target_is_denied_and_the_configmap_stays";
    let Some(xp) = support::require_crossplane(test).await else {
        return;
    };
    let mut w = World::new(xp, "xp-immutable", None).await;
    for scope in BOTH {
        let name = format!("imm-{}", if scope == Scope::Cluster { "c" } else { "m" });
        let obj = w.object(scope, &name, &name, json!({"k": "v"}), json!({}));
        w.create(scope, &obj).await.unwrap();
        w.ready(scope, &name).await;
        let before = w.configmap_holds(&name, &json!({"k": "v"})).await;

        let mut moved = obj.clone();
        moved["spec"]["forProvider"]["manifest"]["metadata"]["name"] =
            json!(format!("{name}-moved"));
        let planned = w.plan(&[&moved], &[], &scope.entry(&w.r, &name));
        let err = w
            .objects(scope)
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"forProvider": {"manifest": {"metadata": {"name": format!("{name}-moved")}}}}})),
            )
            .await
            .expect_err("the change of the target's name is denied");
        assert!(err.to_string().contains("immutable-field"), "{test}: {err}");
        // Nothing moved: the ConfigMap is as it was, no other was made.
        let after = w.configmaps().get(&name).await.unwrap();
        assert_eq!(
            after.metadata.resource_version, before.metadata.resource_version,
            "{test}"
        );
        assert!(w
            .configmaps()
            .get_opt(&format!("{name}-moved"))
            .await
            .unwrap()
            .is_none());
        w.expect(
            format!("{scope:?} change of the target's name"),
            &planned,
            "replace required (denied)",
            "stayed as it was",
        );
    }
    w.report();
}

/// Deleting an MR: without Delete in its policies the ConfigMap stays, with
/// it the ConfigMap goes, and a protected MR's deletion is denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_follows_the_management_policies_and_protection() {
    let test = "deletion_follows_the_management_policies_and_protection";
    let Some(xp) = support::require_crossplane(test).await else {
        return;
    };
    let mut w = World::new(xp, "xp-delete", None).await;
    for scope in BOTH {
        let s = if scope == Scope::Cluster { "c" } else { "m" };
        // Without Delete: orphaned.
        let keep = format!("keep-{s}");
        let obj = w.object(
            scope,
            &keep,
            &keep,
            json!({"x": "1"}),
            json!({"managementPolicies": ["Observe", "Create", "Update", "LateInitialize"]}),
        );
        w.create(scope, &obj).await.unwrap();
        w.ready(scope, &keep).await;
        w.configmap_holds(&keep, &json!({"x": "1"})).await;
        let planned = w.plan(
            &[],
            &[scope.plan_name(&w.r, &keep)],
            &scope.entry(&w.r, &keep),
        );
        w.objects(scope)
            .delete(&keep, &DeleteParams::default())
            .await
            .unwrap();
        w.gone(&w.objects(scope), &keep, "Object").await;
        assert!(
            w.configmaps().get_opt(&keep).await.unwrap().is_some(),
            "{test}: the ConfigMap of an MR without Delete was deleted"
        );
        w.expect(
            format!("{scope:?} delete without Delete"),
            &planned,
            "orphan external",
            "stayed",
        );

        // With Delete (the default policies): deleted.
        let drop = format!("drop-{s}");
        let obj = w.object(scope, &drop, &drop, json!({"x": "2"}), json!({}));
        w.create(scope, &obj).await.unwrap();
        w.ready(scope, &drop).await;
        w.configmap_holds(&drop, &json!({"x": "2"})).await;
        let planned = w.plan(
            &[],
            &[scope.plan_name(&w.r, &drop)],
            &scope.entry(&w.r, &drop),
        );
        w.objects(scope)
            .delete(&drop, &DeleteParams::default())
            .await
            .unwrap();
        w.gone(&w.configmaps(), &drop, "ConfigMap").await;
        w.expect(
            format!("{scope:?} delete with Delete"),
            &planned,
            "delete external",
            "was deleted",
        );

        // Protected: the deletion is denied, the ConfigMap stays.
        let kept = format!("guarded-{s}");
        let mut obj = w.object(scope, &kept, &kept, json!({"x": "3"}), json!({}));
        obj["metadata"]["annotations"] = json!({"mrguard.io/deletion-protection": "true"});
        w.create(scope, &obj).await.unwrap();
        w.ready(scope, &kept).await;
        w.configmap_holds(&kept, &json!({"x": "3"})).await;
        let planned = w.plan(
            &[],
            &[scope.plan_name(&w.r, &kept)],
            &scope.entry(&w.r, &kept),
        );
        let err = w
            .objects(scope)
            .delete(&kept, &DeleteParams::default())
            .await
            .expect_err("deleting a protected MR is denied");
        assert!(
            err.to_string().contains("deletion-protection"),
            "{test}: {err}"
        );
        let still = w.objects(scope).get(&kept).await.unwrap();
        assert!(still.metadata.deletion_timestamp.is_none(), "{test}");
        assert!(
            w.configmaps().get_opt(&kept).await.unwrap().is_some(),
            "{test}"
        );
        assert_eq!(planned["verdict"], "denied", "{test}: {planned:#}");
        w.planned.push(Planned {
            scenario: format!("{scope:?} delete of a protected MR"),
            predicted: format!("{} (denied)", planned["action"].as_str().unwrap_or("")),
            observed: "stayed; the deletion was denied".into(),
        });
    }
    w.report();
}

/// A second Object targeting a ConfigMap another Object of its scope
/// manages is denied by the identity index, and the first one's ConfigMap
/// is untouched. Across scopes the provider configs differ (the
/// cluster-scoped kind's ProviderConfig against the namespaced kind's
/// ClusterProviderConfig, which could name other clusters): a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_object_on_one_configmap_is_denied_and_the_first_keeps_it() {
    let test = "a_second_object_on_one_configmap_is_denied_and_the_first_keeps_it";
    let Some(xp) = support::require_crossplane(test).await else {
        return;
    };
    let w = World::new(xp, "xp-identity", None).await;
    for (scope, other) in [
        (Scope::Cluster, Scope::Namespaced),
        (Scope::Namespaced, Scope::Cluster),
    ] {
        let s = if scope == Scope::Cluster { "c" } else { "m" };
        let (owner, cm) = (format!("owner-{s}"), format!("shared-{s}"));
        let first = w.object(scope, &owner, &cm, json!({"who": "owner"}), json!({}));
        w.create(scope, &first).await.unwrap();
        w.ready(scope, &owner).await;
        let before = w.configmap_holds(&cm, &json!({"who": "owner"})).await;

        // The index learns of the first Object from its watch: the second
        // is denied once it has.
        let intruder = format!("intruder-{s}");
        let second = w.object(scope, &intruder, &cm, json!({"who": "intruder"}), json!({}));
        let message = wait_for(
            &format!("the {scope:?} intruder to be denied"),
            support::WAIT,
            || async {
                let r = support::api::create(&w.admin, &w.collection(scope), &second, true)
                    .await
                    .ok()?;
                (r.status >= 400 && r.message().contains("external-identity"))
                    .then(|| r.message().to_string())
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{test}: {}", w.r.with_logs(e)));
        assert!(
            message.contains(&owner),
            "{test}: the denial names the owner: {message}"
        );
        let err = w
            .create(scope, &second)
            .await
            .expect_err("the intruder is denied");
        assert!(
            err.to_string().contains("external-identity"),
            "{test}: {err}"
        );
        assert!(w.objects(scope).get_opt(&intruder).await.unwrap().is_none());

        // The other scope's kind, through another provider config: warned.
        let across = w.object(
            other,
            &format!("across-{s}"),
            &cm,
            json!({"who": "across"}),
            json!({}),
        );
        let r = support::api::create(&w.admin, &w.collection(other), &across, true)
            .await
            .unwrap();
        assert!(r.status < 300, "{test}: {r:?}");
        assert!(
            r.warnings
                .iter()
                .any(|m| m.contains("external-identity") && m.contains(&owner)),
            "{test}: {r:?}"
        );

        let after = w.configmaps().get(&cm).await.unwrap();
        assert_eq!(
            after.metadata.resource_version, before.metadata.resource_version,
            "{test}: the owner's ConfigMap changed"
        );
    }
}

/// How many times the provider's log says it found `name` paused.
fn paused_reconciles(xp: &Crossplane, name: &str) -> usize {
    xp.provider_log()
        .lines()
        .filter(|l| l.contains("Reconciliation is paused") && l.contains(&format!("\"{name}\"")))
        .count()
}

/// `crossplane.io/paused`: a value other than "true" is warned about and
/// pauses nothing (the provider still repairs the ConfigMap); "true"
/// pauses (the provider looks and repairs nothing); deleting the paused MR
/// is denied (its finalizer would never go), and once unpaused the deletion
/// deletes the ConfigMap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_objects_are_left_alone_and_cannot_be_deleted_while_paused() {
    let test = "paused_objects_are_left_alone_and_cannot_be_deleted_while_paused";
    let Some(xp) = support::require_crossplane(test).await else {
        return;
    };
    let mut w = World::new(xp, "xp-paused", None).await;
    for scope in BOTH {
        let name = format!("paused-{}", if scope == Scope::Cluster { "c" } else { "m" });
        let obj = w.object(scope, &name, &name, json!({"v": "1"}), json!({}));
        w.create(scope, &obj).await.unwrap();
        w.ready(scope, &name).await;
        w.configmap_holds(&name, &json!({"v": "1"})).await;
        let objects = w.objects(scope);
        let tamper = |v: &str| {
            let (cms, name) = (w.configmaps(), name.clone());
            let patch = json!({"data": {"v": v}});
            async move {
                cms.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .unwrap()
            }
        };

        // "True" pauses nothing: mrguard warns, and a requested reconcile
        // repairs the tampered ConfigMap.
        let r = w
            .annotate(scope, &name, "crossplane.io/paused", "True")
            .await;
        assert!(
            r.warnings.iter().any(|m| m.contains("paused-value")),
            "{test}: {r:?}"
        );
        tamper("tampered").await;
        w.annotate(
            scope,
            &name,
            "crossplane.io/reconcile-requested-at",
            "repair-1",
        )
        .await;
        w.configmap_holds(&name, &json!({"v": "1"})).await;

        // "true" pauses: the provider looks, and leaves the ConfigMap.
        w.annotate(scope, &name, "crossplane.io/paused", "true")
            .await;
        let looked = paused_reconciles(xp, &name);
        tamper("tampered").await;
        w.annotate(
            scope,
            &name,
            "crossplane.io/reconcile-requested-at",
            "repair-2",
        )
        .await;
        wait_for(
            "the provider to look at the paused Object",
            RECONCILE,
            || async { (paused_reconciles(xp, &name) > looked).then_some(()) },
        )
        .await
        .unwrap_or_else(|e| panic!("{}", xp.with_logs(e)));
        let cm = w.configmaps().get(&name).await.unwrap();
        assert_eq!(
            cm.data.unwrap()["v"],
            "tampered",
            "{test}: a paused Object was reconciled"
        );

        // Deleting it while paused would hang on its finalizer: denied.
        let planned = w.plan(
            &[],
            &[scope.plan_name(&w.r, &name)],
            &scope.entry(&w.r, &name),
        );
        let err = objects
            .delete(&name, &DeleteParams::default())
            .await
            .expect_err("deleting a paused MR is denied");
        assert!(err.to_string().contains("paused-delete"), "{test}: {err}");
        assert_eq!(planned["verdict"], "denied", "{test}: {planned:#}");
        w.planned.push(Planned {
            scenario: format!("{scope:?} delete of a paused MR"),
            predicted: format!("{} (denied)", planned["action"].as_str().unwrap_or("")),
            observed: "stayed; the deletion was denied".into(),
        });
        // Unpaused, the deletion goes through and deletes the ConfigMap.
        w.annotate(scope, &name, "crossplane.io/paused", "false")
            .await;
        objects
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        w.gone(&w.configmaps(), &name, "ConfigMap").await;
        w.gone(&objects, &name, "Object").await;
    }
    w.report();
}

/// The Object's `status.atProvider.manifest`, once `ready` holds of it.
async fn observed_manifest<F>(w: &World, scope: Scope, name: &str, what: &str, ready: F) -> Value
where
    F: Fn(&Value) -> bool,
{
    let api = w.objects(scope);
    wait_for(
        &format!("{scope:?} Object {name}'s status.atProvider.manifest: {what}"),
        RECONCILE,
        || async {
            let o = api.get_opt(name).await.ok()??;
            let m = o.data["status"]["atProvider"]["manifest"].clone();
            ready(&m).then_some(m)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{}", w.xp.with_logs(e)))
}

/// Adoption: an `[Observe]` Object of a ConfigMap that exists is planned
/// as `adopt` and admitted without an adoption warning (nothing can delete
/// the ConfigMap); the provider fills `status.atProvider` and writes
/// nothing. An out-of-band change then shows in `plan --live` as drift,
/// a key only the cloud has included; given Update, the plan's `update in
/// place` sets the spec's value, and keeps that key, as the built-in
/// `cloudOnlyMapKeys: Keep` says (provider-kubernetes applies its manifest
/// as a merge patch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observed_configmap_is_adopted_and_its_drift_planned() {
    let test = "an_observed_configmap_is_adopted_and_its_drift_planned";
    let Some(xp) = support::require_crossplane(test).await else {
        return;
    };
    let mut w = World::new(xp, "xp-adopt", None).await;
    for scope in BOTH {
        let s = if scope == Scope::Cluster { "c" } else { "m" };
        let (name, cm) = (format!("adopt-{s}"), format!("legacy-{s}"));
        let existing: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": cm}, "data": {"a": "old"}
        }))
        .unwrap();
        let before = w
            .configmaps()
            .create(&PostParams::default(), &existing)
            .await
            .unwrap();

        let obj = w.object(
            scope,
            &name,
            &cm,
            json!({"a": "old"}),
            json!({"managementPolicies": ["Observe"]}),
        );
        let entry = scope.entry(&w.r, &name);
        let planned = w.plan(&[&obj], &[], &entry);
        let r = support::api::create(&w.admin, &w.collection(scope), &obj, false)
            .await
            .unwrap();
        assert!(r.status < 300, "{test}: {r:?}");
        assert!(
            !r.warnings.iter().any(|m| m.contains("adoption")),
            "{test}: an Observe-only Object deletes nothing: {r:?}"
        );
        w.ready(scope, &name).await;
        observed_manifest(&w, scope, &name, "data.a is \"old\"", |m| {
            m["data"]["a"] == "old"
        })
        .await;
        let now = w.configmaps().get(&cm).await.unwrap();
        assert_eq!(
            now.metadata.resource_version, before.metadata.resource_version,
            "{test}: an Observe-only Object wrote to its ConfigMap"
        );
        w.expect(
            format!("{scope:?} [Observe] Object of an existing ConfigMap"),
            &planned,
            "adopt",
            "was observed, not written",
        );

        // Out of band: a changed value and a key the spec does not set.
        w.configmaps()
            .patch(
                &cm,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"a": "changed", "owner": "ops"}})),
            )
            .await
            .unwrap();
        w.annotate(
            scope,
            &name,
            "crossplane.io/reconcile-requested-at",
            "observe-1",
        )
        .await;
        observed_manifest(&w, scope, &name, "data.owner is \"ops\"", |m| {
            m["data"]["owner"] == "ops"
        })
        .await;
        let planned = w.plan(&[&obj], &[], &entry);
        let drift = |path: &str| {
            planned["fields"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|f| f["path"] == path)
                .cloned()
                .unwrap_or_else(|| panic!("{test}: no {path} in {planned:#}"))
        };
        let a = drift("spec.forProvider.manifest.data.a");
        assert_eq!(a["mark"]["cloud"], "changed", "{test}: {a:#}");
        let owner = drift("spec.forProvider.manifest.data.owner");
        assert_eq!(owner["mark"]["cloud"], "ops", "{test}: {owner:#}");
        assert!(
            owner["mark"]["then"]
                .as_str()
                .unwrap_or("")
                .contains("only reads it"),
            "{test}: {owner:#}"
        );
        // Fields of the live ConfigMap the spec never set are no drift.
        assert!(
            !planned["fields"].to_string().contains("resourceVersion"),
            "{test}: {planned:#}"
        );

        // Given Update: the provider makes the ConfigMap the spec's.
        let mut managed = obj.clone();
        managed["spec"]["managementPolicies"] = json!(["*"]);
        let planned = w.plan(&[&managed], &[], &entry);
        let owner = planned["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|f| f["path"] == "spec.forProvider.manifest.data.owner")
            .cloned()
            .unwrap_or_else(|| panic!("{test}: {planned:#}"));
        assert!(
            owner["mark"]["then"]
                .as_str()
                .unwrap_or("")
                .contains("the provider keeps it"),
            "{test}: {owner:#}"
        );
        let r = w
            .patch(scope, &name, json!({"spec": {"managementPolicies": ["*"]}}))
            .await;
        assert!(r.status < 300, "{test}: {r:?}");
        w.configmap_holds(&cm, &json!({"a": "old", "owner": "ops"}))
            .await;
        w.expect(
            format!("{scope:?} adopted Object given Update"),
            &planned,
            "update in place",
            "took the spec's value and kept the cloud-only key, as planned",
        );
    }
    w.report();
}

/// `crossplane.io/poll-interval` and `reconcile-requested-at` as
/// crossplane-runtime v2.3 reads them, with the provider's minimum
/// configured at 1s: `500ms` is allowed with a warning that it is raised,
/// `5 minutes` and `-1s` are denied, and a reconcile request makes the
/// provider repair a ConfigMap changed out of band (its poll is 1h here).
/// provider-kubernetes v1.3.0's Object records no
/// `status.lastHandledReconcileAt`, so the repair is the evidence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_annotations_act_as_the_provider_reads_them() {
    let test = "reconcile_annotations_act_as_the_provider_reads_them";
    let Some(xp) = support::require_crossplane(test).await else {
        return;
    };
    let builtin = include_str!("../../crates/policy/src/admission/config/builtin.yaml");
    assert!(builtin.contains("\nminPollInterval: 0s\n"), "{test}");
    let config = builtin.replace("\nminPollInterval: 0s\n", "\nminPollInterval: 1s\n");
    let mut w = World::new(xp, "xp-reconcile", Some(&config)).await;
    for scope in BOTH {
        let s = if scope == Scope::Cluster { "c" } else { "m" };
        let name = format!("timed-{s}");
        let mut obj = w.object(scope, &name, &name, json!({"v": "1"}), json!({}));
        obj["metadata"]["annotations"] = json!({"crossplane.io/poll-interval": "500ms"});
        let planned = w.plan(&[&obj], &[], &scope.entry(&w.r, &name));
        let r = support::api::create(&w.admin, &w.collection(scope), &obj, false)
            .await
            .unwrap();
        assert!(r.status < 300, "{test}: {r:?}");
        assert!(
            r.warnings
                .iter()
                .any(|m| m.contains("reconcile-annotations") && m.contains("raises it to 1s")),
            "{test}: {r:?}"
        );
        w.configmap_holds(&name, &json!({"v": "1"})).await;
        w.expect(
            format!("{scope:?} create with poll-interval 500ms"),
            &planned,
            "create",
            "was created",
        );
        w.ready(scope, &name).await;

        for bad in ["5 minutes", "-1s"] {
            let r = w
                .patch(
                    scope,
                    &name,
                    json!({"metadata": {"annotations": {"crossplane.io/poll-interval": bad}}}),
                )
                .await;
            assert!(
                r.status >= 400 && r.message().contains("reconcile-annotations"),
                "{test}: {bad}: {r:?}"
            );
            assert!(
                r.message()
                    .contains("the provider keeps its default poll interval"),
                "{test}: {r:?}"
            );
        }

        // A reconcile request, on an Object the provider polls hourly.
        w.annotate(scope, &name, "crossplane.io/poll-interval", "1h")
            .await;
        w.configmaps()
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"v": "tampered"}})),
            )
            .await
            .unwrap();
        let r = w
            .patch(
                scope,
                &name,
                json!({"metadata": {"annotations": {"crossplane.io/reconcile-requested-at": ""}}}),
            )
            .await;
        assert!(r.status >= 400, "{test}: an empty request is denied: {r:?}");
        w.annotate(
            scope,
            &name,
            "crossplane.io/reconcile-requested-at",
            "now-1",
        )
        .await;
        w.configmap_holds(&name, &json!({"v": "1"})).await;
    }
    w.report();
}

/// Activation with Crossplane core: both Object kinds start as Inactive
/// MRDs, without CRDs, and the provider (safe-start) waits. An MRAP naming
/// the namespaced kind in the singular is admitted with mrguard's warning
/// naming the MRD; fixed, core activates that MRD alone, its CRD appears,
/// mrguard's webhooks cover the kind within 10 s, and the provider
/// reconciles an Object of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_activates_a_kind_and_mrguard_covers_it_before_the_provider_reconciles() {
    let test = "core_activates_a_kind_and_mrguard_covers_it_before_the_provider_reconciles";
    let options = CrossplaneOptions {
        objects: ObjectKinds::InactiveMrds,
        core: true,
    };
    let Some(xp) = audited_crossplane(test, &options).await else {
        return;
    };
    let mut w = World::install(xp, "xp-activation", None).await;
    let crds: Api<CustomResourceDefinition> = Api::all(w.admin.clone());
    let mrd = "objects.kubernetes.m.crossplane.io";
    let cluster_mrd = "objects.kubernetes.crossplane.io";
    for name in [mrd, cluster_mrd] {
        assert!(
            crds.get_opt(name).await.unwrap().is_none(),
            "{test}: {name} has a CRD before any MRAP"
        );
    }
    // mrguard's MRAP webhook, once its caBundle is in place.
    let path = "/apis/apiextensions.crossplane.io/v1alpha1/managedresourceactivationpolicies";
    let mrap = |patterns: &[&str]| {
        serde_json::to_value(w.r.object(json!({
            "apiVersion": "apiextensions.crossplane.io/v1alpha1",
            "kind": "ManagedResourceActivationPolicy",
            "metadata": {"name": "objects"},
            "spec": {"activate": patterns},
        })))
        .unwrap()
    };
    let singular = "object.kubernetes.m.crossplane.io";
    let warned = wait_for(
        "mrguard's warning about the singular",
        support::WAIT,
        || async {
            let r = support::api::create(&w.admin, path, &mrap(&[singular]), true)
                .await
                .ok()?;
            r.warnings
                .iter()
                .any(|m| m.contains(&format!("did you mean \"{mrd}\"")))
                .then_some(r)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{test}: {}", w.r.with_logs(e)));
    assert!(
        warned.status < 300,
        "{test}: a warning, not a denial: {warned:?}"
    );
    let r = support::api::create(&w.admin, path, &mrap(&[singular]), false)
        .await
        .unwrap();
    assert!(r.status < 300, "{test}: {r:?}");
    // The singular activates nothing: core leaves both MRDs inactive.
    let mrds = support::api::request(
        &w.admin,
        "GET",
        &format!("/apis/apiextensions.crossplane.io/v1alpha1/managedresourcedefinitions/{mrd}"),
        "application/json",
        None,
    )
    .await
    .unwrap();
    assert_eq!(mrds.body["spec"]["state"], "Inactive", "{test}: {mrds:?}");

    // Fixed: core activates the MRD and creates its CRD.
    let r = support::api::request(
        &w.admin,
        "PATCH",
        &format!("{path}/objects"),
        "application/merge-patch+json",
        Some(&json!({"spec": {"activate": [mrd]}})),
    )
    .await
    .unwrap();
    assert!(r.status < 300, "{test}: {r:?}");
    wait_for(
        &format!("core to create and establish the CRD {mrd}"),
        RECONCILE,
        || async {
            let crd = crds.get_opt(mrd).await.ok()??;
            crd.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{}", xp.with_logs(e)));
    let established = std::time::Instant::now();
    w.covers(Scope::Namespaced, std::time::Duration::from_secs(10))
        .await;
    let covered = established.elapsed();
    assert!(
        crds.get_opt(cluster_mrd).await.unwrap().is_none(),
        "{test}: an MRD no MRAP names was activated"
    );

    // The provider starts the kind's controller and reconciles through
    // mrguard, which defaults the Object.
    let name = "activated";
    let obj = w.object(
        Scope::Namespaced,
        name,
        name,
        json!({"on": "yes"}),
        json!({}),
    );
    let planned = w.plan(&[&obj], &[], &Scope::Namespaced.entry(&w.r, name));
    let created = w.create(Scope::Namespaced, &obj).await.unwrap();
    assert_eq!(
        created.data["spec"]["providerConfigRef"],
        json!({"kind": "ClusterProviderConfig", "name": "default"}),
        "{test}"
    );
    w.configmap_holds(name, &json!({"on": "yes"})).await;
    w.ready(Scope::Namespaced, name).await;
    w.expect(
        "Namespaced create of a kind core just activated".into(),
        &planned,
        "create",
        "was created",
    );
    say(format!(
        "{test}: mrguard's webhooks covered the activated kind {:.1} s after its CRD was established",
        covered.as_secs_f64()
    ));
    w.report();
}

/// Restarts: the provider is killed during a reconcile and mrguard while
/// the provider is down; the user's writes accepted meanwhile all reach
/// their ConfigMaps, the one refused while mrguard was down reaches
/// nothing, the provider's writes refused meanwhile succeed once mrguard is
/// back, and no ConfigMap exists that no Object asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_provider_and_mrguard_lose_no_write() {
    let test = "killed_provider_and_mrguard_lose_no_write";
    let Some(xp) = audited_crossplane(test, &CrossplaneOptions::default()).await else {
        return;
    };
    let mut w = World::new(xp, "xp-restarts", None).await;
    let s = |scope: Scope| if scope == Scope::Cluster { "c" } else { "m" };
    for scope in BOTH {
        let name = format!("kept-{}", s(scope));
        let obj = w.object(scope, &name, &name, json!({"v": "1"}), json!({}));
        w.create(scope, &obj).await.unwrap();
    }
    for scope in BOTH {
        w.ready(scope, &format!("kept-{}", s(scope))).await;
    }

    // An update, and the provider killed while it reconciles it.
    let data = |v: &str| json!({"spec": {"forProvider": {"manifest": {"data": {"v": v}}}}});
    for scope in BOTH {
        let r = w
            .patch(scope, &format!("kept-{}", s(scope)), data("2"))
            .await;
        assert!(r.status < 300, "{test}: {r:?}");
    }
    xp.kill_provider();
    // While it is down: another update, and a new Object.
    for scope in BOTH {
        let r = w
            .patch(scope, &format!("kept-{}", s(scope)), data("3"))
            .await;
        assert!(r.status < 300, "{test}: {r:?}");
        let late = format!("late-{}", s(scope));
        let obj = w.object(scope, &late, &late, json!({"v": "late"}), json!({}));
        w.create(scope, &obj).await.unwrap();
    }

    // mrguard killed: the validating webhook fails closed, so the user's
    // write is refused, not lost.
    for i in 0..w.r.replicas.len() {
        w.r.kill_replica(i);
    }
    for scope in BOTH {
        let r = w
            .patch(scope, &format!("kept-{}", s(scope)), data("refused"))
            .await;
        assert!(
            r.status >= 500 && r.message().contains("validate.mrguard.io"),
            "{test}: with mrguard down the update is refused: {r:?}"
        );
    }
    // The provider back while mrguard is down: it retries what is refused.
    xp.start_provider()
        .await
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    let down = std::time::Instant::now();
    wait_for(
        "the provider to write to an Object while mrguard is down (refused)",
        RECONCILE,
        || async {
            let log = std::fs::read_to_string(xp.cluster.audit_log()).ok()?;
            provider_writes(&log)
                .iter()
                .any(|w| w.3 >= 500)
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{}", xp.with_logs(e)));
    w.r.start_replica()
        .await
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    w.r.wait_admission()
        .await
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    let restarted = down.elapsed();

    for scope in BOTH {
        let (kept, late) = (format!("kept-{}", s(scope)), format!("late-{}", s(scope)));
        w.configmap_holds(&kept, &json!({"v": "3"})).await;
        w.configmap_holds(&late, &json!({"v": "late"})).await;
        let o = w.ready(scope, &kept).await;
        assert_eq!(
            o.data["spec"]["forProvider"]["manifest"]["data"],
            json!({"v": "3"}),
            "{test}: the refused update reached the Object"
        );
        w.ready(scope, &late).await;
    }
    // No ConfigMap no Object asked for (the namespace's own root CA aside).
    let mut names: Vec<String> = w
        .configmaps()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    names.sort();
    assert_eq!(names, ["kept-c", "kept-m", "late-c", "late-m"], "{test}");

    let log = std::fs::read_to_string(xp.cluster.audit_log()).unwrap_or_default();
    let writes = provider_writes(&log);
    let unavailable = writes.iter().filter(|w| w.3 >= 500).count();
    let refused: Vec<_> = writes
        .iter()
        .filter(|w| (400..500).contains(&w.3) && w.3 != 409)
        .collect();
    assert!(
        refused.is_empty(),
        "{test}: mrguard refused the provider: {refused:?}"
    );
    say(format!(
        "{test}: the provider wrote {} times; {unavailable} failed while mrguard was down and were retried; mrguard was back {:.1} s after the provider",
        writes.len(),
        restarted.as_secs_f64()
    ));
}
