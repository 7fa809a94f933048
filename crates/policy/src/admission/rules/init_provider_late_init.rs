use super::{Rule, RuleContext, CU};
use crate::admission::model::{Action, Violation};

/// initProvider with late initialization can copy values into forProvider.
pub(super) struct InitProviderLateInit;

impl Rule for InitProviderLateInit {
    fn name(&self) -> &'static str {
        "init-provider-late-init"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Warn
    }
    fn summary(&self) -> &'static str {
        "`spec.initProvider` is set while `LateInitialize` (or `*`) is on: late initialization can copy its values into `forProvider`, which then enforces them"
    }
    fn fix(&self) -> &'static str {
        "Drop `LateInitialize` from the set, e.g. `[Observe, Create, Update, Delete]`"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let mr = ctx.mr();
        let set_init = mr
            .spec("initProvider")
            .and_then(|v| v.as_object())
            .is_some_and(|m| !m.is_empty());
        match mr.policies() {
            Ok(set) if set_init && set.can_late_initialize() => vec![Violation::new(
                "LateInitialize may copy spec.initProvider values into forProvider and then enforce them",
            )
            .fix("drop LateInitialize from spec.managementPolicies, e.g. [Observe, Create, Update, Delete]")],
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
    fn warns_with_star_or_late_initialize() {
        for set in [
            json!(["*"]),
            json!(["Observe", "Create", "Update", "LateInitialize", "Delete"]),
        ] {
            let v = Case::create(mr(
                json!({"initProvider": {"a": 1}, "managementPolicies": set}),
            ))
            .check(&InitProviderLateInit);
            assert_eq!(v.len(), 1);
        }
        // Absent managementPolicies means {*}.
        assert_eq!(
            Case::create(mr(json!({"initProvider": {"a": 1}})))
                .check(&InitProviderLateInit)
                .len(),
            1
        );
    }

    #[test]
    fn silent_without_late_init_or_without_init_provider() {
        for spec in [
            json!({"initProvider": {"a": 1}, "managementPolicies": ["Observe", "Create", "Update", "Delete"]}),
            json!({"initProvider": {}}),
            json!({}),
        ] {
            assert!(
                Case::create(mr(spec.clone()))
                    .check(&InitProviderLateInit)
                    .is_empty(),
                "{spec}"
            );
        }
    }
}
