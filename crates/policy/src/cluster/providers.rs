//! Which provider serves which MR kind, and the service account it runs as
//! (docs/rules.md, exempt users).
//!
//! Crossplane's package manager owns each MR CRD: the CRD's controller
//! reference (`controller: true`) names the active `ProviderRevision`
//! (`pkg.crossplane.io`). In Crossplane v2 the CRD is made from a
//! ManagedResourceDefinition and carries a copy of the MRD's controller
//! reference, so it still names the revision. The provider's pods run in
//! Crossplane's namespace as the ServiceAccount named after the revision,
//! unless the DeploymentRuntimeConfig named by the revision's
//! `spec.runtimeConfigRef` (default `default`) sets
//! `spec.serviceAccountTemplate.metadata.name`.
//!
//! [`derive`] is the pure derivation; [`ProviderIndex`] holds its result for
//! admission, replaced whole by the runtime's watches.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// The API group of Crossplane's package manager.
pub const PKG_GROUP: &str = "pkg.crossplane.io";
/// The runtime config a revision uses when it names none.
pub const DEFAULT_RUNTIME_CONFIG: &str = "default";

/// An MR CRD, as much as the derivation reads.
#[derive(Debug, Clone, PartialEq)]
pub struct MrCrd {
    /// `spec.group`.
    pub group: String,
    /// `spec.names.kind`.
    pub kind: String,
    /// `metadata.ownerReferences`.
    pub owners: Vec<OwnerReference>,
}

/// A ProviderRevision, as much as the derivation reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    /// `metadata.name`, which is also the provider's ServiceAccount name by
    /// default.
    pub name: String,
    /// `spec.runtimeConfigRef.name`; [`DEFAULT_RUNTIME_CONFIG`] when unset.
    pub runtime_config: Option<String>,
    /// The Provider package the revision belongs to: its controller
    /// reference to a `Provider`, else its `pkg.crossplane.io/package` label.
    pub provider: Option<String>,
}

/// A DeploymentRuntimeConfig, as much as the derivation reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// `metadata.name`.
    pub name: String,
    /// `spec.serviceAccountTemplate.metadata.name`, when set and non-empty.
    pub service_account: Option<String>,
}

impl Revision {
    /// Reads a ProviderRevision object (any representation with
    /// `metadata.name` and `spec.runtimeConfigRef.name`).
    pub fn from_object(obj: &serde_json::Value) -> Option<Self> {
        let name = non_empty(obj.pointer("/metadata/name"))?;
        let owner = obj
            .pointer("/metadata/ownerReferences")
            .and_then(|o| o.as_array())
            .into_iter()
            .flatten()
            .find(|o| {
                o.get("controller").and_then(|c| c.as_bool()) == Some(true)
                    && o.get("kind").and_then(|k| k.as_str()) == Some("Provider")
                    && o.get("apiVersion")
                        .and_then(|a| a.as_str())
                        .and_then(|a| a.split('/').next())
                        == Some(PKG_GROUP)
            })
            .and_then(|o| non_empty(o.get("name")));
        Some(Self {
            name,
            runtime_config: non_empty(obj.pointer("/spec/runtimeConfigRef/name")),
            provider: owner
                .or_else(|| non_empty(obj.pointer("/metadata/labels/pkg.crossplane.io~1package"))),
        })
    }
}

impl RuntimeConfig {
    /// Reads a DeploymentRuntimeConfig object.
    pub fn from_object(obj: &serde_json::Value) -> Option<Self> {
        let name = non_empty(obj.pointer("/metadata/name"))?;
        Some(Self {
            name,
            service_account: non_empty(obj.pointer("/spec/serviceAccountTemplate/metadata/name")),
        })
    }
}

fn non_empty(v: Option<&serde_json::Value>) -> Option<String> {
    v.and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The name of the ProviderRevision controlling `crd`: its owner reference
/// with `controller: true`, kind `ProviderRevision` in [`PKG_GROUP`].
/// Any other controller (or none) means no provider is known.
pub fn controlling_revision(crd: &MrCrd) -> Option<&str> {
    crd.owners
        .iter()
        .find(|o| o.controller == Some(true))
        .filter(|o| {
            o.kind == "ProviderRevision"
                && o.api_version.split('/').next() == Some(PKG_GROUP)
                && !o.name.is_empty()
        })
        .map(|o| o.name.as_str())
}

/// The ServiceAccount name a revision's pods run as.
pub fn service_account<'a>(
    revision: &'a Revision,
    runtime_configs: &'a BTreeMap<String, RuntimeConfig>,
) -> &'a str {
    let config = revision
        .runtime_config
        .as_deref()
        .unwrap_or(DEFAULT_RUNTIME_CONFIG);
    runtime_configs
        .get(config)
        .and_then(|c| c.service_account.as_deref())
        .unwrap_or(&revision.name)
}

/// group → kind → usernames (`system:serviceaccount:<ns>:<sa>`).
pub type ProviderAccounts = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// The provider accounts of every MR kind whose CRD is controlled by a
/// known revision. A CRD whose revision is not (yet) known gets none:
/// exempting fewer users is the safe side.
pub fn derive<'a>(
    namespace: &str,
    crds: impl IntoIterator<Item = &'a MrCrd>,
    revisions: &BTreeMap<String, Revision>,
    runtime_configs: &BTreeMap<String, RuntimeConfig>,
) -> ProviderAccounts {
    let mut out = ProviderAccounts::new();
    for crd in crds {
        let Some(revision) = controlling_revision(crd).and_then(|r| revisions.get(r)) else {
            continue;
        };
        let sa = service_account(revision, runtime_configs);
        out.entry(crd.group.clone())
            .or_default()
            .entry(crd.kind.clone())
            .or_default()
            .insert(format!("system:serviceaccount:{namespace}:{sa}"));
    }
    out
}

/// Provider package name → the `(group, kind)` of the MR kinds it serves
/// (the teardown guard). A CRD maps through its controlling revision to
/// that revision's Provider, whatever the names (Crossplane v2 makes MR
/// CRDs from ManagedResourceDefinitions, which carry no reference to the
/// Provider); failing that, through a direct owner reference to a
/// `Provider`, as v1's package manager also sets.
pub fn provider_kinds<'a>(
    crds: impl IntoIterator<Item = &'a MrCrd>,
    revisions: &BTreeMap<String, Revision>,
) -> HashMap<String, Vec<(String, String)>> {
    let mut out: HashMap<String, Vec<(String, String)>> = HashMap::new();
    for crd in crds {
        let via_revision = controlling_revision(crd)
            .and_then(|r| revisions.get(r))
            .and_then(|r| r.provider.as_deref());
        let direct = || {
            crd.owners
                .iter()
                .find(|o| {
                    o.kind == "Provider"
                        && o.api_version.split('/').next() == Some(PKG_GROUP)
                        && !o.name.is_empty()
                })
                .map(|o| o.name.as_str())
        };
        if let Some(p) = via_revision.or_else(direct) {
            out.entry(p.to_string())
                .or_default()
                .push((crd.group.clone(), crd.kind.clone()));
        }
    }
    for kinds in out.values_mut() {
        kinds.sort();
        kinds.dedup();
    }
    out
}

/// The derived provider accounts, for admission. Interior synchronisation:
/// the runtime replaces the whole map; each decision reads one snapshot.
#[derive(Debug, Default)]
pub struct ProviderIndex {
    accounts: RwLock<Arc<ProviderAccounts>>,
    synced: AtomicBool,
}

impl ProviderIndex {
    /// Replaces the map and marks the index synced.
    pub fn replace(&self, accounts: ProviderAccounts) {
        let accounts = Arc::new(accounts);
        match self.accounts.write() {
            Ok(mut g) => *g = accounts,
            Err(poisoned) => *poisoned.into_inner() = accounts,
        }
        self.synced.store(true, Ordering::Release);
    }

    /// The current map.
    pub fn snapshot(&self) -> Arc<ProviderAccounts> {
        match self.accounts.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Whether a map was set at least once.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Whether `username` runs the provider serving `group`/`kind`.
    pub fn is_provider_of(&self, group: &str, kind: &str, username: &str) -> bool {
        // Only service accounts can be providers: skip the lock for users.
        if !username.starts_with("system:serviceaccount:") {
            return false;
        }
        self.snapshot()
            .get(group)
            .and_then(|kinds| kinds.get(kind))
            .is_some_and(|users| users.contains(username))
    }
}

/// Crossplane's own service accounts, which must never be exempt by default:
/// core writes every composed MR, and the RBAC manager grants permissions.
pub const CROSSPLANE_ACCOUNTS: &[&str] = &["crossplane", "rbac-manager", "crossplane-rbac-manager"];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owner(api_version: &str, kind: &str, name: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            controller: Some(controller),
            block_owner_deletion: Some(true),
        }
    }

    fn crd(group: &str, kind: &str, owners: Vec<OwnerReference>) -> MrCrd {
        MrCrd {
            group: group.into(),
            kind: kind.into(),
            owners,
        }
    }

    fn revisions(list: &[(&str, Option<&str>)]) -> BTreeMap<String, Revision> {
        list.iter()
            .map(|(n, c)| {
                (
                    n.to_string(),
                    Revision {
                        name: n.to_string(),
                        runtime_config: c.map(str::to_string),
                        provider: None,
                    },
                )
            })
            .collect()
    }

    fn configs(list: &[(&str, Option<&str>)]) -> BTreeMap<String, RuntimeConfig> {
        list.iter()
            .map(|(n, sa)| {
                (
                    n.to_string(),
                    RuntimeConfig {
                        name: n.to_string(),
                        service_account: sa.map(str::to_string),
                    },
                )
            })
            .collect()
    }

    fn users(a: &ProviderAccounts, group: &str, kind: &str) -> Vec<String> {
        a.get(group)
            .and_then(|k| k.get(kind))
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_revision_controlled_crd_maps_to_the_revision_account() {
        // What Crossplane v1 sets: the revision as controller, the Provider not.
        let bucket = crd(
            "s3.aws.upbound.io",
            "Bucket",
            vec![
                owner(
                    "pkg.crossplane.io/v1",
                    "ProviderRevision",
                    "provider-aws-s3-1a2b",
                    true,
                ),
                owner("pkg.crossplane.io/v1", "Provider", "provider-aws-s3", false),
            ],
        );
        let a = derive(
            "crossplane-system",
            [&bucket],
            &revisions(&[("provider-aws-s3-1a2b", Some("default"))]),
            &configs(&[("default", None)]),
        );
        assert_eq!(
            users(&a, "s3.aws.upbound.io", "Bucket"),
            ["system:serviceaccount:crossplane-system:provider-aws-s3-1a2b"]
        );
        assert!(users(&a, "s3.aws.upbound.io", "Object").is_empty());
    }

    #[test]
    fn a_v2_crd_made_from_an_mrd_carries_the_revision_as_controller() {
        // v2: an owner reference to the MRD plus a copy of the MRD's
        // controller reference (the revision).
        let vpc = crd(
            "ec2.aws.m.upbound.io",
            "VPC",
            vec![
                owner(
                    "apiextensions.crossplane.io/v1alpha1",
                    "ManagedResourceDefinition",
                    "vpcs.ec2.aws.m.upbound.io",
                    false,
                ),
                owner(
                    "pkg.crossplane.io/v1",
                    "ProviderRevision",
                    "provider-aws-ec2-9f",
                    true,
                ),
            ],
        );
        let a = derive(
            "upbound-system",
            [&vpc],
            &revisions(&[("provider-aws-ec2-9f", None)]),
            &BTreeMap::new(),
        );
        assert_eq!(
            users(&a, "ec2.aws.m.upbound.io", "VPC"),
            ["system:serviceaccount:upbound-system:provider-aws-ec2-9f"]
        );
    }

    #[test]
    fn a_runtime_config_can_name_another_service_account() {
        let c = crd(
            "s3.aws.upbound.io",
            "Bucket",
            vec![owner(
                "pkg.crossplane.io/v1",
                "ProviderRevision",
                "rev-a",
                true,
            )],
        );
        let revs = revisions(&[("rev-a", Some("irsa"))]);
        let a = derive(
            "crossplane-system",
            [&c],
            &revs,
            &configs(&[("irsa", Some("provider-aws")), ("default", Some("unused"))]),
        );
        assert_eq!(
            users(&a, "s3.aws.upbound.io", "Bucket"),
            ["system:serviceaccount:crossplane-system:provider-aws"]
        );
        // No runtimeConfigRef: the `default` config applies.
        let revs = revisions(&[("rev-a", None)]);
        let a = derive(
            "crossplane-system",
            [&c],
            &revs,
            &configs(&[("default", Some("from-default"))]),
        );
        assert_eq!(
            users(&a, "s3.aws.upbound.io", "Bucket"),
            ["system:serviceaccount:crossplane-system:from-default"]
        );
        // A config without a template name, or a missing one: the revision's name.
        for cfgs in [configs(&[("default", None)]), BTreeMap::new()] {
            let a = derive("ns", [&c], &revs, &cfgs);
            assert_eq!(
                users(&a, "s3.aws.upbound.io", "Bucket"),
                ["system:serviceaccount:ns:rev-a"]
            );
        }
    }

    #[test]
    fn crds_without_a_known_revision_controller_exempt_no_one() {
        let revs = revisions(&[("rev-a", None)]);
        let cases = [
            // Controlled by something else.
            crd(
                "g",
                "A",
                vec![owner("apps/v1", "Deployment", "rev-a", true)],
            ),
            // The revision is an owner but not the controller.
            crd(
                "g",
                "B",
                vec![owner(
                    "pkg.crossplane.io/v1",
                    "ProviderRevision",
                    "rev-a",
                    false,
                )],
            ),
            // A look-alike kind in another group.
            crd(
                "g",
                "C",
                vec![owner(
                    "evil.example.com/v1",
                    "ProviderRevision",
                    "rev-a",
                    true,
                )],
            ),
            // The revision is unknown (not yet seen, or deleted).
            crd(
                "g",
                "D",
                vec![owner(
                    "pkg.crossplane.io/v1",
                    "ProviderRevision",
                    "rev-b",
                    true,
                )],
            ),
            // No owners: installed by hand.
            crd("g", "E", vec![]),
        ];
        let a = derive("ns", cases.iter(), &revs, &BTreeMap::new());
        assert!(a.is_empty(), "{a:?}");
    }

    #[test]
    fn two_kinds_of_one_revision_and_two_revisions_of_one_group() {
        let o = |r: &str| vec![owner("pkg.crossplane.io/v1", "ProviderRevision", r, true)];
        let crds = [
            crd("ec2.aws.upbound.io", "VPC", o("ec2")),
            crd("ec2.aws.upbound.io", "Subnet", o("ec2")),
            crd("aws.upbound.io", "ProviderConfig", o("family")),
        ];
        let a = derive(
            "cs",
            crds.iter(),
            &revisions(&[("ec2", None), ("family", None)]),
            &BTreeMap::new(),
        );
        assert_eq!(
            users(&a, "ec2.aws.upbound.io", "Subnet"),
            ["system:serviceaccount:cs:ec2"]
        );
        assert_eq!(
            users(&a, "aws.upbound.io", "ProviderConfig"),
            ["system:serviceaccount:cs:family"]
        );
    }

    /// A v2 CRD made from an MRD names no Provider, only the revision
    /// (controller) and the MRD; the revision names the Provider, and
    /// through it the teardown guard finds the Provider's kinds.
    #[test]
    fn a_provider_serves_the_kinds_its_revisions_control_whatever_the_names() {
        let rev = |name: &str, provider: &str| {
            Revision::from_object(&json!({
                "metadata": {"name": name, "ownerReferences": [
                    {"apiVersion": "pkg.crossplane.io/v1", "kind": "Provider", "name": provider,
                     "uid": "p", "controller": true}]},
                "spec": {"image": "x", "revision": 1}
            }))
            .unwrap()
        };
        let revs: BTreeMap<String, Revision> = [
            rev("upbound-provider-aws-ec2-9f", "provider-aws-ec2"),
            rev("acme-s3-1", "my-s3"),
        ]
        .into_iter()
        .map(|r| (r.name.clone(), r))
        .collect();
        let mrd = owner(
            "apiextensions.crossplane.io/v1alpha1",
            "ManagedResourceDefinition",
            "vpcs.ec2.aws.m.upbound.io",
            false,
        );
        let vpc = crd(
            "ec2.aws.m.upbound.io",
            "VPC",
            vec![
                mrd,
                owner(
                    "pkg.crossplane.io/v1",
                    "ProviderRevision",
                    "upbound-provider-aws-ec2-9f",
                    true,
                ),
            ],
        );
        // v1: both the revision and a direct Provider reference.
        let bucket = crd(
            "s3.aws.upbound.io",
            "Bucket",
            vec![
                owner(
                    "pkg.crossplane.io/v1",
                    "ProviderRevision",
                    "acme-s3-1",
                    true,
                ),
                owner("pkg.crossplane.io/v1", "Provider", "my-s3", false),
            ],
        );
        // Only a Provider reference (the revision is not known yet).
        let object = crd(
            "s3.aws.upbound.io",
            "Object",
            vec![owner("pkg.crossplane.io/v1", "Provider", "my-s3", false)],
        );
        // Neither: installed by hand.
        let loose = crd("x.example.org", "Thing", vec![]);
        let m = provider_kinds([&vpc, &bucket, &object, &loose], &revs);
        assert_eq!(
            m["provider-aws-ec2"],
            [("ec2.aws.m.upbound.io".to_string(), "VPC".to_string())]
        );
        assert_eq!(
            m["my-s3"],
            [
                ("s3.aws.upbound.io".to_string(), "Bucket".to_string()),
                ("s3.aws.upbound.io".to_string(), "Object".to_string())
            ]
        );
        assert_eq!(m.len(), 2, "{m:?}");
        // The revision's package label when it has no Provider controller.
        let labelled = Revision::from_object(&json!({
            "metadata": {"name": "r", "labels": {"pkg.crossplane.io/package": "from-label"}}
        }))
        .unwrap();
        assert_eq!(labelled.provider.as_deref(), Some("from-label"));
    }

    #[test]
    fn objects_are_read_from_their_json() {
        let rev = Revision::from_object(&json!({
            "apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision",
            "metadata": {"name": "provider-aws-s3-1a2b3c4d5e6f"},
            "spec": {"runtimeConfigRef": {"name": "default"}, "image": "x", "revision": 1}
        }))
        .unwrap();
        assert_eq!(rev.name, "provider-aws-s3-1a2b3c4d5e6f");
        assert_eq!(rev.runtime_config.as_deref(), Some("default"));
        let cfg = RuntimeConfig::from_object(&json!({
            "metadata": {"name": "irsa"},
            "spec": {"serviceAccountTemplate": {"metadata": {"name": "provider-aws"}}}
        }))
        .unwrap();
        assert_eq!(cfg.service_account.as_deref(), Some("provider-aws"));
        let empty = RuntimeConfig::from_object(&json!({
            "metadata": {"name": "x"},
            "spec": {"serviceAccountTemplate": {"metadata": {"name": ""}}}
        }))
        .unwrap();
        assert_eq!(empty.service_account, None);
        assert!(Revision::from_object(&json!({"metadata": {}})).is_none());
    }

    #[test]
    fn the_index_answers_for_service_accounts_of_the_kind_only() {
        let idx = ProviderIndex::default();
        assert!(!idx.is_synced());
        let sa = "system:serviceaccount:cs:rev";
        assert!(!idx.is_provider_of("g", "K", sa));
        let mut a = ProviderAccounts::new();
        a.entry("g".into())
            .or_default()
            .entry("K".into())
            .or_default()
            .insert(sa.into());
        idx.replace(a);
        assert!(idx.is_synced());
        assert!(idx.is_provider_of("g", "K", sa));
        assert!(!idx.is_provider_of("g", "Other", sa));
        assert!(!idx.is_provider_of("h", "K", sa));
        assert!(!idx.is_provider_of("g", "K", "system:serviceaccount:cs:crossplane"));
        assert!(!idx.is_provider_of("g", "K", ""));
        idx.replace(ProviderAccounts::new());
        assert!(!idx.is_provider_of("g", "K", sa));
    }
}
