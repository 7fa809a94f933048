use super::{Rule, RuleContext, CU};
use crate::identity::{ProviderConfigRef, ProviderConfigStatus};
use crate::model::{Action, Violation};

/// An MR whose provider config does not exist is admitted by the API
/// server and only fails later in the provider's logs. A warning, since a
/// GitOps tool may create the config a moment later.
pub(super) struct ProviderConfigExists;

impl Rule for ProviderConfigExists {
    fn name(&self) -> &'static str {
        "provider-config-exists"
    }
    fn operations(&self) -> &'static [crate::model::Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Warn
    }
    fn summary(&self) -> &'static str {
        "The referenced ProviderConfig or ClusterProviderConfig does not exist, or the MR's provider family serves no such kind: the provider cannot reconcile the MR"
    }
    fn fix(&self) -> &'static str {
        "Create the provider config, or point `spec.providerConfigRef` (`name`, and `kind` on namespaced MRs) at one that exists"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let index = ctx.cluster.identities();
        if !index.is_synced() || !index.knows_provider_configs() {
            return vec![];
        }
        let r = ProviderConfigRef::of(ctx.object, ctx.namespace, &ctx.config.provider_config);
        let what = if r.namespace.is_empty() {
            format!("{} {:?}", r.kind, r.name)
        } else {
            format!("{} {:?} in namespace {:?}", r.kind, r.name, r.namespace)
        };
        match index.provider_config_status(&ctx.request.kind.group, &r) {
            ProviderConfigStatus::Unknown | ProviderConfigStatus::Exists => vec![],
            ProviderConfigStatus::Missing(group) => vec![Violation::new(format!(
                "{what} ({group}) does not exist yet; the provider cannot reconcile this MR until it does"
            ))
            .fix(format!("create {what} in {group}, or reference one that exists"))],
            ProviderConfigStatus::KindNotServed(group) => vec![Violation::new(format!(
                "{group} serves no {}; the provider cannot use {what}",
                r.kind
            ))
            .fix("set spec.providerConfigRef.kind to a kind the provider serves (ProviderConfig or ClusterProviderConfig)")],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::identity::{MrKey, ProviderConfigFacts};
    use crate::rules::testing::*;
    use serde_json::json;
    use std::sync::Arc;

    fn cluster() -> Arc<Cluster> {
        let c = Arc::new(Cluster::default());
        let i = c.identities();
        i.set_provider_config_kinds(vec![
            ("aws.upbound.io".into(), "ProviderConfig".into()),
            ("aws.m.upbound.io".into(), "ProviderConfig".into()),
            ("aws.m.upbound.io".into(), "ClusterProviderConfig".into()),
        ]);
        i.replace_provider_configs(
            "aws.upbound.io",
            "ProviderConfig",
            vec![(
                MrKey::new("aws.upbound.io", "ProviderConfig", "", "default"),
                ProviderConfigFacts {
                    secret: None,
                    in_use: false,
                },
            )],
        );
        i.replace_provider_configs("aws.m.upbound.io", "ProviderConfig", vec![]);
        c
    }

    #[test]
    fn a_missing_provider_config_warns() {
        let v = Case::create(mr(json!({"providerConfigRef": {"name": "nope"}})))
            .cluster(cluster())
            .check(&ProviderConfigExists);
        assert_eq!(v.len(), 1);
        assert!(
            v[0].message
                .contains("ProviderConfig \"nope\" (aws.upbound.io) does not exist"),
            "{}",
            v[0].message
        );
        let f = Case::create(mr(json!({"providerConfigRef": {"name": "nope"}})))
            .cluster(cluster())
            .evaluate();
        assert!(f
            .iter()
            .any(|f| f.rule == "provider-config-exists" && f.action == Action::Warn));
        // It exists: nothing.
        assert!(
            Case::create(mr(json!({"providerConfigRef": {"name": "default"}})))
                .cluster(cluster())
                .check(&ProviderConfigExists)
                .is_empty()
        );
        // Namespaced ProviderConfig looked up in the MR's namespace.
        let v = Case::create(mr(
            json!({"providerConfigRef": {"kind": "ProviderConfig", "name": "default"}}),
        ))
        .kind("s3.aws.m.upbound.io", "Bucket")
        .namespaced("team-a")
        .cluster(cluster())
        .check(&ProviderConfigExists);
        assert!(
            v[0].message.contains("in namespace \"team-a\""),
            "{}",
            v[0].message
        );
    }

    #[test]
    fn a_kind_the_family_does_not_serve_warns_and_nothing_known_is_silent() {
        let v = Case::create(mr(
            json!({"providerConfigRef": {"kind": "ClusterProviderConfig", "name": "default"}}),
        ))
        .cluster(cluster())
        .check(&ProviderConfigExists);
        assert_eq!(v.len(), 1);
        assert!(
            v[0].message
                .starts_with("aws.upbound.io serves no ClusterProviderConfig"),
            "{}",
            v[0].message
        );
        assert!(
            Case::create(mr(json!({"providerConfigRef": {"name": "nope"}})))
                .check(&ProviderConfigExists)
                .is_empty()
        );
        assert!(
            Case::create(mr(json!({"providerConfigRef": {"name": "nope"}})))
                .kind("nop.crossplane.io", "NopResource")
                .cluster(cluster())
                .check(&ProviderConfigExists)
                .is_empty()
        );
    }
}
