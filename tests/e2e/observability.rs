//! `/metrics` agrees with what the test did through the API server.

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::support::{self, wait_for, Metrics, Options, WAIT};

const GROUP: &str = "account.aws.upbound.io";
const KIND: &str = "AlternateContact";

fn contact(name: &str) -> Value {
    json!({
        "apiVersion": "account.aws.upbound.io/v1beta1", "kind": KIND,
        "metadata": {"name": name},
        "spec": {"forProvider": {
            "alternateContactType": "OPERATIONS", "emailAddress": "ops@example.com",
            "name": "Ops", "phoneNumber": "+1234567890", "title": "Ops",
        }},
    })
}

fn requests(m: &Metrics, webhook: &str, op: &str, result: &str) -> f64 {
    m.get(
        "mrguard_admission_requests_total",
        &[
            ("webhook", webhook),
            ("operation", op),
            ("group", GROUP),
            ("kind", KIND),
            ("result", result),
        ],
    )
}

/// Counters move by exactly what the test sent (only this test's objects
/// reach its webhooks, by objectSelector), and the controller's gauges
/// describe the cluster: leadership, coverage, configurations present,
/// paused MRs, audit findings, the serving certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_agree_with_what_the_test_did() {
    let Some(cluster) = support::require_cluster("metrics_agree_with_what_the_test_did").await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-metrics", Options::default()).await;
    let replica = &r.replicas[0];
    let before = replica.metrics().await.unwrap();
    let contacts = r.cluster_api(&support::contact_resource());
    let pp = PostParams::default();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };

    // 1. created (mutated: external-name); 2. the same as a dry run.
    contacts
        .create(&pp, &r.object(contact("c1")))
        .await
        .unwrap();
    contacts
        .create(&dry, &r.object(contact("c2")))
        .await
        .unwrap();
    // 3. denied: a duplicate policy.
    let mut bad = contact("c-bad");
    bad["spec"]["managementPolicies"] = json!(["Observe", "Observe"]);
    contacts.create(&pp, &r.object(bad)).await.unwrap_err();
    // 4. paused by annotation; 5. initProvider with late initialization
    // (a Warn finding, and an audit finding later).
    let mut paused = contact("c-paused");
    paused["metadata"]["annotations"] = json!({"crossplane.io/paused": "true"});
    contacts.create(&pp, &r.object(paused)).await.unwrap();
    let mut init = contact("c-init");
    init["spec"]["initProvider"] = json!({"title": "Initial"});
    contacts.create(&pp, &r.object(init)).await.unwrap();
    // 6. an update (nothing to default), 7. a delete.
    contacts
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "x"}}})),
        )
        .await
        .unwrap();
    contacts
        .delete("c1", &DeleteParams::default())
        .await
        .unwrap();

    let after = replica.metrics().await.unwrap();
    let diff = |f: &dyn Fn(&Metrics) -> f64| f(&after) - f(&before);
    assert_eq!(
        diff(&|m| requests(m, "mutate", "CREATE", "patched")),
        5.0,
        "{}",
        after.text
    );
    assert_eq!(diff(&|m| requests(m, "validate", "CREATE", "allowed")), 4.0);
    assert_eq!(diff(&|m| requests(m, "validate", "CREATE", "denied")), 1.0);
    assert_eq!(diff(&|m| requests(m, "mutate", "UPDATE", "allowed")), 1.0);
    assert_eq!(diff(&|m| requests(m, "validate", "UPDATE", "allowed")), 1.0);
    assert_eq!(diff(&|m| requests(m, "validate", "DELETE", "allowed")), 1.0);
    assert_eq!(
        diff(&|m| requests(m, "mutate", "DELETE", "allowed")),
        0.0,
        "DELETE is not mutated"
    );
    let findings = |rule: &str, action: &str| {
        diff(&|m| {
            m.get(
                "mrguard_rule_findings_total",
                &[("rule", rule), ("action", action)],
            )
        })
    };
    assert_eq!(findings("management-policies", "Deny"), 1.0);
    assert_eq!(findings("init-provider-late-init", "Warn"), 1.0);
    let duration = |w: &str| {
        diff(&|m| {
            m.get(
                "mrguard_admission_duration_seconds_count",
                &[("webhook", w)],
            )
        })
    };
    assert_eq!(duration("mutate"), 6.0);
    assert_eq!(duration("validate"), 7.0);

    // The controller's view.
    let m = wait_for("the watch and the audit to catch up", WAIT, || async {
        let m = replica.metrics().await.ok()?;
        let paused = m.get(
            "mrguard_managed_resources",
            &[("group", GROUP), ("kind", KIND), ("state", "paused")],
        );
        let audit = m.get(
            "mrguard_audit_violations",
            &[
                ("rule", "init-provider-late-init"),
                ("group", GROUP),
                ("kind", KIND),
            ],
        );
        (paused == 1.0 && audit == 1.0).then_some(m)
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    assert_eq!(m.get("mrguard_controller_leader", &[]), 1.0);
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        assert_eq!(
            m.get(
                "mrguard_controller_webhook_configuration_present",
                &[("kind", kind)]
            ),
            1.0
        );
    }
    assert!(m.get("mrguard_audit_last_success_timestamp_seconds", &[]) > 0.0);
    // provider-nop's group is not in the chart's RBAC list.
    assert_eq!(m.get("mrguard_controller_forbidden_kinds", &[]), 1.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let expiry = m.get("mrguard_tls_certificate_expiry_timestamp_seconds", &[]);
    assert!(
        expiry > now + 80.0 * 86400.0,
        "the serving certificate from the Secret (90 days): {expiry}"
    );
    wait_for("covered_kinds to match the managed CRDs", WAIT, || async {
        let want = crate::controller::managed_crds(&r.client).await?;
        let got = replica
            .metrics()
            .await
            .ok()?
            .get("mrguard_controller_covered_kinds", &[]);
        (got == want as f64).then_some(())
    })
    .await
    .unwrap();
    // The chart's RBAC refused nothing but the forbidden kind's list and
    // watch, and provider configs of a family it does not list (another
    // test's).
    let refused = after.get("mrguard_controller_api_errors_total", &[("code", "403")])
        - ["managed resources", "provider configs"]
            .iter()
            .map(|r| {
                after.get(
                    "mrguard_controller_api_errors_total",
                    &[("resource", *r), ("code", "403")],
                )
            })
            .sum::<f64>();
    assert_eq!(refused, 0.0, "{}", after.text);
}
