//! Two replicas and a leader that dies; mrguard not running at all.

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{self, wait_for, Options, WAIT};

/// Two replicas behind the (stand-in) Service: one holds the Lease. The
/// leader is killed (SIGKILL: no release of the Lease); the standby takes
/// over once the Lease expires, repairs a broken configuration, and
/// admission keeps working through the Service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_when_the_leader_is_killed() {
    let Some(cluster) =
        support::require_cluster("the_standby_takes_over_when_the_leader_is_killed").await
    else {
        return;
    };
    let mut r = support::install(
        cluster,
        "e2e-failover",
        Options {
            replicas: 2,
            // The chart's extraArgs override its defaults; a short
            // Lease keeps the test quick.
            extra_args: vec!["--lease-duration=4s".into()],
            ..Options::default()
        },
    )
    .await;
    let leader = wait_for("a leader", WAIT, || r.leader()).await.unwrap();
    let standby = 1 - leader;
    // Both replicas serve admission; only the leader says it leads.
    wait_for("both replicas ready with one leader", WAIT, || async {
        let l = r.replicas[leader].metrics().await.ok()?;
        let s = r.replicas[standby].metrics().await.ok()?;
        (l.get("mrguard_controller_leader", &[]) == 1.0
            && s.get("mrguard_controller_leader", &[]) == 0.0)
            .then_some(())
    })
    .await
    .unwrap();

    r.kill_replica(leader);
    let new_leader = wait_for("the standby to take the Lease", WAIT, || async {
        r.leader().await.filter(|l| *l == standby)
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    assert_eq!(new_leader, standby);
    wait_for("the standby to lead", WAIT, || async {
        let s = r.replicas[standby].metrics().await.ok()?;
        (s.get("mrguard_controller_leader", &[]) == 1.0).then_some(())
    })
    .await
    .unwrap();

    // The new leader does the controller's work.
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
    wait_for("the new leader to repair the rules", WAIT, || async {
        r.webhooks_ready("s3.aws.upbound.io", "buckets")
            .await
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    // And admission works through the Service's remaining endpoint.
    r.wait_admission().await.unwrap();
    let buckets = r.cluster_api(&support::bucket_resource());
    let created = buckets
        .create(
            &PostParams::default(),
            &r.object(support::bucket(
                "after-failover",
                json!({"region": "us-east-1"}),
            )),
        )
        .await
        .unwrap();
    assert!(created
        .metadata
        .annotations
        .unwrap_or_default()
        .contains_key("crossplane.io/external-name"));
}

/// mrguard stopped (no endpoint behind the Service): the validating
/// webhook fails closed (the chart's `failurePolicy: Fail`), so an MR
/// write is refused; the mutating webhook is skipped
/// (`failurePolicy: Ignore`), which shows once the validating
/// configuration is deleted, the documented emergency exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_mrguard_stopped_validation_fails_closed_and_mutation_is_skipped() {
    let Some(cluster) = support::require_cluster(
        "with_mrguard_stopped_validation_fails_closed_and_mutation_is_skipped",
    )
    .await
    else {
        return;
    };
    let mut r = support::install(cluster, "e2e-outage", Options::default()).await;
    let replica = r.replicas.pop().unwrap();
    r.remove_endpoint(replica.port);
    replica.process.stop();

    let buckets = r.cluster_api(&support::bucket_resource());
    let obj = r.object(support::bucket(
        "while-down",
        json!({"region": "us-east-1"}),
    ));
    let e = buckets
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_err();
    let kube::Error::Api(s) = e else {
        panic!("expected the API server to refuse, got {e}");
    };
    assert!(
        s.message.contains("failed calling webhook") && s.message.contains("validate.mrguard.io"),
        "{}",
        s.message
    );
    assert!(buckets.get_opt("while-down").await.unwrap().is_none());
    // Unrelated objects are not affected: only MR kinds are covered.
    let cm: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(r.client.clone(), &r.workload_ns);
    cm.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "unaffected"}})).unwrap(),
    )
    .await
    .unwrap();

    // The emergency exit: without the validating configuration, writes go
    // through, and the mutating webhook is skipped (no defaults).
    r.validating()
        .delete(&r.fullname, &DeleteParams::default())
        .await
        .unwrap();
    let created = wait_for("the write to go through", WAIT, || async {
        buckets.create(&PostParams::default(), &obj).await.ok()
    })
    .await
    .unwrap();
    let v = serde_json::to_value(&created).unwrap();
    assert!(
        v["metadata"]["annotations"]["crossplane.io/external-name"].is_null(),
        "mutated while mrguard was down: {v:#}"
    );
    assert_eq!(
        v["spec"]["providerConfigRef"],
        json!({"name": "default"}),
        "{v:#}"
    );
}
