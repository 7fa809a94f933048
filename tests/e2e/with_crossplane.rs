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
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::preflight::{mrguard_in, text};
use crate::support::crossplane::running::{self, RECONCILE};
use crate::support::crossplane::{Crossplane, CrossplaneOptions};
use crate::support::{self, cluster::ClusterOptions, wait_for, Cluster, Options, Release};

/// mrguard's configuration for the tests: the Object kinds' target
/// (`spec.forProvider.manifest`'s apiVersion, kind, namespace and name)
/// names the external resource, so changing it would make the provider
/// create another object and leave the first behind.
pub(crate) const CONFIG: &str = "\
resources:
  - apiGroups: [\"kubernetes.crossplane.io\", \"kubernetes.m.crossplane.io\"]
    kinds: [\"Object\"]
    immutableFields:
      - spec.forProvider.manifest.apiVersion
      - spec.forProvider.manifest.kind
      - spec.forProvider.manifest.metadata.name
      - spec.forProvider.manifest.metadata.namespace
";

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
    pub(crate) async fn new(xp: &'static Crossplane, test: &str, config: &str) -> World {
        let r = support::install(
            xp.cluster,
            test,
            Options {
                config: Some(config.into()),
                values: Some(VALUES.into()),
                ..Options::default()
            },
        )
        .await;
        for scope in BOTH {
            wait_for(
                &format!("mrguard's webhooks to cover {} Objects", scope.group()),
                support::WAIT,
                || async {
                    r.webhooks_ready(scope.group(), "objects")
                        .await
                        .then_some(())
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{test}: {}", r.with_logs(e)));
        }
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
        std::fs::write(
            dir.path().join("config.yaml"),
            self.r.options.config.clone().unwrap_or_default(),
        )
        .unwrap();
        let kc = self.xp.cluster.admin_kubeconfig().display().to_string();
        let mut args = vec![
            "plan",
            "--live",
            "--kubeconfig",
            &kc,
            "--config",
            "config.yaml",
            "-o",
            "json",
        ];
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
        use std::io::Write;
        let mut s = String::new();
        for p in &self.planned {
            s.push_str(&format!(
                "plan-vs-reality: {} | predicted: {} | observed: {}\n",
                p.scenario, p.predicted, p.observed
            ));
        }
        let _ = std::io::stderr().write_all(s.as_bytes());
    }
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
    let mut w = World::new(xp, "xp-happy", CONFIG).await;
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
    let denied: Vec<_> = writes.iter().filter(|w| w.3 >= 400).collect();
    assert!(
        denied.is_empty(),
        "{test}: the provider's writes refused: {denied:?}"
    );
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
    eprintln!(
        "{test}: the provider wrote {} times ({main} object, {status} status), 0 refused; mrguard allowed {allowed} Object requests, denied 0",
        writes.len()
    );
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
    let mut w = World::new(xp, "xp-immutable", CONFIG).await;
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
    let mut w = World::new(xp, "xp-delete", CONFIG).await;
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
