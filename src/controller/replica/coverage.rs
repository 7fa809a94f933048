//! Which kinds are MRs: CRDs whose `spec.names.categories` include
//! `managed`. Every replica derives them from the shared CRD store (`crds`)
//! for its identity watches; the leader publishes the set
//! (`leader::coverage`), from which both webhook configurations' `rules`
//! are computed.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::RuleWithOperations;
use kube::core::ApiResource;

pub(crate) use super::crds::{CrdSummary, CRD_PAGE_SIZE, MANAGED_CATEGORY};

pub(crate) const MUTATE_OPERATIONS: &[&str] = &["CREATE", "UPDATE"];
pub(crate) const VALIDATE_OPERATIONS: &[&str] = &["CREATE", "UPDATE", "DELETE"];
/// One MR kind.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MrKind {
    /// The API group.
    pub group: String,
    /// The kind, e.g. `Bucket`.
    pub kind: String,
    /// The resource name, e.g. `buckets`.
    pub plural: String,
    /// Served versions, sorted.
    pub versions: Vec<String>,
    /// The version objects are read in: the storage version when served.
    pub read_version: String,
    /// Whether objects of the kind live in namespaces (Crossplane v2).
    pub namespaced: bool,
}

impl MrKind {
    /// The kind, when the CRD is an MR CRD with a served version.
    pub(crate) fn from_crd(crd: &CrdSummary) -> Option<Self> {
        let s = &crd.spec;
        if !s.names.categories.iter().any(|c| c == MANAGED_CATEGORY)
            || s.group.is_empty()
            || s.names.plural.is_empty()
        {
            return None;
        }
        let mut versions: Vec<String> = s
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.clone())
            .collect();
        let read_version = s
            .versions
            .iter()
            .find(|v| v.served && v.storage)
            .or_else(|| s.versions.iter().find(|v| v.served))?
            .name
            .clone();
        versions.sort();
        versions.dedup();
        Some(Self {
            group: s.group.clone(),
            kind: s.names.kind.clone(),
            plural: s.names.plural.clone(),
            versions,
            read_version,
            namespaced: s.scope == "Namespaced",
        })
    }

    pub(crate) fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.clone(),
            version: self.read_version.clone(),
            api_version: format!("{}/{}", self.group, self.read_version),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }

    /// `plural.group`, the CRD's name.
    pub(crate) fn key(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }
}

/// The MR kinds, keyed by CRD name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Coverage {
    kinds: BTreeMap<String, MrKind>,
}

impl Coverage {
    pub(crate) fn from_crds<'a>(crds: impl IntoIterator<Item = &'a CrdSummary>) -> Self {
        let mut c = Self::default();
        for crd in crds {
            c.upsert(crd);
        }
        c
    }

    /// Adds, changes or (when it is no longer an MR CRD) removes one CRD.
    pub(crate) fn upsert(&mut self, crd: &CrdSummary) {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match MrKind::from_crd(crd) {
            Some(k) => {
                self.kinds.insert(name, k);
            }
            None => {
                self.kinds.remove(&name);
            }
        }
    }

    pub(crate) fn kinds(&self) -> impl Iterator<Item = &MrKind> {
        self.kinds.values()
    }

    pub(crate) fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Webhook rules covering exactly these kinds: one rule per group and
    /// version set, listing that group's plurals. No wildcard anywhere, and
    /// no subresources.
    pub(crate) fn rules(&self, operations: &[&str]) -> Vec<RuleWithOperations> {
        let mut by_group: BTreeMap<(&str, &[String]), Vec<&str>> = BTreeMap::new();
        for k in self.kinds.values() {
            by_group
                .entry((k.group.as_str(), k.versions.as_slice()))
                .or_default()
                .push(k.plural.as_str());
        }
        by_group
            .into_iter()
            .map(|((group, versions), mut plurals)| {
                plurals.sort_unstable();
                plurals.dedup();
                RuleWithOperations {
                    api_groups: Some(vec![group.to_string()]),
                    api_versions: Some(versions.to_vec()),
                    operations: Some(operations.iter().map(|o| o.to_string()).collect()),
                    resources: Some(plurals.into_iter().map(String::from).collect()),
                    scope: Some("*".into()),
                }
            })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::Value;

    /// The fixture CRDs, parsed as the API server would return them.
    pub(crate) fn fixture_crds() -> Vec<Value> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/crds");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files
            .iter()
            .map(|p| serde_saphyr::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
            .collect()
    }

    /// `crd` as the API server has it once it serves the kind.
    pub(crate) fn established(mut crd: Value) -> Value {
        crd["status"] = serde_json::json!({"conditions": [
            {"type": "NamesAccepted", "status": "True"},
            {"type": "Established", "status": "True"}]});
        crd
    }

    pub(crate) fn summaries(crds: &[Value]) -> Vec<CrdSummary> {
        crds.iter()
            .map(|v| serde_json::from_value(v.clone()).unwrap())
            .collect()
    }

    #[test]
    fn fixture_crds_make_exact_rules() {
        let crds = summaries(&fixture_crds());
        let c = Coverage::from_crds(&crds);
        assert_eq!(c.len(), 7);
        let rules = c.rules(VALIDATE_OPERATIONS);
        let flat: Vec<(String, Vec<String>, Vec<String>)> = rules
            .iter()
            .map(|r| {
                (
                    r.api_groups.clone().unwrap().join(","),
                    r.api_versions.clone().unwrap(),
                    r.resources.clone().unwrap(),
                )
            })
            .collect();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            flat,
            vec![
                (
                    "account.aws.m.upbound.io".into(),
                    s(&["v1beta1"]),
                    s(&["alternatecontacts"])
                ),
                (
                    "account.aws.upbound.io".into(),
                    s(&["v1beta1"]),
                    s(&["alternatecontacts"])
                ),
                ("ec2.aws.m.upbound.io".into(), s(&["v1beta1"]), s(&["vpcs"])),
                (
                    "ec2.aws.upbound.io".into(),
                    s(&["v1beta1"]),
                    s(&["subnets", "vpcs"])
                ),
                (
                    "nop.crossplane.io".into(),
                    s(&["v1alpha1"]),
                    s(&["nopresources"])
                ),
                (
                    "s3.aws.upbound.io".into(),
                    s(&["v1beta1", "v1beta2"]),
                    s(&["buckets"])
                ),
            ]
        );
        for r in &rules {
            assert_eq!(r.operations.as_deref().unwrap(), s(VALIDATE_OPERATIONS));
            let all: Vec<&String> = r
                .api_groups
                .iter()
                .chain(r.api_versions.iter())
                .chain(r.resources.iter())
                .flatten()
                .collect();
            assert!(
                all.iter().all(|x| !x.contains('*') && !x.contains('/')),
                "{all:?}"
            );
        }
        let m = c.rules(MUTATE_OPERATIONS);
        assert_eq!(
            m[0].operations.as_deref().unwrap(),
            s(&["CREATE", "UPDATE"])
        );
        // Objects are read in the storage version.
        let bucket = c.kinds().find(|k| k.kind == "Bucket").unwrap();
        assert_eq!(bucket.read_version, "v1beta2");
        assert!(!bucket.namespaced);
        assert!(
            c.kinds()
                .find(|k| k.group == "ec2.aws.m.upbound.io")
                .unwrap()
                .namespaced
        );
    }

    #[test]
    fn only_managed_served_crds_count() {
        let mut crds = fixture_crds();
        // A ProviderConfig-like CRD without the category.
        crds[0]["spec"]["names"]["categories"] = serde_json::json!(["crossplane"]);
        // A CRD whose versions are all unserved.
        crds[1]["spec"]["versions"][0]["served"] = Value::Bool(false);
        let c = Coverage::from_crds(&summaries(&crds));
        assert_eq!(c.len(), 5);
        // A CRD that loses the category on update leaves the set.
        let mut c = Coverage::from_crds(&summaries(&fixture_crds()));
        let mut vpc = summaries(&fixture_crds())
            .into_iter()
            .find(|c| c.metadata.name.as_deref() == Some("vpcs.ec2.aws.upbound.io"))
            .unwrap();
        vpc.spec.names.categories.clear();
        c.upsert(&vpc);
        assert_eq!(c.len(), 6);
        assert!(c.kinds().all(|k| k.key() != "vpcs.ec2.aws.upbound.io"));
    }

    #[test]
    fn no_kinds_no_rules() {
        assert!(Coverage::default().rules(MUTATE_OPERATIONS).is_empty());
    }
}
