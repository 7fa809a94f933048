//! The teardown guard (docs/rules.md, `teardown`): deleting a namespace
//! that still holds MRs whose deletion deletes their external resources
//! removes their Secrets and ProviderConfigs with them; the MRs then cannot
//! reach the cloud, and hang or leak (crossplane#7801, #6878).
//!
//! It judges only what the replica's index knows: offline, or before the
//! index is synced, it allows. Its webhook entry fails open
//! (`failurePolicy: Ignore`), so mrguard down never blocks a deletion.

use kube_core::admission::AdmissionResponse;
use kube_core::Status;

use crate::cluster::Cluster;
use crate::model::{Action, Finding, Operation};
use crate::review::Request;

use super::{Decision, Outcome};

/// The rule name in messages and metrics.
pub const TEARDOWN: &str = "teardown";

/// mrguard's annotation on a namespace: `"true"` allows deleting it while
/// it holds MRs whose deletion deletes their external resources.
pub const ALLOW_TEARDOWN: &str = "mrguard.io/allow-teardown";

/// How many MRs a denial names before "and N more".
const NAMED: usize = 5;

/// The decision for a request the teardown guard judges, or `None` for
/// every other request (which the MR rules judge).
pub(super) fn judge(req: &Request, cluster: &Cluster) -> Option<Decision> {
    if !req.kind.group.is_empty()
        || req.kind.kind != "Namespace"
        || Operation::from(&req.operation) != Operation::Delete
    {
        return None;
    }
    let allow = || Decision {
        response: AdmissionResponse::from(req),
        outcome: Outcome::Allowed,
        findings: vec![],
        mutated: None,
    };
    let index = cluster.identities();
    if !index.is_synced() {
        return Some(allow());
    }
    let acknowledged = req
        .old_object
        .as_ref()
        .and_then(|o| o.value.pointer("/metadata/annotations"))
        .and_then(|a| a.get(ALLOW_TEARDOWN))
        .and_then(|v| v.as_str())
        == Some("true");
    if acknowledged {
        return Some(allow());
    }
    let held = index.deleting_in_namespace(&req.name);
    if held.is_empty() {
        return Some(allow());
    }
    let mut names: Vec<String> = held.iter().take(NAMED).map(|k| k.to_string()).collect();
    if held.len() > NAMED {
        names.push(format!("and {} more", held.len() - NAMED));
    }
    let message = format!(
        "namespace {:?} holds {} MR{} whose deletion deletes the external resource ({}); deleting the namespace removes their credentials and provider configs too, so they may hang or leak",
        req.name,
        held.len(),
        if held.len() == 1 { "" } else { "s" },
        names.join(", ")
    );
    let fix = format!(
        "delete those MRs first and wait until they are gone, or annotate the namespace {ALLOW_TEARDOWN}=true to delete it anyway"
    );
    let mut response = AdmissionResponse::from(req);
    response.allowed = false;
    response.result = Status::failure(
        &format!(
            "mrguard denied DELETE of Namespace {:?}: [{TEARDOWN}] {message}. Fix: {fix}.",
            req.name
        ),
        "Forbidden",
    )
    .with_code(403);
    Some(Decision {
        response,
        outcome: Outcome::Denied,
        findings: vec![Finding {
            rule: TEARDOWN.into(),
            action: Action::Deny,
            message,
            fix: Some(fix),
        }],
        mutated: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::MrKey;
    use crate::review::RequestBuilder;
    use serde_json::json;

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
        c.identities().upsert(k("team-a", "net"), None, true);
        c.identities().upsert(k("team-a", "observed"), None, false);
        c.identities().upsert(k("team-b", "other"), None, true);
        c
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
}
