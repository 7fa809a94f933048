use super::{Rule, RuleContext, U};
use crate::admission::model::{Action, Violation};
use crate::admission::mr::CREATE_PENDING;

/// The provider stopped because a create may have leaked a resource.
pub(super) struct CreationIncomplete;

impl Rule for CreationIncomplete {
    fn name(&self) -> &'static str {
        "creation-incomplete"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        U
    }
    fn default_action(&self) -> Action {
        Action::Warn
    }
    fn summary(&self) -> &'static str {
        "The MR is creation-incomplete: the provider stopped because its last create may have leaked an external resource"
    }
    fn fix(&self) -> &'static str {
        "Check the external system for a leaked resource, then remove `crossplane.io/external-create-pending`"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        // Removing the pending annotation is the documented way to resume.
        if !ctx.state().creation_incomplete() || !ctx.mr().has_annotation(CREATE_PENDING) {
            return vec![];
        }
        vec![Violation::new(format!("possible leak: check the external system, then remove {CREATE_PENDING}"))
            .fix(format!("check the external system for a leaked resource, then remove the {CREATE_PENDING} annotation when safe"))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::json;

    #[test]
    fn warns_while_pending_stays() {
        let o = with_annotations(
            mr(json!({})),
            json!({CREATE_PENDING: "2024-01-01T00:00:00Z"}),
        );
        let v = Case::update(o.clone(), o).check(&CreationIncomplete);
        assert_eq!(v.len(), 1);
        assert!(v[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("remove the crossplane.io/external-create-pending"));
    }

    #[test]
    fn removing_pending_or_complete_creation_is_silent() {
        let o = with_annotations(
            mr(json!({})),
            json!({CREATE_PENDING: "2024-01-01T00:00:00Z"}),
        );
        assert!(Case::update(o, mr(json!({})))
            .check(&CreationIncomplete)
            .is_empty());
        let done = with_annotations(
            mr(json!({})),
            json!({CREATE_PENDING: "2024-01-01T00:00:00Z",
            "crossplane.io/external-create-succeeded": "2024-01-01T00:00:05Z"}),
        );
        assert!(Case::update(done.clone(), done)
            .check(&CreationIncomplete)
            .is_empty());
    }
}
