//! The controller is quiet at scale (issue 18, problem 7): while 400 MR
//! CRDs and 4,000 MRs arrive, the leader never conflicts with itself, its
//! webhook-configuration writes are coalesced, and it logs at most ten
//! WARN or ERROR lines in all (the fixture kind the chart's RBAC forbids
//! among them). Its own API server, since 400 kinds would slow the other
//! tests' controllers down.

use std::time::Duration;

use serde_json::Value;

use crate::support::release::covers;
use crate::support::scale::{self, VERSION};
use crate::support::{self, wait_for, Metrics, Options};

const CRDS: usize = 400;
const MRS: usize = 4000;

/// The lines of a JSON log at WARN or ERROR.
pub(crate) fn loud_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .and_then(|v| v["level"].as_str().map(|s| s == "WARN" || s == "ERROR"))
                .unwrap_or(false)
        })
        .collect()
}

/// Server-side applies of both configurations so far.
pub(crate) fn webhook_writes(m: &Metrics) -> f64 {
    [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    .iter()
    .map(|k| m.get("mrguard_controller_webhook_updates_total", &[("kind", k)]))
    .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_hundred_crds_and_four_thousand_mrs_make_little_noise() {
    let test = "four_hundred_crds_and_four_thousand_mrs_make_little_noise";
    let Some(cluster) = support::require_own_cluster(test).await else {
        return;
    };
    let r = support::install(cluster, "e2e-quiet", Options::default()).await;
    let kinds = scale::kinds(CRDS, &scale::rbac_groups().unwrap());
    scale::create_crds(&r.client, &kinds, 16)
        .await
        .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let (paused, _) = scale::create_mrs(&r.client, &kinds, MRS, 16)
        .await
        .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));

    let long = Duration::from_secs(300);
    wait_for(
        "both configurations cover every generated kind",
        long,
        || async {
            let (m, v) = r.configurations().await?;
            kinds
                .iter()
                .all(|k| {
                    [&m, &v].iter().all(|c| {
                        c["webhooks"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|w| covers(&w["rules"], &k.group, &k.plural))
                    })
                })
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let replica = &r.replicas[0];
    wait_for("the leader counts every paused MR", long, || async {
        let m = replica.metrics().await.ok()?;
        let counted: f64 = kinds
            .iter()
            .map(|k| {
                m.get(
                    "mrguard_managed_resources",
                    &[("group", &k.group), ("kind", &k.kind), ("state", "paused")],
                )
            })
            .sum();
        (counted == paused as f64).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    // A steady state afterwards: nothing more to say.
    tokio::time::sleep(Duration::from_secs(10)).await;

    let m = replica.metrics().await.unwrap();
    let writes = webhook_writes(&m);
    let log = replica.log();
    let loud = loud_lines(&log);
    eprintln!(
        "{test}: {} WARN/ERROR lines, {writes} webhook configuration writes, {} kinds of {VERSION}:\n{}",
        loud.len(),
        kinds.len(),
        loud.join("\n")
    );
    assert!(
        loud.len() <= 10,
        "{} WARN or ERROR lines:\n{}",
        loud.len(),
        loud.join("\n")
    );
    // Two configurations; coalesced, a few writes each while the CRDs
    // arrive, however many there are.
    assert!(writes <= 40.0, "{writes} webhook configuration writes");
    assert_eq!(
        m.get("mrguard_controller_api_errors_total", &[("code", "409")]),
        0.0,
        "the controller conflicted with itself:\n{}",
        m.text
    );
}
