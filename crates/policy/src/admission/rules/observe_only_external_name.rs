use super::{Rule, RuleContext, CU};
use crate::admission::config::ExternalNameStrategy;
use crate::admission::model::{Action, Violation};
use crate::admission::mr::PolicySet;

/// Without Create, a provider-assigned kind can only be found by its
/// external name. The paused set `[]` does nothing at all, so it is exempt
/// (docs/rules.md): pausing an MR must never be refused.
pub(super) struct ObserveOnlyExternalName;

impl Rule for ObserveOnlyExternalName {
    fn name(&self) -> &'static str {
        "observe-only-external-name"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Deny
    }
    fn summary(&self) -> &'static str {
        "A set without `Create` on an `IdentifierFromProvider` kind, with no external name: nothing identifies the existing resource to observe"
    }
    fn fix(&self) -> &'static str {
        "Set `crossplane.io/external-name` to the existing resource's ID, or add `Create` to the set"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        if ctx.resource.external_name != ExternalNameStrategy::IdentifierFromProvider {
            return vec![];
        }
        let mr = ctx.mr();
        match mr.policies() {
            Ok(set)
                if set != PolicySet::PAUSED
                    && !set.can_create()
                    && mr.external_name().is_none() =>
            {
                vec![Violation::new(format!(
                "managementPolicies {set} cannot create, and {} identifiers are assigned by the provider, so without crossplane.io/external-name nothing identifies the existing resource",
                ctx.kind
            ))
            .fix("set the crossplane.io/external-name annotation to the existing resource's ID, or add Create to spec.managementPolicies")]
            }
            _ => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::json;

    fn vpc(c: Case) -> Case {
        c.kind("ec2.aws.upbound.io", "VPC")
    }

    #[test]
    fn observe_only_vpc_without_external_name_is_denied() {
        let v = vpc(Case::create(mr(json!({"managementPolicies": ["Observe"]}))))
            .check(&ObserveOnlyExternalName);
        assert_eq!(v.len(), 1);
        assert!(v[0].message.contains("VPC"));
        let v = vpc(Case::create(mr(
            json!({"managementPolicies": ["Observe", "Update"]}),
        )))
        .check(&ObserveOnlyExternalName);
        assert_eq!(v.len(), 1);
    }

    /// Bug: pausing an observe-only VPC (`managementPolicies: []`) was
    /// denied, though the paused set does nothing.
    #[test]
    fn the_paused_set_is_exempt() {
        let paused = mr(json!({"managementPolicies": []}));
        for case in [
            Case::create(paused.clone()),
            Case::update(paused.clone(), paused),
        ] {
            let v = vpc(case).check(&ObserveOnlyExternalName);
            assert!(v.is_empty(), "{v:?}");
        }
    }

    #[test]
    fn allowed_with_external_name_create_or_name_based_kinds() {
        let named = with_annotations(
            mr(json!({"managementPolicies": ["Observe"]})),
            json!({"crossplane.io/external-name": "vpc-123"}),
        );
        assert!(vpc(Case::create(named))
            .check(&ObserveOnlyExternalName)
            .is_empty());
        assert!(vpc(Case::create(mr(
            json!({"managementPolicies": ["Observe", "Create"]})
        )))
        .check(&ObserveOnlyExternalName)
        .is_empty());
        assert!(vpc(Case::create(mr(json!({}))))
            .check(&ObserveOnlyExternalName)
            .is_empty());
        assert!(Case::create(mr(json!({"managementPolicies": ["Observe"]})))
            .check(&ObserveOnlyExternalName)
            .is_empty());
    }
}
