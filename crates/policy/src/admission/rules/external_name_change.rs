use super::{Rule, RuleContext, U};
use crate::admission::model::{Action, Violation};

/// A non-empty external name is the identity of the external resource once
/// creation was attempted; changing it points the MR at something else.
pub(super) struct ExternalNameChange;

impl Rule for ExternalNameChange {
    fn name(&self) -> &'static str {
        "external-name-change"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        U
    }
    fn default_action(&self) -> Action {
        Action::Deny
    }
    fn summary(&self) -> &'static str {
        "A non-empty `crossplane.io/external-name` changed or was removed after creation was attempted: the MR would manage another resource and lose the first"
    }
    fn fix(&self) -> &'static str {
        "Restore the annotation; to manage another resource, create a new MR"
    }
    fn honours_exemptions(&self) -> bool {
        true
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let state = ctx.state();
        let Some(before) = state.external_name() else {
            return vec![];
        };
        if !state.creation_attempted() {
            return vec![];
        }
        match ctx.mr().annotation(crate::admission::mr::EXTERNAL_NAME) {
            Some(after) if after == before => vec![],
            Some(after) => vec![Violation::new(format!(
                "crossplane.io/external-name changed from {before:?} to {after:?} after creation was attempted"
            ))
            .fix(format!("restore the annotation to {before:?}; to manage another resource, create a new MR"))],
            None => vec![Violation::new(format!(
                "crossplane.io/external-name {before:?} was removed after creation was attempted"
            ))
            .fix(format!("restore the annotation to {before:?}"))],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::{json, Value};

    fn obj(a: Value) -> Value {
        with_annotations(mr(json!({})), a)
    }

    #[test]
    fn change_or_removal_after_attempt_is_denied() {
        let old = obj(
            json!({"crossplane.io/external-name": "a", "crossplane.io/external-create-pending": "2024-01-01T00:00:00Z"}),
        );
        let v = Case::update(
            old.clone(),
            obj(json!({"crossplane.io/external-name": "b"})),
        )
        .check(&ExternalNameChange);
        assert!(v[0].message.contains("changed from \"a\" to \"b\""));
        let v = Case::update(old.clone(), obj(json!({}))).check(&ExternalNameChange);
        assert!(v[0].message.contains("was removed"));
        let v = Case::update(old, obj(json!({"crossplane.io/external-name": ""})))
            .check(&ExternalNameChange);
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn setting_an_absent_name_and_changes_before_any_attempt_are_allowed() {
        let old = obj(json!({"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"}));
        assert!(
            Case::update(old, obj(json!({"crossplane.io/external-name": "vpc-1"})))
                .check(&ExternalNameChange)
                .is_empty()
        );
        let old = obj(json!({"crossplane.io/external-name": "a"}));
        assert!(
            Case::update(old, obj(json!({"crossplane.io/external-name": "b"})))
                .check(&ExternalNameChange)
                .is_empty()
        );
        let old = obj(
            json!({"crossplane.io/external-name": "", "crossplane.io/external-create-failed": "2024-01-01T00:00:00Z"}),
        );
        assert!(
            Case::update(old, obj(json!({"crossplane.io/external-name": "b"})))
                .check(&ExternalNameChange)
                .is_empty()
        );
    }
}
