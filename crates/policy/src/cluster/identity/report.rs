//! What `explain` and `check --live` tell of one MR's external identity:
//! the identity itself, and every other live MR that claims it, with the
//! same provider config (one external resource for certain) or another
//! one (the near match `external-identity` warns about).
//!
//! Pure: the caller lists the live MRs of the kinds that can collide (the
//! folded group's legacy and `.m.` kinds) and records them with
//! [`record`] in an [`IdentityIndex`], the same index admission asks, so
//! the claimants shown are those admission would name.

use serde::Serialize;
use serde_json::Value;

use super::{Claim, Identity, IdentityIndex, IndexedMr, MrKey};
use crate::admission::config::Config;
use crate::admission::mr::{DeletionOutcome, Mr};

/// The index entry of one listed MR of `group`/`kind`, as the runtime's
/// watches compute it, without a digest. `None` without a name.
pub fn entry_of(obj: &Value, group: &str, kind: &str, config: &Config) -> Option<IndexedMr> {
    let m = Mr(obj);
    let name = m.name();
    if name.is_empty() {
        return None;
    }
    let namespace = namespace_of(obj);
    let deleting = obj.pointer("/metadata/deletionTimestamp").is_some();
    let claim = Claim::of(
        obj,
        group,
        kind,
        namespace,
        config.resource(group, kind),
        &config.provider_config,
        deleting,
    );
    Some(IndexedMr::new(
        MrKey::new(group, kind, namespace, name),
        claim,
        m.deletion_outcome() == DeletionOutcome::Delete,
    ))
}

/// Records a listed MR of `group`/`kind` in `index` ([`entry_of`]).
pub fn record(index: &IdentityIndex, obj: &Value, group: &str, kind: &str, config: &Config) {
    if let Some(mr) = entry_of(obj, group, kind, config) {
        index.upsert(mr);
    }
}

fn namespace_of(obj: &Value) -> &str {
    obj.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `(group, kind)` of an object, from `apiVersion` and `kind`.
fn group_kind(obj: &Value) -> (&str, &str) {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    (group, obj.get("kind").and_then(Value::as_str).unwrap_or(""))
}

/// One MR's external identity and who else claims it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IdentityReport {
    /// The identity in words, e.g. `Bucket.s3.aws.upbound.io "data" in
    /// eu-west-1 via ClusterProviderConfig default`; `None` when the MR
    /// has none yet.
    pub identity: Option<String>,
    /// Why it has none, when it has none.
    pub none_because: Option<String>,
    /// The group with `.m.` folded: legacy and namespaced kinds meet there.
    pub folded_group: String,
    /// The effective external name.
    pub external_name: Option<String>,
    /// `spec.forProvider.region`, when set.
    pub region: Option<String>,
    /// The resolved provider config, e.g. `ClusterProviderConfig default`.
    pub provider_config: Option<String>,
    /// Whether the live MRs were looked at; without them (offline, or the
    /// listing failed) the claimants are unknown, not none.
    pub looked_up: bool,
    /// The other live MRs that claim it, the same provider config first.
    pub claimants: Vec<ClaimantReport>,
}

/// Another live MR that claims the identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimantReport {
    /// `Kind.group namespace/name` (or `Kind.group name`).
    pub object: String,
    /// Its API group, as served (not folded).
    pub group: String,
    /// Its kind.
    pub kind: String,
    /// Its namespace; empty for cluster scope.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// With the same provider config: certainly the same external
    /// resource (`external-identity` denies). Otherwise a near match,
    /// the same only if both configs reach one account (it warns).
    pub same_provider_config: bool,
    /// It is being deleted (it keeps its claim until it is gone).
    pub deleting: bool,
}

impl IdentityReport {
    /// The identity of `obj` (an MR; its group, kind and namespace read
    /// from it) and the other MRs `index` knows to claim it. `looked_up`
    /// says whether `index` holds the live MRs of the colliding kinds.
    pub fn of(obj: &Value, config: &Config, index: &IdentityIndex, looked_up: bool) -> Self {
        let (group, kind) = group_kind(obj);
        let namespace = namespace_of(obj);
        let resource = config.resource(group, kind);
        let identity = Identity::of(
            obj,
            group,
            kind,
            namespace,
            resource,
            &config.provider_config,
        );
        let Some(identity) = identity else {
            let because = if Mr(obj).name().is_empty() {
                "the MR has no name".to_string()
            } else {
                format!(
                    "no {} annotation, and the provider assigns {kind}'s identifier (IdentifierFromProvider): it has one once created",
                    crate::admission::mr::EXTERNAL_NAME
                )
            };
            return Self {
                identity: None,
                none_because: Some(because),
                folded_group: super::fold_group(group),
                external_name: None,
                region: None,
                provider_config: None,
                looked_up,
                claimants: Vec::new(),
            };
        };
        let me = MrKey::new(group, kind, namespace, Mr(obj).name());
        let claimants = index
            .claimants(&identity.claim(false), &me)
            .into_iter()
            .map(|c| ClaimantReport {
                object: c.key.to_string(),
                group: c.key.group().into(),
                kind: c.key.kind().into(),
                namespace: c.key.namespace().into(),
                name: c.key.name().into(),
                same_provider_config: c.same_provider_config,
                deleting: c.deleting,
            })
            .collect();
        Self {
            identity: Some(identity.to_string()),
            none_because: None,
            folded_group: identity.group.clone(),
            external_name: Some(identity.external_name.clone()),
            region: identity.region.clone(),
            provider_config: Some(identity.provider_config.to_string()),
            looked_up,
            claimants,
        }
    }

    /// One line per fact, for people: the identity, then each claimant
    /// (or that there is none, or that nobody looked).
    pub fn lines(&self) -> Vec<String> {
        let Some(identity) = &self.identity else {
            return vec![format!(
                "identity: none yet ({})",
                self.none_because.as_deref().unwrap_or("")
            )];
        };
        let mut out = vec![format!("identity: {identity}")];
        if !self.looked_up {
            out.push("claimed by: unknown (the live MRs were not listed)".into());
        } else if self.claimants.is_empty() {
            out.push("claimed by: no other live MR".into());
        }
        for c in &self.claimants {
            let how = if c.same_provider_config {
                "same provider config: the same external resource"
            } else {
                "another provider config: the same resource if both reach one account"
            };
            let deleting = if c.deleting { ", being deleted" } else { "" };
            out.push(format!("claimed by: {} ({how}{deleting})", c.object));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bucket(api_version: &str, ns: &str, name: &str, spec: Value) -> Value {
        let mut b = json!({"apiVersion": api_version, "kind": "Bucket",
            "metadata": {"name": name}, "spec": spec});
        if !ns.is_empty() {
            b["metadata"]["namespace"] = json!(ns);
        }
        b
    }

    fn listed(objs: &[&Value]) -> IdentityIndex {
        let c = Config::builtin();
        let index = IdentityIndex::default();
        for o in objs {
            let (g, k) = group_kind(o);
            record(&index, o, g, k, &c);
        }
        index
    }

    /// Two namespaces' Buckets named alike, and a legacy Bucket with that
    /// external name, all claim one bucket; another provider config is a
    /// near match, named after the certain ones; the MR itself is left out.
    #[test]
    fn names_every_other_claimant_certain_ones_first() {
        let spec = json!({"forProvider": {"region": "eu-west-1"}});
        let a = bucket(
            "s3.aws.m.upbound.io/v1beta1",
            "team-a",
            "data",
            spec.clone(),
        );
        let b = bucket(
            "s3.aws.m.upbound.io/v1beta1",
            "team-b",
            "data",
            spec.clone(),
        );
        let mut legacy = bucket(
            "s3.aws.upbound.io/v1beta1",
            "",
            "old",
            json!({"forProvider": {"region": "eu-west-1"}, "providerConfigRef": {"name": "default"}}),
        );
        legacy["metadata"]["annotations"] = json!({"crossplane.io/external-name": "data"});
        let near = bucket(
            "s3.aws.m.upbound.io/v1beta1",
            "team-c",
            "data",
            json!({"forProvider": {"region": "eu-west-1"},
                   "providerConfigRef": {"kind": "ProviderConfig", "name": "own"}}),
        );
        let other = bucket("s3.aws.m.upbound.io/v1beta1", "team-a", "logs", spec);
        let mut deleting = a.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let index = listed(&[&deleting, &b, &legacy, &near, &other]);

        let r = IdentityReport::of(&b, &Config::builtin(), &index, true);
        assert_eq!(
            r.identity.as_deref(),
            Some(
                "Bucket.s3.aws.upbound.io \"data\" in eu-west-1 via ClusterProviderConfig default"
            )
        );
        let named: Vec<(&str, bool, bool)> = r
            .claimants
            .iter()
            .map(|c| (c.object.as_str(), c.same_provider_config, c.deleting))
            .collect();
        // The legacy cluster-scoped Bucket resolves `default` to a
        // ProviderConfig, not the ClusterProviderConfig: a near match.
        assert_eq!(
            named,
            [
                ("Bucket.s3.aws.m.upbound.io team-a/data", true, true),
                ("Bucket.s3.aws.m.upbound.io team-c/data", false, false),
                ("Bucket.s3.aws.upbound.io old", false, false),
            ]
        );
        assert_eq!(r.claimants[0].namespace, "team-a");
        assert_eq!(r.claimants[0].name, "data");
        let lines = r.lines();
        assert_eq!(
            lines[1],
            "claimed by: Bucket.s3.aws.m.upbound.io team-a/data (same provider config: the same external resource, being deleted)"
        );
        assert!(lines[2].contains("another provider config"), "{lines:?}");

        // Alone in its identity: looked up, nobody else.
        let r = IdentityReport::of(&other, &Config::builtin(), &index, true);
        assert!(r.claimants.is_empty());
        assert_eq!(r.lines()[1], "claimed by: no other live MR");
        // Not looked up: unknown, not none.
        let r = IdentityReport::of(&other, &Config::builtin(), &IdentityIndex::default(), false);
        assert!(r.lines()[1].contains("unknown"), "{:?}", r.lines());
    }

    /// A kind whose identifier the provider assigns has no identity before
    /// the external-name annotation, and the report says why.
    #[test]
    fn no_identity_before_the_provider_assigns_one() {
        let vpc = json!({"apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC",
            "metadata": {"name": "net"}, "spec": {"forProvider": {"region": "eu-west-1"}}});
        let r = IdentityReport::of(&vpc, &Config::builtin(), &IdentityIndex::default(), true);
        assert_eq!(r.identity, None);
        assert_eq!(r.folded_group, "ec2.aws.upbound.io");
        assert!(r.lines()[0].starts_with("identity: none yet (no crossplane.io/external-name"));
        let v = serde_json::to_value(&r).unwrap();
        assert!(v["identity"].is_null());
        assert_eq!(v["lookedUp"], true);
    }

    /// The entries are those the runtime's watches record: a listed MR
    /// that deletes its resource counts for the teardown guard too.
    #[test]
    fn entries_match_the_watches() {
        let b = bucket(
            "s3.aws.m.upbound.io/v1beta1",
            "team-a",
            "data",
            json!({"forProvider": {}}),
        );
        let mr = entry_of(&b, "s3.aws.m.upbound.io", "Bucket", &Config::builtin()).unwrap();
        assert_eq!(mr.key.to_string(), "Bucket.s3.aws.m.upbound.io team-a/data");
        assert!(mr.claim.is_some());
        assert!(mr.deletes);
        assert_eq!(mr.judged, 0);
        assert!(entry_of(&json!({"metadata": {}}), "g", "K", &Config::builtin()).is_none());
    }
}
