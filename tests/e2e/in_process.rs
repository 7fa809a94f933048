//! `admission.inProcess: auto` (docs/in-process.md) against the real API
//! server with the chart's RBAC: the leader writes the policies, the API
//! server enforces them with mrguard stopped, a hand edit is put back with
//! an Event, and turning the mode off removes what the leader wrote and
//! nothing else. Needs kube-apiserver 1.36 (MutatingAdmissionPolicy v1).

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use mrguard_policy::commands::export::in_process;
use serde_json::json;

use crate::support::{self, vpc_resource, wait_for, Options, Release, WAIT};

const SERVER: (u32, u32) = (1, 36);

const CONFIG: &str = r#"
resources:
  - apiGroups: ["ec2.aws.upbound.io"]
    kinds: ["VPC"]
    immutableFields: ["spec.forProvider.region"]
"#;

fn options() -> Options {
    Options {
        config: Some(CONFIG.into()),
        values: Some("admission: {inProcess: auto}".into()),
        ..Options::default()
    }
}

fn admission(kind: &str, plural: &str) -> kube::api::ApiResource {
    support::resource("admissionregistration.k8s.io", "v1", kind, plural)
}

fn vaps(r: &Release) -> Api<DynamicObject> {
    r.cluster_api(&admission(
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
    ))
}

fn maps(r: &Release) -> Api<DynamicObject> {
    r.cluster_api(&admission(
        "MutatingAdmissionPolicy",
        "mutatingadmissionpolicies",
    ))
}

/// The four kinds the leader writes.
fn all_kinds(r: &Release) -> Vec<Api<DynamicObject>> {
    in_process::KINDS
        .into_iter()
        .map(|(k, p)| r.cluster_api(&admission(k, p)))
        .collect()
}

/// Selects this release's objects.
fn ours(r: &Release) -> ListParams {
    ListParams::default().labels(&in_process::selector(&r.fullname))
}

/// The names of this release's objects of `api`.
async fn owned(r: &Release, api: &Api<DynamicObject>) -> Vec<String> {
    api.list(&ours(r))
        .await
        .map(|l| {
            l.items
                .into_iter()
                .map(|o| o.metadata.name.unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

/// The expression of the webhook's in-process matchCondition, if any.
async fn in_process_condition(r: &Release, validating: bool) -> Option<String> {
    let (m, v) = r.configurations().await?;
    let c = if validating { v } else { m };
    c["webhooks"][0]["matchConditions"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == in_process::CONDITION)
        .and_then(|c| c["expression"].as_str().map(str::to_string))
}

/// Waits until the leader wrote the policies and the webhooks skip what
/// they enforce (the conditions are set from what the replica saw live).
async fn wait_in_force(r: &Release) {
    let immutable = format!("{}-immutable-field-0", r.fullname);
    let defaults = format!("{}-defaults", r.fullname);
    wait_for(
        "the in-process policies written and in force",
        WAIT,
        || async {
            let v = owned(r, &vaps(r)).await;
            let m = owned(r, &maps(r)).await;
            let validating = in_process_condition(r, true).await?;
            let mutating = in_process_condition(r, false).await?;
            (v.contains(&immutable) && m.contains(&defaults)).then_some((validating, mutating))
        },
    )
    .await
    .map(|(validating, mutating)| {
        assert_eq!(validating, "request.operation in ['CREATE', 'UPDATE']");
        assert_eq!(mutating, "false");
    })
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
}

fn vpc(r: &Release, name: &str, region: &str) -> DynamicObject {
    r.object(json!({
        "apiVersion": "ec2.aws.upbound.io/v1beta1",
        "kind": "VPC",
        "metadata": {"name": name, "annotations": {
            "crossplane.io/external-create-succeeded": "2026-01-01T00:00:00Z"}},
        "spec": {"forProvider": {"region": region, "cidrBlock": "10.0.0.0/16"}},
    }))
}

/// Name and resourceVersion of every object of this release's, sorted.
async fn versions(r: &Release) -> Vec<(Option<String>, Option<String>)> {
    let mut out = Vec::new();
    for api in all_kinds(r) {
        for o in api.list(&ours(r)).await.unwrap() {
            out.push((o.metadata.name, o.metadata.resource_version));
        }
    }
    out.sort();
    out
}

async fn remove_policies(r: &Release) {
    for api in all_kinds(r) {
        for name in owned(r, &api).await {
            let _ = api.delete(&name, &DeleteParams::default()).await;
        }
    }
}

/// With mrguard stopped, the MutatingAdmissionPolicy still gives the
/// defaults, the exported rule still denies (from the API server, not the
/// webhook, which fails open in this mode), and a provider's status write
/// and a harmless spec change go through.
#[tokio::test]
async fn with_mrguard_stopped_the_api_server_keeps_its_rules() {
    const TEST: &str = "with_mrguard_stopped_the_api_server_keeps_its_rules";
    let Some(cluster) = support::require_cluster_at(TEST, SERVER).await else {
        return;
    };
    let mut r = support::install(cluster, "e2e-inproc-down", options()).await;
    wait_in_force(&r).await;
    let policy = vaps(&r)
        .get(&format!("{}-immutable-field-0", r.fullname))
        .await
        .unwrap();
    let owner = &policy.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ClusterRole", format!("{}-in-process", r.fullname).as_str())
    );
    assert_eq!(
        policy.data["spec"]["matchConstraints"]["objectSelector"]["matchLabels"]
            [support::release::TEST_LABEL],
        r.name,
        "the policies judge what the webhooks would have been sent"
    );

    // Settled: the leader's passes rewrite nothing (a replace of the same
    // object stores nothing), so nothing is ever "put back".
    let before = versions(&r).await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(versions(&r).await, before, "the policies churn");
    assert!(
        !r.replicas[0].log().contains("put back"),
        "{}",
        r.with_logs("a settled policy was taken for a hand edit".into())
    );

    r.kill_replica(0);
    let api = r.cluster_api(&vpc_resource());
    let created = api
        .create(&PostParams::default(), &vpc(&r, "inproc-down", "us-east-1"))
        .await
        .unwrap_or_else(|e| panic!("{}", r.with_logs(format!("create: {e}"))));
    assert_eq!(
        created.metadata.annotations.as_ref().unwrap()["crossplane.io/external-name"],
        "inproc-down",
        "the MutatingAdmissionPolicy set the external name with mrguard down"
    );
    assert_eq!(created.data["spec"]["providerConfigRef"]["name"], "default");

    let moved = Patch::Merge(json!({"spec": {"forProvider": {"region": "eu-west-1"}}}));
    let e = api
        .patch("inproc-down", &PatchParams::default(), &moved)
        .await
        .expect_err("the region is immutable");
    let text = e.to_string();
    assert!(
        text.contains("ValidatingAdmissionPolicy")
            && text.contains("spec.forProvider.region is immutable once the MR is created"),
        "{text}"
    );

    let status = Patch::Merge(json!({"status": {"atProvider": {"id": "vpc-123"}}}));
    api.patch_status("inproc-down", &PatchParams::default(), &status)
        .await
        .unwrap_or_else(|e| panic!("the provider's status write: {e}"));
    let labelled = Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}}));
    api.patch("inproc-down", &PatchParams::default(), &labelled)
        .await
        .unwrap_or_else(|e| panic!("a write no exported rule judges, with the webhook down: {e}"));

    api.delete("inproc-down", &DeleteParams::default())
        .await
        .unwrap();
    remove_policies(&r).await;
}

/// A hand edit of a policy is put back, with a PolicyRestored Event naming
/// it; a policy of a planned name that lacks the label is never touched;
/// restarted with the mode off, the leader deletes every policy it wrote
/// and only those, and takes its matchCondition back.
#[tokio::test]
async fn hand_edits_are_put_back_and_off_removes_only_ours() {
    const TEST: &str = "hand_edits_are_put_back_and_off_removes_only_ours";
    let Some(cluster) = support::require_cluster_at(TEST, SERVER).await else {
        return;
    };
    let name = "e2e-inproc-edit";
    // Someone else's policy under a name the plan has, there first.
    let fullname = format!("{name}-mrguard");
    let stranger = format!("{fullname}-paused-value");
    let admin = support::cluster::client_from(cluster.admin_kubeconfig())
        .await
        .unwrap();
    let vap_api: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &admission("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    );
    let theirs: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": stranger},
        "spec": {
            "matchConstraints": {
                "objectSelector": {"matchLabels": {"nothing": "matches"}},
                "resourceRules": [{"apiGroups": ["ec2.aws.upbound.io"], "apiVersions": ["*"],
                    "resources": ["vpcs"], "operations": ["CREATE"]}]},
            "validations": [{"expression": "true"}],
        },
    }))
    .unwrap();
    vap_api
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();

    let mut r = support::install(cluster, name, options()).await;
    assert_eq!(r.fullname, fullname);
    wait_in_force(&r).await;
    let immutable = format!("{}-immutable-field-0", r.fullname);
    let edit = Patch::Merge(json!({"spec": {"failurePolicy": "Ignore"}}));
    vaps(&r)
        .patch(&immutable, &PatchParams::default(), &edit)
        .await
        .unwrap();
    wait_for("the hand edit put back", WAIT, || async {
        let p = vaps(&r).get(&immutable).await.ok()?;
        (p.data["spec"]["failurePolicy"] == "Fail").then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(admin.clone(), "default");
    wait_for("the PolicyRestored Event", WAIT, || async {
        let l = events.list(&ListParams::default()).await.ok()?;
        l.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("PolicyRestored")
                    && e.regarding.as_ref().and_then(|o| o.name.as_deref())
                        == Some(immutable.as_str())
            })
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    let untouched = vap_api.get(&stranger).await.unwrap();
    assert_eq!(
        untouched.metadata.labels, None,
        "another's policy is left as it was"
    );
    assert_eq!(
        untouched.data["spec"]["validations"][0]["expression"],
        "true"
    );

    // The mode off: a new leader started with --in-process=off.
    r.kill_replica(0);
    r.options.values = Some("admission: {inProcess: off}".into());
    r.start_replica().await.unwrap();
    wait_for("every policy of ours removed", WAIT, || async {
        for api in all_kinds(&r) {
            if !owned(&r, &api).await.is_empty() {
                return None;
            }
        }
        in_process_condition(&r, true).await.is_none().then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{}", r.with_logs(e)));
    assert!(
        vap_api.get_opt(&stranger).await.unwrap().is_some(),
        "another's policy is not removed"
    );
    vap_api
        .delete(&stranger, &DeleteParams::default())
        .await
        .unwrap();
}
