use super::{Rule, RuleContext};
use crate::admission::config::ExternalNameStrategy;
use crate::admission::model::{Action, Operation, Violation};
use crate::admission::mr::DeletionOutcome;

/// mrguard's annotation: `"true"` acknowledges that the MR adopts an
/// existing external resource (`adoption`).
pub const ADOPT: &str = "mrguard.io/adopt";

/// An MR created with an explicit external name imports the resource of
/// that name, if one exists; with Delete in its policies, deleting the MR
/// later deletes a resource Crossplane never created (crossplane#726).
pub(super) struct Adoption;

const C: &[Operation] = &[Operation::Create];

impl Rule for Adoption {
    fn name(&self) -> &'static str {
        "adoption"
    }
    fn operations(&self) -> &'static [Operation] {
        C
    }
    fn default_action(&self) -> Action {
        Action::Warn
    }
    fn summary(&self) -> &'static str {
        "A CREATE with `crossplane.io/external-name` set on an `IdentifierFromProvider` kind, or set to other than `metadata.name`, adopts an existing resource, and Delete in its policies means deleting the MR deletes it"
    }
    fn fix(&self) -> &'static str {
        "Drop `Delete` from `spec.managementPolicies` (or, on a cluster-scoped MR, set `deletionPolicy: Orphan`) to keep the resource, or acknowledge with the annotation `mrguard.io/adopt: \"true\"`"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let mr = ctx.mr();
        let Some(external) = mr.external_name() else {
            return vec![];
        };
        let adopts = match ctx.resource.external_name {
            ExternalNameStrategy::IdentifierFromProvider => true,
            ExternalNameStrategy::NameAsIdentifier => external != mr.name(),
        };
        // The audit judges live MRs as CREATEs; once a create was attempted
        // the provider recorded the name, which is no adoption.
        if !adopts
            || mr.creation_attempted()
            || mr.annotation(ADOPT) == Some("true")
            || mr.deletion_outcome_in(ctx.namespaced()) != DeletionOutcome::Delete
        {
            return vec![];
        }
        vec![Violation::new(format!(
            "external name {external:?} adopts an existing {} if one exists; deleting this MR will delete it",
            ctx.kind
        ))
        .fix(format!(
            "to keep it when the MR is deleted, drop Delete from spec.managementPolicies; to accept, annotate {ADOPT}: \"true\""
        ))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::json;

    fn named(ext: &str, spec: serde_json::Value) -> serde_json::Value {
        with_annotations(mr(spec), json!({"crossplane.io/external-name": ext}))
    }

    #[test]
    fn adopting_with_delete_warns_and_says_what_a_delete_does() {
        let f = Case::create(named("vpc-0abc", json!({})))
            .kind("ec2.aws.upbound.io", "VPC")
            .evaluate();
        let f: Vec<_> = f.into_iter().filter(|f| f.rule == "adoption").collect();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].action, Action::Warn);
        assert!(
            f[0].message.contains("deleting this MR will delete it"),
            "{}",
            f[0].message
        );
        assert!(format!("adoption: {}", f[0].message).len() <= 120);
        // A Bucket whose external name is not its own name adopts too.
        let v = Case::create(named("legacy-bucket", json!({}))).check(&Adoption);
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn no_finding_without_adoption_or_without_delete_or_when_acknowledged() {
        // The Bucket's external name is its name: it creates, not adopts.
        assert!(Case::create(named("b", json!({})))
            .check(&Adoption)
            .is_empty());
        // No external name on a provider-assigned kind: it creates.
        assert!(Case::create(mr(json!({})))
            .kind("ec2.aws.upbound.io", "VPC")
            .check(&Adoption)
            .is_empty());
        for spec in [
            json!({"managementPolicies": ["Observe"]}),
            json!({"managementPolicies": ["Observe", "Create", "Update", "LateInitialize"]}),
            json!({"deletionPolicy": "Orphan"}),
        ] {
            assert!(Case::create(named("vpc-1", spec))
                .kind("ec2.aws.upbound.io", "VPC")
                .check(&Adoption)
                .is_empty());
        }
        let acked = with_annotations(
            mr(json!({})),
            json!({"crossplane.io/external-name": "vpc-1", "mrguard.io/adopt": "true"}),
        );
        assert!(Case::create(acked)
            .kind("ec2.aws.upbound.io", "VPC")
            .check(&Adoption)
            .is_empty());
        // A live VPC whose ID the provider recorded, as the audit sees it.
        let recorded = with_annotations(
            mr(json!({})),
            json!({"crossplane.io/external-name": "vpc-1",
                   "crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"}),
        );
        assert!(Case::create(recorded)
            .kind("ec2.aws.upbound.io", "VPC")
            .check(&Adoption)
            .is_empty());
    }

    /// `deletionPolicy: Orphan` keeps a cluster-scoped MR's resource but
    /// not a namespaced one's, which has no deletionPolicy.
    #[test]
    fn both_scopes_side_by_side() {
        let orphan = named("vpc-1", json!({"deletionPolicy": "Orphan"}));
        assert!(Case::create(orphan.clone())
            .kind("ec2.aws.upbound.io", "VPC")
            .check(&Adoption)
            .is_empty());
        let v = Case::create(orphan)
            .kind("ec2.aws.m.upbound.io", "VPC")
            .namespaced("team-a")
            .check(&Adoption);
        assert_eq!(v.len(), 1);
        assert!(v[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("drop Delete from spec.managementPolicies"));
        let kept = named(
            "vpc-1",
            json!({"managementPolicies": ["Observe", "Create", "Update"]}),
        );
        assert!(Case::create(kept)
            .kind("ec2.aws.m.upbound.io", "VPC")
            .namespaced("team-a")
            .check(&Adoption)
            .is_empty());
    }

    #[test]
    fn deny_is_a_configuration_away() {
        let f = Case::create(named("vpc-1", json!({})))
            .kind("ec2.aws.upbound.io", "VPC")
            .config("rules: {adoption: Deny}\n")
            .evaluate();
        assert!(f
            .iter()
            .any(|f| f.rule == "adoption" && f.action == Action::Deny));
    }
}
