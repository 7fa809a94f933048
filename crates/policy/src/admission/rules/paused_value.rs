use super::{Rule, RuleContext, CU};
use crate::admission::model::{Action, Violation};
use crate::admission::mr::PAUSED;

/// Only the exact string "true" pauses; "True" or "yes" silently do not.
pub(super) struct PausedValue;

impl Rule for PausedValue {
    fn name(&self) -> &'static str {
        "paused-value"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Warn
    }
    fn summary(&self) -> &'static str {
        "`crossplane.io/paused` is neither `\"true\"` nor `\"false\"`: only `\"true\"` pauses, so the MR is NOT paused"
    }
    fn fix(&self) -> &'static str {
        "Set the annotation to `\"true\"` or `\"false\"`"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let Some(v) = crate::admission::mr::at(ctx.object, &["metadata", "annotations", PAUSED])
        else {
            return vec![];
        };
        match v.as_str() {
            Some("true") | Some("false") => vec![],
            _ => vec![Violation::new(format!(
                "{PAUSED} is {}; only \"true\" pauses, so this MR is NOT paused",
                super::show(v)
            ))
            .fix(format!("set {PAUSED} to \"true\" or \"false\""))],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::json;

    #[test]
    fn warns_on_near_miss_values() {
        for bad in ["True", "yes", "1", "", "TRUE"] {
            let v = Case::create(with_annotations(mr(json!({})), json!({PAUSED: bad})))
                .check(&PausedValue);
            assert_eq!(v.len(), 1, "{bad}");
            assert!(v[0].message.contains("NOT paused"));
        }
    }

    #[test]
    fn true_false_and_absent_are_fine() {
        for ok in ["true", "false"] {
            assert!(
                Case::create(with_annotations(mr(json!({})), json!({PAUSED: ok})))
                    .check(&PausedValue)
                    .is_empty()
            );
        }
        assert!(Case::create(mr(json!({}))).check(&PausedValue).is_empty());
    }
}
