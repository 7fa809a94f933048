//! The external-identity index and the identity and adoption rules
//! (docs/rules.md) through a real API server: the index is filled by the
//! replica's own watches under the chart's RBAC, and the denials reach
//! `kubectl` as the API server returns them.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::check_live::{mrguard, text};
use crate::support::{self, api, wait_for, Options, WAIT};

/// A stand-in for Crossplane v2's namespaced Bucket, written here
/// (tests/fixtures/PROVENANCE.md); kept out of `crds/` so that the coverage
/// tests' counts stay those of the fixture CRDs.
pub(crate) async fn install_namespaced_bucket_crd(client: &kube::Client) {
    let path = support::fixtures_dir().join("crds-identity/s3.aws.m.upbound.io_buckets.yaml");
    let v: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let crd: CustomResourceDefinition = serde_json::from_value(v).unwrap();
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    if api
        .get_opt("buckets.s3.aws.m.upbound.io")
        .await
        .unwrap()
        .is_none()
    {
        support::cluster::create_crd(client, &crd).await.unwrap();
    }
}

fn namespaced_bucket(name: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "s3.aws.m.upbound.io/v1beta1",
        "kind": "Bucket",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"forProvider": {"region": "eu-west-1"}},
    })
}

/// Creates `obj` at `path` until the answer is not an allowance that only
/// the index's lag explains; returns the last answer.
async fn create_until(
    client: &kube::Client,
    path: &str,
    obj: &Value,
    what: &str,
    done: impl Fn(&api::Response) -> bool,
) -> api::Response {
    wait_for(what, WAIT, || async {
        let r = api::create(client, path, obj, true).await.ok()?;
        done(&r).then_some(r)
    })
    .await
    .unwrap();
    api::create(client, path, obj, false).await.unwrap()
}

fn denied_by(r: &api::Response, rule: &str) -> bool {
    r.status >= 400 && r.message().contains(&format!("[{rule}]"))
}

/// Two namespaces' Buckets named alike are one S3 bucket under the same
/// ClusterProviderConfig: the second is denied, naming the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_namespaces_buckets_named_alike_the_second_is_denied() {
    let Some(cluster) =
        support::require_cluster("two_namespaces_buckets_named_alike_the_second_is_denied").await
    else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    install_namespaced_bucket_crd(&admin).await;
    let r = support::install(cluster, "e2e-identity-ns", Options::default()).await;
    wait_for("admission of namespaced Buckets", WAIT, || async {
        r.webhooks_ready("s3.aws.m.upbound.io", "buckets")
            .await
            .then_some(())
    })
    .await
    .unwrap();
    let team_b = format!("{}-b", r.workload_ns);
    let ns: kube::Api<Namespace> = kube::Api::all(r.client.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": team_b}})).unwrap(),
    )
    .await
    .unwrap();
    let a = serde_json::to_value(r.object(namespaced_bucket("data", &r.workload_ns))).unwrap();
    let path_a = format!(
        "/apis/s3.aws.m.upbound.io/v1beta1/namespaces/{}/buckets",
        r.workload_ns
    );
    let created = api::create(&r.client, &path_a, &a, false).await.unwrap();
    assert_eq!(created.status, 201, "{}", created.body);

    let b = serde_json::to_value(r.object(namespaced_bucket("data", &team_b))).unwrap();
    let path_b = format!("/apis/s3.aws.m.upbound.io/v1beta1/namespaces/{team_b}/buckets");
    let resp = create_until(&r.client, &path_b, &b, "the second Bucket denied", |r| {
        denied_by(r, "external-identity")
    })
    .await;
    assert!(denied_by(&resp, "external-identity"), "{}", resp.body);
    let m = resp.message();
    assert!(
        m.contains(&format!(
            "Bucket.s3.aws.m.upbound.io {}/data",
            r.workload_ns
        )),
        "{m}"
    );
    assert!(m.contains("another crossplane.io/external-name"), "{m}");

    // Another name in team-b is another bucket.
    let c = serde_json::to_value(r.object(namespaced_bucket("data-b", &team_b))).unwrap();
    let resp = api::create(&r.client, &path_b, &c, false).await.unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);

    // The preflight of the second names the first, from the live objects.
    let first = format!("Bucket.s3.aws.m.upbound.io {}/data", r.workload_ns);
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("team-b.yaml");
    std::fs::write(&manifest, serde_saphyr::to_string(&b).unwrap()).unwrap();
    let kubeconfig = cluster.admin_kubeconfig().display().to_string();
    let (manifest, live) = (manifest.display().to_string(), "--live");
    let check = |output: &str| {
        let args = ["check", live, "-f", &manifest, "--kubeconfig", &kubeconfig];
        mrguard(&[&args[..], &["-o", output]].concat())
    };
    let out = check("json");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let results: Value = serde_json::from_slice(&out.stdout).unwrap();
    let res = &results[0];
    assert_eq!(
        (&res["operation"], &res["verdict"]),
        (&json!("CREATE"), &json!("denied")),
        "{res}"
    );
    let f = &res["findings"][0];
    assert_eq!(f["rule"], "external-identity", "{res}");
    assert!(f["message"].as_str().unwrap().contains(&first), "{f}");
    let id = &res["identity"];
    assert_eq!(
        id["identity"],
        "Bucket.s3.aws.upbound.io \"data\" in eu-west-1 via ClusterProviderConfig default"
    );
    assert_eq!(id["lookedUp"], true);
    let claimants = id["claimants"].as_array().unwrap();
    assert_eq!(claimants.len(), 1, "{id}");
    assert_eq!(
        (&claimants[0]["namespace"], &claimants[0]["name"]),
        (&json!(r.workload_ns), &json!("data"))
    );
    assert_eq!(claimants[0]["sameProviderConfig"], true);
    let out = check("text");
    let t = text(&out.stdout);
    assert!(
        t.contains(&format!(
            "  claimed by: {first} (same provider config: the same external resource)\n"
        )),
        "{t}"
    );
    eprintln!("--- check --live (text) ---\n{t}");

    // A third namespace's `data` under its own ProviderConfig is a near
    // match: admitted with a warning, and `explain` of the first shows
    // its identity and both kinds of claimant.
    let team_c = format!("{}-c", r.workload_ns);
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": team_c}})).unwrap(),
    )
    .await
    .unwrap();
    let mut near = namespaced_bucket("data", &team_c);
    near["spec"]["providerConfigRef"] = json!({"kind": "ProviderConfig", "name": "own"});
    let near = serde_json::to_value(r.object(near)).unwrap();
    let path_c = format!("/apis/s3.aws.m.upbound.io/v1beta1/namespaces/{team_c}/buckets");
    let resp = api::create(&r.client, &path_c, &near, false).await.unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    // So is a legacy (cluster-scoped) Bucket named `data` outside: its
    // default is a ProviderConfig, not the ClusterProviderConfig.
    let legacy_name = format!("{}-legacy", r.workload_ns);
    let mut legacy = support::bucket(&legacy_name, json!({"region": "eu-west-1"}));
    legacy["metadata"]["annotations"] = json!({"crossplane.io/external-name": "data"});
    let legacy = serde_json::to_value(r.object(legacy)).unwrap();
    let resp = api::create(
        &r.client,
        "/apis/s3.aws.upbound.io/v1beta1/buckets",
        &legacy,
        false,
    )
    .await
    .unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    let explain = |output: &str| {
        mrguard(&[
            "explain",
            "buckets.s3.aws.m.upbound.io/data",
            "-n",
            &r.workload_ns,
            "--kubeconfig",
            &kubeconfig,
            "-o",
            output,
        ])
    };
    let out = explain("json");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = &e["identity"];
    assert_eq!(
        id["identity"],
        "Bucket.s3.aws.upbound.io \"data\" in eu-west-1 via ClusterProviderConfig default",
        "{e}"
    );
    assert_eq!(id["foldedGroup"], "s3.aws.upbound.io");
    let claimants: Vec<(&str, bool)> = id["claimants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["object"].as_str().unwrap(),
                c["sameProviderConfig"].as_bool().unwrap(),
            )
        })
        .collect();
    let near_key = format!("Bucket.s3.aws.m.upbound.io {team_c}/data");
    let legacy_key = format!("Bucket.s3.aws.upbound.io {legacy_name}");
    assert_eq!(
        claimants,
        [(near_key.as_str(), false), (legacy_key.as_str(), false)],
        "{id}"
    );
    let out = explain("text");
    let t = text(&out.stdout);
    assert!(
        t.contains("  identity    Bucket.s3.aws.upbound.io \"data\" in eu-west-1 via ClusterProviderConfig default\n"),
        "{t}"
    );
    assert!(
        t.contains(&format!(
            "  claimed by  {near_key} (another provider config"
        )),
        "{t}"
    );
    eprintln!("--- explain (text) ---\n{t}");
    let buckets = r.cluster_api(&support::bucket_resource());
    buckets
        .delete(&legacy_name, &DeleteParams::default())
        .await
        .unwrap();
}

/// A VPC claiming another VPC's external name is denied while the first
/// exists, also while it is being deleted, and allowed once it is gone.
/// Creating with an explicit external name and the default policies
/// (Delete) warns that a delete would delete the adopted VPC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vpc_claiming_another_s_external_name_is_denied_until_the_first_is_gone() {
    let Some(cluster) = support::require_cluster(
        "a_vpc_claiming_another_s_external_name_is_denied_until_the_first_is_gone",
    )
    .await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-identity-vpc", Options::default()).await;
    let path = "/apis/ec2.aws.upbound.io/v1beta1/vpcs";
    let ext = json!({"crossplane.io/external-name": "vpc-e2e-identity-0abc"});
    let mut first = support::vpc("e2e-identity-first", json!({}));
    first["metadata"]["annotations"] = ext.clone();
    first["metadata"]["finalizers"] = json!(["e2e.mrguard.io/hold"]);
    let first = serde_json::to_value(r.object(first)).unwrap();
    let resp = api::create(&r.client, path, &first, false).await.unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    // Adoption with Delete in the (default) policies warns.
    assert!(
        resp.warnings
            .iter()
            .any(|w| w.starts_with("adoption: ") && w.contains("deleting this MR will delete it")),
        "{:?}",
        resp.warnings
    );

    let mut second = support::vpc("e2e-identity-second", json!({}));
    second["metadata"]["annotations"] = ext;
    let second = serde_json::to_value(r.object(second)).unwrap();
    let resp = create_until(&r.client, path, &second, "the second VPC denied", |r| {
        denied_by(r, "external-identity")
    })
    .await;
    assert!(denied_by(&resp, "external-identity"), "{}", resp.body);
    assert!(
        resp.message()
            .contains("VPC.ec2.aws.upbound.io e2e-identity-first"),
        "{}",
        resp.message()
    );

    // Being deleted, the first keeps its claim until it is gone.
    let vpcs = r.cluster_api(&support::vpc_resource());
    vpcs.delete("e2e-identity-first", &DeleteParams::default())
        .await
        .unwrap();
    let resp = create_until(
        &r.client,
        path,
        &second,
        "the deleting VPC's claim seen",
        |r| denied_by(r, "external-identity") && r.message().contains("being deleted"),
    )
    .await;
    assert!(denied_by(&resp, "external-identity"), "{}", resp.body);

    vpcs.patch(
        "e2e-identity-first",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let resp = create_until(&r.client, path, &second, "the second VPC allowed", |r| {
        r.status == 201
    })
    .await;
    assert_eq!(resp.status, 201, "{}", resp.body);
}

/// Admission cannot see two creates racing in two replicas, nor creates
/// while mrguard is down: two VPCs with one external name, created before
/// any mrguard runs, are found by `mrguard audit` and by the leader's audit
/// (finding in the log, `mrguard_audit_violations{rule="external-identity"}`
/// and a result in the ClusterPolicyReport naming the other VPC).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_created_while_mrguard_was_down_are_found_by_the_audit() {
    let Some(cluster) = support::require_cluster(
        "duplicates_created_while_mrguard_was_down_are_found_by_the_audit",
    )
    .await
    else {
        return;
    };
    let Some(fixtures) = support::third_party_fixtures(
        "duplicates_created_while_mrguard_was_down_are_found_by_the_audit",
    ) else {
        return;
    };
    // This release writes policy reports: one writer at a time.
    let _writer = crate::policy_reports::REPORT_WRITERS.lock().await;
    // No release yet, and no label any release's objectSelector matches:
    // no webhook judges these creates.
    let admin = cluster.admin().await.unwrap();
    let vpcs: kube::Api<kube::api::DynamicObject> =
        kube::Api::all_with(admin.clone(), &support::vpc_resource());
    for name in ["e2e-identity-dup-a", "e2e-identity-dup-b"] {
        let mut v = support::vpc(name, json!({}));
        v["metadata"]["annotations"] =
            json!({"crossplane.io/external-name": "vpc-e2e-identity-dup"});
        vpcs.create(&PostParams::default(), &serde_json::from_value(v).unwrap())
            .await
            .unwrap();
    }
    // `mrguard audit` from a workstation runs the controller's audit loop
    // with an index it builds from the listing: both claimants are found.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mrguard"))
        .args(["audit", "--quiet", "-o", "json", "--kubeconfig"])
        .arg(cluster.admin_kubeconfig())
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let findings: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let claimants: Vec<(&str, &str)> = findings
        .iter()
        .filter(|f| f["rule"] == "external-identity" && f["kind"] == "VPC")
        .map(|f| (f["name"].as_str().unwrap(), f["message"].as_str().unwrap()))
        .collect();
    for (me, other) in [
        ("e2e-identity-dup-a", "e2e-identity-dup-b"),
        ("e2e-identity-dup-b", "e2e-identity-dup-a"),
    ] {
        assert!(
            claimants
                .iter()
                .any(|(n, m)| *n == me && m.contains(&format!("VPC.ec2.aws.upbound.io {other}"))),
            "{me}: {claimants:?}"
        );
    }
    crate::policy_reports::ensure_report_crds(&admin, &fixtures).await;
    let r = support::install(
        cluster,
        "e2e-identity-audit",
        Options {
            values: Some("controller:\n  policyReports: wgpolicyk8s\n".into()),
            // Each finding, naming the other claimant, is a debug line.
            log_level: "info,mrguard::audit=debug".into(),
            ..Options::default()
        },
    )
    .await;
    let replica = &r.replicas[0];
    wait_for("the audit to report both claimants", WAIT, || async {
        let m = replica.metrics().await.ok()?;
        let n = m.get(
            "mrguard_audit_violations",
            &[
                ("rule", "external-identity"),
                ("group", "ec2.aws.upbound.io"),
                ("kind", "VPC"),
            ],
        );
        let log = replica.log();
        (n >= 2.0
            && log.contains("VPC.ec2.aws.upbound.io e2e-identity-dup-a")
            && log.contains("VPC.ec2.aws.upbound.io e2e-identity-dup-b"))
        .then_some(())
    })
    .await
    .map_err(|e| r.with_logs(e))
    .unwrap();
    // The policy report carries the finding, naming the other claimant.
    let reports = kube::Api::<kube::api::DynamicObject>::all_with(
        admin.clone(),
        &support::resource(
            "wgpolicyk8s.io",
            "v1alpha2",
            "ClusterPolicyReport",
            "clusterpolicyreports",
        ),
    );
    let result = wait_for(
        "the ClusterPolicyReport's identity result",
        WAIT,
        || async {
            let report = serde_json::to_value(reports.get_opt("mrguard").await.ok()??).ok()?;
            report["results"].as_array()?.iter().find_map(|x| {
                (x["rule"] == "external-identity"
                    && x["resources"][0]["name"] == "e2e-identity-dup-a")
                    .then(|| x.clone())
            })
        },
    )
    .await
    .map_err(|e| r.with_logs(e))
    .unwrap();
    assert_eq!(result["result"], "fail", "{result}");
    assert!(
        result["message"]
            .as_str()
            .unwrap_or("")
            .contains("VPC.ec2.aws.upbound.io e2e-identity-dup-b"),
        "{result}"
    );
    for name in ["e2e-identity-dup-a", "e2e-identity-dup-b"] {
        let _ = vpcs.delete(name, &DeleteParams::default()).await;
    }
}

/// A namespace with the release label (the harness's objectSelector) and
/// one namespaced VPC whose deletion would delete its external resource.
async fn namespace_with_vpc(r: &support::Release, name: &str) {
    let ns: kube::Api<Namespace> = kube::Api::all(r.client.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name,
            "labels": {support::release::TEST_LABEL: r.name}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let mut vpc = support::namespaced_vpc("net", json!({}));
    vpc["metadata"]["namespace"] = json!(name);
    kube::Api::<kube::api::DynamicObject>::namespaced_with(
        r.client.clone(),
        name,
        &support::namespaced_vpc_resource(),
    )
    .create(&PostParams::default(), &r.object(vpc))
    .await
    .unwrap();
}

/// An exception with `rules: [teardown]` matching a namespace by name
/// waives the teardown denial: the deletion goes through with a warning
/// naming the exception; a namespace it does not name is still denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exception_naming_a_namespace_waives_its_teardown_denial() {
    let Some(cluster) =
        support::require_cluster("an_exception_naming_a_namespace_waives_its_teardown_denial")
            .await
    else {
        return;
    };
    let r = support::install(
        cluster,
        "e2e-teardown-exc",
        Options {
            // The built-in configuration (the chart's default) with the exception.
            config: Some(format!(
                "{}exceptions:\n  - name: retired-teams\n    rules: [teardown]\n    match: {{names: [\"*-retired\"]}}\n    \
                 reason: these teams' accounts are closed (ticket OPS-9)\n    expires: \"2099-01-31T00:00:00Z\"\n",
                mrguard_policy::admission::config::BUILTIN_YAML
            )),
            ..Options::default()
        },
    )
    .await;
    let (retired, held) = (
        format!("{}-retired", r.workload_ns),
        format!("{}-held", r.workload_ns),
    );
    namespace_with_vpc(&r, &held).await;
    namespace_with_vpc(&r, &retired).await;
    let ns: kube::Api<Namespace> = kube::Api::all(r.client.clone());
    let dry = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    // The index has the MRs once the namespace the exception leaves out
    // is denied.
    wait_for("the held namespace's deletion denied", WAIT, || async {
        match ns.delete(&held, &dry).await {
            Err(kube::Error::Api(s)) if s.message.contains("[teardown]") => Some(()),
            _ => None,
        }
    })
    .await
    .map_err(|e| r.with_logs(e))
    .unwrap();
    let resp = api::request(
        &r.client,
        "DELETE",
        &format!("/api/v1/namespaces/{retired}"),
        "application/json",
        None,
    )
    .await
    .unwrap();
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert!(
        resp.warnings.iter().any(|w| {
            w.starts_with(
            "teardown: waived by exception retired-teams (expires 2099-01-31T00:00:00Z): namespace "
        ) && w.contains(&format!("VPC.ec2.aws.m.upbound.io {retired}/net"))
        }),
        "{:?}",
        resp.warnings
    );
    // envtest runs no namespace controller: the namespace stays
    // Terminating; its VPC goes so that no MR is left in it.
    for n in [&retired, &held] {
        let _ = kube::Api::<kube::api::DynamicObject>::namespaced_with(
            r.client.clone(),
            n,
            &support::namespaced_vpc_resource(),
        )
        .delete("net", &DeleteParams::default())
        .await;
    }
}

/// The teardown guard: a namespace that still holds an MR whose deletion
/// deletes its external resource cannot be deleted (the denial names the
/// MR), and can be once annotated. With mrguard stopped the entry fails
/// open: the deletion succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_holding_mrs_cannot_be_deleted_until_annotated_or_mrguard_is_down() {
    let Some(cluster) = support::require_cluster(
        "a_namespace_holding_mrs_cannot_be_deleted_until_annotated_or_mrguard_is_down",
    )
    .await
    else {
        return;
    };
    let mut r = support::install(cluster, "e2e-teardown", Options::default()).await;
    let guarded = format!("{}-guarded", r.workload_ns);
    namespace_with_vpc(&r, &guarded).await;
    let ns: kube::Api<Namespace> = kube::Api::all(r.client.clone());
    let dry = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    wait_for("the namespace deletion denied", WAIT, || async {
        match ns.delete(&guarded, &dry).await {
            Err(kube::Error::Api(s)) if s.message.contains("[teardown]") => Some(()),
            _ => None,
        }
    })
    .await
    .map_err(|e| r.with_logs(e))
    .unwrap();
    let e = ns
        .delete(&guarded, &DeleteParams::default())
        .await
        .unwrap_err();
    let kube::Error::Api(s) = e else {
        panic!("expected a denial, got {e}")
    };
    assert_eq!(s.code, 403, "{}", s.message);
    assert!(
        s.message
            .contains(&format!("VPC.ec2.aws.m.upbound.io {guarded}/net")),
        "{}",
        s.message
    );
    assert!(
        s.message.contains("mrguard.io/allow-teardown=true"),
        "{}",
        s.message
    );

    ns.patch(
        &guarded,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"mrguard.io/allow-teardown": "true"}}})),
    )
    .await
    .unwrap();
    ns.delete(&guarded, &DeleteParams::default())
        .await
        .expect("an annotated namespace is deleted");

    // mrguard down: the entry fails open.
    let unguarded = format!("{}-down", r.workload_ns);
    namespace_with_vpc(&r, &unguarded).await;
    wait_for("the second namespace's deletion denied", WAIT, || async {
        match ns.delete(&unguarded, &dry).await {
            Err(kube::Error::Api(s)) if s.message.contains("[teardown]") => Some(()),
            _ => None,
        }
    })
    .await
    .unwrap();
    // envtest runs no namespace controller: the namespaces stay
    // Terminating, and an MR left in one would fail other releases' policy
    // report writes there. The VPCs go; the second one leaves this
    // release's webhooks first (its label), since with mrguard down its
    // validating webhook fails closed.
    let client = r.client.clone();
    let vpcs = |n: &str| {
        kube::Api::<kube::api::DynamicObject>::namespaced_with(
            client.clone(),
            n,
            &support::namespaced_vpc_resource(),
        )
    };
    vpcs(&guarded)
        .delete("net", &DeleteParams::default())
        .await
        .unwrap();
    vpcs(&unguarded)
        .patch(
            "net",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {support::release::TEST_LABEL: null}}})),
        )
        .await
        .unwrap();
    r.kill_replica(0);
    ns.delete(&unguarded, &DeleteParams::default())
        .await
        .expect("with mrguard down the deletion succeeds");
    vpcs(&unguarded)
        .delete("net", &DeleteParams::default())
        .await
        .unwrap();
}

/// A provider family of the test's own, so that its provider configs
/// change no other test's findings: a ProviderConfig kind in `upbound.io`,
/// which only this release may list (other releases' index leaves a kind
/// it cannot list out), and an MR kind in a group every release may list
/// (`azure.m.upbound.io`, so it is no forbidden kind for the others).
/// Written here, not copied: the smallest CRDs with Crossplane's categories.
const PC_GROUP: &str = "upbound.io";
const THING_GROUP: &str = "azure.m.upbound.io";

fn provider_config_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("providerconfigs.{PC_GROUP}")},
        "spec": {
            "group": PC_GROUP,
            "scope": "Cluster",
            "names": {"kind": "ProviderConfig", "listKind": "ProviderConfigList",
                      "plural": "providerconfigs", "singular": "providerconfig",
                      "categories": ["crossplane", "providerconfig", "e2epc"]},
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}},
                "subresources": {"status": {}},
            }],
        },
    })
}

async fn ensure_crd(admin: &kube::Client, crd: Value) {
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(admin.clone());
    if api
        .get_opt(crd.metadata.name.as_deref().unwrap())
        .await
        .unwrap()
        .is_none()
    {
        support::cluster::create_crd(admin, &crd).await.unwrap();
    }
}

/// The reference check and the credentials half of the teardown guard: an
/// MR naming a ProviderConfig that does not exist is admitted with a
/// warning; a Secret that a ProviderConfig in use reads cannot be deleted
/// (the denial names the config), and can once mrguard is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_provider_config_warns_and_a_credentials_secret_in_use_cannot_be_deleted() {
    let Some(cluster) = support::require_cluster(
        "a_missing_provider_config_warns_and_a_credentials_secret_in_use_cannot_be_deleted",
    )
    .await
    else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    ensure_crd(&admin, provider_config_crd()).await;
    ensure_crd(
        &admin,
        support::managed_crd(THING_GROUP, "v1alpha1", "E2eThing", "e2ethings", "Cluster"),
    )
    .await;
    // The chart's RBAC for this family: its MR group and, through
    // providerFamilies, read on its provider configs.
    let values = format!(
"rbac:\n  audit:\n    apiGroups: [{THING_GROUP}]\n    providerFamilies:\n      - group: {PC_GROUP}\n        services: []\n"
    );
    let mut r = support::install(
        cluster,
        "e2e-provider-configs",
        Options {
            values: Some(values),
            ..Options::default()
        },
    )
    .await;
    wait_for("admission of Things", WAIT, || async {
        r.webhooks_ready(THING_GROUP, "e2ethings")
            .await
            .then_some(())
    })
    .await
    .unwrap();

    let pcs = kube::Api::<kube::api::DynamicObject>::all_with(
        r.client.clone(),
        &support::resource(PC_GROUP, "v1beta1", "ProviderConfig", "providerconfigs"),
    );
    let pc_name = format!("{}-used", r.name);
    let pc: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{PC_GROUP}/v1beta1"), "kind": "ProviderConfig",
        "metadata": {"name": pc_name},
        "spec": {"credentials": {"source": "Secret",
                 "secretRef": {"namespace": r.workload_ns, "name": "creds", "key": "creds"}}},
    }))
    .unwrap();
    pcs.create(&PostParams::default(), &pc).await.unwrap();
    // Crossplane counts the MRs using a config in status.users.
    pcs.patch_status(
        &pc_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"users": 1}})),
    )
    .await
    .unwrap();

    // An MR naming a config that does not exist: admitted, with a warning.
    let path = format!("/apis/{THING_GROUP}/v1alpha1/e2ethings");
    let thing = serde_json::to_value(r.object(json!({
        "apiVersion": format!("{THING_GROUP}/v1alpha1"), "kind": "E2eThing",
        "metadata": {"name": format!("{}-thing", r.name)},
        "spec": {"forProvider": {}, "providerConfigRef": {"name": "nowhere"}},
    })))
    .unwrap();
    wait_for("the missing config warned", WAIT, || async {
        let resp = api::create(&r.client, &path, &thing, true).await.ok()?;
        resp.warnings
            .iter()
            .any(|w| w.starts_with("provider-config-exists: "))
            .then_some(())
    })
    .await
    .map_err(|e| r.with_logs(e))
    .unwrap();
    let resp = api::create(&r.client, &path, &thing, false).await.unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    let w: Vec<_> = resp
        .warnings
        .iter()
        .filter(|w| w.starts_with("provider-config-exists: "))
        .collect();
    assert!(
        w[0].contains(&format!(
            "ProviderConfig \"nowhere\" ({PC_GROUP}) does not exist"
        )),
        "{w:?}"
    );
    // Naming the config that exists: no warning.
    let mut ok = thing.clone();
    ok["metadata"]["name"] = json!(format!("{}-thing-ok", r.name));
    ok["spec"]["providerConfigRef"] = json!({"name": pc_name});
    let resp = api::create(&r.client, &path, &ok, false).await.unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    assert!(
        !resp
            .warnings
            .iter()
            .any(|w| w.starts_with("provider-config-exists")),
        "{:?}",
        resp.warnings
    );

    // The credentials Secret of a config in use.
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(r.client.clone(), &r.workload_ns);
    let secret = json!({"metadata": {"name": "creds",
        "labels": {support::release::TEST_LABEL: r.name}},
        "stringData": {"creds": "[default]\n"}});
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(secret.clone()).unwrap(),
        )
        .await
        .unwrap();
    let dry = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    wait_for("the Secret deletion denied", WAIT, || async {
        match secrets.delete("creds", &dry).await {
            Err(kube::Error::Api(s)) if s.message.contains("[teardown]") => Some(()),
            _ => None,
        }
    })
    .await
    .map_err(|e| r.with_logs(e))
    .unwrap();
    let e = secrets
        .delete("creds", &DeleteParams::default())
        .await
        .unwrap_err();
    let kube::Error::Api(s) = e else {
        panic!("expected a denial, got {e}")
    };
    assert!(
        s.message.contains(&format!(
            "ProviderConfig.{PC_GROUP} {pc_name} in use reads its credentials"
        )),
        "{}",
        s.message
    );
    // Another Secret in the namespace is not held.
    let mut other = secret.clone();
    other["metadata"]["name"] = json!("unrelated");
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(other).unwrap(),
        )
        .await
        .unwrap();
    secrets
        .delete("unrelated", &DeleteParams::default())
        .await
        .expect("a Secret no config reads is deleted");

    // mrguard down: the entry fails open.
    r.kill_replica(0);
    secrets
        .delete("creds", &DeleteParams::default())
        .await
        .expect("with mrguard down the Secret is deleted");
    let _ = pcs.delete(&pc_name, &DeleteParams::default()).await;
}

/// The teardown guard's Provider entry (crossplane#6001): a Provider
/// package whose MR kinds (CRDs owned by it, as the package manager makes
/// them) still have MRs cannot be deleted, naming them, and can once they
/// are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_whose_kinds_have_mrs_cannot_be_deleted_until_they_are_gone() {
    let Some(cluster) = support::require_cluster(
        "a_provider_whose_kinds_have_mrs_cannot_be_deleted_until_they_are_gone",
    )
    .await
    else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    support::crossplane::install(&admin, support::crossplane::PackageKind::Provider)
        .await
        .unwrap();
    let r = support::install(cluster, "e2e-teardown-provider", Options::default()).await;
    let providers = kube::Api::<kube::api::DynamicObject>::all_with(
        r.client.clone(),
        &support::resource("pkg.crossplane.io", "v1", "Provider", "providers"),
    );
    let name = "e2e-provider-widgets";
    let provider: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "pkg.crossplane.io/v1", "kind": "Provider",
        "metadata": {"name": name, "labels": {support::release::TEST_LABEL: r.name}},
        "spec": {"package": "xpkg.example.org/e2e/provider-widgets:v0.1.0"},
    }))
    .unwrap();
    let created = providers
        .create(&PostParams::default(), &provider)
        .await
        .unwrap();
    // An MR kind of the chart's default RBAC groups, owned by the Provider.
    let mut crd = support::managed_crd(
        "azure.m.upbound.io",
        "v1alpha1",
        "E2eWidget",
        "e2ewidgets",
        "Cluster",
    );
    crd["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "pkg.crossplane.io/v1", "kind": "Provider", "name": name,
        "uid": created.metadata.uid.clone().unwrap(), "controller": false}]);
    ensure_crd(&admin, crd).await;
    let widgets = kube::Api::<kube::api::DynamicObject>::all_with(
        r.client.clone(),
        &support::resource("azure.m.upbound.io", "v1alpha1", "E2eWidget", "e2ewidgets"),
    );
    widgets
        .create(
            &PostParams::default(),
            &r.object(
                json!({"apiVersion": "azure.m.upbound.io/v1alpha1", "kind": "E2eWidget",
                "metadata": {"name": "w1"}, "spec": {"forProvider": {}}}),
            ),
        )
        .await
        .unwrap();
    let dry = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    wait_for("the Provider deletion denied", WAIT, || async {
        match providers.delete(name, &dry).await {
            Err(kube::Error::Api(s)) if s.message.contains("[teardown]") => Some(()),
            _ => None,
        }
    })
    .await
    .map_err(|e| r.with_logs(e))
    .unwrap();
    let e = providers
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_err();
    let kube::Error::Api(s) = e else {
        panic!("expected a denial, got {e}")
    };
    assert!(
        s.message
            .contains("1 MR of its kinds still exists (E2eWidget.azure.m.upbound.io w1)"),
        "{}",
        s.message
    );

    widgets
        .delete("w1", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the Provider deletion allowed", WAIT, || async {
        providers.delete(name, &dry).await.ok().map(|_| ())
    })
    .await
    .unwrap();
    providers
        .delete(name, &DeleteParams::default())
        .await
        .expect("a Provider without MRs is deleted");
}

/// The Provider entry of the teardown guard: Crossplane v2 makes MR CRDs from
/// ManagedResourceDefinitions, so a CRD names its MRD and (as controller)
/// the ProviderRevision, never the Provider; the revision's controller is
/// the Provider. The guard maps the kind through the revision, whatever
/// the names (the revision is not named after the Provider here); a
/// direct owner reference to the Provider alone would miss this kind and
/// allow the Provider's deletion while its MR exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_whose_v2_kinds_have_mrs_is_found_through_its_revision() {
    let Some(cluster) = support::require_cluster(
        "a_provider_whose_v2_kinds_have_mrs_is_found_through_its_revision",
    )
    .await
    else {
        return;
    };
    let admin = cluster.admin().await.unwrap();
    support::crossplane::install(&admin, support::crossplane::PackageKind::Provider)
        .await
        .unwrap();
    crate::exemptions::install_package_crds(&admin).await;
    let r = support::install(cluster, "e2e-teardown-v2", Options::default()).await;
    let providers = kube::Api::<kube::api::DynamicObject>::all_with(
        admin.clone(),
        &support::resource("pkg.crossplane.io", "v1", "Provider", "providers"),
    );
    let revisions = kube::Api::<kube::api::DynamicObject>::all_with(
        admin.clone(),
        &support::resource(
            "pkg.crossplane.io",
            "v1",
            "ProviderRevision",
            "providerrevisions",
        ),
    );
    let name = "e2e-provider-sprockets";
    let provider: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "pkg.crossplane.io/v1", "kind": "Provider",
        "metadata": {"name": name, "labels": {support::release::TEST_LABEL: r.name}},
        "spec": {"package": "xpkg.example.org/e2e/provider-sprockets:v0.1.0"},
    }))
    .unwrap();
    let provider_uid = providers
        .create(&PostParams::default(), &provider)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let revision = "acme-sprockets-7c1d9e";
    let rev: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision",
        "metadata": {"name": revision, "ownerReferences": [
            {"apiVersion": "pkg.crossplane.io/v1", "kind": "Provider", "name": name,
             "uid": provider_uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"desiredState": "Active", "revision": 1,
                 "image": "xpkg.example.org/e2e/provider-sprockets:v0.1.0"},
    }))
    .unwrap();
    let rev_uid = revisions
        .create(&PostParams::default(), &rev)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let mut crd = support::managed_crd(
        "azure.m.upbound.io",
        "v1alpha1",
        "E2eSprocket",
        "e2esprockets",
        "Cluster",
    );
    crd["metadata"]["ownerReferences"] = json!([
        {"apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceDefinition",
         "name": "e2esprockets.azure.m.upbound.io",
         "uid": "00000000-0000-0000-0000-0000000000d1", "controller": false},
        {"apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision", "name": revision,
         "uid": rev_uid, "controller": true, "blockOwnerDeletion": true}]);
    ensure_crd(&admin, crd).await;
    let sprockets = kube::Api::<kube::api::DynamicObject>::all_with(
        r.client.clone(),
        &support::resource(
            "azure.m.upbound.io",
            "v1alpha1",
            "E2eSprocket",
            "e2esprockets",
        ),
    );
    let s1 = r.object(json!({
        "apiVersion": "azure.m.upbound.io/v1alpha1", "kind": "E2eSprocket",
        "metadata": {"name": "s1"}, "spec": {"forProvider": {}}}));
    wait_for("the MR created", WAIT, || async {
        sprockets
            .create(&PostParams::default(), &s1)
            .await
            .ok()
            .map(|_| ())
    })
    .await
    .map_err(|e| r.with_logs(e))
    .unwrap();
    let dry = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    let denial = wait_for("the Provider deletion denied", WAIT, || async {
        match providers.delete(name, &dry).await {
            Err(kube::Error::Api(s)) if s.message.contains("[teardown]") => Some(s.message),
            _ => None,
        }
    })
    .await
    .map_err(|e| r.with_logs(e))
    .unwrap();
    assert!(
        denial.contains("1 MR of its kinds still exists (E2eSprocket.azure.m.upbound.io s1)"),
        "{denial}"
    );

    sprockets
        .delete("s1", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the Provider deletion allowed", WAIT, || async {
        providers.delete(name, &dry).await.ok().map(|_| ())
    })
    .await
    .unwrap();
    providers
        .delete(name, &DeleteParams::default())
        .await
        .expect("a Provider without MRs is deleted");
    let _ = revisions.delete(revision, &DeleteParams::default()).await;
}

/// Editing the configuration lists again only the kinds whose claims
/// change. Against a real API server with an audit log of mrguard's
/// requests, two kinds watched: an entry put in front of `resources` that
/// gives one of them another external-name strategy makes the replica
/// list that kind again, and only that kind. Any change to `resources`
/// listed every kind again before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_edit_relists_only_the_kinds_whose_claims_change() {
    use crate::connections::{a_new_kind_is_watched, GROUP};
    let test = "a_configuration_edit_relists_only_the_kinds_whose_claims_change";
    let release = "e2e-claims-edit";
    let Some(cluster) = support::audited_cluster(test, release).await else {
        return;
    };
    let r = support::install(cluster, release, Options::default()).await;
    let (changed, kept) = ("E2eClaimsChanged", "E2eClaimsKept");
    for kind in [changed, kept] {
        a_new_kind_is_watched(&r, kind, WAIT).await;
    }
    // The watchers' lists: kube-runtime's pages, or read from the watch
    // cache with a resourceVersionMatch (the audit's lists have neither).
    let lists = |kind: &str| {
        let collection = format!("/apis/{GROUP}/v1alpha1/{}s", kind.to_lowercase());
        let log = std::fs::read_to_string(cluster.audit_log()).unwrap();
        support::requested(&log, "list", &collection)
            .iter()
            .filter(|u| u.contains("resourceVersionMatch") || u.contains("limit=500"))
            .count()
    };
    let (changed_before, kept_before) = (lists(changed), lists(kept));
    assert!(changed_before >= 1 && kept_before >= 1);

    let mut config: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(r.config_file()).unwrap()).unwrap();
    config["resources"].as_array_mut().unwrap().insert(
        0,
        json!({"apiGroups": [GROUP], "kinds": [changed], "externalName": "IdentifierFromProvider"}),
    );
    // JSON is YAML.
    r.write_config(&config.to_string()).unwrap();
    wait_for("the changed kind listed again", WAIT, || async {
        (lists(changed) > changed_before).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    // Two polls of the configuration (2 s each) more for a relist to show.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(
        lists(kept),
        kept_before,
        "the kept kind was listed again; {}",
        r.with_logs(String::new())
    );
    r.check_alive().unwrap();
}
