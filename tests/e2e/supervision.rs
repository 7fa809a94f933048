//! The leader's tasks are supervised, against a real
//! API server with the chart's RBAC: a task that dies makes the leader step
//! down and restart its tasks; a Lease taken away stops the tasks until it
//! is won back; an API server that stops answering for 30 s makes the
//! leader stop writing (its renewals time out, they do not hang), counts
//! the failed calls, and everything is repaired once it answers again.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use crate::support::cluster::Cluster;
use crate::support::{self, wait_for, Options, Release, WAIT};

/// Breaks the caBundle of the validating configuration by hand.
async fn break_ca_bundle(r: &Release) {
    let garbage = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n",
    );
    let patch = json!([
        {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": garbage},
    ]);
    r.validating()
        .patch(
            &r.fullname,
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(patch).unwrap()),
        )
        .await
        .unwrap_or_else(|e| panic!("{}", r.with_logs(e.to_string())));
}

async fn repaired(r: &Release) -> bool {
    r.webhooks_ready("s3.aws.upbound.io", "buckets").await
}

/// Waits until replica 0's `mrguard_controller_leader` reads `value`.
async fn leader_gauge(r: &Release, value: f64, within: Duration) {
    wait_for(
        &format!("mrguard_controller_leader = {value}"),
        within,
        || async {
            let m = r.replicas[0].metrics().await.ok()?;
            (m.get("mrguard_controller_leader", &[]) == value).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
}

/// Lines of the replica's log at `level` whose text contains `needle`.
fn lines(r: &Release, level: &str, needle: &str) -> Vec<String> {
    r.replicas[0]
        .log()
        .lines()
        .filter(|l| l.contains(&format!("\"level\":\"{level}\"")) && l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// A leader task that panics (the test hook `MRGUARD_TEST_PANIC_TASK`)
/// is logged once at ERROR and counted; the leader releases the Lease,
/// takes it again and restarts its tasks, and the webhook configurations
/// are still repaired afterwards, where an unsupervised leader would keep
/// the Lease and do nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_task_that_panics_is_restarted() {
    let Some(cluster) = support::require_cluster("a_leader_task_that_panics_is_restarted").await
    else {
        return;
    };
    let r = support::install(
        cluster,
        "e2e-task-panic",
        Options {
            env: vec![("MRGUARD_TEST_PANIC_TASK".into(), "webhooks".into())],
            ..Options::default()
        },
    )
    .await;
    let replica = &r.replicas[0];
    wait_for("the task restart counted", WAIT, || async {
        let m = replica.metrics().await.ok()?;
        (m.get(
            "mrguard_controller_task_restarts_total",
            &[("task", "webhooks")],
        ) == 1.0)
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    leader_gauge(&r, 1.0, WAIT).await;
    wait_for("stepped down and took the Lease again", WAIT, || async {
        let log = replica.log();
        (log.contains("stepped down: released the lease")
            && log.matches("acquired the lease").count() >= 2)
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));

    break_ca_bundle(&r).await;
    wait_for("the configuration repaired", WAIT, || async {
        repaired(&r).await.then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let errors = lines(&r, "ERROR", "leader task webhooks panicked");
    assert_eq!(errors.len(), 1, "{}", r.with_logs(errors.join("\n")));
    r.check_alive().unwrap();
}

/// Another holder takes the Lease (as a replica that won it would): the
/// leader stops its tasks, so a broken caBundle stays broken while it does
/// not hold the Lease; once the other holder stops renewing it takes the
/// Lease back and repairs it. A deleted Lease is taken again at once.
/// (The code before the supervision passed this too: a regression guard.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_lease_stops_the_tasks_until_it_is_won_back() {
    let Some(cluster) =
        support::require_cluster("a_stolen_lease_stops_the_tasks_until_it_is_won_back").await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-lease-stolen", Options::default()).await;
    leader_gauge(&r, 1.0, WAIT).await;
    let leases: Api<Lease> = Api::namespaced(r.client.clone(), &r.namespace);
    let mut lease = leases.get(&r.lease_name()).await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("thief".into());
    spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
    spec.lease_duration_seconds = Some(20);
    leases
        .replace(&r.lease_name(), &PostParams::default(), &lease)
        .await
        .unwrap();
    leader_gauge(&r, 0.0, WAIT).await;

    break_ca_bundle(&r).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !repaired(&r).await,
        "a replica without the Lease wrote: {}",
        r.with_logs(String::new())
    );
    // The thief never renews: after a lease duration the replica takes over.
    leader_gauge(&r, 1.0, WAIT).await;
    wait_for("the configuration repaired", WAIT, || async {
        repaired(&r).await.then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let holder = leases.get(&r.lease_name()).await.unwrap().spec.unwrap();
    assert!(
        holder
            .holder_identity
            .unwrap()
            .starts_with(&r.replicas[0].pod),
        "the replica holds the Lease again"
    );

    // A deleted Lease is created again by the leader at its next renewal,
    // and drift is still repaired.
    leases
        .delete(&r.lease_name(), &Default::default())
        .await
        .unwrap();
    wait_for("the Lease created again by the leader", WAIT, || async {
        (r.leader().await == Some(0)).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    break_ca_bundle(&r).await;
    wait_for("the configuration repaired", WAIT, || async {
        repaired(&r).await.then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    leader_gauge(&r, 1.0, WAIT).await;
}

/// Stops (SIGSTOP) or resumes (SIGCONT) the API server: connections stay
/// open but nothing answers, the worst case for a client without timeouts.
fn signal(cluster: &Cluster, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(cluster.apiserver_pid().to_string())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill -{sig} the API server");
}

/// The API server stops answering for 30 s: the leader's Lease calls time
/// out (counted with code 0) instead of hanging, so it stops writing
/// before the Lease could pass to another replica; when the API server
/// answers again it leads again and repairs drift. A renewal that hung
/// would let the leader keep writing on a Lease it might have lost. Its
/// own API server, since stopping it would disturb the other tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_unreachable_for_30s_stops_the_leader_and_it_recovers() {
    let test = "an_api_server_unreachable_for_30s_stops_the_leader_and_it_recovers";
    let Some(cluster) = support::require_own_cluster(test).await else {
        return;
    };
    let r = support::install(cluster, "e2e-unreachable", Options::default()).await;
    leader_gauge(&r, 1.0, WAIT).await;
    signal(cluster, "STOP");
    let stopped = std::time::Instant::now();
    // The chart's lease duration is 15 s: a leader that cannot renew for
    // 10 s stops writing.
    let stepped_down = wait_for(
        "the leader stops leading",
        Duration::from_secs(25),
        || async {
            let m = r.replicas[0].metrics().await.ok()?;
            (m.get("mrguard_controller_leader", &[]) == 0.0).then_some(m)
        },
    )
    .await;
    let timeouts = r.replicas[0].metrics().await.map(|m| {
        m.get(
            "mrguard_controller_api_errors_total",
            &[("resource", "leases.coordination.k8s.io"), ("code", "0")],
        )
    });
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(stopped.elapsed())).await;
    signal(cluster, "CONT");
    let m = stepped_down.unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let timeouts = timeouts.unwrap();
    assert!(timeouts >= 1.0, "lease calls timed out: {}", m.text);
    assert!(
        !lines(&r, "WARN", "no answer within").is_empty(),
        "{}",
        r.with_logs("a renewal that timed out is logged".into())
    );

    leader_gauge(&r, 1.0, Duration::from_secs(120)).await;
    break_ca_bundle(&r).await;
    wait_for(
        "the configuration repaired",
        Duration::from_secs(120),
        || async { repaired(&r).await.then_some(()) },
    )
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    r.check_alive().unwrap();
}
