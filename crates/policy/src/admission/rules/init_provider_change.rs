use serde_json::Value;

use super::{Rule, RuleContext, U};
use crate::admission::model::{Action, Violation};

/// initProvider only applies at creation; changing it later does nothing.
pub(super) struct InitProviderChange;

fn init_provider(v: Option<&Value>) -> Option<&Value> {
    // Absent, null and {} all mean "nothing to initialize".
    v.and_then(|o| o.get("spec"))
        .and_then(|s| s.get("initProvider"))
        .filter(|i| !i.is_null() && i.as_object().is_none_or(|m| !m.is_empty()))
}

impl Rule for InitProviderChange {
    fn name(&self) -> &'static str {
        "init-provider-change"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        U
    }
    fn default_action(&self) -> Action {
        Action::Warn
    }
    fn summary(&self) -> &'static str {
        "`spec.initProvider` changed on a created MR: it applies only at creation, so the change does nothing"
    }
    fn fix(&self) -> &'static str {
        "Change the value in `spec.forProvider` instead"
    }
    fn honours_exemptions(&self) -> bool {
        true
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        if !ctx.state().is_created()
            || init_provider(ctx.old_object) == init_provider(Some(ctx.object))
        {
            return vec![];
        }
        vec![Violation::new("spec.initProvider changed after creation; it only applies at creation, so this has no effect")
            .fix("set the value in spec.forProvider to change the external resource")]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::json;

    fn created(spec: Value) -> Value {
        with_annotations(
            mr(spec),
            json!({"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"}),
        )
    }

    #[test]
    fn warns_on_change_after_creation() {
        let v = Case::update(
            created(json!({"initProvider": {"a": 1}})),
            created(json!({"initProvider": {"a": 2}})),
        )
        .check(&InitProviderChange);
        assert_eq!(v.len(), 1);
        let v = Case::update(
            created(json!({"initProvider": {"a": 1}})),
            created(json!({})),
        )
        .check(&InitProviderChange);
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn silent_before_creation_or_without_change() {
        let v = Case::update(
            mr(json!({"initProvider": {"a": 1}})),
            mr(json!({"initProvider": {"a": 2}})),
        )
        .check(&InitProviderChange);
        assert!(v.is_empty(), "creation state is read from the old object");
        let v = Case::update(
            created(json!({"initProvider": {"a": 1}})),
            created(json!({"initProvider": {"a": 1}})),
        )
        .check(&InitProviderChange);
        assert!(v.is_empty());
        let v = Case::update(created(json!({})), created(json!({"initProvider": {}})))
            .check(&InitProviderChange);
        assert!(v.is_empty(), "absent and {{}} are the same");
    }

    #[test]
    fn creation_state_comes_from_the_old_object() {
        // The new object claims creation, the old does not: no finding.
        let v = Case::update(
            mr(json!({"initProvider": {"a": 1}})),
            created(json!({"initProvider": {"a": 2}})),
        )
        .check(&InitProviderChange);
        assert!(v.is_empty());
    }
}
