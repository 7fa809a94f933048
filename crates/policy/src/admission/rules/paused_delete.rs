use super::{Rule, RuleContext, D};
use crate::admission::model::{Action, Violation};

/// A paused MR never runs its finalizer, so deleting it hangs forever.
pub(super) struct PausedDelete;

impl Rule for PausedDelete {
    fn name(&self) -> &'static str {
        "paused-delete"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        D
    }
    fn default_action(&self) -> Action {
        Action::Deny
    }
    fn summary(&self) -> &'static str {
        "Deleting a paused MR that still has finalizers: the provider never runs its finalizer, so the deletion hangs forever"
    }
    fn fix(&self) -> &'static str {
        "Unpause it first (remove `crossplane.io/paused`, or give `managementPolicies` a non-empty set), then delete"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let state = ctx.state();
        if state.is_paused() && state.has_finalizers() {
            vec![Violation::new("the MR is paused and still has finalizers, so the deletion would hang forever")
                .fix("unpause it first: remove crossplane.io/paused or give spec.managementPolicies a non-empty set, then delete")]
        } else {
            vec![]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::{json, Value};

    fn paused(finalizers: Value) -> Value {
        let mut o = with_annotations(mr(json!({})), json!({"crossplane.io/paused": "true"}));
        o["metadata"]["finalizers"] = finalizers;
        o
    }

    #[test]
    fn paused_with_finalizers_is_denied() {
        assert_eq!(
            Case::delete(paused(json!(["finalizer.managedresource.crossplane.io"])))
                .check(&PausedDelete)
                .len(),
            1
        );
        let mut o = mr(json!({"managementPolicies": []}));
        o["metadata"]["finalizers"] = json!(["f"]);
        assert_eq!(Case::delete(o).check(&PausedDelete).len(), 1);
    }

    #[test]
    fn without_finalizers_or_unpaused_it_is_fine() {
        assert!(Case::delete(paused(json!([])))
            .check(&PausedDelete)
            .is_empty());
        let mut o = with_annotations(mr(json!({})), json!({"crossplane.io/paused": "True"}));
        o["metadata"]["finalizers"] = json!(["f"]);
        assert!(Case::delete(o).check(&PausedDelete).is_empty());
    }
}
