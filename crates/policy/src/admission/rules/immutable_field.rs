use std::collections::HashMap;

use super::{show, Rule, RuleContext, U};
use crate::admission::model::{Action, Violation};

/// Configured immutable fields cannot change or go away once created.
/// Absent → set is late initialization and allowed.
pub(super) struct ImmutableField;

impl Rule for ImmutableField {
    fn name(&self) -> &'static str {
        "immutable-field"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        U
    }
    fn default_action(&self) -> Action {
        Action::Deny
    }
    fn summary(&self) -> &'static str {
        "A configured immutable field changed or was removed on a created MR: the provider cannot change it in place (setting an absent field is allowed)"
    }
    fn fix(&self) -> &'static str {
        "Restore the old value, or create a new MR for the new value"
    }
    fn honours_exemptions(&self) -> bool {
        true
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let Some(old) = ctx.old_object else {
            return vec![];
        };
        if !ctx.state().is_created() {
            return vec![];
        }
        let mut out = Vec::new();
        for path in &ctx.resource.immutable_fields {
            let new: HashMap<String, &serde_json::Value> =
                path.select(ctx.object).into_iter().collect();
            for (at, before) in path.select(old) {
                match new.get(&at) {
                    Some(after) if *after == before => {}
                    Some(after) => out.push(
                        Violation::new(format!(
                            "{at} is immutable and changed from {} to {}",
                            show(before),
                            show(after)
                        ))
                        .fix(format!(
                            "restore {at} to {}, or create a new resource for the new value",
                            show(before)
                        )),
                    ),
                    None => out.push(
                        Violation::new(format!(
                            "{at} is immutable and was removed (it was {})",
                            show(before)
                        ))
                        .fix(format!("restore {at} to {}", show(before))),
                    ),
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::{json, Value};

    const CFG: &str = "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    immutableFields: [spec.forProvider.region, 'spec.forProvider.subnets[*].zone', 'metadata.labels[team]']\n";

    fn created(fp: Value) -> Value {
        with_annotations(
            mr(json!({"forProvider": fp})),
            json!({"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"}),
        )
    }

    fn check(old: Value, new: Value) -> Vec<Violation> {
        Case::update(old, new).config(CFG).check(&ImmutableField)
    }

    #[test]
    fn change_and_removal_are_denied_after_creation() {
        let v = check(
            created(json!({"region": "a"})),
            created(json!({"region": "b"})),
        );
        assert_eq!(v.len(), 1);
        assert!(v[0]
            .message
            .contains("spec.forProvider.region is immutable and changed from \"a\" to \"b\""));
        let v = check(created(json!({"region": "a"})), created(json!({})));
        assert!(v[0].message.contains("was removed"));
    }

    #[test]
    fn absent_to_set_is_late_initialization() {
        assert!(check(created(json!({})), created(json!({"region": "a"}))).is_empty());
        assert!(check(
            created(json!({"region": null})),
            created(json!({"region": "a"}))
        )
        .is_empty());
    }

    #[test]
    fn not_judged_before_creation() {
        let old = mr(json!({"forProvider": {"region": "a"}}));
        let new = mr(json!({"forProvider": {"region": "b"}}));
        assert!(check(old, new).is_empty());
    }

    #[test]
    fn ready_condition_counts_as_created() {
        let mut old = mr(json!({"forProvider": {"region": "a"}}));
        old["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        let new = mr(json!({"forProvider": {"region": "b"}}));
        assert_eq!(check(old, new).len(), 1);
    }

    #[test]
    fn wildcards_compare_element_by_element() {
        let old = created(json!({"subnets": [{"zone": "a"}, {"zone": "b"}]}));
        let new = created(json!({"subnets": [{"zone": "a"}, {"zone": "c"}, {"zone": "d"}]}));
        let v = check(old, new);
        assert_eq!(v.len(), 1);
        assert!(v[0].message.starts_with("spec.forProvider.subnets[1].zone"));
    }

    #[test]
    fn map_keys() {
        let mut old = created(json!({}));
        old["metadata"]["labels"] = json!({"team": "a"});
        let mut new = old.clone();
        new["metadata"]["labels"] = json!({"team": "b"});
        assert!(check(old, new)[0]
            .message
            .starts_with("metadata.labels[team]"));
    }

    #[test]
    fn unchanged_is_fine() {
        assert!(check(
            created(json!({"region": "a"})),
            created(json!({"region": "a"}))
        )
        .is_empty());
    }
}
