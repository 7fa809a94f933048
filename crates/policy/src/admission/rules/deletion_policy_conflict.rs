use serde_json::Value;

use super::{Rule, RuleContext, CU};
use crate::admission::model::{Action, Violation};
use crate::admission::mr::PolicyAction;

/// `deletionPolicy: Orphan` does nothing when a non-default set has `Delete`.
/// Only cluster-scoped MRs: a namespaced MR has no deletionPolicy at all,
/// which `deletion-policy` tells.
pub(super) struct DeletionPolicyConflict;

impl Rule for DeletionPolicyConflict {
    fn name(&self) -> &'static str {
        "deletion-policy-conflict"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Warn
    }
    fn summary(&self) -> &'static str {
        "On a cluster-scoped MR, `deletionPolicy: Orphan` is ignored when a non-default set contains `Delete`: the external resource WILL be deleted"
    }
    fn fix(&self) -> &'static str {
        "Remove `Delete` from `spec.managementPolicies` to keep the external resource"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let mr = ctx.mr();
        if ctx.namespaced() || mr.deletion_policy().and_then(Value::as_str) != Some("Orphan") {
            return vec![];
        }
        match mr.policies() {
            Ok(set) if !set.is_default() && set.has(PolicyAction::Delete) => vec![Violation::new(
                "Orphan is ignored because managementPolicies has Delete: the external resource WILL be deleted".to_string(),
            )
            .fix("remove Delete from spec.managementPolicies to keep the external resource")],
            _ => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::json;

    #[test]
    fn orphan_with_delete_in_a_custom_set_warns() {
        let v = Case::create(mr(
            json!({"deletionPolicy": "Orphan", "managementPolicies": ["Observe", "Delete"]}),
        ))
        .check(&DeletionPolicyConflict);
        assert_eq!(v.len(), 1);
        assert!(v[0].message.contains("WILL be deleted"));
    }

    /// The same object namespaced gets only deletion-policy's warning that
    /// namespaced MRs have no deletionPolicy, not a conflict between the two.
    #[test]
    fn both_scopes_side_by_side() {
        let o =
            mr(json!({"deletionPolicy": "Orphan", "managementPolicies": ["Observe", "Delete"]}));
        assert_eq!(
            Case::create(o.clone()).check(&DeletionPolicyConflict).len(),
            1
        );
        let namespaced = Case::create(o)
            .kind("s3.aws.m.upbound.io", "Bucket")
            .namespaced("team-a");
        assert!(namespaced.check(&DeletionPolicyConflict).is_empty());
        let f = namespaced.evaluate();
        let rules: Vec<_> = f.iter().map(|f| f.rule.as_ref()).collect();
        assert_eq!(rules, ["deletion-policy"], "{f:?}");
        assert!(f[0]
            .message
            .contains("namespaced MRs have no spec.deletionPolicy"));
    }

    #[test]
    fn no_conflict_otherwise() {
        for spec in [
            json!({"deletionPolicy": "Orphan"}),
            json!({"deletionPolicy": "Orphan", "managementPolicies": ["*"]}),
            json!({"deletionPolicy": "Orphan", "managementPolicies": ["Observe"]}),
            json!({"deletionPolicy": "Delete", "managementPolicies": ["Observe", "Delete"]}),
            json!({"managementPolicies": ["Observe", "Delete"]}),
        ] {
            assert!(
                Case::create(mr(spec.clone()))
                    .check(&DeletionPolicyConflict)
                    .is_empty(),
                "{spec}"
            );
        }
    }
}
