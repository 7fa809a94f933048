use super::{Rule, RuleContext, D};
use crate::admission::model::{Action, Violation};
use crate::admission::mr::{DeletionOutcome, DELETION_PROTECTION};

/// Protected MRs cannot be deleted while deletion destroys the external
/// resource. Applies to everyone, exempt users included.
pub(super) struct DeletionProtection;

impl Rule for DeletionProtection {
    fn name(&self) -> &'static str {
        "deletion-protection"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        D
    }
    fn default_action(&self) -> Action {
        Action::Deny
    }
    fn summary(&self) -> &'static str {
        "Deleting an MR protected by `mrguard.io/deletion-protection: \"true\"` or its config entry's `deletionProtection: true` while its deletion outcome is `Delete`: that destroys the external resource (applies to exempt users too)"
    }
    fn fix(&self) -> &'static str {
        "Orphan it first (a `managementPolicies` set without `Delete`, or on a cluster-scoped MR `deletionPolicy: Orphan`), or remove the protection"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let state = ctx.state();
        let by_annotation = state.annotation(DELETION_PROTECTION) == Some("true");
        if !(by_annotation || ctx.resource.deletion_protection) {
            return vec![];
        }
        if state.deletion_outcome_in(ctx.namespaced()) != DeletionOutcome::Delete {
            return vec![];
        }
        let why = if by_annotation {
            format!("the annotation {DELETION_PROTECTION}: \"true\"")
        } else {
            "deletionProtection in mrguard's configuration".to_string()
        };
        // A namespaced MR has no deletionPolicy: only its policies orphan it.
        let orphan = if ctx.namespaced() {
            "spec.managementPolicies without Delete, e.g. [Observe, Create, Update, LateInitialize]; namespaced MRs have no deletionPolicy"
        } else {
            "spec.deletionPolicy: Orphan, or spec.managementPolicies without Delete"
        };
        vec![Violation::new(format!(
            "the MR is protected by {why} and deleting it would destroy the external resource"
        ))
        .fix(format!(
            "orphan it first ({orphan}), or remove the protection"
        ))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::{json, Value};

    fn protected(spec: Value) -> Value {
        with_annotations(mr(spec), json!({DELETION_PROTECTION: "true"}))
    }

    #[test]
    fn protected_mr_with_delete_outcome_is_denied_even_for_exempt_users() {
        assert_eq!(
            Case::delete(protected(json!({})))
                .check(&DeletionProtection)
                .len(),
            1
        );
        // A custom set with Delete overrides Orphan: still deleted.
        let o = protected(
            json!({"deletionPolicy": "Orphan", "managementPolicies": ["Observe", "Delete"]}),
        );
        assert_eq!(Case::delete(o.clone()).check(&DeletionProtection).len(), 1);
        let f = Case::delete(o)
            .user("system:serviceaccount:crossplane-system:p")
            .evaluate();
        assert!(f
            .iter()
            .any(|f| f.rule == "deletion-protection" && f.action == Action::Deny));
    }

    #[test]
    fn orphaned_or_unprotected_mrs_can_be_deleted() {
        assert!(Case::delete(protected(json!({"deletionPolicy": "Orphan"})))
            .check(&DeletionProtection)
            .is_empty());
        assert!(Case::delete(protected(
            json!({"managementPolicies": ["Observe", "Create", "Update"]})
        ))
        .check(&DeletionProtection)
        .is_empty());
        assert!(Case::delete(mr(json!({})))
            .check(&DeletionProtection)
            .is_empty());
        let o = with_annotations(mr(json!({})), json!({DELETION_PROTECTION: "True"}));
        assert!(Case::delete(o).check(&DeletionProtection).is_empty());
    }

    /// A namespaced MR's deletionPolicy orphans nothing, and its fix names
    /// only managementPolicies; the same object cluster-scoped is orphaned.
    #[test]
    fn both_scopes_side_by_side() {
        let o = protected(json!({"deletionPolicy": "Orphan"}));
        assert!(Case::delete(o.clone())
            .check(&DeletionProtection)
            .is_empty());
        let v = Case::delete(o)
            .kind("s3.aws.m.upbound.io", "Bucket")
            .namespaced("team-a")
            .check(&DeletionProtection);
        assert_eq!(v.len(), 1);
        let fix = v[0].fix.as_deref().unwrap();
        assert!(
            fix.contains("spec.managementPolicies without Delete"),
            "{fix}"
        );
        assert!(!fix.contains("deletionPolicy: Orphan"), "{fix}");
        let cluster = Case::delete(protected(json!({}))).check(&DeletionProtection);
        assert!(cluster[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("spec.deletionPolicy: Orphan"));
        // Orphaned by its policies: deletable in both scopes.
        let kept = protected(json!({"managementPolicies": ["Observe", "Create", "Update"]}));
        assert!(Case::delete(kept.clone())
            .check(&DeletionProtection)
            .is_empty());
        assert!(Case::delete(kept)
            .kind("s3.aws.m.upbound.io", "Bucket")
            .namespaced("team-a")
            .check(&DeletionProtection)
            .is_empty());
    }

    #[test]
    fn config_entry_protects_a_kind() {
        let cfg = "resources:\n  - apiGroups: ['rds.aws.upbound.io']\n    kinds: [Instance]\n    deletionProtection: true\n";
        let v = Case::delete(mr(json!({})))
            .kind("rds.aws.upbound.io", "Instance")
            .config(cfg)
            .check(&DeletionProtection);
        assert!(v[0].message.contains("configuration"));
        assert!(Case::delete(mr(json!({})))
            .config(cfg)
            .check(&DeletionProtection)
            .is_empty());
    }
}
