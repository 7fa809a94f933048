//! The index of the identities live MRs claim, and of the provider
//! configs that exist: filled by the watches, asked by admission and the
//! audit.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use super::{Claim, ProviderConfigRef};

/// A kind as the index files it: `group/Kind`, the first two parts of its
/// MRs' keys.
fn kind_path(group: &str, kind: &str) -> String {
    format!("{group}/{kind}")
}

/// One MR, as `group/Kind/namespace/name` in one allocation, shared by
/// both tables of the index.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MrKey(Arc<str>);

impl MrKey {
    /// The key of an MR (`namespace` empty for cluster scope).
    pub fn new(group: &str, kind: &str, namespace: &str, name: &str) -> Self {
        Self(Arc::from(format!("{group}/{kind}/{namespace}/{name}")))
    }

    /// `group/Kind`: the kind's part of the key, as [`kind_path`] spells it.
    fn kind_path(&self) -> &str {
        let end = self
            .0
            .match_indices('/')
            .nth(1)
            .map_or(self.0.len(), |(i, _)| i);
        &self.0[..end]
    }

    fn parts(&self) -> [&str; 4] {
        let mut it = self.0.splitn(4, '/');
        let mut next = || it.next().unwrap_or("");
        [next(), next(), next(), next()]
    }

    /// The MR's API group.
    pub fn group(&self) -> &str {
        self.parts()[0]
    }

    /// The MR's kind.
    pub fn kind(&self) -> &str {
        self.parts()[1]
    }

    /// The MR's namespace, empty for cluster scope.
    pub fn namespace(&self) -> &str {
        self.parts()[2]
    }

    /// The MR's name.
    pub fn name(&self) -> &str {
        self.parts()[3]
    }
}

impl fmt::Display for MrKey {
    /// `Kind.group namespace/name`, or `Kind.group name` for cluster scope.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [group, kind, namespace, name] = self.parts();
        if namespace.is_empty() {
            write!(f, "{kind}.{group} {name}")
        } else {
            write!(f, "{kind}.{group} {namespace}/{name}")
        }
    }
}

/// One MR as a listing or a watch event gives it to the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedMr {
    /// The MR.
    pub key: MrKey,
    /// Its claim, `None` while it has no identity.
    pub claim: Option<Claim>,
    /// Whether deleting it deletes its external resource (for the
    /// teardown guard).
    pub deletes: bool,
    /// A digest of what the audit judges of it, 0 where there is none (a
    /// CLI's one listing): an update that changes neither this nor the
    /// rest changes no audit finding.
    pub judged: u32,
}

impl IndexedMr {
    /// `key` with its claim, and no digest.
    pub fn new(key: MrKey, claim: Option<Claim>, deletes: bool) -> Self {
        Self {
            key,
            claim,
            deletes,
            judged: 0,
        }
    }

    /// The same, with `judged` as the digest of what the audit judges.
    pub fn with_judged(self, judged: u32) -> Self {
        Self { judged, ..self }
    }

    fn split(self) -> (MrKey, Entry) {
        let entry = Entry {
            claim: self.claim,
            deletes: self.deletes,
            judged: self.judged,
        };
        (self.key, entry)
    }
}

/// Another MR holding an identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimant {
    /// The other MR.
    pub key: MrKey,
    /// Whether it also uses the same provider config: then it is certainly
    /// the same external resource; otherwise only when both configs reach
    /// the same account.
    pub same_provider_config: bool,
    /// Whether it is being deleted (it keeps its claim until it is gone).
    pub deleting: bool,
}

/// Per MR: its claim, if it has an identity yet, whether deleting it
/// deletes the external resource (for the teardown guard), and a digest
/// of what the audit judges of it (0 when not given). 32 bits fit in the
/// entry's padding (32 bytes, as without it, so 100,000 MRs cost nothing
/// more); a collision only leaves a change to the kind's next refresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    claim: Option<Claim>,
    deletes: bool,
    judged: u32,
}

#[derive(Debug, Default)]
struct Inner {
    /// Per kind (`group/Kind`, a key's first two parts), its MRs: a kind is
    /// relisted, dropped or read without a scan of every MR. In one flat
    /// table a relist scans all of them: at 1,000 kinds and 100,000 MRs a
    /// new replica's sync takes 13.7 s of CPU that way, each kind's relist
    /// holding the write lock admission reads wait for (BENCHMARKS.md). A
    /// kind without MRs has no entry.
    by_kind: HashMap<Box<str>, HashMap<MrKey, Entry>>,
    /// Loose digest to the MRs claiming it; almost always one.
    by_identity: HashMap<u64, Vec<MrKey>>,
    /// The kinds listed whole (`replace_kind`) and not dropped since: what
    /// `by_kind` holds of them is all there is.
    listed: std::collections::HashSet<Box<str>>,
}

impl Inner {
    fn get(&self, key: &MrKey) -> Option<&Entry> {
        self.by_kind.get(key.kind_path())?.get(key)
    }

    fn mrs(&self) -> impl Iterator<Item = (&MrKey, &Entry)> {
        self.by_kind.values().flatten()
    }

    fn unclaim(&mut self, key: &MrKey, entry: Entry) {
        let Some(old) = entry.claim else { return };
        if let Some(v) = self.by_identity.get_mut(&old.loose) {
            v.retain(|k| k != key);
            if v.is_empty() {
                self.by_identity.remove(&old.loose);
            }
        }
    }

    fn remove(&mut self, key: &MrKey) {
        let Some(mrs) = self.by_kind.get_mut(key.kind_path()) else {
            return;
        };
        let Some(entry) = mrs.remove(key) else { return };
        if mrs.is_empty() {
            self.by_kind.remove(key.kind_path());
        }
        self.unclaim(key, entry);
    }

    fn insert(&mut self, key: MrKey, entry: Entry) {
        self.remove(&key);
        if let Some(claim) = entry.claim {
            self.by_identity
                .entry(claim.loose)
                // Almost always one claimant: no room for four.
                .or_insert_with(|| Vec::with_capacity(1))
                .push(key.clone());
        }
        match self.by_kind.get_mut(key.kind_path()) {
            Some(mrs) => {
                mrs.insert(key, entry);
            }
            None => {
                let kind = key.kind_path().into();
                self.by_kind.insert(kind, HashMap::from([(key, entry)]));
            }
        }
    }

    /// Forgets every MR of `group/Kind`.
    fn drop_kind(&mut self, kind_path: &str) {
        let Some(mrs) = self.by_kind.remove(kind_path) else {
            return;
        };
        for (key, entry) in mrs {
            self.unclaim(&key, entry);
        }
    }
}

/// What one ProviderConfig (or ClusterProviderConfig) object tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfigFacts {
    /// `spec.credentials.secretRef` as `(namespace, name)`, when its
    /// credentials come from a Secret.
    pub secret: Option<(String, String)>,
    /// Whether MRs use it (`status.users` > 0, kept by Crossplane).
    pub in_use: bool,
}

/// Whether the provider config an MR references exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderConfigStatus {
    /// Nothing is known of the MR's provider family: no finding.
    Unknown,
    /// The family's group (named) serves no such kind.
    KindNotServed(String),
    /// The kind is served in the group (named) but no such object exists.
    Missing(String),
    /// It exists.
    Exists,
}

#[derive(Debug, Default)]
struct ProviderConfigs {
    /// `(group, kind)` of every served ProviderConfig kind.
    kinds: std::collections::BTreeSet<(String, String)>,
    /// The served kinds whose objects were listed: only these are known
    /// (a kind RBAC forbids must not make every reference "missing").
    listed: std::collections::BTreeSet<(String, String)>,
    objects: HashMap<MrKey, ProviderConfigFacts>,
    /// Provider package name to the `(group, kind)` of its MR CRDs (their
    /// owner references), for the teardown guard.
    providers: HashMap<String, Vec<(String, String)>>,
    /// The kinds are known from CRDs alone (offline): no object is.
    kinds_only: bool,
}

/// The identities live MRs claim, kept by every replica's watches, and the
/// provider configs that exist. An empty index finds nothing, so offline
/// decisions never differ.
#[derive(Debug)]
pub struct IdentityIndex {
    inner: RwLock<Inner>,
    provider_configs: RwLock<ProviderConfigs>,
    synced: AtomicBool,
}

impl Default for IdentityIndex {
    fn default() -> Self {
        Self {
            inner: RwLock::default(),
            provider_configs: RwLock::default(),
            synced: AtomicBool::new(true),
        }
    }
}

impl IdentityIndex {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        // A panic while holding the lock leaves the maps consistent (every
        // write is a few map operations), so poisoning is ignored.
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn pcs(&self) -> std::sync::RwLockReadGuard<'_, ProviderConfigs> {
        self.provider_configs
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn pcs_mut(&self) -> std::sync::RwLockWriteGuard<'_, ProviderConfigs> {
        self.provider_configs
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the served ProviderConfig kinds, `(group, kind)`; objects of
    /// kinds no longer served are forgotten.
    pub fn set_provider_config_kinds(&self, kinds: Vec<(String, String)>) {
        let mut pcs = self.pcs_mut();
        pcs.kinds = kinds.into_iter().collect();
        let ProviderConfigs {
            kinds,
            objects,
            listed,
            ..
        } = &mut *pcs;
        listed.retain(|k| kinds.contains(k));
        objects.retain(|k, _| kinds.contains(&(k.group().to_string(), k.kind().to_string())));
    }

    /// The served ProviderConfig kinds, from CRDs read without a cluster
    /// (`check --crd`): `provider-config-kind` judges the kind an MR names,
    /// and `provider-config-exists` finds nothing, no object being known.
    pub fn set_provider_config_kinds_only(&self, kinds: Vec<(String, String)>) {
        let mut pcs = self.pcs_mut();
        pcs.kinds = kinds.iter().cloned().collect();
        pcs.listed = kinds.into_iter().collect();
        pcs.objects.clear();
        pcs.kinds_only = true;
    }

    /// Replaces every object of one ProviderConfig kind (a fresh list).
    pub fn replace_provider_configs(
        &self,
        group: &str,
        kind: &str,
        objects: Vec<(MrKey, ProviderConfigFacts)>,
    ) {
        let mut pcs = self.pcs_mut();
        pcs.objects
            .retain(|k, _| !(k.group() == group && k.kind() == kind));
        pcs.objects.extend(objects);
        pcs.listed.insert((group.to_string(), kind.to_string()));
    }

    /// Records one provider config object (key: group, kind, namespace,
    /// name). Returns whether what it tells changed: its status is
    /// rewritten as MRs come and go, which changes nothing here.
    pub fn upsert_provider_config(&self, key: MrKey, facts: ProviderConfigFacts) -> bool {
        let mut pcs = self.pcs_mut();
        if pcs.objects.get(&key) == Some(&facts) {
            return false;
        }
        pcs.objects.insert(key, facts);
        true
    }

    /// Forgets a provider config object that is gone. Returns whether it
    /// was known.
    pub fn remove_provider_config(&self, key: &MrKey) -> bool {
        self.pcs_mut().objects.remove(key).is_some()
    }

    /// Whether `r`, referenced by an MR of `mr_group`, exists. The MR's
    /// family group is the longest served ProviderConfig group that
    /// `mr_group` ends with (`s3.aws.m.upbound.io` → `aws.m.upbound.io`).
    pub fn provider_config_status(
        &self,
        mr_group: &str,
        r: &ProviderConfigRef,
    ) -> ProviderConfigStatus {
        let pcs = self.pcs();
        // Only families whose configs could be listed are judged.
        let family = pcs
            .listed
            .iter()
            .map(|(g, _)| g.as_str())
            .filter(|g| mr_group == *g || mr_group.ends_with(&format!(".{g}")))
            .max_by_key(|g| g.len());
        let Some(group) = family else {
            return ProviderConfigStatus::Unknown;
        };
        if !pcs.kinds.contains(&(group.to_string(), r.kind.clone())) {
            return ProviderConfigStatus::KindNotServed(group.to_string());
        }
        let key = MrKey::new(group, &r.kind, &r.namespace, &r.name);
        if pcs.objects.contains_key(&key) {
            ProviderConfigStatus::Exists
        } else {
            ProviderConfigStatus::Missing(group.to_string())
        }
    }

    /// The ProviderConfig kinds the family of `mr_group` serves (from the
    /// CRDs), with the family's group: the longest group whose configs
    /// could be listed that `mr_group` is or ends with, as
    /// [`Self::provider_config_status`] finds it. `None` when none fits: a
    /// family mrguard may not read is not judged, so that a config group
    /// it cannot see never claims another provider's MRs.
    pub fn provider_config_kinds_for(&self, mr_group: &str) -> Option<(String, Vec<String>)> {
        let pcs = self.pcs();
        let group = pcs
            .listed
            .iter()
            .map(|(g, _)| g.as_str())
            .filter(|g| mr_group == *g || mr_group.ends_with(&format!(".{g}")))
            .max_by_key(|g| g.len())?;
        let kinds = pcs
            .kinds
            .iter()
            .filter(|(g, _)| g == group)
            .map(|(_, k)| k.clone())
            .collect();
        Some((group.to_string(), kinds))
    }

    /// Sets which MR kinds each Provider package serves.
    pub fn set_provider_kinds(&self, providers: HashMap<String, Vec<(String, String)>>) {
        self.pcs_mut().providers = providers;
    }

    /// The live MRs of the kinds Provider `name` serves, sorted (the
    /// teardown guard). A scan, like [`Self::deleting_in_namespace`].
    pub fn mrs_of_provider(&self, name: &str) -> Vec<MrKey> {
        let kinds = match self.pcs().providers.get(name) {
            Some(k) if !k.is_empty() => k.clone(),
            _ => return Vec::new(),
        };
        let inner = self.read();
        let mut out: Vec<MrKey> = kinds
            .iter()
            .filter_map(|(g, kd)| inner.by_kind.get(kind_path(g, kd).as_str()))
            .flat_map(HashMap::keys)
            .cloned()
            .collect();
        out.sort();
        out
    }

    /// The provider configs in use whose credentials are the Secret
    /// `namespace/name`, sorted (the teardown guard).
    pub fn secret_users(&self, namespace: &str, name: &str) -> Vec<MrKey> {
        let pcs = self.pcs();
        let mut out: Vec<MrKey> = pcs
            .objects
            .iter()
            .filter(|(_, f)| {
                f.in_use
                    && f.secret
                        .as_ref()
                        .is_some_and(|(ns, n)| ns == namespace && n == name)
            })
            .map(|(k, _)| k.clone())
            .collect();
        out.sort();
        out
    }

    /// Records a live MR. Returns whether anything kept of it changed (or
    /// it is new): an update that changes none of it (a provider
    /// rewriting status) changes no audit finding.
    pub fn upsert(&self, mr: IndexedMr) -> bool {
        let (key, entry) = mr.split();
        let mut inner = self.write();
        if inner.get(&key) == Some(&entry) {
            return false;
        }
        inner.insert(key, entry);
        true
    }

    /// Forgets an MR that is gone.
    pub fn remove(&self, key: &MrKey) {
        self.write().remove(key);
    }

    /// Replaces every MR of `group`/`kind` with `mrs` (a fresh list).
    pub fn replace_kind(&self, group: &str, kind: &str, mrs: Vec<IndexedMr>) {
        let path = kind_path(group, kind);
        let mut inner = self.write();
        inner.drop_kind(&path);
        for mr in mrs {
            let (key, entry) = mr.split();
            inner.insert(key, entry);
        }
        inner.listed.insert(path.into());
    }

    /// Forgets every claim of `group`/`kind` (its CRD is gone).
    pub fn drop_kind(&self, group: &str, kind: &str) {
        let path = kind_path(group, kind);
        let mut inner = self.write();
        inner.drop_kind(&path);
        inner.listed.remove(path.as_str());
    }

    /// The other MRs claiming `identity`, or the same identity but for the
    /// provider config; `except` (the MR asking) is left out. Sorted.
    pub fn claimants(&self, claim: &Claim, except: &MrKey) -> Vec<Claimant> {
        let inner = self.read();
        let Some(keys) = inner.by_identity.get(&claim.loose) else {
            return Vec::new();
        };
        let mut out: Vec<Claimant> = keys
            .iter()
            .filter(|k| *k != except)
            .filter_map(|k| {
                let c = inner.get(k)?.claim?;
                Some(Claimant {
                    key: k.clone(),
                    same_provider_config: c.full == claim.full,
                    deleting: c.deleting,
                })
            })
            .collect();
        out.sort_by(|a, b| {
            b.same_provider_config
                .cmp(&a.same_provider_config)
                .then_with(|| a.key.cmp(&b.key))
        });
        out
    }

    /// Groups of two or more MRs that claim one identity, provider config
    /// included (for the audit). Each group is sorted; groups by first key.
    pub fn duplicates(&self) -> Vec<Vec<MrKey>> {
        let inner = self.read();
        let mut out = Vec::new();
        for keys in inner.by_identity.values().filter(|v| v.len() > 1) {
            let mut by_full: HashMap<u64, Vec<MrKey>> = HashMap::new();
            for k in keys {
                if let Some(c) = inner.get(k).and_then(|e| e.claim) {
                    by_full.entry(c.full).or_default().push(k.clone());
                }
            }
            for mut g in by_full.into_values().filter(|g| g.len() > 1) {
                g.sort();
                out.push(g);
            }
        }
        out.sort();
        out
    }

    /// The heap bytes the index holds, from its tables' capacities and the
    /// keys' lengths (hashbrown's layout: one slot and one control byte per
    /// bucket). An estimate within allocator rounding.
    pub fn heap_bytes(&self) -> usize {
        fn table<K, V>(m: &HashMap<K, V>) -> usize {
            let buckets = if m.capacity() == 0 {
                0
            } else {
                (m.capacity() * 8 / 7).next_power_of_two()
            };
            buckets * (std::mem::size_of::<(K, V)>() + 1)
        }
        let inner = self.read();
        // Each key once, with the Arc's two counters.
        let keys: usize = inner.mrs().map(|(k, _)| k.0.len() + 16).sum();
        let lists: usize = inner
            .by_identity
            .values()
            .map(|v| v.capacity() * std::mem::size_of::<MrKey>())
            .sum();
        let kinds: usize = inner
            .by_kind
            .iter()
            .map(|(kind, mrs)| kind.len() + table(mrs))
            .sum();
        table(&inner.by_kind) + kinds + table(&inner.by_identity) + keys + lists
    }

    /// The MRs in `namespace` whose deletion deletes their external
    /// resource, sorted (the teardown guard). A scan: namespace deletions
    /// are rare, and a second table would cost memory on every MR.
    pub fn deleting_in_namespace(&self, namespace: &str) -> Vec<MrKey> {
        if namespace.is_empty() {
            return Vec::new();
        }
        let inner = self.read();
        let mut out: Vec<MrKey> = inner
            .mrs()
            .filter(|(k, e)| e.deletes && k.namespace() == namespace)
            .map(|(k, _)| k.clone())
            .collect();
        out.sort();
        out
    }

    /// Whether any MR claims `claim`'s identity, provider config aside:
    /// the cheap test before naming anyone.
    pub fn is_claimed(&self, claim: &Claim) -> bool {
        self.read().by_identity.contains_key(&claim.loose)
    }

    /// Whether any provider config kind is watched (its objects known).
    pub fn knows_provider_configs(&self) -> bool {
        let pcs = self.pcs();
        !pcs.listed.is_empty() && !pcs.kinds_only
    }

    /// How many live MRs the index knows.
    pub fn len(&self) -> usize {
        self.read().by_kind.values().map(HashMap::len).sum()
    }

    /// How many live MRs of `group`/`kind` there are, if the index has
    /// listed the kind whole (a watch's list, or a command's listing) and
    /// follows it since; `None` when it does not know.
    pub fn listed_len(&self, group: &str, kind: &str) -> Option<usize> {
        let path = kind_path(group, kind);
        let inner = self.read();
        inner
            .listed
            .contains(path.as_str())
            .then(|| inner.by_kind.get(path.as_str()).map_or(0, HashMap::len))
    }

    /// Whether the index knows no MR (a kind without MRs has no entry, so
    /// this reads no more than one table's length; admission asks).
    pub fn is_empty(&self) -> bool {
        self.read().by_kind.is_empty()
    }

    /// Whether the index has listed every covered kind once (always true
    /// where no watch fills it).
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Set by the watches that fill the index: false until their first
    /// full list, so a replica is not ready with a partial index.
    pub fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::identity::testing::{bucket, identity};
    use serde_json::json;

    #[test]
    fn the_index_finds_other_claimants_and_forgets_the_gone() {
        let idx = IdentityIndex::default();
        let b = bucket("data", json!({}), json!({"forProvider": {}}));
        let a_key = MrKey::new("s3.aws.m.upbound.io", "Bucket", "team-a", "data");
        let b_key = MrKey::new("s3.aws.m.upbound.io", "Bucket", "team-b", "data");
        let ia = identity(&b, "s3.aws.m.upbound.io", "Bucket", "team-a").unwrap();
        assert!(idx.claimants(&ia.claim(false), &b_key).is_empty());
        idx.upsert(IndexedMr::new(a_key.clone(), Some(ia.claim(true)), true));
        let ib = identity(&b, "s3.aws.m.upbound.io", "Bucket", "team-b").unwrap();
        let c = idx.claimants(&ib.claim(false), &b_key);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].key, a_key);
        assert!(c[0].same_provider_config && c[0].deleting);
        assert_eq!(a_key.to_string(), "Bucket.s3.aws.m.upbound.io team-a/data");
        // The MR itself is never its own claimant.
        assert!(idx.claimants(&ia.claim(false), &a_key).is_empty());
        // A legacy Bucket meets the namespaced one, with another config.
        let legacy = identity(&b, "s3.aws.upbound.io", "Bucket", "").unwrap();
        let c = idx.claimants(
            &legacy.claim(false),
            &MrKey::new("s3.aws.upbound.io", "Bucket", "", "data"),
        );
        assert_eq!(c.len(), 1);
        assert!(!c[0].same_provider_config);
        // Changing the external name moves the claim.
        let moved = bucket(
            "data",
            json!({"crossplane.io/external-name": "x"}),
            json!({"forProvider": {}}),
        );
        let im = identity(&moved, "s3.aws.m.upbound.io", "Bucket", "team-a").unwrap();
        idx.upsert(IndexedMr::new(a_key.clone(), Some(im.claim(false)), true));
        assert!(idx.claimants(&ib.claim(false), &b_key).is_empty());
        assert_eq!(idx.claimants(&im.claim(false), &b_key).len(), 1);
        idx.remove(&a_key);
        assert!(idx.claimants(&im.claim(false), &b_key).is_empty());
        assert!(idx.is_empty());
    }

    #[test]
    fn provider_configs_are_found_by_family_kind_and_name() {
        let idx = IdentityIndex::default();
        let pc = |kind: &str, ns: &str, name: &str| ProviderConfigRef {
            kind: kind.into(),
            name: name.into(),
            namespace: ns.into(),
        };
        // Nothing known: no finding.
        assert_eq!(
            idx.provider_config_status(
                "s3.aws.m.upbound.io",
                &pc("ClusterProviderConfig", "", "default")
            ),
            ProviderConfigStatus::Unknown
        );
        idx.set_provider_config_kinds(vec![
            ("aws.upbound.io".into(), "ProviderConfig".into()),
            ("aws.m.upbound.io".into(), "ProviderConfig".into()),
            ("aws.m.upbound.io".into(), "ClusterProviderConfig".into()),
        ]);
        let facts = |secret: Option<(&str, &str)>, in_use| ProviderConfigFacts {
            secret: secret.map(|(a, b)| (a.into(), b.into())),
            in_use,
        };
        idx.replace_provider_configs(
            "aws.m.upbound.io",
            "ClusterProviderConfig",
            vec![(
                MrKey::new("aws.m.upbound.io", "ClusterProviderConfig", "", "default"),
                facts(Some(("crossplane-system", "aws-secret")), true),
            )],
        );
        let mine = MrKey::new("aws.m.upbound.io", "ProviderConfig", "team-a", "mine");
        assert!(idx.upsert_provider_config(mine.clone(), facts(Some(("team-a", "creds")), false)));
        // The same facts again (a status rewrite) change nothing.
        assert!(!idx.upsert_provider_config(mine.clone(), facts(Some(("team-a", "creds")), false)));
        // The legacy family is served but not listed yet (say RBAC forbids
        // it): nothing is known of it.
        assert_eq!(
            idx.provider_config_status("s3.aws.upbound.io", &pc("ProviderConfig", "", "default")),
            ProviderConfigStatus::Unknown
        );
        idx.replace_provider_configs("aws.upbound.io", "ProviderConfig", vec![]);
        let s = |g: &str, r: ProviderConfigRef| idx.provider_config_status(g, &r);
        assert_eq!(
            s(
                "s3.aws.m.upbound.io",
                pc("ClusterProviderConfig", "", "default")
            ),
            ProviderConfigStatus::Exists
        );
        assert_eq!(
            s(
                "s3.aws.m.upbound.io",
                pc("ProviderConfig", "team-a", "mine")
            ),
            ProviderConfigStatus::Exists
        );
        assert_eq!(
            s(
                "s3.aws.m.upbound.io",
                pc("ProviderConfig", "team-b", "mine")
            ),
            ProviderConfigStatus::Missing("aws.m.upbound.io".into())
        );
        // The legacy group serves no ClusterProviderConfig.
        assert_eq!(
            s(
                "s3.aws.upbound.io",
                pc("ClusterProviderConfig", "", "default")
            ),
            ProviderConfigStatus::KindNotServed("aws.upbound.io".into())
        );
        assert_eq!(
            s("nop.crossplane.io", pc("ProviderConfig", "", "default")),
            ProviderConfigStatus::Unknown
        );
        // Only configs in use hold their Secret.
        assert_eq!(
            idx.secret_users("crossplane-system", "aws-secret"),
            vec![MrKey::new(
                "aws.m.upbound.io",
                "ClusterProviderConfig",
                "",
                "default"
            )]
        );
        assert!(idx.secret_users("team-a", "creds").is_empty());
        let default = MrKey::new("aws.m.upbound.io", "ClusterProviderConfig", "", "default");
        assert!(idx.remove_provider_config(&default));
        assert!(!idx.remove_provider_config(&default));
        assert!(idx
            .secret_users("crossplane-system", "aws-secret")
            .is_empty());
        assert_eq!(
            idx.provider_config_kinds_for("s3.aws.m.upbound.io"),
            Some((
                "aws.m.upbound.io".into(),
                vec!["ClusterProviderConfig".into(), "ProviderConfig".into()]
            ))
        );
        assert_eq!(
            idx.provider_config_kinds_for("s3.aws.upbound.io"),
            Some(("aws.upbound.io".into(), vec!["ProviderConfig".into()]))
        );
        assert_eq!(idx.provider_config_kinds_for("nop.crossplane.io"), None);
        assert_eq!(idx.provider_config_kinds_for("xaws.m.upbound.io"), None);
        idx.set_provider_config_kinds(vec![]);
        assert_eq!(
            s(
                "s3.aws.m.upbound.io",
                pc("ProviderConfig", "team-a", "mine")
            ),
            ProviderConfigStatus::Unknown
        );
    }

    /// An update that changes nothing the index keeps, the audit's digest
    /// included, says so; a relist's digests are what later updates are
    /// compared with.
    #[test]
    fn an_update_says_whether_what_the_audit_judges_changed() {
        let idx = IdentityIndex::default();
        let b = bucket("data", json!({}), json!({"forProvider": {}}));
        let claim = Some(
            identity(&b, "s3.aws.upbound.io", "Bucket", "")
                .unwrap()
                .claim(false),
        );
        let k = MrKey::new("s3.aws.upbound.io", "Bucket", "", "data");
        assert!(
            idx.upsert(IndexedMr::new(k.clone(), claim, true).with_judged(7)),
            "new"
        );
        assert!(
            !idx.upsert(IndexedMr::new(k.clone(), claim, true).with_judged(7)),
            "the same"
        );
        assert!(
            idx.upsert(IndexedMr::new(k.clone(), claim, true).with_judged(8)),
            "judged"
        );
        assert!(
            idx.upsert(IndexedMr::new(k.clone(), claim, false).with_judged(8)),
            "deletes"
        );
        assert!(
            idx.upsert(IndexedMr::new(k.clone(), None, false).with_judged(8)),
            "claim"
        );
        // The digest costs no memory: the entry is as large as before.
        assert_eq!(std::mem::size_of::<Entry>(), 32);
        idx.replace_kind(
            "s3.aws.upbound.io",
            "Bucket",
            vec![IndexedMr::new(k.clone(), claim, true).with_judged(9)],
        );
        assert!(!idx.upsert(IndexedMr::new(k.clone(), claim, true).with_judged(9)));
        assert!(idx.upsert(IndexedMr::new(k, claim, true).with_judged(10)));
    }

    #[test]
    fn a_relist_replaces_one_kind_and_duplicates_are_found() {
        let idx = IdentityIndex::default();
        let b = bucket("data", json!({}), json!({"forProvider": {}}));
        let v = bucket(
            "n",
            json!({"crossplane.io/external-name": "data"}),
            json!({"forProvider": {}}),
        );
        let ib = identity(&b, "s3.aws.m.upbound.io", "Bucket", "team-a").unwrap();
        let iv = identity(&v, "ec2.aws.upbound.io", "VPC", "").unwrap();
        let k = |ns: &str| MrKey::new("s3.aws.m.upbound.io", "Bucket", ns, "data");
        let vk = MrKey::new("ec2.aws.upbound.io", "VPC", "", "n");
        idx.upsert(IndexedMr::new(k("old"), Some(ib.claim(false)), true));
        idx.upsert(IndexedMr::new(vk.clone(), Some(iv.claim(false)), true));
        idx.replace_kind(
            "s3.aws.m.upbound.io",
            "Bucket",
            vec![
                IndexedMr::new(k("team-a"), Some(ib.claim(false)), true),
                IndexedMr::new(k("team-b"), Some(ib.claim(false)), false),
                IndexedMr::new(k("team-b2"), None, true),
            ],
        );
        assert_eq!(idx.len(), 4);
        // Only a kind listed whole has a known size.
        assert_eq!(idx.listed_len("s3.aws.m.upbound.io", "Bucket"), Some(3));
        assert_eq!(idx.listed_len("ec2.aws.upbound.io", "VPC"), None);
        idx.replace_kind("ec2.aws.upbound.io", "Subnet", vec![]);
        assert_eq!(idx.listed_len("ec2.aws.upbound.io", "Subnet"), Some(0));
        // The relisted kind's old MR no longer claims; the other kind's does.
        let claimants = idx.claimants(&ib.claim(false), &k("x"));
        let keys: Vec<_> = claimants.iter().map(|c| c.key.clone()).collect();
        assert_eq!(keys, vec![k("team-a"), k("team-b")]);
        assert_eq!(idx.claimants(&iv.claim(false), &k("x")).len(), 1);
        idx.set_provider_kinds(HashMap::from([(
            "provider-aws-s3".to_string(),
            vec![("s3.aws.m.upbound.io".to_string(), "Bucket".to_string())],
        )]));
        assert_eq!(
            idx.mrs_of_provider("provider-aws-s3"),
            vec![k("team-a"), k("team-b"), k("team-b2")]
        );
        assert_eq!(idx.deleting_in_namespace("team-a"), vec![k("team-a")]);
        assert!(idx.deleting_in_namespace("team-b").is_empty());
        assert_eq!(idx.deleting_in_namespace("team-b2"), vec![k("team-b2")]);
        assert!(idx.deleting_in_namespace("").is_empty());
        assert_eq!(idx.duplicates(), vec![vec![k("team-a"), k("team-b")]]);
        idx.drop_kind("s3.aws.m.upbound.io", "Bucket");
        assert_eq!(idx.len(), 1);
        assert!(idx.deleting_in_namespace("team-a").is_empty());
        assert!(idx.duplicates().is_empty());
        assert!(idx.mrs_of_provider("provider-aws-s3").is_empty());
        assert_eq!(idx.listed_len("s3.aws.m.upbound.io", "Bucket"), None);
        assert!(idx.claimants(&ib.claim(false), &k("x")).is_empty());
        // The last MR gone, the index is empty again (no kind left behind).
        assert!(!idx.is_empty());
        idx.remove(&vk);
        assert!(idx.is_empty());
        assert_eq!(idx.len(), 0);
    }

    #[test]
    fn a_key_knows_its_kind() {
        assert_eq!(MrKey::new("g.io", "K", "ns", "n").kind_path(), "g.io/K");
        assert_eq!(MrKey::new("g.io", "K", "", "n").kind_path(), "g.io/K");
        assert_eq!(MrKey::new("", "K", "", "n").kind_path(), "/K");
        assert_eq!(
            MrKey::new("g.io", "K", "ns", "n").kind_path(),
            kind_path("g.io", "K")
        );
    }
}
