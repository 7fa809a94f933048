use super::{Rule, RuleContext, CU};
use crate::admission::model::{Action, Operation, Violation};
use crate::cluster::identity::{Claim, Identity, MrKey};

/// Two live MRs with one external identity manage, and delete, one
/// external resource. Judged against the index every replica keeps; an
/// empty index (offline `check`) finds nothing.
pub(super) struct ExternalIdentity;

impl ExternalIdentity {
    fn identity(ctx: &RuleContext<'_>, obj: &serde_json::Value) -> Option<Identity> {
        Identity::of(
            obj,
            &ctx.request.kind.group,
            ctx.kind,
            ctx.namespace,
            ctx.resource,
            &ctx.config.provider_config,
        )
    }
}

impl Rule for ExternalIdentity {
    fn name(&self) -> &'static str {
        "external-identity"
    }
    fn operations(&self) -> &'static [Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Deny
    }
    fn summary(&self) -> &'static str {
        "A CREATE, or a change of external name, region or provider config, claims the external resource another live MR already manages (same folded group, kind, external name, region and provider config); with another provider config only, a warning"
    }
    fn fix(&self) -> &'static str {
        "Give the MR another `crossplane.io/external-name` (or `metadata.name` for kinds named after the MR), or delete the other MR first (orphaned by a `managementPolicies` set without `Delete`, to keep the resource)"
    }
    /// The provider records the external name its cloud assigned; that
    /// write must never be refused.
    fn honours_exemptions(&self) -> bool {
        true
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let index = ctx.cluster.identities();
        if index.is_empty() {
            return vec![];
        }
        let claim = |obj| {
            Claim::of(
                obj,
                &ctx.request.kind.group,
                ctx.kind,
                ctx.namespace,
                ctx.resource,
                &ctx.config.provider_config,
                false,
            )
        };
        let Some(mine) = claim(ctx.object) else {
            return vec![];
        };
        if ctx.operation == Operation::Update
            && ctx
                .old_object
                .and_then(claim)
                .is_some_and(|old| old.same_identity(&mine))
        {
            return vec![];
        }
        // The common case ends here, having allocated nothing.
        if !index.is_claimed(&mine) {
            return vec![];
        }
        let Some(identity) = Self::identity(ctx, ctx.object) else {
            return vec![];
        };
        let name = Some(ctx.mr().name())
            .filter(|n| !n.is_empty())
            .unwrap_or(ctx.name);
        let me = MrKey::new(&ctx.request.kind.group, ctx.kind, ctx.namespace, name);
        let others = index.claimants(&mine, &me);
        let Some(first) = others.first() else {
            return vec![];
        };
        let more = match others.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        let deleting = if first.deleting {
            " (being deleted; it keeps its claim until it is gone)"
        } else {
            ""
        };
        let fix = format!(
            "give this MR another crossplane.io/external-name, or delete {} first (managementPolicies without Delete keep the resource)",
            first.key
        );
        if first.same_provider_config {
            vec![Violation::new(format!(
                "{identity} is already claimed by {}{deleting}{more}; two MRs would manage, and delete, one external resource",
                first.key
            ))
            .fix(fix)]
        } else {
            vec![Violation::new(format!(
                "{} \"{}\" is also claimed by {} with another provider config{more}; if both reach one account, they share it",
                ctx.kind, identity.external_name, first.key
            ))
            .fix(fix)
            .warn_only()]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::config::Config;
    use crate::admission::rules::testing::*;
    use crate::cluster::identity::IndexedMr;
    use crate::cluster::Cluster;
    use serde_json::{json, Value};
    use std::sync::Arc;

    fn bucket(name: &str, extra: Value) -> Value {
        let mut b =
            json!({"metadata": {"name": name}, "spec": {"forProvider": {"region": "eu-west-1"}}});
        if let Some(a) = extra.get("annotations") {
            b["metadata"]["annotations"] = a.clone();
        }
        if let Some(r) = extra.get("providerConfigRef") {
            b["spec"]["providerConfigRef"] = r.clone();
        }
        b
    }

    /// A cluster where team-a's Bucket `data` (namespaced) exists.
    fn cluster_with(
        group: &str,
        kind: &str,
        ns: &str,
        obj: &Value,
        deleting: bool,
    ) -> Arc<Cluster> {
        let c = Arc::new(Cluster::default());
        let cfg = Config::builtin();
        let id = Identity::of(
            obj,
            group,
            kind,
            ns,
            cfg.resource(group, kind),
            &cfg.provider_config,
        )
        .unwrap();
        c.identities().upsert(IndexedMr::new(
            MrKey::new(group, kind, ns, crate::admission::mr::Mr(obj).name()),
            Some(id.claim(deleting)),
            true,
        ));
        c
    }

    const NS_BUCKET: &str = "s3.aws.m.upbound.io";

    #[test]
    fn a_second_bucket_named_alike_in_another_namespace_is_denied() {
        let data = bucket("data", json!({}));
        let c = cluster_with(NS_BUCKET, "Bucket", "team-a", &data, false);
        let v = Case::create(data.clone())
            .kind(NS_BUCKET, "Bucket")
            .namespaced("team-b")
            .cluster(c.clone())
            .check(&ExternalIdentity);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(!v[0].warn_only);
        assert!(
            v[0].message
                .contains("already claimed by Bucket.s3.aws.m.upbound.io team-a/data"),
            "{}",
            v[0].message
        );
        assert!(v[0].fix.as_deref().unwrap().contains("team-a/data"));
        // Another name is another bucket.
        let v = Case::create(bucket("logs", json!({})))
            .kind(NS_BUCKET, "Bucket")
            .namespaced("team-b")
            .cluster(c.clone())
            .check(&ExternalIdentity);
        assert!(v.is_empty());
        // Another region is another bucket.
        let mut other_region = data.clone();
        other_region["spec"]["forProvider"]["region"] = json!("us-east-1");
        let v = Case::create(other_region)
            .kind(NS_BUCKET, "Bucket")
            .namespaced("team-b")
            .cluster(c)
            .check(&ExternalIdentity);
        assert!(v.is_empty());
    }

    #[test]
    fn only_the_provider_config_differing_is_a_warning() {
        let pc = json!({"providerConfigRef": {"kind": "ProviderConfig", "name": "default"}});
        let data = bucket("data", pc.clone());
        let c = cluster_with(NS_BUCKET, "Bucket", "team-a", &data, false);
        let v = Case::create(data)
            .kind(NS_BUCKET, "Bucket")
            .namespaced("team-b")
            .cluster(c.clone())
            .check(&ExternalIdentity);
        assert_eq!(v.len(), 1);
        assert!(v[0].warn_only);
        assert!(v[0].message.contains("with another provider config"));
        // A legacy Bucket meets the namespaced one.
        let v = Case::create(bucket("data", json!({})))
            .cluster(c)
            .check(&ExternalIdentity);
        assert_eq!(v.len(), 1);
        assert!(v[0].warn_only);
    }

    #[test]
    fn a_vpc_claiming_another_s_external_name_is_denied_even_while_it_is_deleted() {
        let ext = json!({"annotations": {"crossplane.io/external-name": "vpc-1"}});
        let first = bucket("first", ext.clone());
        let c = cluster_with("ec2.aws.upbound.io", "VPC", "", &first, true);
        let v = Case::create(bucket("second", ext.clone()))
            .kind("ec2.aws.upbound.io", "VPC")
            .cluster(c.clone())
            .check(&ExternalIdentity);
        assert_eq!(v.len(), 1);
        assert!(
            v[0].message
                .contains("VPC.ec2.aws.upbound.io first (being deleted"),
            "{}",
            v[0].message
        );
        // Changing the external name to another's on UPDATE is denied too.
        let old = bucket(
            "second",
            json!({"annotations": {"crossplane.io/external-name": "vpc-2"}}),
        );
        let v = Case::update(old, bucket("second", ext.clone()))
            .kind("ec2.aws.upbound.io", "VPC")
            .cluster(c.clone())
            .check(&ExternalIdentity);
        assert_eq!(v.len(), 1);
        // An UPDATE that keeps the identity is never judged; nor is the MR
        // its own claimant.
        let v = Case::update(first.clone(), first.clone())
            .kind("ec2.aws.upbound.io", "VPC")
            .cluster(c.clone())
            .check(&ExternalIdentity);
        assert!(v.is_empty());
        let v = Case::create(first)
            .kind("ec2.aws.upbound.io", "VPC")
            .cluster(c.clone())
            .check(&ExternalIdentity);
        assert!(v.is_empty());
        // Once the first is gone, the claim is free.
        c.identities()
            .remove(&MrKey::new("ec2.aws.upbound.io", "VPC", "", "first"));
        let v = Case::create(bucket("second", ext))
            .kind("ec2.aws.upbound.io", "VPC")
            .cluster(c)
            .check(&ExternalIdentity);
        assert!(v.is_empty());
    }

    #[test]
    fn an_empty_index_and_exempt_providers_find_nothing() {
        let data = bucket("data", json!({}));
        assert!(Case::create(data.clone())
            .kind(NS_BUCKET, "Bucket")
            .namespaced("team-b")
            .check(&ExternalIdentity)
            .is_empty());
        let c = cluster_with(NS_BUCKET, "Bucket", "team-a", &data, false);
        // The provider serving the kind, as the replicas derive it.
        let provider = "system:serviceaccount:crossplane-system:provider-aws-s3";
        let mut a = crate::cluster::providers::ProviderAccounts::new();
        a.entry(NS_BUCKET.into())
            .or_default()
            .entry("Bucket".into())
            .or_default()
            .insert(provider.into());
        c.providers().replace(a);
        let f = Case::create(data)
            .kind(NS_BUCKET, "Bucket")
            .namespaced("team-b")
            .user(provider)
            .cluster(c)
            .evaluate();
        assert!(f.iter().all(|f| f.rule != "external-identity"), "{f:?}");
    }
}
