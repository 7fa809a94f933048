//! An MR's external identity: its parts read from the object, and the
//! digests the index keeps of it (see the module above for what they are).

use std::borrow::Cow;
use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};

use serde_json::Value;

use crate::admission::config::{ExternalNameStrategy, ProviderConfigDefaults, ResourceConfig};
use crate::admission::mr::Mr;

/// The group with its `m` segment removed: `s3.aws.m.upbound.io` becomes
/// `s3.aws.upbound.io`, so legacy and namespaced kinds of one provider meet.
pub fn fold_group(group: &str) -> String {
    let mut parts: Vec<&str> = group.split('.').collect();
    if let Some(i) = parts.iter().skip(1).position(|p| *p == "m") {
        parts.remove(i + 1);
    }
    parts.join(".")
}

/// The provider config an MR uses, with defaults resolved.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProviderConfigRef {
    /// `ProviderConfig` or `ClusterProviderConfig`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its namespace: the MR's for a namespaced `ProviderConfig`, else empty.
    pub namespace: String,
}

impl ProviderConfigRef {
    /// `spec.providerConfigRef` of `obj`, defaults filled in as Crossplane
    /// and mrguard's mutation fill them: the configured default name, and
    /// `ClusterProviderConfig` for a namespaced MR without a kind.
    pub fn of(obj: &Value, namespace: &str, defaults: &ProviderConfigDefaults) -> Self {
        let (kind, name, namespace) = provider_config_parts(obj, namespace, defaults);
        Self {
            kind: kind.into(),
            name: name.into(),
            namespace: namespace.into(),
        }
    }
}

impl fmt::Display for ProviderConfigRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// Which external resource an MR points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The group with `.m.` folded ([`fold_group`]).
    pub group: String,
    /// The kind.
    pub kind: String,
    /// The effective external name.
    pub external_name: String,
    /// `spec.forProvider.region`, when it is a string.
    pub region: Option<String>,
    /// The resolved provider config.
    pub provider_config: ProviderConfigRef,
}

impl Identity {
    /// The identity of `obj`, an MR of `group`/`kind` in `namespace` (empty
    /// for cluster scope). `None` when it has none yet: an
    /// `IdentifierFromProvider` kind without `crossplane.io/external-name`,
    /// or no name at all.
    pub fn of(
        obj: &Value,
        group: &str,
        kind: &str,
        namespace: &str,
        resource: &ResourceConfig,
        defaults: &ProviderConfigDefaults,
    ) -> Option<Self> {
        let (external_name, region) = named(obj, resource)?;
        let region = region.map(String::from);
        Some(Self {
            group: fold_group(group),
            kind: kind.into(),
            external_name: external_name.into_owned(),
            region,
            provider_config: ProviderConfigRef::of(obj, namespace, defaults),
        })
    }

    fn parts(&self) -> Parts<'_> {
        Parts {
            group: &self.group,
            fold: false,
            kind: &self.kind,
            external_name: &self.external_name,
            region: self.region.as_deref(),
            pc_kind: &self.provider_config.kind,
            pc_name: &self.provider_config.name,
            pc_namespace: &self.provider_config.namespace,
        }
    }

    /// What the index keeps of this identity for one MR.
    pub fn claim(&self, deleting: bool) -> Claim {
        self.parts().claim(deleting)
    }
}

/// An identity's parts, borrowed from the object: digests without
/// allocating, for admission's common case (nobody else claims it).
struct Parts<'a> {
    group: &'a str,
    /// Whether `group` still has its `m` segment to drop.
    fold: bool,
    kind: &'a str,
    external_name: &'a str,
    region: Option<&'a str>,
    pc_kind: &'a str,
    pc_name: &'a str,
    pc_namespace: &'a str,
}

impl Parts<'_> {
    /// What the index keeps: the digest without the provider config, and
    /// the same hasher continued over it (one pass over the common parts).
    fn claim(&self, deleting: bool) -> Claim {
        // SipHash with fixed keys: the same digest for the same identity
        // within one process, which is all the index needs. The folded
        // group is hashed segment by segment, so an owned (folded) and a
        // borrowed (unfolded) identity hash alike.
        let mut h = DefaultHasher::new();
        let mut dropped = !self.fold;
        for (i, seg) in self.group.split('.').enumerate() {
            if !dropped && i >= 1 && seg == "m" {
                dropped = true;
                continue;
            }
            h.write(seg.as_bytes());
            h.write_u8(b'.');
        }
        h.write_u8(0xff);
        self.kind.hash(&mut h);
        self.external_name.hash(&mut h);
        self.region.hash(&mut h);
        let loose = h.finish();
        self.pc_kind.hash(&mut h);
        self.pc_name.hash(&mut h);
        self.pc_namespace.hash(&mut h);
        Claim {
            full: h.finish(),
            loose,
            deleting,
        }
    }
}

impl Claim {
    /// The claim of `obj` (see [`Identity::of`]) without building the
    /// identity: no allocation, but for the joined value of `identityFields`.
    pub fn of(
        obj: &Value,
        group: &str,
        kind: &str,
        namespace: &str,
        resource: &ResourceConfig,
        defaults: &ProviderConfigDefaults,
        deleting: bool,
    ) -> Option<Self> {
        let (external_name, region) = named(obj, resource)?;
        let external_name = &*external_name;
        let (pc_kind, pc_name, pc_namespace) = provider_config_parts(obj, namespace, defaults);
        Some(
            Parts {
                group,
                fold: true,
                kind,
                external_name,
                region,
                pc_kind,
                pc_name,
                pc_namespace,
            }
            .claim(deleting),
        )
    }

    /// Whether both claim one identity, provider config included.
    pub fn same_identity(&self, other: &Claim) -> bool {
        self.full == other.full
    }
}

/// `(kind, name, namespace)` of the provider config, defaults resolved
/// ([`ProviderConfigRef::of`]), borrowed.
fn provider_config_parts<'a>(
    obj: &'a Value,
    namespace: &'a str,
    defaults: &'a ProviderConfigDefaults,
) -> (&'a str, &'a str, &'a str) {
    let r = Mr(obj).spec("providerConfigRef");
    let (name, kind) = match r {
        Some(Value::String(s)) => (s.as_str(), None),
        Some(Value::Object(o)) => (
            o.get("name").and_then(Value::as_str).unwrap_or(""),
            o.get("kind")
                .and_then(Value::as_str)
                .filter(|k| !k.is_empty()),
        ),
        _ => ("", None),
    };
    let name = if name.is_empty() {
        defaults.name_for(namespace)
    } else {
        name
    };
    let kind = kind.unwrap_or(if namespace.is_empty() {
        "ProviderConfig"
    } else {
        "ClusterProviderConfig"
    });
    let namespace = if !namespace.is_empty() && kind == "ProviderConfig" {
        namespace
    } else {
        ""
    };
    (kind, name, namespace)
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{} {:?}", self.kind, self.group, self.external_name)?;
        if let Some(r) = &self.region {
            write!(f, " in {r}")?;
        }
        write!(f, " via {}", self.provider_config)
    }
}

/// What the index keeps per MR: digests of its identity with and without
/// the provider config, and whether the MR is being deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub(super) full: u64,
    pub(super) loose: u64,
    pub(super) deleting: bool,
}

/// The external name (the annotation, or the MR's name for a kind named
/// after it) and `spec.forProvider.region` of an MR; `None` when nothing
/// names the external resource yet. The owned identity and the borrowed
/// claim both start here, so they cannot disagree.
fn named<'a>(obj: &'a Value, resource: &ResourceConfig) -> Option<(Cow<'a, str>, Option<&'a str>)> {
    let mr = Mr(obj);
    let external_name = if resource.identity_fields.is_empty() {
        Cow::Borrowed(match (mr.external_name(), resource.external_name) {
            (Some(n), _) => n,
            (None, ExternalNameStrategy::NameAsIdentifier) => mr.name(),
            (None, ExternalNameStrategy::IdentifierFromProvider) => return None,
        })
    } else {
        // The fields' values, joined by '/': an absent or non-string one
        // is empty; none at all is no identity yet.
        let values: Vec<&str> = resource
            .identity_fields
            .iter()
            .map(|f| f.get(obj).and_then(Value::as_str).unwrap_or(""))
            .collect();
        if values.iter().all(|v| v.is_empty()) {
            return None;
        }
        Cow::Owned(values.join("/"))
    };
    if external_name.is_empty() {
        return None;
    }
    let region = mr
        .spec("forProvider")
        .and_then(|f| f.get("region"))
        .and_then(Value::as_str);
    Some((external_name, region))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::config::Config;
    use crate::cluster::identity::testing::{bucket, identity};
    use serde_json::json;

    /// Admission's allocation-free claim is the claim of the identity the
    /// messages name, folded group and provider config defaults included.
    #[test]
    fn the_borrowed_claim_equals_the_owned_one() {
        let c = Config::builtin();
        for (obj, group, kind, ns) in [
            (
                bucket(
                    "data",
                    json!({}),
                    json!({"forProvider": {"region": "eu-west-1"}}),
                ),
                "s3.aws.m.upbound.io",
                "Bucket",
                "team-a",
            ),
            (
                bucket(
                    "data",
                    json!({}),
                    json!({"forProvider": {}, "providerConfigRef": "x"}),
                ),
                "s3.aws.upbound.io",
                "Bucket",
                "",
            ),
            (
                bucket(
                    "n",
                    json!({"crossplane.io/external-name": "vpc-1"}),
                    json!({"forProvider": {}, "providerConfigRef": {"kind": "ProviderConfig", "name": "p"}}),
                ),
                "ec2.aws.m.upbound.io",
                "VPC",
                "team-b",
            ),
            (
                bucket("odd", json!({}), json!({"forProvider": {}})),
                "a.m.m.example.org",
                "Thing",
                "",
            ),
        ] {
            let owned = identity(&obj, group, kind, ns).unwrap().claim(true);
            let borrowed = Claim::of(
                &obj,
                group,
                kind,
                ns,
                c.resource(group, kind),
                &c.provider_config,
                true,
            )
            .unwrap();
            assert_eq!(owned, borrowed, "{group} {kind}");
        }
        let vpc = bucket("n", json!({}), json!({"forProvider": {}}));
        assert!(Claim::of(
            &vpc,
            "ec2.aws.upbound.io",
            "VPC",
            "",
            c.resource("ec2.aws.upbound.io", "VPC"),
            &c.provider_config,
            false
        )
        .is_none());
    }

    #[test]
    fn folds_the_m_segment_only() {
        assert_eq!(fold_group("s3.aws.m.upbound.io"), "s3.aws.upbound.io");
        assert_eq!(fold_group("azure.m.upbound.io"), "azure.upbound.io");
        assert_eq!(fold_group("s3.aws.upbound.io"), "s3.aws.upbound.io");
        assert_eq!(fold_group("m.example.org"), "m.example.org");
        assert_eq!(fold_group("nop.crossplane.io"), "nop.crossplane.io");
    }

    #[test]
    fn name_as_identifier_kinds_default_to_their_name() {
        let b = bucket(
            "data",
            json!({}),
            json!({"forProvider": {"region": "eu-west-1"}}),
        );
        let i = identity(&b, "s3.aws.m.upbound.io", "Bucket", "team-a").unwrap();
        assert_eq!(i.external_name, "data");
        assert_eq!(i.group, "s3.aws.upbound.io");
        assert_eq!(i.region.as_deref(), Some("eu-west-1"));
        assert_eq!(
            i.provider_config,
            ProviderConfigRef {
                kind: "ClusterProviderConfig".into(),
                name: "default".into(),
                namespace: "".into()
            }
        );
        // The annotation wins.
        let b = bucket(
            "data",
            json!({"crossplane.io/external-name": "other"}),
            json!({"forProvider": {}}),
        );
        let i = identity(&b, "s3.aws.upbound.io", "Bucket", "").unwrap();
        assert_eq!(i.external_name, "other");
        assert_eq!(i.region, None);
        assert_eq!(i.provider_config.kind, "ProviderConfig");
    }

    #[test]
    fn provider_assigned_identifiers_need_the_annotation() {
        let v = bucket("net", json!({}), json!({"forProvider": {}}));
        assert!(identity(&v, "ec2.aws.upbound.io", "VPC", "").is_none());
        let v = bucket(
            "net",
            json!({"crossplane.io/external-name": "vpc-1"}),
            json!({"forProvider": {}}),
        );
        let i = identity(&v, "ec2.aws.upbound.io", "VPC", "").unwrap();
        assert_eq!(i.external_name, "vpc-1");
        // An empty annotation counts as none.
        let v = bucket(
            "net",
            json!({"crossplane.io/external-name": ""}),
            json!({"forProvider": {}}),
        );
        assert!(identity(&v, "ec2.aws.upbound.io", "VPC", "").is_none());
    }

    #[test]
    fn a_namespaced_provider_config_lives_in_the_mr_namespace() {
        let b = bucket(
            "data",
            json!({}),
            json!({"forProvider": {}, "providerConfigRef": {"kind": "ProviderConfig", "name": "pc"}}),
        );
        let i = identity(&b, "s3.aws.m.upbound.io", "Bucket", "team-a").unwrap();
        assert_eq!(i.provider_config.namespace, "team-a");
        assert_eq!(
            i.to_string(),
            "Bucket.s3.aws.upbound.io \"data\" via ProviderConfig team-a/pc"
        );
        let j = identity(&b, "s3.aws.m.upbound.io", "Bucket", "team-b").unwrap();
        assert_ne!(i.claim(false).full, j.claim(false).full);
        assert_eq!(i.claim(false).loose, j.claim(false).loose);
    }

    /// provider-kubernetes' Objects name their external resource in the
    /// manifest (the built-in `identityFields`): two Objects of any name,
    /// either scope, that target one ConfigMap claim one identity.
    #[test]
    fn identity_fields_name_the_target_whatever_the_mrs_name() {
        let object = |name: &str, cm: &str| {
            json!({"metadata": {"name": name}, "spec": {
                "forProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": cm, "namespace": "apps"}}},
                "providerConfigRef": {"kind": "ClusterProviderConfig", "name": "default"}}})
        };
        let c = Config::builtin();
        let of = |obj: &Value, group: &str, ns: &str| {
            Claim::of(
                obj,
                group,
                "Object",
                ns,
                c.resource(group, "Object"),
                &c.provider_config,
                false,
            )
            .unwrap()
        };
        let a = of(
            &object("first", "settings"),
            "kubernetes.m.crossplane.io",
            "apps",
        );
        let b = of(
            &object("second", "settings"),
            "kubernetes.m.crossplane.io",
            "apps",
        );
        assert!(a.same_identity(&b));
        let other = of(
            &object("first", "other"),
            "kubernetes.m.crossplane.io",
            "apps",
        );
        assert!(!a.same_identity(&other));
        let i = Identity::of(
            &object("first", "settings"),
            "kubernetes.m.crossplane.io",
            "Object",
            "apps",
            c.resource("kubernetes.m.crossplane.io", "Object"),
            &c.provider_config,
        )
        .unwrap();
        assert_eq!(i.external_name, "v1/ConfigMap/apps/settings");
        assert_eq!(
            i.claim(false).full,
            a.full,
            "the owned and borrowed claims agree"
        );
        // No target yet: no identity.
        let none = json!({"metadata": {"name": "x"}, "spec": {"forProvider": {}}});
        assert!(Claim::of(
            &none,
            "kubernetes.crossplane.io",
            "Object",
            "",
            c.resource("kubernetes.crossplane.io", "Object"),
            &c.provider_config,
            false
        )
        .is_none());
    }
}
