//! Admission through a real API server: what a user's `kubectl create`,
//! `--dry-run=server`, `apply`, `label` and `delete` get back.

use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::support::{self, api, Options, LOOSE_GROUP, LOOSE_KIND, LOOSE_PLURAL, LOOSE_VERSION};

/// Config of the admission tests: a configured default name, tags on
/// Buckets and Subnets, a CEL rule, and the AWS providers' accounts exempt
/// by a glob (the chart exempts no one by name; tests/e2e/exemptions.rs
/// covers the derived provider accounts).
const CONFIG: &str = r#"
providerConfig:
  defaultName: aws-default
exemptUsernames: ["system:serviceaccount:crossplane-system:provider-aws-*"]
resources:
  - apiGroups: ["ec2.aws.upbound.io", "ec2.aws.m.upbound.io"]
    kinds: ["VPC", "Subnet"]
    externalName: IdentifierFromProvider
    immutableFields: ["spec.forProvider.region"]
  - apiGroups: ["s3.aws.upbound.io"]
    kinds: ["Bucket"]
    immutableFields: ["spec.forProvider.region"]
    tagsField: spec.forProvider.tags
    celRules:
      - name: no-public-buckets
        expression: "!has(self.metadata.labels) || !('public' in self.metadata.labels)"
        message: "public buckets are not allowed"
"#;

const PROVIDER: &str = "system:serviceaccount:crossplane-system:provider-aws-s3";

fn options() -> Options {
    Options {
        config: Some(CONFIG.into()),
        ..Options::default()
    }
}

fn buckets_path() -> &'static str {
    "/apis/s3.aws.upbound.io/v1beta1/buckets"
}

/// The API server's denial of a request, with the webhook's message.
fn denied(r: &api::Response, rule: &str) {
    assert!(
        r.status == 403 || r.status == 400 || r.status == 422,
        "expected a denial naming {rule}, got HTTP {}: {}",
        r.status,
        r.body
    );
    let m = r.message();
    assert!(m.contains("validate.mrguard.io"), "{m}");
    assert!(m.contains(&format!("[{rule}]")), "{m}");
}

fn kube_denied(e: kube::Error, rule: &str) -> String {
    let kube::Error::Api(s) = e else {
        panic!("expected a denial naming {rule}, got {e}");
    };
    assert!(s.message.contains("validate.mrguard.io"), "{}", s.message);
    assert!(s.message.contains(&format!("[{rule}]")), "{}", s.message);
    s.message
}

/// `kubectl create` and `kubectl create --dry-run=server`: both get the
/// defaults (external name, configured provider config in place of the
/// CRD's "default", tags), and the client receives mutation and
/// validation warnings. The dry run stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_and_server_dry_run_get_the_defaults_and_the_warnings() {
    let Some(cluster) =
        support::require_cluster("create_and_server_dry_run_get_the_defaults_and_the_warnings")
            .await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-create", options()).await;
    let mut obj = serde_json::to_value(r.object(support::bucket(
        "defaults",
        json!({"region": "us-east-1", "tags": {"Name": "mine"}}),
    )))
    .unwrap();
    // A provider-config reference as a bare string is a common manifest
    // mistake: rewritten, with a warning. initProvider with the default
    // policies warns about late initialization.
    obj["spec"]["providerConfigRef"] = json!("team-config");
    obj["spec"]["initProvider"] = json!({"objectLockEnabled": true});

    for dry_run in [true, false] {
        let resp = api::create(&r.client, buckets_path(), &obj, dry_run)
            .await
            .unwrap();
        assert_eq!(resp.status, 201, "dry_run={dry_run}: {}", resp.body);
        let o = &resp.body;
        assert_eq!(
            o["metadata"]["annotations"]["crossplane.io/external-name"],
            "defaults"
        );
        assert_eq!(
            o["spec"]["providerConfigRef"],
            json!({"name": "team-config"})
        );
        assert_eq!(o["spec"]["deletionPolicy"], "Delete");
        assert_eq!(o["spec"]["managementPolicies"], json!(["*"]));
        let tags = &o["spec"]["forProvider"]["tags"];
        assert_eq!(tags["crossplane-kind"], "bucket.s3.aws.upbound.io");
        assert_eq!(tags["crossplane-name"], "defaults");
        assert_eq!(tags["crossplane-providerconfig"], "team-config");
        assert_eq!(tags["Name"], "mine", "a user's tag is kept");
        let w = &resp.warnings;
        assert!(
            w.iter().any(|w| w.starts_with("provider-config-ref: ")),
            "dry_run={dry_run}: {w:?}"
        );
        assert!(
            w.iter().any(|w| w.starts_with("init-provider-late-init")),
            "dry_run={dry_run}: {w:?}"
        );
        let stored = r
            .cluster_api(&support::bucket_resource())
            .get_opt("defaults")
            .await
            .unwrap();
        assert_eq!(stored.is_some(), !dry_run, "dry_run={dry_run}");
    }

    // Without a reference the CRD writes {name: default}; on CREATE that
    // counts as unset and takes the configured default.
    let plain =
        serde_json::to_value(r.object(support::bucket("plain", json!({"region": "us-east-1"}))))
            .unwrap();
    let resp = api::create(&r.client, buckets_path(), &plain, false)
        .await
        .unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    assert_eq!(
        resp.body["spec"]["providerConfigRef"],
        json!({"name": "aws-default"})
    );
    assert_eq!(
        resp.body["spec"]["forProvider"]["tags"]["crossplane-providerconfig"],
        "aws-default"
    );
}

/// Every Deny rule fails a real create, update or delete, with mrguard's
/// message naming the rule; `deletecollection` cannot get around
/// deletion protection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_deny_rule_fails_a_real_request() {
    let Some(cluster) = support::require_cluster("each_deny_rule_fails_a_real_request").await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-deny", options()).await;
    let buckets = r.cluster_api(&support::bucket_resource());
    let pp = PostParams::default();
    let create = |v: Value| {
        let obj = r.object(v);
        let buckets = buckets.clone();
        let pp = pp.clone();
        async move { buckets.create(&pp, &obj).await }
    };

    // management-policies: a duplicate action (the CRD allows it).
    let mut b = support::bucket("dup-policy", json!({"region": "us-east-1"}));
    b["spec"]["managementPolicies"] = json!(["Observe", "Observe"]);
    kube_denied(create(b).await.unwrap_err(), "management-policies");

    // connection-secret-ref: an empty Secret name (the CRD only requires
    // the key).
    let mut b = support::bucket("empty-secret", json!({"region": "us-east-1"}));
    b["spec"]["writeConnectionSecretToRef"] = json!({"name": "", "namespace": "x"});
    kube_denied(create(b).await.unwrap_err(), "connection-secret-ref");

    // reference: a selector that selects nothing.
    let subnets = r.cluster_api(&kube::api::ApiResource {
        group: "ec2.aws.upbound.io".into(),
        version: "v1beta1".into(),
        api_version: "ec2.aws.upbound.io/v1beta1".into(),
        kind: "Subnet".into(),
        plural: "subnets".into(),
    });
    let subnet = r.object(json!({
        "apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "Subnet",
        "metadata": {"name": "no-selector"},
        "spec": {"forProvider": {"region": "us-east-1", "cidrBlock": "10.0.1.0/24", "vpcIdSelector": {}}},
    }));
    kube_denied(subnets.create(&pp, &subnet).await.unwrap_err(), "reference");

    // observe-only-external-name: observing a provider-named VPC without
    // its ID.
    let vpcs = r.cluster_api(&support::vpc_resource());
    let vpc = r.object(support::vpc(
        "observe-blind",
        json!({"managementPolicies": ["Observe"]}),
    ));
    kube_denied(
        vpcs.create(&pp, &vpc).await.unwrap_err(),
        "observe-only-external-name",
    );

    // cel:no-public-buckets, a configured CEL rule.
    let mut b = support::bucket("public", json!({"region": "us-east-1"}));
    b["metadata"]["labels"] = json!({"public": "yes"});
    kube_denied(create(b).await.unwrap_err(), "cel:no-public-buckets");

    // deletion-policy: needs a CRD whose schema does not already enforce
    // the enum; the upjet CRDs reject "delete" before any webhook runs.
    let resp = api::create(
        &r.client,
        &format!("/apis/{}/{}/{}", LOOSE_GROUP, LOOSE_VERSION, LOOSE_PLURAL),
        &serde_json::to_value(r.object(json!({
            "apiVersion": format!("{LOOSE_GROUP}/{LOOSE_VERSION}"), "kind": LOOSE_KIND,
            "metadata": {"name": "lowercase-policy"},
            "spec": {"forProvider": {}, "deletionPolicy": "delete"},
        })))
        .unwrap(),
        false,
    )
    .await
    .unwrap();
    denied(&resp, "deletion-policy");

    // immutable-field and external-name-change: on a created Bucket.
    let created = r.object(json!({
        "apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket",
        "metadata": {"name": "created", "annotations": {
            "crossplane.io/external-create-succeeded": "2025-01-01T00:00:00Z"}},
        "spec": {"forProvider": {"region": "us-east-1"}},
    }));
    buckets.create(&pp, &created).await.unwrap();
    let e = buckets
        .patch(
            "created",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"forProvider": {"region": "eu-central-1"}}})),
        )
        .await
        .unwrap_err();
    let m = kube_denied(e, "immutable-field");
    assert!(m.contains("spec.forProvider.region"), "{m}");
    let e = buckets
        .patch(
            "created",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"crossplane.io/external-name": "other"}}}),
            ),
        )
        .await
        .unwrap_err();
    kube_denied(e, "external-name-change");

    // paused-delete: a paused MR with a finalizer would hang forever.
    let paused = r.object(json!({
        "apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket",
        "metadata": {"name": "paused", "annotations": {"crossplane.io/paused": "true"},
                     "finalizers": ["finalizer.managedresource.crossplane.io"]},
        "spec": {"forProvider": {"region": "us-east-1"}},
    }));
    buckets.create(&pp, &paused).await.unwrap();
    let e = buckets
        .delete("paused", &DeleteParams::default())
        .await
        .unwrap_err();
    kube_denied(e, "paused-delete");

    // deletion-protection: on delete, and on deletecollection, which the
    // API server admits object by object.
    for name in ["protected-1", "protected-2"] {
        let o = r.object(json!({
            "apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket",
            "metadata": {"name": name, "labels": {"group": "protected"},
                         "annotations": {"mrguard.io/deletion-protection": "true"}},
            "spec": {"forProvider": {"region": "us-east-1"}},
        }));
        buckets.create(&pp, &o).await.unwrap();
    }
    let e = buckets
        .delete("protected-1", &DeleteParams::default())
        .await
        .unwrap_err();
    let m = kube_denied(e, "deletion-protection");
    assert!(
        m.contains("Orphan"),
        "the message says how to orphan it first: {m}"
    );
    let e = buckets
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("group=protected"),
        )
        .await
        .unwrap_err();
    kube_denied(e, "deletion-protection");
    for name in ["protected-1", "protected-2"] {
        assert!(
            buckets.get_opt(name).await.unwrap().is_some(),
            "{name} was deleted"
        );
    }
    // Orphaning first is the way out.
    buckets
        .patch(
            "protected-2",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deletionPolicy": "Orphan"}})),
        )
        .await
        .unwrap();
    buckets
        .delete("protected-2", &DeleteParams::default())
        .await
        .unwrap();
}

/// Namespaced (Crossplane v2) MRs: the namespace's mapped provider
/// config, `kind: ClusterProviderConfig`, and no deletionPolicy; a
/// namespace without a mapping gets the default name; the release
/// namespace is not covered by the webhooks at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaced_mrs_get_their_namespace_provider_config() {
    let Some(cluster) =
        support::require_cluster("namespaced_mrs_get_their_namespace_provider_config").await
    else {
        return;
    };
    let name = "e2e-namespaced";
    let config = format!(
        "providerConfig:\n  defaultName: aws-default\n  namespaceProviderConfigs:\n    {name}: aws-team-a\n"
    );
    let r = support::install(
        cluster,
        name,
        Options {
            config: Some(config),
            ..Options::default()
        },
    )
    .await;
    let pp = PostParams::default();
    let vpcs = r.namespaced_api(&support::namespaced_vpc_resource());
    let created = vpcs
        .create(
            &pp,
            &r.namespaced_object(support::namespaced_vpc("team-vpc", json!({}))),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&created).unwrap();
    assert_eq!(
        v["spec"]["providerConfigRef"],
        json!({"kind": "ClusterProviderConfig", "name": "aws-team-a"}),
        "{v:#}"
    );
    assert!(v["spec"].get("deletionPolicy").is_none(), "{v:#}");
    // VPC identifiers come from the provider: no external-name.
    assert!(
        v["metadata"]["annotations"]["crossplane.io/external-name"].is_null(),
        "{v:#}"
    );
    // An explicit namespaced ProviderConfig is kept.
    let mut own = support::namespaced_vpc("own-config", json!({}));
    own["spec"]["providerConfigRef"] = json!({"kind": "ProviderConfig", "name": "mine"});
    let created = vpcs.create(&pp, &r.namespaced_object(own)).await.unwrap();
    assert_eq!(
        serde_json::to_value(&created).unwrap()["spec"]["providerConfigRef"],
        json!({"kind": "ProviderConfig", "name": "mine"})
    );

    // Another namespace, no mapping: the default name.
    let other = format!("{name}-other");
    let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(r.client.clone());
    ns.create(
        &pp,
        &serde_json::from_value(json!({"metadata": {"name": other}})).unwrap(),
    )
    .await
    .unwrap();
    let mut o =
        serde_json::to_value(r.namespaced_object(support::namespaced_vpc("plain", json!({}))))
            .unwrap();
    o["metadata"]["namespace"] = json!(other);
    let created = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        r.client.clone(),
        &other,
        &support::namespaced_vpc_resource(),
    )
    .create(&pp, &serde_json::from_value(o).unwrap())
    .await
    .unwrap();
    assert_eq!(
        serde_json::to_value(&created).unwrap()["spec"]["providerConfigRef"]["name"],
        "aws-default"
    );

    // The release namespace is excluded by the chart's namespaceSelector:
    // mrguard must not gate its own recovery.
    let mut o = serde_json::to_value(
        r.namespaced_object(support::namespaced_vpc("in-release-ns", json!({}))),
    )
    .unwrap();
    o["metadata"]["namespace"] = json!(r.namespace);
    let created = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        r.client.clone(),
        &r.namespace,
        &support::namespaced_vpc_resource(),
    )
    .create(&pp, &serde_json::from_value(o).unwrap())
    .await
    .unwrap();
    assert_eq!(
        serde_json::to_value(&created).unwrap()["spec"]["providerConfigRef"]["name"],
        "default",
        "the release namespace was mutated"
    );

    // Namespaced MRs are validated too: the region is immutable once created.
    vpcs.patch(
        "team-vpc",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            "crossplane.io/external-create-succeeded": "2025-01-01T00:00:00Z"}}})),
    )
    .await
    .unwrap();
    let e = vpcs
        .patch(
            "team-vpc",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"forProvider": {"region": "eu-west-1"}}})),
        )
        .await
        .unwrap_err();
    kube_denied(e, "immutable-field");
}

/// On UPDATE a live MR keeps the provider config it
/// had. A Bucket a provider wrote with `{name: default}` (exempt: never
/// mutated) keeps it through a user's `kubectl label` and the provider's
/// finalizer removal, though `defaultName` is `aws-default`: neither
/// update rewrites it to `aws-default` or adds tags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_by_a_user_or_the_provider_keeps_the_provider_config() {
    let Some(cluster) =
        support::require_cluster("an_update_by_a_user_or_the_provider_keeps_the_provider_config")
            .await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-update-ref", options()).await;
    // The provider's ServiceAccount by name (what exemptUsernames
    // matches); its rights here come from system:masters instead of a
    // provider's ClusterRole.
    let provider = api::impersonating(
        cluster.admin_kubeconfig(),
        PROVIDER,
        &[
            "system:masters",
            "system:serviceaccounts",
            "system:authenticated",
        ],
    )
    .await
    .unwrap();
    let as_provider = kube::Api::<kube::api::DynamicObject>::all_with(
        provider.clone(),
        &support::bucket_resource(),
    );
    let buckets = r.cluster_api(&support::bucket_resource());

    // The provider's own create: exempt, so returned exactly as sent
    // (plus the CRD's defaults): no external-name, no tags, {name: default}.
    let sent = r.object(support::bucket("live", json!({"region": "us-east-1"})));
    let created = as_provider
        .create(&PostParams::default(), &sent)
        .await
        .unwrap();
    let v = serde_json::to_value(&created).unwrap();
    assert_eq!(
        v["spec"]["providerConfigRef"],
        json!({"name": "default"}),
        "{v:#}"
    );
    assert!(
        v["metadata"]["annotations"].is_null(),
        "exempt create was mutated: {v:#}"
    );
    assert!(
        v["spec"]["forProvider"]["tags"].is_null(),
        "exempt create was mutated: {v:#}"
    );
    // The provider records creation.
    as_provider
        .patch(
            "live",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "annotations": {"crossplane.io/external-create-succeeded": "2025-01-01T00:00:00Z"},
                "finalizers": ["finalizer.managedresource.crossplane.io"]}})),
        )
        .await
        .unwrap();

    // A user's `kubectl label bucket live team=x`.
    let labelled = buckets
        .patch(
            "live",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "x"}}})),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&labelled).unwrap();
    assert_eq!(v["metadata"]["labels"]["team"], "x");
    assert_eq!(
        v["spec"]["providerConfigRef"],
        json!({"name": "default"}),
        "a label change moved the MR to other credentials: {v:#}"
    );
    if let Some(pc) = v["spec"]["forProvider"]["tags"].get("crossplane-providerconfig") {
        assert_eq!(
            pc, "default",
            "tags name credentials the MR does not use: {v:#}"
        );
    }

    // The provider's finalizer removal on deletion: exempt, untouched.
    let before = serde_json::to_value(buckets.get("live").await.unwrap()).unwrap();
    let after = as_provider
        .patch(
            "live",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "remove", "path": "/metadata/finalizers"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let mut after = serde_json::to_value(&after).unwrap();
    assert_eq!(
        after["spec"], before["spec"],
        "the provider's update was mutated"
    );
    after["metadata"]["finalizers"] = before["metadata"]["finalizers"].clone();
    assert_eq!(
        after["metadata"]["annotations"],
        before["metadata"]["annotations"]
    );
}

/// Pausing an observe-only, provider-named VPC with
/// `managementPolicies: []` is allowed: observe-only-external-name does
/// not deny it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_with_an_empty_policy_set_is_allowed() {
    let Some(cluster) =
        support::require_cluster("pausing_with_an_empty_policy_set_is_allowed").await
    else {
        return;
    };
    let r = support::install(cluster, "e2e-paused-set", options()).await;
    let vpcs = r.cluster_api(&support::vpc_resource());
    let created = vpcs
        .create(
            &PostParams::default(),
            &r.object(support::vpc(
                "paused-vpc",
                json!({"managementPolicies": []}),
            )),
        )
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&created).unwrap()["spec"]["managementPolicies"],
        json!([])
    );
    // And an update that pauses an existing one.
    vpcs.create(
        &PostParams::default(),
        &r.object(support::vpc("to-pause", json!({}))),
    )
    .await
    .unwrap();
    vpcs.patch(
        "to-pause",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"managementPolicies": []}})),
    )
    .await
    .unwrap();
    // Observe-only without an ID is still denied.
    let e = vpcs
        .patch(
            "to-pause",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"managementPolicies": ["Observe"]}})),
        )
        .await
        .unwrap_err();
    kube_denied(e, "observe-only-external-name");
}

/// Policy operations through a real API server: an exception lets a region change
/// of a created Bucket named `sample-*` through, with the warning naming
/// it, and not for another name; a staged Deny warns with its date; an
/// Audit rule allows with no warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exceptions_staged_and_audit_actions_through_the_api_server() {
    let Some(cluster) =
        support::require_cluster("exceptions_staged_and_audit_actions_through_the_api_server")
            .await
    else {
        return;
    };
    let config = format!(
        "{CONFIG}rules:\n  external-name-change: {{action: Deny, warnUntil: \"2099-06-01T00:00:00Z\"}}\n  paused-value: Audit\nexceptions:\n  - name: bucket-migration\n    rules: [immutable-field]\n    match: {{names: [\"sample-*\"]}}\n    reason: buckets move regions (ticket NET-42)\n    expires: \"2099-01-31T00:00:00Z\"\n"
    );
    let r = support::install(
        cluster,
        "e2e-policy-ops",
        Options {
            config: Some(config),
            ..Options::default()
        },
    )
    .await;
    let created = |name: &str| {
        serde_json::to_value(r.object(json!({
            "apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket",
            "metadata": {"name": name, "annotations": {
                "crossplane.io/external-create-succeeded": "2025-01-01T00:00:00Z"}},
            "spec": {"forProvider": {"region": "us-east-1"}},
        })))
        .unwrap()
    };
    let merge = |name: &str, patch: Value| {
        let client = r.client.clone();
        let path = format!("{}/{name}", buckets_path());
        async move {
            api::request(
                &client,
                "PATCH",
                &path,
                "application/merge-patch+json",
                Some(&patch),
            )
            .await
            .unwrap()
        }
    };
    for name in ["sample-bucket", "prod-bucket"] {
        let resp = api::create(&r.client, buckets_path(), &created(name), false)
            .await
            .unwrap();
        assert_eq!(resp.status, 201, "{}", resp.body);
    }
    let region = json!({"spec": {"forProvider": {"region": "eu-central-1"}}});

    let resp = merge("sample-bucket", region.clone()).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert!(
        resp.warnings.iter().any(|w| {
            w.starts_with(
            "immutable-field: waived by exception bucket-migration (expires 2099-01-31T00:00:00Z): "
        )
        }),
        "{:?}",
        resp.warnings
    );
    assert_eq!(resp.body["spec"]["forProvider"]["region"], "eu-central-1");

    let resp = merge("prod-bucket", region).await;
    denied(&resp, "immutable-field");

    let resp = merge(
        "prod-bucket",
        json!({"metadata": {"annotations": {"crossplane.io/external-name": "other"}}}),
    )
    .await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert!(
        resp.warnings
            .iter()
            .any(|w| w.starts_with("external-name-change: ")
                && w.ends_with("(staged: this will be denied from 2099-06-01T00:00:00Z)")),
        "{:?}",
        resp.warnings
    );

    let mut paused = created("paused-bucket");
    paused["metadata"]["annotations"]["crossplane.io/paused"] = json!("True");
    let resp = api::create(&r.client, buckets_path(), &paused, false)
        .await
        .unwrap();
    assert_eq!(resp.status, 201, "{}", resp.body);
    assert!(
        resp.warnings.iter().all(|w| !w.contains("paused-value")),
        "{:?}",
        resp.warnings
    );
}
