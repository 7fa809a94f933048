//! The controller is quiet at scale: while 400 MR CRDs and 4,000 MRs
//! arrive, the leader never conflicts with itself, its webhook-configuration
//! writes are coalesced, and it logs at most ten WARN or ERROR lines in all
//! (the fixture kind the chart's RBAC forbids among them); and when all
//! 4,000 violate a rule, the audit says so in one line a pass, not one a
//! finding, however often the leader changes. Each test has its own API
//! server, since 400 kinds would slow the other tests' controllers down.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{json, Value};

use crate::support::release::covers;
use crate::support::scale::{self, VERSION};
use crate::support::{self, cluster::create_crd, wait_for, Metrics, Options, Release};

const CRDS: usize = 400;
const MRS: usize = 4000;

/// Held by each test of this module for its whole run: two API servers
/// with 400 CRDs each, and their replicas, on a 2-CPU machine made Lease
/// calls miss their 1 s deadline (six WARN lines that only the load
/// caused).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    let _alone = ONE_AT_A_TIME.lock().await;
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

/// The provider family of the generated kinds (`<service>.aws.upbound.io`),
/// whose provider configs the chart's default RBAC lets mrguard read.
const FAMILY: &str = "aws.upbound.io";

/// The family's ProviderConfig kind: the smallest CRD with Crossplane's
/// categories. None of its objects is created, so every generated MR's
/// `providerConfigRef` (`default`) names one that does not exist.
fn provider_config_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("providerconfigs.{FAMILY}")},
        "spec": {
            "group": FAMILY,
            "scope": "Cluster",
            "names": {"kind": "ProviderConfig", "listKind": "ProviderConfigList",
                      "plural": "providerconfigs", "singular": "providerconfig",
                      "categories": ["crossplane", "providerconfig", "aws"]},
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}},
            }],
        },
    }))
    .unwrap()
}

/// The rule every generated MR violates here.
const RULE: &str = "provider-config-exists";

/// One "audit pass done" line: its level and fields.
#[derive(Debug)]
struct PassLine {
    level: String,
    findings: u64,
    new_findings: u64,
    by_rule: String,
    by_kind: String,
    new_examples: String,
}

fn pass_lines(log: &str) -> Vec<PassLine> {
    log.lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            let f = &v["fields"];
            (f["message"] == "audit pass done").then(|| PassLine {
                level: v["level"].as_str().unwrap_or("").to_string(),
                findings: f["findings"].as_u64().unwrap_or(0),
                new_findings: f["new_findings"].as_u64().unwrap_or(0),
                by_rule: f["by_rule"].as_str().unwrap_or("").to_string(),
                by_kind: f["by_kind"].as_str().unwrap_or("").to_string(),
                new_examples: f["new_examples"].as_str().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// The findings of `RULE` in replica `i`'s gauges, and when its last
/// complete audit pass ended.
async fn audited(r: &Release, i: usize) -> Option<(f64, f64)> {
    let m = r.replicas[i].metrics().await.ok()?;
    Some((
        m.get("mrguard_audit_violations", &[("rule", RULE)]),
        m.get("mrguard_audit_last_success_timestamp_seconds", &[]),
    ))
}

/// Waits until replica `i`'s audit has found every MR's violation and a
/// pass that began with all of them known has ended (a steady pass).
async fn two_passes_over_every_finding(r: &Release, i: usize, long: Duration) {
    let first = wait_for("the audit to find every MR's violation", long, || async {
        let (found, at) = audited(r, i).await?;
        (found == MRS as f64 && at > 0.0).then_some(at)
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    // The gauges fill during a pass, before its timestamp: the pass that
    // ends next may be the one that found the last MRs, and only the one
    // after it begins with all of them known.
    let mut at = first;
    for _ in 0..2 {
        let before = at;
        at = wait_for("one more audit pass", long, || async move {
            let (found, now) = audited(r, i).await?;
            (found == MRS as f64 && now > before).then_some(now)
        })
        .await
        .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    }
}

/// mrguard installed into a cluster whose 4,000 MRs over 400 kinds all
/// name a ProviderConfig not created yet: each leader's audit finds all
/// 4,000, and says so in one WARN line with the counts; its later passes,
/// which find nothing new, at INFO; each finding's own line is at debug. A
/// leader change adds the new leader's one summary, not 4,000 lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_thousand_violating_mrs_make_one_warning_per_leader() {
    let test = "four_thousand_violating_mrs_make_one_warning_per_leader";
    let _alone = ONE_AT_A_TIME.lock().await;
    let Some(cluster) = support::require_own_cluster(test).await else {
        return;
    };
    // The cluster before mrguard: what its audit is for.
    let admin = cluster.admin().await.unwrap();
    create_crd(&admin, &provider_config_crd()).await.unwrap();
    let kinds = scale::kinds(CRDS, &scale::rbac_groups().unwrap());
    scale::create_crds(&admin, &kinds, 16).await.unwrap();
    scale::create_mrs(&admin, &kinds, MRS, 16).await.unwrap();

    let mut r = support::install(
        cluster,
        "e2e-quiet-findings",
        Options {
            replicas: 2,
            // A short Lease keeps the leader change quick.
            extra_args: vec!["--lease-duration=4s".into()],
            ..Options::default()
        },
    )
    .await;
    let long = Duration::from_secs(300);
    let leader = wait_for("a leader", long, || r.leader())
        .await
        .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    two_passes_over_every_finding(&r, leader, long).await;

    // SIGKILL: the Lease is not released, and the standby takes it once it
    // expires.
    let standby = 1 - leader;
    r.kill_replica(leader);
    wait_for("the standby to take the Lease", long, || async {
        r.leader().await.filter(|l| *l == standby)
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    two_passes_over_every_finding(&r, standby, long).await;

    let logs: Vec<String> = r.replicas.iter().map(|p| p.log()).collect();
    let loud: Vec<&str> = logs.iter().flat_map(|l| loud_lines(l)).collect();
    eprintln!(
        "{test}: {} WARN/ERROR lines over both replicas:\n{}",
        loud.len(),
        loud.iter()
            .map(|l| l.chars().take(600).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(loud.len() <= 10, "{} WARN or ERROR lines", loud.len());
    for (who, i) in [("the first leader", leader), ("the new leader", standby)] {
        let passes = pass_lines(&logs[i]);
        let warned: Vec<&PassLine> = passes.iter().filter(|p| p.level == "WARN").collect();
        // Every finding is new once per leader: in one pass, or in a few
        // while its watches and provider configs are first listed.
        let new: u64 = warned.iter().map(|p| p.new_findings).sum();
        assert!(
            (1..=3).contains(&warned.len()) && new >= MRS as u64,
            "{who}: {warned:#?}"
        );
        let first = warned[0];
        assert!(first.new_examples.contains(RULE), "{who}: {first:#?}");
        assert_eq!(
            first.new_examples.split(", ").count(),
            5,
            "{who}: {first:#?}"
        );
        // Its last pass found nothing new: INFO, with the counts.
        let last = passes.last().unwrap();
        assert_eq!(
            (last.level.as_str(), last.new_findings),
            ("INFO", 0),
            "{who}: {last:#?}"
        );
        assert!(last.findings >= MRS as u64, "{who}: {last:#?}");
        assert!(
            last.by_rule.contains(&format!("{RULE}={MRS}")),
            "{who}: {last:#?}"
        );
        // Ten kinds named; the other 390 summed.
        assert!(
            last.by_kind
                .contains(&format!(",{} more kinds=", CRDS - 10)),
            "{who}: {last:#?}"
        );
    }
}
