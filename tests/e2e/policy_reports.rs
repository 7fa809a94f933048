//! Policy reports from the audit against a real API server, with the
//! upstream report CRDs (`policy-reports/` of MRGUARD_FIXTURES) and the chart's RBAC
//! for `controller.policyReports`: reports appear, change, disappear, and a
//! pass that finds the same writes nothing.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{json, Value};

use crate::check_live::{ensure_namespace, kubectl_apply_create};
use crate::support::{self, cluster::create_crd, resource, wait_for, Options, WAIT};
use mrguard::controller::leader::reports::ReportWriter;
use mrguard_policy::admission::model::Action;
use mrguard_policy::commands::reports::{Flavor, PassInput, ReportFinding, ReportedMr};

/// Held by each test whose release writes policy reports: every release
/// audits every namespace, so two at once would rewrite each other's
/// reports with their own configurations. Taken first, dropped last.
pub(crate) static REPORT_WRITERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Installs the upstream report CRDs (from `fixtures`, the folder
/// MRGUARD_FIXTURES names) once per API server.
pub(crate) async fn ensure_report_crds(client: &kube::Client, fixtures: &std::path::Path) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for file in [
        "wgpolicyk8s.io_policyreports.yaml",
        "wgpolicyk8s.io_clusterpolicyreports.yaml",
        "openreports.io_reports.yaml",
        "openreports.io_clusterreports.yaml",
    ] {
        let text = std::fs::read_to_string(fixtures.join("policy-reports").join(file)).unwrap();
        let v: Value = serde_saphyr::from_str(&text).unwrap();
        let crd: CustomResourceDefinition = serde_json::from_value(v).unwrap();
        let name = crd.metadata.name.clone().unwrap();
        if api.get_opt(&name).await.unwrap().is_none() {
            match create_crd(client, &crd).await {
                Ok(()) => {}
                // Another test of this binary got there first.
                Err(e) if e.contains("already exists") => {}
                Err(e) => panic!("{e}"),
            }
        }
    }
}

fn policy_reports(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &resource(
            "wgpolicyk8s.io",
            "v1alpha2",
            "PolicyReport",
            "policyreports",
        ),
    )
}

fn vpcs(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &support::namespaced_vpc_resource())
}

/// A namespaced VPC, not labelled for the test's webhooks: it is stored as
/// it is, like an MR created before a rule existed.
fn vpc(ns: &str, name: &str, annotations: Value, policies: Value) -> Value {
    let mut v = support::namespaced_vpc(name, json!({"managementPolicies": policies}));
    v["metadata"]["namespace"] = json!(ns);
    v["metadata"]["annotations"] = annotations;
    v
}

/// (name, rule, result) of a report's results, sorted.
fn results(report: &Value) -> Vec<(String, String, String)> {
    let mut r: Vec<(String, String, String)> = report["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["resources"][0]["name"].as_str().unwrap_or("").to_string(),
                r["rule"].as_str().unwrap_or("").to_string(),
                r["result"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    r.sort();
    r
}

async fn report(api: &Api<DynamicObject>) -> Option<Value> {
    let r = api.get_opt("mrguard").await.ok()??;
    serde_json::to_value(r).ok()
}

fn count(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_reports_appear_change_and_disappear_and_an_unchanged_pass_writes_nothing() {
    let test = "policy_reports_appear_change_and_disappear_and_an_unchanged_pass_writes_nothing";
    let _writer = REPORT_WRITERS.lock().await;
    let Some(cluster) = support::require_cluster(test).await else {
        return;
    };
    let Some(fixtures) = support::third_party_fixtures(test) else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    ensure_report_crds(&admin, &fixtures).await;
    let release = support::install(
        cluster,
        "e2e-reports",
        Options {
            values: Some("controller:\n  policyReports: wgpolicyk8s\n".into()),
            ..Options::default()
        },
    )
    .await;
    let ns_a = release.workload_ns.clone();
    let ns_b = format!("{ns_a}-b");
    ensure_namespace(&admin, &ns_b).await;

    // "bad": an unsupported policy set (Deny) and a paused value that does
    // not pause (Warn); "good": clean; "b1" in the second namespace: Warn.
    let bad_policies = json!(["Observe", "Observe"]);
    kubectl_apply_create(
        &vpcs(&admin, &ns_a),
        &vpc(
            &ns_a,
            "bad",
            json!({"crossplane.io/paused": "True"}),
            bad_policies,
        ),
    )
    .await;
    kubectl_apply_create(
        &vpcs(&admin, &ns_a),
        &vpc(&ns_a, "good", json!({}), json!(["*"])),
    )
    .await;
    kubectl_apply_create(
        &vpcs(&admin, &ns_b),
        &vpc(
            &ns_b,
            "b1",
            json!({"crossplane.io/paused": "yes"}),
            json!(["*"]),
        ),
    )
    .await;
    let bad_uid = vpcs(&admin, &ns_a)
        .get("bad")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();

    let reports_a = policy_reports(&admin, &ns_a);
    let reports_b = policy_reports(&admin, &ns_b);
    let first = wait_for("the PolicyReport of the first namespace", WAIT, || async {
        let r = report(&reports_a).await?;
        (results(&r).len() == 2).then_some(r)
    })
    .await
    .map_err(|e| release.with_logs(e))
    .unwrap();
    assert_eq!(
        results(&first),
        vec![
            ("bad".into(), "management-policies".into(), "fail".into()),
            ("bad".into(), "paused-value".into(), "warn".into()),
        ]
    );
    assert_eq!(
        first["summary"],
        // "good" passed every rule: counted, not listed.
        json!({"pass": 1, "fail": 1, "warn": 1, "error": 0, "skip": 0})
    );
    assert_eq!(
        first["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "mrguard"
    );
    let fail = first["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["result"] == "fail")
        .unwrap();
    assert_eq!(fail["policy"], "mrguard");
    assert_eq!(fail["severity"], "high");
    assert_eq!(fail["source"], "mrguard");
    assert_eq!(
        fail["resources"][0],
        json!({"apiVersion": "ec2.aws.m.upbound.io/v1beta1", "kind": "VPC", "name": "bad",
               "namespace": ns_a, "uid": bad_uid})
    );
    assert!(
        fail["message"].as_str().unwrap().contains(". Fix: "),
        "{fail}"
    );
    eprintln!(
        "--- PolicyReport {ns_a}/mrguard ---\n{}",
        serde_saphyr::to_string(&first).unwrap()
    );
    let b = wait_for("the PolicyReport of the second namespace", WAIT, || async {
        let r = report(&reports_b).await?;
        (results(&r).len() == 1).then_some(r)
    })
    .await
    .unwrap();
    assert_eq!(
        results(&b),
        vec![("b1".into(), "paused-value".into(), "warn".into())]
    );

    // Unchanged passes: no write. Counted two ways: mrguard logs every
    // report it writes, and the stored report keeps its resourceVersion.
    let leader = &release.replicas[0];
    let written_a = format!("\"namespace\":\"{ns_a}\"");
    let writes = |log: &str| {
        log.lines()
            .filter(|l| l.contains("policy report written") && l.contains(&written_a))
            .count()
    };
    let log = leader.log();
    let (writes_before, syncs_before) = (writes(&log), count(&log, "policy reports synced"));
    assert!(writes_before >= 1, "no write logged for {ns_a}");
    let version = first["metadata"]["resourceVersion"].clone();
    wait_for("two more audit passes", WAIT, || async {
        (count(&leader.log(), "policy reports synced") >= syncs_before + 2).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(
        writes(&leader.log()),
        writes_before,
        "an unchanged pass wrote {ns_a}'s report"
    );
    assert_eq!(
        report(&reports_a).await.unwrap()["metadata"]["resourceVersion"],
        version
    );

    // Fixed: its results leave, the report stays (the namespace has MRs).
    let pp = PatchParams::default();
    vpcs(&admin, &ns_a)
        .patch(
            "bad",
            &pp,
            &Patch::Merge(
                json!({"metadata": {"annotations": {"crossplane.io/paused": null}},
                                 "spec": {"managementPolicies": ["*"]}}),
            ),
        )
        .await
        .unwrap();
    let fixed = wait_for("the fixed findings to leave", WAIT, || async {
        let r = report(&reports_a).await?;
        results(&r).is_empty().then_some(r)
    })
    .await
    .unwrap();
    assert_eq!(fixed["summary"]["fail"], 0);
    assert_ne!(fixed["metadata"]["resourceVersion"], version);

    // Every MR of the second namespace deleted: its report goes.
    vpcs(&admin, &ns_b)
        .delete("b1", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the second namespace's report to go", WAIT, || async {
        reports_b
            .get_opt("mrguard")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await
    .unwrap();

    // A cluster-scoped MR is reported in the ClusterPolicyReport.
    let buckets = Api::<DynamicObject>::all_with(admin.clone(), &support::bucket_resource());
    let mut bucket = support::bucket("e2e-reports-bucket", json!({"region": "us-east-1"}));
    bucket["metadata"]["annotations"] = json!({"crossplane.io/paused": "yes"});
    kubectl_apply_create(&buckets, &bucket).await;
    let cluster_reports = Api::<DynamicObject>::all_with(
        admin.clone(),
        &resource(
            "wgpolicyk8s.io",
            "v1alpha2",
            "ClusterPolicyReport",
            "clusterpolicyreports",
        ),
    );
    let names_bucket = |r: &Value| {
        r["results"].as_array().into_iter().flatten().any(|x| {
            x["resources"][0]["name"] == "e2e-reports-bucket" && x["rule"] == "paused-value"
        })
    };
    wait_for(
        "the ClusterPolicyReport to name the Bucket",
        WAIT,
        || async {
            let r = serde_json::to_value(cluster_reports.get_opt("mrguard").await.ok()??).ok()?;
            names_bucket(&r).then_some(())
        },
    )
    .await
    .unwrap();
    buckets
        .delete("e2e-reports-bucket", &DeleteParams::default())
        .await
        .unwrap();
    // Gone from the report, or the report gone with the last
    // cluster-scoped MR.
    wait_for("the deleted Bucket to leave the report", WAIT, || async {
        match cluster_reports.get_opt("mrguard").await.ok()? {
            None => Some(()),
            Some(r) => (!names_bucket(&serde_json::to_value(r).ok()?)).then_some(()),
        }
    })
    .await
    .unwrap();
    release.check_alive().unwrap();
}

fn finding(ns: &str, i: usize) -> ReportFinding {
    ReportFinding {
        subject: ReportedMr {
            api_version: "ec2.aws.m.upbound.io/v1beta1".into(),
            kind: "VPC".into(),
            namespace: ns.into(),
            name: format!("vpc-{i:04}"),
            uid: format!("00000000-0000-0000-0000-{i:012}"),
        },
        rule: "management-policies".into(),
        action: Action::Deny,
        message: "managementPolicies lists \"Observe\" more than once".into(),
        fix: Some("use one of the supported sets".into()),
        exception: None,
    }
}

/// OpenReports, split: many findings in one namespace become numbered
/// Reports the API server accepts, each within the size given; fewer
/// findings later remove the extra ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openreports_split_into_numbered_reports_the_api_server_accepts() {
    let test = "openreports_split_into_numbered_reports_the_api_server_accepts";
    let Some(cluster) = support::require_cluster(test).await else {
        return;
    };
    let Some(fixtures) = support::third_party_fixtures(test) else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    ensure_report_crds(&admin, &fixtures).await;
    let ns = "e2e-openreports";
    ensure_namespace(&admin, ns).await;
    let max = 30_000;
    let writer = ReportWriter::new(admin.clone(), Flavor::OpenReports).with_max_bytes(max);
    let pass = |n: usize| PassInput {
        findings: (0..n).map(|i| finding(ns, i)).collect(),
        scopes: BTreeSet::from([ns.to_string()]),
        incomplete_kinds: BTreeSet::new(),
        // MRs that passed: counted in the first report, never listed.
        passed: BTreeMap::from([(ns.to_string(), 7)]),
    };
    let reports: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        ns,
        &resource("openreports.io", "v1alpha1", "Report", "reports"),
    );
    let stats = writer.sync(&pass(200)).await.unwrap();
    assert!(stats.applied > 2, "{stats:?}");
    let list = reports.list(&ListParams::default()).await.unwrap();
    let mut names = Vec::new();
    let mut total = 0;
    let mut passes = 0;
    for r in &list.items {
        let v = serde_json::to_value(r).unwrap();
        names.push(v["metadata"]["name"].as_str().unwrap().to_string());
        passes += v["summary"]["pass"].as_u64().unwrap();
        if v["metadata"]["name"] == "mrguard" {
            assert_eq!(
                v["summary"]["pass"], 7,
                "the first report counts the passes"
            );
        }
        let n = v["results"].as_array().unwrap().len();
        assert_eq!(v["summary"]["fail"], n);
        assert_eq!(v["source"], "mrguard");
        // What was sent stays within the limit (the stored object adds
        // metadata and managedFields).
        let mut sent = v.clone();
        sent["metadata"] = json!({"name": v["metadata"]["name"], "namespace": ns,
                                  "labels": v["metadata"]["labels"]});
        assert!(
            sent.to_string().len() <= max,
            "{} bytes",
            sent.to_string().len()
        );
        total += n;
    }
    names.sort();
    assert_eq!(total, 200);
    assert_eq!(passes, 7, "counted once over the numbered reports");
    assert_eq!(names.len(), stats.applied);
    assert!(names.contains(&"mrguard".to_string()) && names.contains(&"mrguard-2".to_string()));
    // The same pass again: nothing to write.
    assert_eq!(writer.sync(&pass(200)).await.unwrap().applied, 0);
    let stats = writer.sync(&pass(5)).await.unwrap();
    assert_eq!((stats.applied, stats.deleted), (1, names.len() - 1));
    let left = reports.list(&ListParams::default()).await.unwrap();
    assert_eq!(left.items.len(), 1);
}

/// Against a real API server with the chart's RBAC: with an
/// exception and an Audit action in the chart's `config`, the audit
/// reports the waived finding as `skip` naming the exception, and the
/// Audit finding as `fail` with action Audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_reports_show_audit_findings_and_skip_waived_ones() {
    let test = "policy_reports_show_audit_findings_and_skip_waived_ones";
    let _writer = REPORT_WRITERS.lock().await;
    let Some(cluster) = support::require_cluster(test).await else {
        return;
    };
    let Some(fixtures) = support::third_party_fixtures(test) else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    ensure_report_crds(&admin, &fixtures).await;
    let release = support::install(
        cluster,
        "e2e-reports-ops",
        Options {
            values: Some(
                "controller:\n  policyReports: wgpolicyk8s\nconfig:\n  rules:\n    paused-value: Audit\n  exceptions:\n    - name: legacy-policies\n      rules: [management-policies]\n      match: {names: [\"legacy-*\"]}\n      reason: migrating (ticket NET-7)\n"
                    .into(),
            ),
            ..Options::default()
        },
    )
    .await;
    let ns = release.workload_ns.clone();
    kubectl_apply_create(
        &vpcs(&admin, &ns),
        &vpc(&ns, "legacy-vpc", json!({}), json!(["Observe", "Observe"])),
    )
    .await;
    kubectl_apply_create(
        &vpcs(&admin, &ns),
        &vpc(
            &ns,
            "paused-vpc",
            json!({"crossplane.io/paused": "True"}),
            json!(["*"]),
        ),
    )
    .await;
    let reports = policy_reports(&admin, &ns);
    let r = wait_for("the PolicyReport with both results", WAIT, || async {
        let r = report(&reports).await?;
        (results(&r).len() == 2).then_some(r)
    })
    .await
    .map_err(|e| release.with_logs(e))
    .unwrap();
    assert_eq!(
        results(&r),
        vec![
            (
                "legacy-vpc".into(),
                "management-policies".into(),
                "skip".into()
            ),
            ("paused-vpc".into(), "paused-value".into(), "fail".into()),
        ]
    );
    let props = |name: &str| {
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["resources"][0]["name"] == name)
            .unwrap()["properties"]
            .clone()
    };
    assert_eq!(
        props("legacy-vpc"),
        json!({"action": "Skip", "exception": "legacy-policies"})
    );
    assert_eq!(props("paused-vpc"), json!({"action": "Audit"}));
    assert_eq!(
        r["summary"],
        json!({"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 1})
    );
    eprintln!(
        "--- PolicyReport {ns}/mrguard ---\n{}",
        serde_saphyr::to_string(&r).unwrap()
    );
    release.check_alive().unwrap();
}

/// The "audit pass done" lines of a log: (kinds, kinds listed, line
/// index). A kind judged empty from its watch, without a list, counts as
/// listed.
fn audit_passes(log: &str) -> Vec<(u64, u64, usize)> {
    log.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let v: Value = serde_json::from_str(l).ok()?;
            let f = &v["fields"];
            if f["message"] != "audit pass done" {
                return None;
            }
            let empty = f["empty"].as_u64().unwrap_or(0);
            Some((f["kinds"].as_u64()?, f["listed"].as_u64()? + empty, i))
        })
        .collect()
}

/// The incremental audit against a real API server: once every kind has
/// been listed, a pass lists only the kinds whose MRs the watches saw
/// change (and a tenth due a refresh). An MR changed into a violation,
/// past the webhooks (it is not labelled for them), is found by the next
/// pass that starts after its watch event: no full pass is waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_lists_what_changed_and_finds_an_update_at_once() {
    let test = "the_audit_lists_what_changed_and_finds_an_update_at_once";
    let Some(cluster) = support::require_cluster(test).await else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    // Each new finding's own line is at debug, under a target of its own.
    let release = support::install(
        cluster,
        "e2e-audit-changes",
        Options {
            log_level: "info,mrguard::audit=debug".into(),
            ..Options::default()
        },
    )
    .await;
    let ns = release.workload_ns.clone();
    let api = vpcs(&admin, &ns);
    kubectl_apply_create(&api, &vpc(&ns, "calm-vpc", json!({}), json!(["*"]))).await;
    let leader = wait_for("a leader", WAIT, || async { release.leader().await })
        .await
        .unwrap();
    let log = || release.replicas[leader].log();
    // Passes after the first lists fewer kinds than they cover.
    let passes = wait_for(
        "two passes that keep some kinds' findings",
        WAIT,
        || async {
            let p = audit_passes(&log());
            (p.iter().filter(|(kinds, listed, _)| listed < kinds).count() >= 2).then_some(p)
        },
    )
    .await
    .map_err(|e| release.with_logs(e))
    .unwrap();
    eprintln!("{test}: passes (kinds, listed, log line): {passes:?}");
    // The first pass judged every kind.
    assert_eq!(passes[0].0, passes[0].1, "{passes:?}");
    // Other tests' MRs change as this one runs, so how few kinds a pass
    // lists depends on them; that it lists fewer than all is what counts.
    assert!(passes.last().unwrap().0 >= 8, "{passes:?}");

    let before = passes.len();
    api.patch(
        "calm-vpc",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"managementPolicies": ["Observe", "Observe"]}})),
    )
    .await
    .unwrap();
    let found = wait_for("the audit to find the changed MR", WAIT, || async {
        let log = log();
        log.lines().position(|l| {
            l.contains("audit: existing MR violates a rule")
                && l.contains("calm-vpc")
                && l.contains(&ns)
                && l.contains("management-policies")
        })
    })
    .await
    .map_err(|e| release.with_logs(e))
    .unwrap();
    // Passes done after the patch and before the finding: at most the one
    // that was already under way (it may have listed VPCs before the
    // event arrived).
    let passes = wait_for("the pass that found it to end", WAIT, || async {
        let p = audit_passes(&log());
        p.iter().any(|(_, _, line)| *line > found).then_some(p)
    })
    .await
    .map_err(|e| release.with_logs(e))
    .unwrap();
    let between: Vec<_> = passes[before..]
        .iter()
        .filter(|(_, _, line)| *line < found)
        .collect();
    assert!(between.len() <= 1, "{between:?}");
    // The pass that found it listed a few kinds, not all of them.
    let finder = passes
        .iter()
        .find(|(_, _, line)| *line > found)
        .copied()
        .unwrap();
    assert!(finder.1 < finder.0, "{finder:?}");
    release.check_alive().unwrap();
}

/// The audit's lists of `collection` in `log`, the audit log of an
/// [`support::audited_cluster`]: from the watch cache (`resourceVersion=0`
/// alone) or paged by 250. The watchers' lists carry
/// `resourceVersionMatch` or kube-runtime's pages of 500.
fn audit_lists(log: &str, collection: &str) -> usize {
    support::requested(log, "list", collection)
        .iter()
        .filter(|u| !u.contains("resourceVersionMatch") && !u.contains("limit=500"))
        .count()
}

/// A provider rewriting an MR's status does not make the audit list its
/// kind again: nothing the rules read changed. Against a real API server
/// (its own, with an audit log of mrguard's requests): an MR's status is
/// patched through the status subresource before every pass for six
/// passes, and the audit lists its kind at most for the refresh (once in
/// 10 passes) where it listed it after every patch; a label change is
/// then listed by the next pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_update_does_not_make_the_audit_list_its_kind() {
    use crate::connections::{a_new_kind_is_watched, GROUP};
    let test = "a_status_update_does_not_make_the_audit_list_its_kind";
    let release = "e2e-audit-status";
    let Some(cluster) = support::audited_cluster(test, release).await else {
        return;
    };
    let r = support::install(cluster, release, Options::default()).await;
    let kind = "E2eStatusProbe";
    a_new_kind_is_watched(&r, kind, WAIT).await;
    let plural = format!("{}s", kind.to_lowercase());
    let collection = format!("/apis/{GROUP}/v1alpha1/{plural}");
    let api = r.cluster_api(&resource(GROUP, "v1alpha1", kind, &plural));
    let leader = wait_for("a leader", WAIT, || async { r.leader().await })
        .await
        .unwrap();
    let passes = || audit_passes(&r.replicas[leader].log()).len();
    let lists = || {
        audit_lists(
            &std::fs::read_to_string(cluster.audit_log()).unwrap(),
            &collection,
        )
    };
    // The audit has listed the new kind, so its findings are kept.
    wait_for("the audit to list the new kind", WAIT, || async {
        (lists() >= 1).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let (passes_before, lists_before) = (passes() + 1, lists());
    let mut n = 0;
    wait_for("six passes with status updates between", WAIT, || {
        n += 1;
        let api = api.clone();
        async move {
            api.patch_status(
                "paused",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"atProvider": {"n": n}}})),
            )
            .await
            .unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            (passes() >= passes_before + 6).then_some(())
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let listed = lists() - lists_before;
    eprintln!(
        "{test}: {n} status updates over {} passes; the audit listed the kind {listed} times",
        passes() - passes_before + 1
    );
    assert!(
        listed <= 1,
        "{listed} lists; {}",
        r.with_logs(String::new())
    );

    // A label is something rules read: the next pass lists the kind.
    let before = lists();
    api.patch(
        "paused",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .unwrap();
    let at = passes();
    wait_for(
        "the audit to list the kind after a label change",
        WAIT,
        || async { (lists() > before).then_some(()) },
    )
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    // At most the pass under way and the next: not a refresh 10 passes on.
    assert!(passes() <= at + 2, "{} passes", passes() - at);
    r.check_alive().unwrap();
}
