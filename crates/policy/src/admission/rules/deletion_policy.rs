use serde_json::Value;

use super::{Rule, RuleContext, CU};
use crate::admission::model::{Action, Violation};

/// `deletionPolicy` is `Delete` or `Orphan`; namespaced MRs have none.
pub(super) struct DeletionPolicy;

impl Rule for DeletionPolicy {
    fn name(&self) -> &'static str {
        "deletion-policy"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Deny
    }
    fn summary(&self) -> &'static str {
        "`spec.deletionPolicy` is exactly `Delete` or `Orphan`; on a namespaced MR, which has none and ignores it, its presence is a warning"
    }
    fn fix(&self) -> &'static str {
        "Set `spec.deletionPolicy` to `Delete` or `Orphan`; on a namespaced MR remove it and keep the resource with `managementPolicies`"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let Some(policy) = ctx.mr().deletion_policy() else {
            return vec![];
        };
        if ctx.namespaced() {
            return vec![Violation::new(
                "namespaced MRs have no spec.deletionPolicy; it is ignored; use managementPolicies",
            )
            .fix("remove spec.deletionPolicy and use spec.managementPolicies to keep the external resource")
            .warn_only()];
        }
        match policy {
            Value::String(s) if s == "Delete" || s == "Orphan" => vec![],
            other => vec![Violation::new(format!(
                "spec.deletionPolicy is {}; it must be \"Delete\" or \"Orphan\" (case-sensitive)",
                super::show(other)
            ))
            .fix("set spec.deletionPolicy to Delete or Orphan")],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::json;

    #[test]
    fn accepts_delete_orphan_and_absent() {
        for spec in [
            json!({"deletionPolicy": "Delete"}),
            json!({"deletionPolicy": "Orphan"}),
            json!({}),
        ] {
            assert!(Case::create(mr(spec)).check(&DeletionPolicy).is_empty());
        }
    }

    #[test]
    fn rejects_other_values_case_sensitively() {
        for bad in [
            json!("delete"),
            json!("orphan"),
            json!("Retain"),
            json!(""),
            json!(1),
        ] {
            let v = Case::create(mr(json!({"deletionPolicy": bad}))).check(&DeletionPolicy);
            assert_eq!(v.len(), 1);
            assert!(!v[0].warn_only);
            assert!(v[0].message.contains("must be \"Delete\" or \"Orphan\""));
        }
    }

    #[test]
    fn presence_on_namespaced_mr_is_a_warning() {
        let v = Case::create(mr(json!({"deletionPolicy": "Orphan"})))
            .namespaced("team-a")
            .check(&DeletionPolicy);
        assert_eq!(v.len(), 1);
        assert!(v[0].warn_only);
    }
}
