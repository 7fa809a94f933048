use super::{Rule, RuleContext, CU};
use crate::admission::model::{Action, Violation};
use crate::cluster::identity::{ProviderConfigRef, ProviderConfigStatus};

/// An MR whose provider config does not exist is admitted by the API
/// server and only fails later in the provider's logs. A warning, since a
/// GitOps tool may create the config a moment later.
pub(super) struct ProviderConfigExists;

impl Rule for ProviderConfigExists {
    fn name(&self) -> &'static str {
        "provider-config-exists"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Warn
    }
    fn summary(&self) -> &'static str {
        "The referenced ProviderConfig (in the MR's namespace, for a namespaced MR) or ClusterProviderConfig does not exist: the provider cannot reconcile the MR until it does"
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
            // provider-config-kind names the kinds the family serves.
            ProviderConfigStatus::KindNotServed(_) => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use crate::cluster::identity::{MrKey, ProviderConfigFacts};
    use crate::cluster::Cluster;
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
    fn a_kind_the_family_does_not_serve_is_left_to_provider_config_kind() {
        assert!(Case::create(mr(
            json!({"providerConfigRef": {"kind": "ClusterProviderConfig", "name": "default"}}),
        ))
        .cluster(cluster())
        .check(&ProviderConfigExists)
        .is_empty());
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

    /// Each kind is looked up in its scope: a namespaced ProviderConfig in
    /// the MR's namespace, a ClusterProviderConfig cluster-wide, and a
    /// cluster-scoped MR's ProviderConfig cluster-wide.
    #[test]
    fn each_kind_is_looked_up_in_its_scope() {
        let c = cluster();
        let i = c.identities();
        let facts = || ProviderConfigFacts {
            secret: None,
            in_use: false,
        };
        i.upsert_provider_config(
            MrKey::new("aws.m.upbound.io", "ProviderConfig", "team-a", "team"),
            facts(),
        );
        i.replace_provider_configs(
            "aws.m.upbound.io",
            "ClusterProviderConfig",
            vec![(
                MrKey::new("aws.m.upbound.io", "ClusterProviderConfig", "", "shared"),
                facts(),
            )],
        );
        let ns = |namespace: &str, r: serde_json::Value| {
            Case::create(mr(json!({"providerConfigRef": r})))
                .kind("s3.aws.m.upbound.io", "Bucket")
                .namespaced(namespace)
                .cluster(c.clone())
                .check(&ProviderConfigExists)
        };
        let pc = json!({"kind": "ProviderConfig", "name": "team"});
        assert!(ns("team-a", pc.clone()).is_empty());
        let v = ns("team-b", pc);
        assert_eq!(
            v[0].message,
            "ProviderConfig \"team\" in namespace \"team-b\" (aws.m.upbound.io) does not exist yet; the provider cannot reconcile this MR until it does"
        );
        assert!(ns(
            "team-b",
            json!({"kind": "ClusterProviderConfig", "name": "shared"})
        )
        .is_empty());
        // A ClusterProviderConfig is not found by a namespaced ProviderConfig's name.
        let v = ns(
            "team-a",
            json!({"kind": "ClusterProviderConfig", "name": "team"}),
        );
        assert!(
            v[0].message
                .starts_with("ClusterProviderConfig \"team\" (aws.m.upbound.io) does not exist"),
            "{}",
            v[0].message
        );
        // Cluster scope as before: the legacy family's ProviderConfig.
        let legacy = |name: &str| {
            Case::create(mr(json!({"providerConfigRef": {"name": name}})))
                .cluster(c.clone())
                .check(&ProviderConfigExists)
        };
        assert!(legacy("default").is_empty());
        assert!(legacy("team")[0]
            .message
            .starts_with("ProviderConfig \"team\" (aws.upbound.io)"));
    }
}
