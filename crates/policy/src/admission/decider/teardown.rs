//! The teardown guard (docs/rules.md, `teardown`): deleting a namespace
//! that still holds MRs whose deletion deletes their external resources
//! removes their Secrets and ProviderConfigs with them; the MRs then cannot
//! reach the cloud, and hang or leak (crossplane#7801, #6878).
//!
//! It judges only what the replica's index knows: offline, or before the
//! index is synced, it allows. Its webhook entry fails open
//! (`failurePolicy: Ignore`), so mrguard down never blocks a deletion.

use crate::admission::model::{Operation, Violation};
use crate::admission::review::Request;
use crate::cluster::Cluster;

pub use crate::admission::model::TEARDOWN;

/// mrguard's annotation on a namespace: `"true"` allows deleting it while
/// it holds MRs whose deletion deletes their external resources.
pub const ALLOW_TEARDOWN: &str = "mrguard.io/allow-teardown";

/// How many MRs a denial names before "and N more".
const NAMED: usize = 5;

/// What the teardown guard finds in a request it judges (`Some(None)`:
/// nothing), or `None` for every other request (which the MR rules judge).
/// [`super::Decider::teardown`] decides and answers, so exceptions and the
/// denial read as every rule's.
pub(super) fn judge(req: &Request, cluster: &Cluster) -> Option<Option<Violation>> {
    if Operation::from(&req.operation) != Operation::Delete {
        return None;
    }
    match (req.kind.group.as_str(), req.kind.kind.as_str()) {
        ("", "Namespace") => Some(namespace(req, cluster)),
        ("", "Secret") => Some(secret(req, cluster)),
        ("pkg.crossplane.io", "Provider") => Some(provider(req, cluster)),
        _ => None,
    }
}

fn acknowledged(req: &Request) -> bool {
    req.old_object
        .as_ref()
        .and_then(|o| o.value.pointer("/metadata/annotations"))
        .and_then(|a| a.get(ALLOW_TEARDOWN))
        .and_then(|v| v.as_str())
        == Some("true")
}

/// A Provider package whose kinds still have MRs (crossplane#6001):
/// without the provider nothing reconciles or deletes them.
fn provider(req: &Request, cluster: &Cluster) -> Option<Violation> {
    let index = cluster.identities();
    if !index.is_synced() || acknowledged(req) {
        return None;
    }
    let mrs = index.mrs_of_provider(&req.name);
    if mrs.is_empty() {
        return None;
    }
    let message = format!(
        "{} MR{} of its kinds still exist{} ({}); without the provider nothing reconciles or deletes them, and their finalizers block their deletion",
        mrs.len(),
        if mrs.len() == 1 { "" } else { "s" },
        if mrs.len() == 1 { "s" } else { "" },
        list(&mrs)
    );
    let fix = format!(
        "delete those MRs first and wait until they are gone, or annotate the Provider {ALLOW_TEARDOWN}=true to delete it anyway"
    );
    Some(Violation::new(message).fix(fix))
}

/// Names up to [`NAMED`] keys, then how many more.
fn list(keys: &[crate::cluster::identity::MrKey]) -> String {
    let mut names: Vec<String> = keys.iter().take(NAMED).map(|k| k.to_string()).collect();
    if keys.len() > NAMED {
        names.push(format!("and {} more", keys.len() - NAMED));
    }
    names.join(", ")
}

/// A credentials Secret that a provider config in use references.
fn secret(req: &Request, cluster: &Cluster) -> Option<Violation> {
    let index = cluster.identities();
    let namespace = req.namespace.as_deref().unwrap_or("");
    if !index.is_synced() {
        return None;
    }
    let users = index.secret_users(namespace, &req.name);
    if users.is_empty() {
        return None;
    }
    let message = format!(
        "the provider config{} {} in use read{} credentials from this Secret; every MR behind {} would fail",
        if users.len() == 1 { "" } else { "s" },
        list(&users),
        if users.len() == 1 { "s its" } else { " their" },
        if users.len() == 1 { "it" } else { "them" },
    );
    let fix =
        "point those provider configs at other credentials, or delete their MRs first".to_string();
    Some(Violation::new(message).fix(fix))
}

fn namespace(req: &Request, cluster: &Cluster) -> Option<Violation> {
    let index = cluster.identities();
    if !index.is_synced() || acknowledged(req) {
        return None;
    }
    let held = index.deleting_in_namespace(&req.name);
    if held.is_empty() {
        return None;
    }
    let message = format!(
        "namespace {:?} holds {} MR{} whose deletion deletes the external resource ({}); deleting the namespace removes their credentials and provider configs too, so they may hang or leak",
        req.name,
        held.len(),
        if held.len() == 1 { "" } else { "s" },
        list(&held)
    );
    let fix = format!(
        "delete those MRs first and wait until they are gone, or annotate the namespace {ALLOW_TEARDOWN}=true to delete it anyway"
    );
    Some(Violation::new(message).fix(fix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::config::Config;
    use crate::admission::decider::{Decider, Decision};
    use crate::admission::review::RequestBuilder;
    use crate::cluster::identity::{IndexedMr, MrKey};
    use serde_json::json;

    /// The teardown decision with the built-in configuration.
    fn judge(req: &Request, cluster: &Cluster) -> Option<Decision> {
        Decider::new(&Config::builtin(), cluster, jiff::Timestamp::now()).teardown(req)
    }

    fn delete_namespace(annotations: serde_json::Value) -> Request {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": "team-a", "annotations": annotations}});
        RequestBuilder::new(Operation::Delete)
            .old_object(ns)
            .build()
    }

    fn cluster() -> Cluster {
        let c = Cluster::default();
        let k = |ns: &str, name: &str| MrKey::new("ec2.aws.m.upbound.io", "VPC", ns, name);
        c.identities()
            .upsert(IndexedMr::new(k("team-a", "net"), None, true));
        c.identities()
            .upsert(IndexedMr::new(k("team-a", "observed"), None, false));
        c.identities()
            .upsert(IndexedMr::new(k("team-b", "other"), None, true));
        c.identities().upsert_provider_config(
            MrKey::new("aws.m.upbound.io", "ClusterProviderConfig", "", "default"),
            crate::cluster::identity::ProviderConfigFacts {
                secret: Some(("crossplane-system".into(), "aws-secret".into())),
                in_use: true,
            },
        );
        c
    }

    fn delete_secret(name: &str) -> Request {
        let s = json!({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": name, "namespace": "crossplane-system"}});
        RequestBuilder::new(Operation::Delete).old_object(s).build()
    }

    #[test]
    fn a_credentials_secret_in_use_is_denied_naming_its_config() {
        let d = judge(&delete_secret("aws-secret"), &cluster()).unwrap();
        assert!(!d.response.allowed);
        let m = &d.response.result.message;
        assert!(m.starts_with("mrguard denied DELETE of Secret \"aws-secret\" in namespace \"crossplane-system\" (1 problem): (1) [teardown]"), "{m}");
        assert!(
            m.contains(
                "ClusterProviderConfig.aws.m.upbound.io default in use reads its credentials"
            ),
            "{m}"
        );
        assert!(
            judge(&delete_secret("other"), &cluster())
                .unwrap()
                .response
                .allowed
        );
        assert!(
            judge(&delete_secret("aws-secret"), Cluster::empty())
                .unwrap()
                .response
                .allowed
        );
    }

    #[test]
    fn a_namespace_holding_deleting_mrs_is_denied_naming_them() {
        let req = delete_namespace(json!({}));
        assert_eq!(req.name, "team-a");
        let d = judge(&req, &cluster()).unwrap();
        assert!(!d.response.allowed);
        let m = &d.response.result.message;
        assert!(m.contains("[teardown]"), "{m}");
        assert!(m.contains("holds 1 MR whose deletion"), "{m}");
        assert!(m.contains("VPC.ec2.aws.m.upbound.io team-a/net"), "{m}");
        assert!(!m.contains("observed") && !m.contains("other"), "{m}");
        assert!(m.contains("mrguard.io/allow-teardown=true"), "{m}");
        assert_eq!(d.findings[0].rule, "teardown");
    }

    /// The index learns "deletes the external resource" from the listed
    /// objects: for namespaced MRs from managementPolicies alone, since a
    /// deletionPolicy on them counts for nothing.
    #[test]
    fn namespaced_mrs_delete_by_their_management_policies_alone() {
        let c = Cluster::default();
        let config = Config::builtin();
        let mr = |ns: &str, name: &str, spec: serde_json::Value| {
            let mut spec = spec;
            spec["forProvider"] = json!({"region": "eu-west-1"});
            let o = json!({"apiVersion": "s3.aws.m.upbound.io/v1beta1", "kind": "Bucket",
                           "metadata": {"name": name, "namespace": ns}, "spec": spec});
            crate::cluster::identity::report::record(
                c.identities(),
                &o,
                "s3.aws.m.upbound.io",
                "Bucket",
                &config,
            );
        };
        mr(
            "team-a",
            "orphan-ignored",
            json!({"deletionPolicy": "Orphan"}),
        );
        mr(
            "team-a",
            "kept",
            json!({"managementPolicies": ["Observe", "Create", "Update", "LateInitialize"]}),
        );
        mr("team-b", "kept", json!({"managementPolicies": ["Observe"]}));
        let d = judge(&delete_namespace(json!({})), &c).unwrap();
        let m = &d.response.result.message;
        assert!(!d.response.allowed);
        assert!(m.contains("holds 1 MR whose deletion"), "{m}");
        assert!(
            m.contains("Bucket.s3.aws.m.upbound.io team-a/orphan-ignored"),
            "{m}"
        );
        let mut b = delete_namespace(json!({}));
        b.name = "team-b".into();
        assert!(judge(&b, &c).unwrap().response.allowed);
        // Side by side: the same spec cluster-scoped is orphaned.
        let legacy = json!({"apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket",
                            "metadata": {"name": "legacy"},
                            "spec": {"forProvider": {}, "deletionPolicy": "Orphan"}});
        let entry = crate::cluster::identity::report::entry_of(
            &legacy,
            "s3.aws.upbound.io",
            "Bucket",
            &config,
        )
        .unwrap();
        assert!(!entry.deletes);
    }

    #[test]
    fn annotated_empty_unsynced_or_offline_namespaces_are_allowed() {
        let c = cluster();
        let acked = delete_namespace(json!({"mrguard.io/allow-teardown": "true"}));
        assert!(judge(&acked, &c).unwrap().response.allowed);
        let mut other = delete_namespace(json!({}));
        other.name = "team-c".into();
        assert!(judge(&other, &c).unwrap().response.allowed);
        assert!(
            judge(&delete_namespace(json!({})), Cluster::empty())
                .unwrap()
                .response
                .allowed
        );
        c.identities().set_synced(false);
        assert!(
            judge(&delete_namespace(json!({})), &c)
                .unwrap()
                .response
                .allowed
        );
    }

    #[test]
    fn a_provider_whose_kinds_have_mrs_is_denied_until_they_are_gone() {
        let c = cluster();
        c.identities().set_provider_kinds(
            [(
                "provider-aws-ec2".to_string(),
                vec![("ec2.aws.m.upbound.io".to_string(), "VPC".to_string())],
            )]
            .into(),
        );
        let provider = |annotations: serde_json::Value| {
            let p = json!({"apiVersion": "pkg.crossplane.io/v1", "kind": "Provider",
                           "metadata": {"name": "provider-aws-ec2", "annotations": annotations}});
            RequestBuilder::new(Operation::Delete).old_object(p).build()
        };
        let d = judge(&provider(json!({})), &c).unwrap();
        assert!(!d.response.allowed);
        let m = &d.response.result.message;
        assert!(
            m.starts_with(
                "mrguard denied DELETE of Provider \"provider-aws-ec2\" (1 problem): (1) [teardown] 3 MRs"
            ),
            "{m}"
        );
        assert!(m.contains("VPC.ec2.aws.m.upbound.io team-a/net"), "{m}");
        assert!(
            judge(&provider(json!({"mrguard.io/allow-teardown": "true"})), &c)
                .unwrap()
                .response
                .allowed
        );
        for k in [
            ("team-a", "net"),
            ("team-a", "observed"),
            ("team-b", "other"),
        ] {
            c.identities()
                .remove(&MrKey::new("ec2.aws.m.upbound.io", "VPC", k.0, k.1));
        }
        assert!(judge(&provider(json!({})), &c).unwrap().response.allowed);
        // A provider with no known kinds, and no index at all.
        assert!(
            judge(&provider(json!({})), Cluster::empty())
                .unwrap()
                .response
                .allowed
        );
    }

    #[test]
    fn other_requests_are_left_to_the_mr_rules() {
        let c = cluster();
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
        let update = RequestBuilder::new(Operation::Update)
            .object(ns.clone())
            .old_object(ns)
            .build();
        assert!(judge(&update, &c).is_none());
        let vpc = json!({"apiVersion": "ec2.aws.m.upbound.io/v1beta1", "kind": "VPC",
                         "metadata": {"name": "net", "namespace": "team-a"}, "spec": {"forProvider": {}}});
        let del = RequestBuilder::new(Operation::Delete)
            .old_object(vpc)
            .build();
        assert!(judge(&del, &c).is_none());
    }

    /// A teardown denial reads the configuration's exceptions as every
    /// rule does, by the namespace's, Secret's or Provider's name.
    fn with_exception(names: &str, expires: &str) -> Config {
        Config::from_yaml(&format!(
            "exceptions:\n  - name: team-a-retired\n    rules: [teardown]\n    match: {{names: [{names}]}}\n    reason: team A moved out (OPS-9)\n    expires: '{expires}'\n"
        ))
        .unwrap()
    }

    #[test]
    fn an_exception_waives_a_teardown_denial_with_a_warning_naming_it() {
        let c = cluster();
        let config = with_exception("team-a, aws-secret", "2099-01-01T00:00:00Z");
        let decider = Decider::new(&config, &c, jiff::Timestamp::now());
        let d = decider.teardown(&delete_namespace(json!({}))).unwrap();
        assert!(d.response.allowed);
        let w = d.response.warnings.unwrap();
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("teardown: waived by exception team-a-retired (expires 2099-01-01T00:00:00Z): namespace \"team-a\" holds 1 MR"), "{}", w[0]);
        // The metrics count it by its exception, as for an MR.
        assert_eq!(d.findings[0].exception(), Some("team-a-retired"));
        assert_eq!(d.findings[0].rule, TEARDOWN);
        let d = decider.teardown(&delete_secret("aws-secret")).unwrap();
        assert!(d.response.allowed);
        assert_eq!(d.findings[0].exception(), Some("team-a-retired"));
        // Another namespace's name is not matched.
        let other = with_exception("team-b", "2099-01-01T00:00:00Z");
        let d = Decider::new(&other, &c, jiff::Timestamp::now())
            .teardown(&delete_namespace(json!({})))
            .unwrap();
        assert!(!d.response.allowed);
        assert_eq!(d.findings[0].exception(), None);
    }

    #[test]
    fn an_expired_exception_waives_no_teardown_denial() {
        let c = cluster();
        let config = with_exception("team-a", "2020-01-01T00:00:00Z");
        let d = Decider::new(&config, &c, jiff::Timestamp::now())
            .teardown(&delete_namespace(json!({})))
            .unwrap();
        assert!(!d.response.allowed);
        assert!(d.response.warnings.is_none());
        assert_eq!(d.findings[0].exception(), None);
        assert!(d.response.result.message.contains("[teardown]"));
    }
}
