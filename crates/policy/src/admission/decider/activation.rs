//! The ManagedResourceActivationPolicy webhook (docs/activation.md):
//! Crossplane silently activates nothing with an `activate` entry that is
//! malformed or that matches no MRD name, so admission says so while the
//! author is still there.
//!
//! - A malformed pattern (Go's `filepath.Match` answers `ErrBadPattern`)
//!   is denied: it can never activate anything.
//! - A well-formed pattern that matches no MRD the cluster has is admitted
//!   with a warning naming the nearest MRD names: the MRD may come later
//!   (a provider installed after its policy), but usually it is the
//!   singular/plural mistake (`bucket.s3…` for `buckets.s3…`).
//!
//! Fixed decisions, not configurable rules: neither depends on a platform
//! team's policy, only on Crossplane's matching.

use kube_core::admission::AdmissionResponse;
use kube_core::Status;

use super::{allow, Decision, Outcome};
use crate::admission::model::Operation;
use crate::admission::review::Request;
use crate::cluster::activation::{self, Mrap};
use crate::cluster::Cluster;

/// Whether the request is for an MRAP.
pub(crate) fn is_mrap(req: &Request) -> bool {
    req.kind.group == activation::GROUP && req.kind.kind == activation::MRAP_KIND
}

/// The decision on an MRAP CREATE or UPDATE; any other request is allowed.
pub(crate) fn decide(req: &Request, cluster: &Cluster) -> Decision {
    let Some(object) = super::written_object(req) else {
        return allow(req);
    };
    let mut typed = object.clone();
    // The review carries the type in `kind`; the object may not repeat it.
    typed["apiVersion"] = format!("{}/{}", activation::GROUP, req.kind.version).into();
    typed["kind"] = activation::MRAP_KIND.into();
    let Some(mrap) = Mrap::from_object(&typed) else {
        return allow(req);
    };
    let review = cluster.activations().snapshot().review_mrap(&mrap);
    let mut response = AdmissionResponse::from(req);
    if !review.warnings.is_empty() {
        response.warnings = Some(review.warnings);
    }
    let outcome = if review.denials.is_empty() {
        Outcome::Allowed
    } else {
        let name = if req.name.is_empty() {
            &mrap.name
        } else {
            &req.name
        };
        let message = format!(
            "mrguard denied {} of {} {name:?}: {}",
            Operation::from(&req.operation).as_str(),
            activation::MRAP_KIND,
            review.denials.join("; ")
        );
        response.allowed = false;
        response.result = Status::failure(&message, "Invalid").with_code(422);
        Outcome::Denied
    };
    Decision {
        response,
        outcome,
        findings: vec![],
        mutated: None,
        cel_timings: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::admission::config::Config;
    use crate::admission::decider::{Decider, Outcome};
    use crate::admission::review::RequestBuilder;
    use crate::cluster::activation::Activations;
    use crate::cluster::Cluster;

    fn mrap(patterns: &[&str]) -> serde_json::Value {
        json!({"apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceActivationPolicy",
               "metadata": {"name": "aws"}, "spec": {"activate": patterns}})
    }

    #[test]
    fn the_webhook_warns_and_denies() {
        let cluster = Cluster::default();
        let mut known = Activations::default();
        known.add(&json!({"apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceDefinition",
            "metadata": {"name": "buckets.s3.aws.upbound.io"},
            "spec": {"group": "s3.aws.upbound.io", "names": {"kind": "Bucket", "plural": "buckets"}}}));
        cluster.activations().replace(known);
        let config = Config::builtin();
        let decider = Decider::new(&config, &cluster, jiff::Timestamp::now());

        let d =
            decider.validate(&RequestBuilder::create(mrap(&["bucket.s3.aws.upbound.io"])).build());
        assert_eq!(d.outcome, Outcome::Allowed);
        let w = d.response.warnings.unwrap();
        assert!(
            w[0].contains("did you mean \"buckets.s3.aws.upbound.io\"?"),
            "{w:?}"
        );

        let d = decider.validate(&RequestBuilder::create(mrap(&["*.aws.upbound.io"])).build());
        assert_eq!(d.outcome, Outcome::Allowed);
        assert!(d.response.warnings.is_none());

        let d = decider
            .validate(&RequestBuilder::create(mrap(&["buckets.s3.aws.upbound.io", "[s3"])).build());
        assert_eq!(d.outcome, Outcome::Denied);
        assert!(!d.response.allowed);
        assert!(
            d.response.result.message.starts_with(
                "mrguard denied CREATE of ManagedResourceActivationPolicy \"aws\": spec.activate[1]: syntax error in pattern \"[s3\""
            ),
            "{}",
            d.response.result.message
        );
        // A DELETE is never judged.
        let d = decider.validate(&RequestBuilder::delete(mrap(&["[s3"])).build());
        assert_eq!(d.outcome, Outcome::Allowed);
    }
}
