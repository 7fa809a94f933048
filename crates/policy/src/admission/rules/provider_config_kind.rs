use super::{Rule, RuleContext, CU};
use crate::admission::model::{Action, Violation};
use crate::cluster::identity::ProviderConfigRef;

/// A namespaced (`.m.`) MR names the kind of its provider config:
/// `ProviderConfig` (in the MR's namespace) or `ClusterProviderConfig`.
/// The API server admits any string, and a kind the provider family does
/// not serve leaves the MR unreconciled with nothing but an event to tell.
/// The served kinds come from the CRDs the replica watches, for families
/// whose configs it may list (as `provider-config-exists`); where none of
/// the family is known, as offline, nothing is found.
pub(super) struct ProviderConfigKind;

impl Rule for ProviderConfigKind {
    fn name(&self) -> &'static str {
        "provider-config-kind"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Deny
    }
    fn summary(&self) -> &'static str {
        "`spec.providerConfigRef.kind` names a kind the MR's provider family does not serve (a namespaced MR takes `ProviderConfig` or `ClusterProviderConfig`): the provider never reconciles the MR"
    }
    fn fix(&self) -> &'static str {
        "Set `spec.providerConfigRef.kind` to one of the kinds the message names: `ProviderConfig` for one in the MR's namespace, `ClusterProviderConfig` for a cluster-wide one"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let Some((family, served)) = ctx
            .cluster
            .identities()
            .provider_config_kinds_for(&ctx.request.kind.group)
        else {
            return vec![];
        };
        let r = ProviderConfigRef::of(ctx.object, ctx.namespace, &ctx.config.provider_config);
        if served.is_empty() || served.contains(&r.kind) {
            return vec![];
        }
        let choices: Vec<String> = served
            .iter()
            .map(|k| match k.as_str() {
                "ProviderConfig" if ctx.namespaced() => {
                    format!("ProviderConfig (in namespace {:?})", ctx.namespace)
                }
                "ClusterProviderConfig" => "ClusterProviderConfig (cluster-wide)".to_string(),
                other => other.to_string(),
            })
            .collect();
        vec![Violation::new(format!(
            "spec.providerConfigRef.kind {:?} is not a kind {family} serves; it serves {}",
            r.kind,
            served.join(" and ")
        ))
        .fix(format!(
            "set spec.providerConfigRef.kind to {}",
            choices.join(" or ")
        ))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use crate::cluster::Cluster;
    use serde_json::{json, Value};
    use std::sync::Arc;

    fn cluster() -> Arc<Cluster> {
        let c = Arc::new(Cluster::default());
        let i = c.identities();
        i.set_provider_config_kinds(vec![
            ("aws.upbound.io".into(), "ProviderConfig".into()),
            ("aws.m.upbound.io".into(), "ProviderConfig".into()),
            ("aws.m.upbound.io".into(), "ClusterProviderConfig".into()),
        ]);
        i.replace_provider_configs("aws.upbound.io", "ProviderConfig", vec![]);
        i.replace_provider_configs("aws.m.upbound.io", "ClusterProviderConfig", vec![]);
        c
    }

    fn bucket(r: Value) -> Case {
        Case::create(mr(json!({"providerConfigRef": r})))
            .kind("s3.aws.m.upbound.io", "Bucket")
            .namespaced("team-a")
    }

    #[test]
    fn a_kind_the_family_does_not_serve_is_denied_naming_the_kinds_it_serves() {
        let v = bucket(json!({"kind": "ProviderConfigs", "name": "default"}))
            .cluster(cluster())
            .check(&ProviderConfigKind);
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0].message,
            "spec.providerConfigRef.kind \"ProviderConfigs\" is not a kind aws.m.upbound.io serves; it serves ClusterProviderConfig and ProviderConfig"
        );
        assert_eq!(
            v[0].fix.as_deref(),
            Some("set spec.providerConfigRef.kind to ClusterProviderConfig (cluster-wide) or ProviderConfig (in namespace \"team-a\")")
        );
        let f = bucket(json!({"kind": "ProviderConfigs", "name": "default"}))
            .cluster(cluster())
            .evaluate();
        assert!(f
            .iter()
            .any(|f| f.rule == "provider-config-kind" && f.action == Action::Deny));
        // provider-config-exists leaves the kind to this rule.
        assert!(f.iter().all(|f| f.rule != "provider-config-exists"));
    }

    #[test]
    fn served_kinds_defaults_and_unknown_families_pass() {
        for r in [
            json!({"kind": "ProviderConfig", "name": "default"}),
            json!({"kind": "ClusterProviderConfig", "name": "default"}),
            // No kind: ClusterProviderConfig, as Crossplane defaults it.
            json!({"name": "default"}),
        ] {
            assert!(
                bucket(r.clone())
                    .cluster(cluster())
                    .check(&ProviderConfigKind)
                    .is_empty(),
                "{r}"
            );
        }
        // Offline without CRDs: nothing is known, nothing is found.
        assert!(
            bucket(json!({"kind": "ProviderConfigs", "name": "default"}))
                .check(&ProviderConfigKind)
                .is_empty()
        );
        // A family whose configs mrguard may not list is not judged.
        let unlisted = Arc::new(Cluster::default());
        unlisted.identities().set_provider_config_kinds(vec![(
            "aws.m.upbound.io".into(),
            "ClusterProviderConfig".into(),
        )]);
        assert!(
            bucket(json!({"kind": "ProviderConfigs", "name": "default"}))
                .cluster(unlisted)
                .check(&ProviderConfigKind)
                .is_empty()
        );
        // A family the cluster serves no provider config kind of.
        assert!(
            bucket(json!({"kind": "ProviderConfigs", "name": "default"}))
                .kind("nop.crossplane.io", "NopResource")
                .cluster(cluster())
                .check(&ProviderConfigKind)
                .is_empty()
        );
    }

    #[test]
    fn both_scopes_side_by_side() {
        // A cluster-scoped MR of the legacy family: ProviderConfig only.
        let legacy = |r: Value| {
            Case::create(mr(json!({"providerConfigRef": r})))
                .cluster(cluster())
                .check(&ProviderConfigKind)
        };
        assert!(legacy(json!({"name": "default"})).is_empty());
        let v = legacy(json!({"kind": "ClusterProviderConfig", "name": "default"}));
        assert_eq!(
            v[0].message,
            "spec.providerConfigRef.kind \"ClusterProviderConfig\" is not a kind aws.upbound.io serves; it serves ProviderConfig"
        );
        assert_eq!(
            v[0].fix.as_deref(),
            Some("set spec.providerConfigRef.kind to ProviderConfig")
        );
        // The same reference on a namespaced MR is served.
        assert!(
            bucket(json!({"kind": "ClusterProviderConfig", "name": "default"}))
                .cluster(cluster())
                .check(&ProviderConfigKind)
                .is_empty()
        );
    }
}
