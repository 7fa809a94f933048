//! Writes the audit's findings as policy reports (`--policy-reports`):
//! lists the reports mrguard wrote before (by label), asks
//! `mrguard_policy::commands::reports::plan` what should change, and applies exactly
//! that with server-side apply; reports that should go are deleted. An
//! unchanged pass reads the reports and writes nothing.

use futures::StreamExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject};
use kube::Api;
use serde_json::Value;

use crate::kube::api::{api_err, list_values, KubeError, FIELD_MANAGER};
use crate::metrics::controller::ControllerMetrics;
use mrguard_policy::commands::reports::{
    self, Flavor, PassInput, MANAGED_BY, MANAGED_BY_LABEL, MAX_REPORT_BYTES,
};

/// The resource name for errors and metrics (`plural.group`).
fn resource_name(flavor: Flavor, namespaced: bool) -> &'static str {
    match (flavor, namespaced) {
        (Flavor::WgPolicyK8s, true) => "policyreports.wgpolicyk8s.io",
        (Flavor::WgPolicyK8s, false) => "clusterpolicyreports.wgpolicyk8s.io",
        (Flavor::OpenReports, true) => "reports.openreports.io",
        (Flavor::OpenReports, false) => "clusterreports.openreports.io",
    }
}

/// What one sync did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Reports created or replaced.
    pub applied: usize,
    /// Reports deleted.
    pub deleted: usize,
    /// Reports left as they were.
    pub unchanged: usize,
}

/// Writes reports of one flavor.
pub struct ReportWriter {
    client: kube::Client,
    flavor: Flavor,
    max_bytes: usize,
}

impl ReportWriter {
    /// A writer of `flavor` reports.
    pub fn new(client: kube::Client, flavor: Flavor) -> Self {
        Self {
            client,
            flavor,
            max_bytes: MAX_REPORT_BYTES,
        }
    }

    /// Overrides the report size limit (tests exercise splitting with it).
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    fn api_resource(&self, namespaced: bool) -> ApiResource {
        ApiResource {
            group: self.flavor.group().into(),
            version: self.flavor.version().into(),
            api_version: self.flavor.api_version(),
            kind: self.flavor.kind(namespaced).into(),
            plural: self.flavor.plural(namespaced).into(),
        }
    }

    fn api(&self, namespace: &str) -> Api<DynamicObject> {
        let ar = self.api_resource(!namespace.is_empty());
        if namespace.is_empty() {
            Api::all_with(self.client.clone(), &ar)
        } else {
            Api::namespaced_with(self.client.clone(), namespace, &ar)
        }
    }

    /// Every report mrguard wrote, of both scopes.
    async fn existing(&self) -> Result<Vec<Value>, KubeError> {
        let mut out = Vec::new();
        for namespaced in [true, false] {
            let ar = self.api_resource(namespaced);
            let params = ListParams::default()
                .labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"))
                .limit(50);
            let mut pages = std::pin::pin!(list_values(self.client.clone(), &ar, params));
            while let Some(page) = pages.next().await {
                let page =
                    page.map_err(api_err("list", resource_name(self.flavor, namespaced), ""))?;
                out.extend(page);
            }
        }
        Ok(out)
    }

    /// Brings the reports in line with one audit pass.
    pub async fn sync(&self, input: &PassInput) -> Result<SyncStats, KubeError> {
        let existing = self.existing().await?;
        let plan = reports::plan(
            self.flavor,
            input,
            &existing,
            jiff::Timestamp::now(),
            self.max_bytes,
        );
        let mut stats = SyncStats {
            unchanged: plan.unchanged,
            ..SyncStats::default()
        };
        // Forced: the reports are mrguard's alone; a conflict can only come
        // from someone editing them by hand.
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        // One report that cannot be written (a namespace's quota, a webhook)
        // does not hold the others back; the first error is returned.
        let mut first_error = None;
        for report in &plan.apply {
            let ns = report
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            let name = report
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            match self.api(ns).patch(name, &pp, &Patch::Apply(report)).await {
                Ok(_) => {
                    tracing::info!(
                        kind = self.flavor.kind(!ns.is_empty()),
                        namespace = ns,
                        name,
                        "policy report written"
                    );
                    stats.applied += 1;
                }
                Err(e) => {
                    first_error.get_or_insert(api_err(
                        "patch",
                        resource_name(self.flavor, !ns.is_empty()),
                        object(ns, name),
                    )(e));
                }
            }
        }
        for r in &plan.delete {
            match self
                .api(&r.namespace)
                .delete(&r.name, &DeleteParams::default())
                .await
            {
                Ok(_) => {
                    tracing::info!(
                        kind = self.flavor.kind(!r.namespace.is_empty()),
                        namespace = %r.namespace,
                        name = %r.name,
                        "policy report deleted"
                    );
                    stats.deleted += 1;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    first_error.get_or_insert(api_err(
                        "delete",
                        resource_name(self.flavor, !r.namespace.is_empty()),
                        object(&r.namespace, &r.name),
                    )(e));
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok(stats)
    }
}

/// Syncs and logs the outcome; failures are retried on the next pass.
pub(crate) async fn sync_logged(
    writer: &ReportWriter,
    input: &PassInput,
    metrics: &ControllerMetrics,
) {
    match writer.sync(input).await {
        Ok(s) => tracing::info!(
            applied = s.applied,
            deleted = s.deleted,
            unchanged = s.unchanged,
            "policy reports synced"
        ),
        Err(e) if e.is_not_found() => {
            e.count(Some(metrics));
            tracing::warn!(
                error = %e,
                "policy reports: the {} CRDs are not installed; install them or set --policy-reports=off",
                writer.flavor.group()
            );
        }
        Err(e) => e.log(
            Some(metrics),
            "policy reports: failed to write; retrying on the next audit pass",
        ),
    }
}

fn object(ns: &str, name: &str) -> String {
    if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::leader::audit::listing::{AuditFinding, KindReport};
    use crate::controller::leader::audit::PassCollector;
    use crate::controller::replica::coverage::tests::{fixture_crds, summaries};
    use crate::controller::replica::coverage::Coverage;
    use crate::controller::replica::coverage::MrKind;
    use crate::kube::mock::{self, list, status, Reply};
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    fn bucket_kind() -> MrKind {
        Coverage::from_crds(&summaries(&fixture_crds()))
            .kinds()
            .find(|k| k.kind == "VPC" && k.namespaced)
            .unwrap()
            .clone()
    }

    fn finding(ns: &str, name: &str) -> AuditFinding {
        AuditFinding {
            group: "ec2.aws.m.upbound.io".into(),
            kind: "VPC".into(),
            namespace: ns.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            rule: "deletion-policy".into(),
            action: "Deny".into(),
            message: "bad".into(),
            fix: None,
            exception: None,
        }
    }

    /// Reports by request path.
    type Store = Arc<Mutex<BTreeMap<String, Value>>>;

    fn cluster() -> (kube::Client, Store, Arc<Mutex<usize>>) {
        cluster_with(false)
    }

    /// An API server holding reports by path, counting writes.
    fn cluster_with(forbid_cluster_reports: bool) -> (kube::Client, Store, Arc<Mutex<usize>>) {
        let store: Store = Arc::default();
        let writes: Arc<Mutex<usize>> = Arc::default();
        let (s, w) = (store.clone(), writes.clone());
        let (client, _api) = mock::client(move |r| {
            let mut s = s.lock().unwrap();
            match r.method.as_str() {
                "GET" => {
                    let want_ns = !r.path.ends_with("/clusterpolicyreports");
                    let mut items: Vec<Value> = s
                        .values()
                        .filter(|v| v["metadata"].get("namespace").is_some() == want_ns)
                        .cloned()
                        .collect();
                    // An item that is not an object is skipped, not a panic.
                    items.push(Value::String("not a report".into()));
                    assert!(
                        r.query
                            .contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dmrguard"),
                        "{}",
                        r.query
                    );
                    Reply::Json(200, list("List", "wgpolicyk8s.io/v1alpha2", items))
                }
                "PATCH" if forbid_cluster_reports && r.path.contains("/clusterpolicyreports/") => {
                    Reply::Json(
                        403,
                        status(403, "Forbidden", "clusterpolicyreports is forbidden"),
                    )
                }
                "PATCH" => {
                    assert!(
                        r.query.contains("fieldManager=mrguard") && r.query.contains("force=true")
                    );
                    assert_eq!(r.content_type, "application/apply-patch+yaml");
                    *w.lock().unwrap() += 1;
                    s.insert(r.path.clone(), r.body.clone());
                    Reply::Json(200, r.body.clone())
                }
                "DELETE" => {
                    *w.lock().unwrap() += 1;
                    match s.remove(&r.path) {
                        Some(v) => Reply::Json(200, v),
                        None => Reply::Json(404, status(404, "NotFound", "gone")),
                    }
                }
                _ => Reply::Json(405, status(405, "MethodNotAllowed", "no")),
            }
        });
        (client, store, writes)
    }

    #[tokio::test]
    async fn reports_appear_change_disappear_and_an_unchanged_pass_writes_nothing() {
        let (client, store, writes) = cluster();
        let writer = ReportWriter::new(client, Flavor::WgPolicyK8s);
        let kind = bucket_kind();
        let pass = |findings: Vec<AuditFinding>, ns: &[&str]| {
            let mut c = PassCollector::default();
            c.kind(
                &kind,
                &KindReport {
                    findings,
                    namespaces: ns.iter().map(|s| s.to_string()).collect(),
                    ..Default::default()
                },
            );
            c.finish()
        };
        let s = writer
            .sync(&pass(vec![finding("team-a", "b1")], &["team-a", "team-b"]))
            .await
            .unwrap();
        assert_eq!(
            s,
            SyncStats {
                applied: 2,
                deleted: 0,
                unchanged: 0
            }
        );
        let a = store.lock().unwrap()
            ["/apis/wgpolicyk8s.io/v1alpha2/namespaces/team-a/policyreports/mrguard"]
            .clone();
        assert_eq!(
            a["results"][0]["resources"][0]["apiVersion"],
            "ec2.aws.m.upbound.io/v1beta1"
        );
        assert_eq!(a["results"][0]["resources"][0]["uid"], "uid-b1");

        let before = *writes.lock().unwrap();
        let s = writer
            .sync(&pass(vec![finding("team-a", "b1")], &["team-a", "team-b"]))
            .await
            .unwrap();
        assert_eq!(
            s,
            SyncStats {
                applied: 0,
                deleted: 0,
                unchanged: 2
            }
        );
        assert_eq!(*writes.lock().unwrap(), before);

        // Fixed in team-a, team-b emptied of MRs.
        let s = writer.sync(&pass(vec![], &["team-a"])).await.unwrap();
        assert_eq!(
            s,
            SyncStats {
                applied: 1,
                deleted: 1,
                unchanged: 0
            }
        );
        let st = store.lock().unwrap();
        assert_eq!(st.len(), 1);
        assert_eq!(st.values().next().unwrap()["summary"]["fail"], 0);
    }

    #[tokio::test]
    async fn one_report_that_cannot_be_written_does_not_hold_the_others_back() {
        let (client, store, _) = cluster_with(true);
        let mut c = PassCollector::default();
        c.kind(
            &bucket_kind(),
            &KindReport {
                findings: vec![finding("team-a", "b1")],
                namespaces: ["".to_string(), "team-a".to_string()].into(),
                ..Default::default()
            },
        );
        let e = ReportWriter::new(client, Flavor::WgPolicyK8s)
            .sync(&c.finish())
            .await
            .unwrap_err();
        assert_eq!(e.status_code(), Some(403));
        assert!(
            e.to_string()
                .starts_with("failed to patch clusterpolicyreports.wgpolicyk8s.io mrguard"),
            "{e}"
        );
        assert_eq!(
            store.lock().unwrap().len(),
            1,
            "the namespaced report is written"
        );
    }

    #[tokio::test]
    async fn a_missing_crd_or_permission_is_an_error_naming_the_resource() {
        let (client, _api) = mock::client(|_| {
            Reply::Json(
                404,
                status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ),
            )
        });
        let e = ReportWriter::new(client, Flavor::OpenReports)
            .sync(&PassInput::default())
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("failed to list reports.openreports.io"),
            "{e}"
        );
        assert!(e.is_not_found());
    }
}
