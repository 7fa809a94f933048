use super::{Rule, RuleContext, CU};
use crate::admission::model::{Action, Violation};
use crate::admission::mr::PolicySet;

/// Every action is known, none repeats, and the set is one of the 13.
pub(super) struct ManagementPolicies;

impl Rule for ManagementPolicies {
    fn name(&self) -> &'static str {
        "management-policies"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Deny
    }
    fn summary(&self) -> &'static str {
        "`spec.managementPolicies` is one of the 13 supported sets, with no unknown or repeated action: providers fail on any other set"
    }
    fn fix(&self) -> &'static str {
        "Use a supported set (the message lists them), such as `[\"*\"]`, `[Observe]` or `[Observe, Create, Update, Delete]`"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        match ctx.mr().policies() {
            Ok(_) => vec![],
            Err(e) => vec![Violation::new(e.to_string()).fix(format!(
                "use one of the supported sets: {}",
                PolicySet::supported_list()
            ))],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::json;

    #[test]
    fn supported_sets_pass_and_others_list_the_supported_ones() {
        for ok in [
            json!(["*"]),
            json!([]),
            json!(["Observe"]),
            json!(["Update", "Observe"]),
        ] {
            assert!(Case::create(mr(json!({"managementPolicies": ok})))
                .check(&ManagementPolicies)
                .is_empty());
        }
        assert!(Case::create(mr(json!({})))
            .check(&ManagementPolicies)
            .is_empty());
        for bad in [
            json!(["*", "Observe"]),
            json!(["Observe", "Observe"]),
            json!(["Create"]),
            json!(["observe"]),
            json!("Observe"),
        ] {
            let v = Case::create(mr(json!({"managementPolicies": bad.clone()})))
                .check(&ManagementPolicies);
            assert_eq!(v.len(), 1, "{bad}");
            let fix = v[0].fix.as_deref().unwrap();
            assert!(
                fix.contains("[Observe, Update]") && fix.contains("[*]"),
                "{fix}"
            );
        }
    }
}
