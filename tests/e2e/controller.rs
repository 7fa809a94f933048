//! The companion controller against a real API server, with the chart's
//! RBAC: webhook configurations kept and repaired, coverage following
//! CRDs, certificates recreated, MR watches, Events and the audit.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

use crate::support::release::covers;
use crate::support::{self, wait_for, Options, WAIT};

fn b64(b: &[u8]) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b)
}

/// A caBundle broken by hand and rules emptied (say, by a `helm upgrade`
/// from an old chart) are put back within seconds, on both
/// configurations, without touching what the chart owns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_ca_bundle_and_emptied_rules_are_repaired() {
    let Some(cluster) =
        support::require_cluster("a_broken_ca_bundle_and_emptied_rules_are_repaired").await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-repair", Options::default()).await;
    let ca = r.secret_ca().await.unwrap();
    let garbage =
        b64(b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n");
    let broken = json!([
        {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": garbage},
        {"op": "replace", "path": "/webhooks/0/rules", "value": []},
    ]);
    let pp = PatchParams::default();
    let patch = Patch::Json::<()>(serde_json::from_value(broken).unwrap());
    let replica = &r.replicas[0];
    let updates = |m: &crate::support::Metrics| {
        m.get(
            "mrguard_controller_webhook_updates_total",
            &[("kind", "ValidatingWebhookConfiguration")],
        ) + m.get(
            "mrguard_controller_webhook_updates_total",
            &[("kind", "MutatingWebhookConfiguration")],
        )
    };
    let before = updates(&replica.metrics().await.unwrap());
    // What the API server stored (the controller may repair it at once).
    let v = r
        .validating()
        .patch(&r.fullname, &pp, &patch)
        .await
        .unwrap();
    let m = r.mutating().patch(&r.fullname, &pp, &patch).await.unwrap();
    let (m, v) = (
        serde_json::to_value(m).unwrap(),
        serde_json::to_value(v).unwrap(),
    );
    // The API server omits an empty list.
    let rules = &v["webhooks"][0]["rules"];
    assert!(rules.is_null() || *rules == json!([]), "{rules}");
    assert_eq!(m["webhooks"][0]["clientConfig"]["caBundle"], json!(garbage));

    wait_for("both configurations repaired", WAIT, || async {
        r.webhooks_ready("s3.aws.upbound.io", "buckets")
            .await
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let (m, v) = r.configurations().await.unwrap();
    for c in [&m, &v] {
        let w = &c["webhooks"][0];
        assert_eq!(w["clientConfig"]["caBundle"], json!(b64(&ca)));
        // The chart's fields are untouched: the URL, the policies.
        assert!(w["clientConfig"]["url"]
            .as_str()
            .unwrap()
            .starts_with("https://127.0.0.1:"));
        assert!(covers(&w["rules"], "nop.crossplane.io", "nopresources"));
    }
    assert_eq!(v["webhooks"][0]["failurePolicy"], "Fail");
    assert_eq!(m["webhooks"][0]["failurePolicy"], "Ignore");
    // Both repairs were the controller's. The counter moves after the
    // write returns, so the repair can be seen a moment before it is
    // counted.
    wait_for("both repairs counted", WAIT, || async {
        let after = updates(&replica.metrics().await.ok()?);
        (after >= before + 2.0).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    // Admission works again.
    r.wait_admission().await.unwrap();
}

/// Deleting a configuration is the emergency exit: the controller sees it
/// (`mrguard_controller_webhook_configuration_present` drops to 0) and
/// never recreates it, while it keeps repairing the other one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_configuration_stays_deleted() {
    let Some(cluster) = support::require_cluster("a_deleted_configuration_stays_deleted").await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-emergency", Options::default()).await;
    r.mutating()
        .delete(&r.fullname, &DeleteParams::default())
        .await
        .unwrap();
    let replica = &r.replicas[0];
    wait_for("the controller to see the deletion", WAIT, || async {
        let m = replica.metrics().await.ok()?;
        (m.has(
            "mrguard_controller_webhook_configuration_present",
            &[("kind", "MutatingWebhookConfiguration")],
        ) && m.get(
            "mrguard_controller_webhook_configuration_present",
            &[("kind", "MutatingWebhookConfiguration")],
        ) == 0.0)
            .then_some(())
    })
    .await
    .unwrap();
    // Prove the controller is still at work after the deletion: it repairs
    // the validating configuration...
    let updates_before = replica.metrics().await.unwrap().get(
        "mrguard_controller_webhook_updates_total",
        &[("kind", "ValidatingWebhookConfiguration")],
    );
    let patch = Patch::Json::<()>(
        serde_json::from_value(
            json!([{"op": "replace", "path": "/webhooks/0/rules", "value": []}]),
        )
        .unwrap(),
    );
    r.validating()
        .patch(&r.fullname, &PatchParams::default(), &patch)
        .await
        .unwrap();
    wait_for("the validating configuration repaired", WAIT, || async {
        let m = replica.metrics().await.ok()?;
        let v = serde_json::to_value(r.validating().get(&r.fullname).await.ok()?).ok()?;
        (m.get(
            "mrguard_controller_webhook_updates_total",
            &[("kind", "ValidatingWebhookConfiguration")],
        ) > updates_before
            && covers(&v["webhooks"][0]["rules"], "s3.aws.upbound.io", "buckets"))
        .then_some(())
    })
    .await
    .unwrap();
    // ...and the mutating one is still gone.
    assert!(r.mutating().get_opt(&r.fullname).await.unwrap().is_none());
    let log = r.replicas[0].log();
    assert!(
        log.contains("will not recreate it"),
        "{}",
        r.with_logs(String::new())
    );
}

const PROBE_GROUP: &str = "ec2.aws.upbound.io";
const PROBE_PLURAL: &str = "e2ecoverageprobes";

/// A new CRD in the `managed` category is covered within seconds, with no
/// restart, and admission reaches its objects; deleting it removes it
/// from the rules again. In a group the chart's RBAC covers, so the MR
/// watch of the new kind works too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_managed_crd_is_covered_and_a_removed_one_uncovered() {
    let Some(cluster) =
        support::require_cluster("a_new_managed_crd_is_covered_and_a_removed_one_uncovered").await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-coverage", Options::default()).await;
    let replica = &r.replicas[0];
    let covered_before = replica
        .metrics()
        .await
        .unwrap()
        .get("mrguard_controller_covered_kinds", &[]);
    let crd = support::managed_crd(
        PROBE_GROUP,
        "v1alpha1",
        "E2eCoverageProbe",
        PROBE_PLURAL,
        "Cluster",
    );
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    support::cluster::create_crd(&r.client, &crd).await.unwrap();

    let covered = || async {
        let (m, v) = r.configurations().await?;
        Some(
            covers(&m["webhooks"][0]["rules"], PROBE_GROUP, PROBE_PLURAL)
                && covers(&v["webhooks"][0]["rules"], PROBE_GROUP, PROBE_PLURAL),
        )
    };
    wait_for("the new kind in both configurations", WAIT, || async {
        covered().await.filter(|c| *c).map(|_| ())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let ar = kube::api::ApiResource {
        group: PROBE_GROUP.into(),
        version: "v1alpha1".into(),
        api_version: format!("{PROBE_GROUP}/v1alpha1"),
        kind: "E2eCoverageProbe".into(),
        plural: PROBE_PLURAL.into(),
    };
    let probes = r.cluster_api(&ar);
    let obj = r.object(json!({
        "apiVersion": format!("{PROBE_GROUP}/v1alpha1"), "kind": "E2eCoverageProbe",
        "metadata": {"name": "probe"}, "spec": {"forProvider": {}},
    }));
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    // The API server's webhook informer follows within moments.
    let created = wait_for("the new kind's objects mutated", WAIT, || async {
        let o = probes.create(&dry, &obj).await.ok()?;
        o.metadata
            .annotations
            .as_ref()?
            .contains_key("crossplane.io/external-name")
            .then_some(o)
    })
    .await
    .unwrap();
    assert_eq!(
        serde_json::to_value(&created).unwrap()["spec"]["managementPolicies"],
        json!(["*"])
    );

    let crds: Api<CustomResourceDefinition> = Api::all(r.client.clone());
    crds.delete(
        &format!("{PROBE_PLURAL}.{PROBE_GROUP}"),
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    wait_for(
        "the removed kind out of both configurations",
        WAIT,
        || async {
            let (m, v) = r.configurations().await?;
            (!covers(&m["webhooks"][0]["rules"], PROBE_GROUP, PROBE_PLURAL)
                && !covers(&v["webhooks"][0]["rules"], PROBE_GROUP, PROBE_PLURAL))
            .then_some(())
        },
    )
    .await
    .unwrap();
    // The gauge went up by one and back; other tests may add kinds too,
    // so compare with what the cluster holds now.
    let _ = covered_before;
    wait_for("covered_kinds to match the managed CRDs", WAIT, || async {
        let want = managed_crds(&r.client).await?;
        let got = replica
            .metrics()
            .await
            .ok()?
            .get("mrguard_controller_covered_kinds", &[]);
        (got == want as f64).then_some(())
    })
    .await
    .unwrap();
}

/// CRDs in the `managed` category with a served version.
pub(crate) async fn managed_crds(client: &kube::Client) -> Option<usize> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let list = crds.list(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .iter()
            .filter(|c| {
                c.spec
                    .names
                    .categories
                    .iter()
                    .flatten()
                    .any(|x| x == "managed")
                    && c.metadata.deletion_timestamp.is_none()
                    && c.spec.versions.iter().any(|v| v.served)
            })
            .count(),
    )
}

/// The controller may not create Secrets. Deleting the TLS
/// Secret is reported once at ERROR, naming it and the fix, and nothing
/// recreates it; the chart's empty Secret put back (what `helm upgrade`
/// does) is filled with a new CA, and admission works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_secret_gives_a_new_ca_and_admission_works_again() {
    let Some(cluster) =
        support::require_cluster("a_lost_secret_gives_a_new_ca_and_admission_works_again").await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-lost-secret", Options::default()).await;
    let old_ca = r.secret_ca().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(r.client.clone(), &r.namespace);
    secrets
        .delete(&r.secret_name(), &DeleteParams::default())
        .await
        .unwrap();
    let missing = format!(
        "failed to update the TLS Secret {}/{}: it does not exist",
        r.namespace,
        r.secret_name()
    );
    wait_for("the missing Secret reported", WAIT, || async {
        r.replicas[0].log().contains(&missing).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let reports = r.replicas[0]
        .log()
        .lines()
        .filter(|l| l.contains(&missing))
        .count();
    // Still reported once, and nothing was created.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(secrets.get_opt(&r.secret_name()).await.unwrap().is_none());
    let log = r.replicas[0].log();
    assert_eq!(reports, 1, "{log}");
    assert_eq!(log.lines().filter(|l| l.contains(&missing)).count(), 1);

    // `helm upgrade` puts the chart's empty Secret back.
    let chart_secret: Secret =
        serde_json::from_value(r.rendered.one("Secret").unwrap().clone()).unwrap();
    secrets
        .create(&PostParams::default(), &chart_secret)
        .await
        .unwrap();
    let new_ca = wait_for("the Secret filled with a new CA", WAIT, || async {
        r.secret_ca().await.filter(|ca| *ca != old_ca)
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    wait_for("the new CA in both configurations", WAIT, || async {
        let (m, v) = r.configurations().await?;
        [m, v]
            .iter()
            .all(|c| c["webhooks"][0]["clientConfig"]["caBundle"] == json!(b64(&new_ca)))
            .then_some(())
    })
    .await
    .unwrap();
    // The replica serves the new certificate; the API server trusts it.
    r.wait_admission().await.unwrap_or_else(|e| panic!("{e}"));
}

/// A creation-incomplete MR gets its `PossiblyLeaked` Event, which the API
/// server accepts (a `generateName` of `"<name>."` is invalid, and such an
/// Event was retried forever while
/// `mrguard_controller_events_total{result="failed"}` climbed). A new
/// incomplete creation of the same MR counts into the same Event (kube's
/// Recorder series) instead of adding one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_incomplete_mr_gets_one_possibly_leaked_event() {
    let Some(cluster) =
        support::require_cluster("a_creation_incomplete_mr_gets_one_possibly_leaked_event").await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-leak", Options::default()).await;
    let replica = &r.replicas[0];
    let buckets = r.cluster_api(&support::bucket_resource());
    let mut leak = support::bucket("e2e-leak1", json!({"region": "us-east-1"}));
    leak["metadata"]["annotations"] =
        json!({"crossplane.io/external-create-pending": "2025-06-01T00:00:00Z"});
    let created = buckets
        .create(&PostParams::default(), &r.object(leak))
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();

    // Other tests' releases watch Buckets too: only this replica's Events
    // count here.
    let events: Api<Event> = Api::namespaced(r.client.clone(), "default");
    let mine = || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        Some(
            list.items
                .into_iter()
                .filter(|e| {
                    e.regarding.as_ref().and_then(|x| x.uid.as_deref()) == Some(uid.as_str())
                        && e.reporting_instance
                            .as_deref()
                            .is_some_and(|i| i.starts_with(&format!("{}_", replica.pod)))
                })
                .collect::<Vec<_>>(),
        )
    };
    let found = wait_for("the PossiblyLeaked Event", WAIT, || async {
        mine().await.filter(|v| !v.is_empty())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    assert_eq!(found.len(), 1);
    let e = &found[0];
    assert_eq!(e.reason.as_deref(), Some("PossiblyLeaked"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(
        e.reporting_controller.as_deref(),
        Some("mrguard.io/controller")
    );
    let note = e.note.clone().unwrap_or_default();
    assert!(note.contains("possibly leaked external resource"), "{note}");
    assert!(note.contains("2025-06-01T00:00:00Z"), "{note}");
    // The counter moves after the write returns, so the Event can be seen
    // a moment before it is counted.
    let m = wait_for("the written Event counted", WAIT, || async {
        let m = replica.metrics().await.ok()?;
        (m.get(
            "mrguard_controller_events_total",
            &[("reason", "PossiblyLeaked"), ("result", "written")],
        ) >= 1.0)
            .then_some(m)
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    assert_eq!(
        m.get(
            "mrguard_controller_events_total",
            &[("reason", "PossiblyLeaked"), ("result", "failed")]
        ),
        0.0
    );
    assert_eq!(
        m.get(
            "mrguard_managed_resources",
            &[
                ("group", "s3.aws.upbound.io"),
                ("kind", "Bucket"),
                ("state", "creation_incomplete")
            ]
        ),
        1.0
    );

    // The provider tries again and again leaves the creation incomplete.
    buckets
        .patch(
            "e2e-leak1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "crossplane.io/external-create-pending": "2025-06-02T00:00:00Z"}}})),
        )
        .await
        .unwrap();
    let counted = wait_for("the repeat counted in the Event's series", WAIT, || async {
        let v = mine().await?;
        v.iter()
            .any(|e| e.series.as_ref().is_some_and(|s| s.count >= 2))
            .then_some(v)
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    assert_eq!(counted.len(), 1, "a repeat added an Event: {counted:#?}");
    let m = replica.metrics().await.unwrap();
    assert_eq!(
        m.get(
            "mrguard_controller_events_total",
            &[("reason", "PossiblyLeaked"), ("result", "failed")]
        ),
        0.0
    );

    // Once the MR is gone, so is its gauge (and nobody else reports it).
    buckets
        .delete("e2e-leak1", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the gauge to clear", WAIT, || async {
        let m = replica.metrics().await.ok()?;
        (m.get(
            "mrguard_managed_resources",
            &[
                ("group", "s3.aws.upbound.io"),
                ("kind", "Bucket"),
                ("state", "creation_incomplete"),
            ],
        ) == 0.0)
            .then_some(())
    })
    .await
    .unwrap();
}

/// Lines of a replica's JSON log whose message or fields mention all of
/// `needles`.
fn log_lines<'a>(log: &'a str, needles: &[&str]) -> Vec<&'a str> {
    log.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .collect()
}

/// With the chart's default RBAC (`rbac.audit.mode=groups`) and
/// provider-nop installed, whose group is not on the list:
/// - the forbidden MR watch is logged once per failure streak, never
///   "recovered" while it still fails, and its retries back off (not an
///   ERROR, a kube WARN and a false "recovered" about once a second);
/// - the audit still records its passes as successful (so
///   `mrguard_audit_last_success_timestamp_seconds` moves) and reports the
///   forbidden kind in `mrguard_controller_forbidden_kinds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_kind_is_logged_once_backs_off_and_the_audit_still_succeeds() {
    let Some(cluster) = support::require_cluster(
        "a_forbidden_kind_is_logged_once_backs_off_and_the_audit_still_succeeds",
    )
    .await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-forbidden", Options::default()).await;
    let replica = &r.replicas[0];
    let failures = || async {
        let m = replica.metrics().await.ok()?;
        Some(m.get(
            "mrguard_controller_api_errors_total",
            &[
                ("verb", "watch"),
                ("resource", "managed resources"),
                ("code", "403"),
            ],
        ))
    };
    let first = wait_for("the first forbidden watch", WAIT, || async {
        failures().await.filter(|n| *n >= 1.0)
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let since = Instant::now();
    // kube's default backoff doubles from 0.8 s (each step plus up to 100%
    // jitter), so after any failure the next three come at least 0.8, 2.4
    // and 5.6 s later, and a fourth not within 10 s. Without growth (the
    // bug: reset by every relist) each retry came within 1.6 s: at least
    // six in 10 s. An upper bound only: a slow machine retries less, never
    // more.
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(since.elapsed())).await;
    let retries = failures().await.unwrap() - first;
    assert!(
        retries <= 4.0,
        "{retries} failed relists within 10 s after the first: the backoff does not grow"
    );

    let log = replica.log();
    let denied = log_lines(
        &log,
        &[
            "RBAC denied the controller",
            "nopresources.nop.crossplane.io",
            "failed to watch MRs",
        ],
    );
    assert_eq!(
        denied.len(),
        1,
        "logged once per failure streak:\n{}",
        denied.join("\n")
    );
    let recovered = log_lines(&log, &["nopresources.nop.crossplane.io", "recovered"]);
    assert!(
        recovered.is_empty(),
        "a false recovery:\n{}",
        recovered.join("\n")
    );

    // The audit: successful passes, the forbidden kind counted.
    let m = wait_for("a successful audit pass", WAIT, || async {
        let m = replica.metrics().await.ok()?;
        (m.get("mrguard_audit_last_success_timestamp_seconds", &[]) > 0.0).then_some(m)
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    assert_eq!(
        m.get("mrguard_controller_forbidden_kinds", &[]),
        1.0,
        "{}",
        m.text
    );
    let log = replica.log();
    let audit = log_lines(&log, &["audit pass done", "nopresources.nop.crossplane.io"]);
    assert!(!audit.is_empty(), "the audit names the forbidden kind");
    let v: Value = serde_json::from_str(audit[0]).unwrap();
    assert_eq!(v["fields"]["complete"], true, "{v}");
}

/// `mrguard audit` leaves out a kind whose CRD is not established: its
/// list would answer 404 and fail the command (exit 2). A second CRD
/// claiming a kind already taken in its group never is (NamesAccepted
/// False).
#[tokio::test]
async fn the_audit_command_leaves_out_a_kind_whose_crd_is_not_established() {
    const GROUP: &str = "conflict.e2e.mrguard.dev";
    const TWIN: &str = "e2econflicttwins";
    let Some(cluster) = support::require_cluster(
        "the_audit_command_leaves_out_a_kind_whose_crd_is_not_established",
    )
    .await
    else {
        return;
    };
    let client = cluster.admin().await.unwrap();
    let crd = |plural: &str| -> CustomResourceDefinition {
        serde_json::from_value(support::managed_crd(
            GROUP,
            "v1alpha1",
            "E2eConflict",
            plural,
            "Cluster",
        ))
        .unwrap()
    };
    support::cluster::create_crd(&client, &crd("e2econflicts"))
        .await
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd(TWIN))
        .await
        .unwrap();
    let twin = format!("{TWIN}.{GROUP}");
    support::cluster::wait_for_crd_condition(&client, &twin, "NamesAccepted", "False")
        .await
        .unwrap();

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mrguard"))
        .args(["audit", "--quiet", "--kubeconfig"])
        .arg(cluster.admin_kubeconfig())
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    for name in [twin.clone(), format!("e2econflicts.{GROUP}")] {
        crds.delete(&name, &DeleteParams::default()).await.unwrap();
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains(TWIN), "{stderr}");
    assert!(stderr.contains("finding(s) in"), "{stderr}");
}
