//! Every replica's external-identity index (`external-identity`,
//! docs/controller.md): the shared CRD store (`crds`) names the MR kinds,
//! and one watch per kind feeds `Cluster::identities` with the identity of
//! each MR, and [`MrStates`] (the gauges and the leader's `PossiblyLeaked`
//! Events, `mr_states`) with whether it is paused or its creation
//! incomplete. That is the only watch of MRs a replica holds.
//!
//! Every replica answers admission, so every replica runs these watches,
//! leader or not. The objects are decoded into a small view (name,
//! annotations, deletion time, `spec.forProvider.region`,
//! `spec.providerConfigRef`); the rest of each object is skipped while
//! decoding, and the index keeps only keys and digests. A kind whose
//! identity is in fields of its own (`identityFields`) is decoded whole.
//!
//! A kind is watched once its CRD is `Established` (before that the API
//! server has no MR of it to list, and answers 404).
//!
//! The index is not synced, and `/readyz` fails, until the CRD list and
//! every MR kind it found have been listed once (a kind whose list is
//! forbidden or not served counts, so RBAC cannot keep a replica unready).
//! A configuration change (another external-name strategy or default
//! provider config) relists every kind.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::core::{DynamicObject, NotUsed, Object};
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::coverage::{Coverage, CrdSummary, MrKind};
use super::crds::CrdStore;
use super::mr_states::{MrStates, ObjState, QUIET_NOT_FOUND};
use crate::controller::changes::Changes;
use crate::kube::api::KubeError;
use crate::kube::retry::{backoff_watcher, watch_config, watcher_progress, ErrorOnce};
use crate::live_config::ConfigStore;
use crate::metrics::controller::ControllerMetrics;
use mrguard_policy::admission::config::Config;
use mrguard_policy::admission::mr::EXTERNAL_NAME;
use mrguard_policy::cluster::identity::report::entry_of;
use mrguard_policy::cluster::identity::{IndexedMr, MrKey, ProviderConfigFacts};
use mrguard_policy::cluster::Cluster;

/// How often the configuration is compared with the one the claims were
/// computed with.
const CONFIG_POLL: Duration = Duration::from_secs(2);

/// An object's `spec`, decoded when present and empty when absent or
/// null. kube's `Object` requires the field, and a list is decoded whole:
/// one MR or ProviderConfig without `spec` would fail its kind's every list.
#[derive(Clone, Debug, Default)]
pub(crate) struct OptionalSpec<T>(T);

impl<T> std::ops::Deref for OptionalSpec<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for OptionalSpec<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A missing field reaches `Option` as `None`; any other type errs.
        Ok(Self(Option::<T>::deserialize(d)?.unwrap_or_default()))
    }
}

/// What the index needs of one MR; everything else is skipped while
/// decoding. kube's `Object` costs what a hand-written view did, measured
/// decoding a 2.3 KB Bucket 20,000 times: 89 against 86 allocations and
/// 13.7 against 13.4 KB allocated per MR, 56 bytes more per view held, and
/// no view is held: the index keeps keys and digests.
pub(crate) type IdentityView = Object<OptionalSpec<ViewSpec>, NotUsed>;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ViewSpec {
    #[serde(default)]
    for_provider: ViewForProvider,
    #[serde(default)]
    provider_config_ref: Option<Value>,
    // The deletion outcome, for the teardown guard.
    #[serde(default)]
    management_policies: Option<Value>,
    #[serde(default)]
    deletion_policy: Option<Value>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct ViewForProvider {
    #[serde(default)]
    region: Option<Value>,
}

/// What the index needs of a ProviderConfig: its credentials Secret and
/// whether MRs use it.
pub(crate) type ProviderConfigView = Object<OptionalSpec<PcSpec>, PcStatus>;

#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct PcSpec {
    #[serde(default)]
    credentials: Option<PcCredentials>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PcCredentials {
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    secret_ref: Option<PcSecretRef>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct PcSecretRef {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct PcStatus {
    #[serde(default)]
    users: Option<i64>,
}

/// What the index reads of a [`ProviderConfigView`].
pub(crate) trait ProviderConfigFactsOf {
    fn facts(&self, kind: &MrKind) -> Option<(MrKey, ProviderConfigFacts)>;
}

impl ProviderConfigFactsOf for ProviderConfigView {
    fn facts(&self, kind: &MrKind) -> Option<(MrKey, ProviderConfigFacts)> {
        let name = self.metadata.name.as_deref()?;
        let namespace = self.metadata.namespace.as_deref().unwrap_or("");
        let secret = self.spec.credentials.as_ref().and_then(|c| {
            if c.source.as_deref().is_some_and(|s| s != "Secret") {
                return None;
            }
            let r = c.secret_ref.as_ref()?;
            // A namespaced ProviderConfig's Secret defaults to its own namespace.
            let ns = r
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(namespace);
            Some((ns.to_string(), r.name.clone()?))
        });
        Some((
            MrKey::new(&kind.group, &kind.kind, namespace, name),
            ProviderConfigFacts {
                secret,
                in_use: self.status.as_ref().and_then(|s| s.users).unwrap_or(0) > 0,
            },
        ))
    }
}

/// The Crossplane category of ProviderConfig CRDs.
const PROVIDER_CONFIG_CATEGORY: &str = "providerconfig";

/// A ProviderConfig or ClusterProviderConfig kind (not the Usage kinds).
fn provider_config_kind(crd: &CrdSummary) -> Option<MrKind> {
    let names = &crd.spec.names;
    if !names
        .categories
        .iter()
        .any(|c| c == PROVIDER_CONFIG_CATEGORY)
        || names.kind.ends_with("Usage")
    {
        return None;
    }
    // MrKind's parsing, without its category check.
    let mut c = crd.clone();
    c.spec.names.categories = vec![super::coverage::MANAGED_CATEGORY.into()];
    MrKind::from_crd(&c)
}

/// The provider config kinds among `crds`, keyed by CRD name.
fn provider_config_kinds<'a>(
    crds: impl IntoIterator<Item = &'a CrdSummary>,
) -> BTreeMap<String, MrKind> {
    crds.into_iter()
        .filter_map(|c| Some((c.metadata.name.clone()?, provider_config_kind(c)?)))
        .collect()
}

/// What the index, the gauges and the audit read of an [`IdentityView`].
pub(crate) trait MrView:
    Resource<DynamicType = kube::core::ApiResource>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// `spec.managementPolicies`, for the gauges.
    fn management_policies(&self) -> Option<&Value>;
    /// The index key and claim of this MR of `kind` (no claim when it has
    /// no identity yet), and whether deleting it deletes its resource.
    fn claim(&self, kind: &MrKind, config: &Config) -> Option<IndexedMr>;

    /// A digest of what the audit judges of this MR: its metadata but for
    /// `resourceVersion` and `managedFields`, and its generation, which
    /// the API server moves on any change but to metadata and, with the
    /// status subresource (every Crossplane MR's CRD has it), status. So
    /// a provider rewriting status leaves it. `every_change` (a rule reads
    /// status or managedFields): the resourceVersion too.
    fn judged(&self, every_change: bool) -> u32 {
        use std::hash::{Hash, Hasher};
        let m = self.meta();
        // Fixed keys: digests are compared within this process only.
        let mut h = std::hash::DefaultHasher::new();
        m.generation.hash(&mut h);
        m.labels.hash(&mut h);
        m.annotations.hash(&mut h);
        m.deletion_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .hash(&mut h);
        m.finalizers.hash(&mut h);
        for o in m.owner_references.iter().flatten() {
            (&o.uid, &o.kind, &o.name, o.controller).hash(&mut h);
        }
        if every_change {
            m.resource_version.hash(&mut h);
        }
        // The index keeps 32 bits (`IndexedMr::judged`).
        h.finish() as u32
    }

    /// The MR's UID and what the gauges count of it.
    fn state(&self, kind: &MrKind) -> Option<(String, ObjState)> {
        let uid = self.meta().uid.clone()?;
        let state = ObjState::of(kind, self.meta(), self.management_policies());
        Some((uid, state))
    }
}

impl MrView for IdentityView {
    fn management_policies(&self) -> Option<&Value> {
        self.spec.management_policies.as_ref()
    }

    fn claim(&self, kind: &MrKind, config: &Config) -> Option<IndexedMr> {
        // The fields the view keeps, as an object for the one conversion
        // that `check --live` and `explain` use on listed MRs too.
        let name = self.metadata.name.as_deref()?;
        let mut obj = json!({"metadata": {"name": name}, "spec": {"forProvider": {}}});
        if let Some(ns) = &self.metadata.namespace {
            obj["metadata"]["namespace"] = json!(ns);
        }
        if let Some(t) = &self.metadata.deletion_timestamp {
            obj["metadata"]["deletionTimestamp"] = json!(t.0.to_string());
        }
        if let Some(e) = self
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(EXTERNAL_NAME))
        {
            obj["metadata"]["annotations"] = json!({ EXTERNAL_NAME: e });
        }
        if let Some(r) = &self.spec.for_provider.region {
            obj["spec"]["forProvider"]["region"] = r.clone();
        }
        if let Some(r) = &self.spec.provider_config_ref {
            obj["spec"]["providerConfigRef"] = r.clone();
        }
        if let Some(p) = &self.spec.management_policies {
            obj["spec"]["managementPolicies"] = p.clone();
        }
        if let Some(p) = &self.spec.deletion_policy {
            obj["spec"]["deletionPolicy"] = p.clone();
        }
        entry_of(&obj, &kind.group, &kind.kind, config)
    }
}

/// The whole MR, for a kind whose identity is in fields of its own
/// (`identityFields`, such as provider-kubernetes' Object, named by its
/// manifest): the small view does not keep them.
impl MrView for DynamicObject {
    fn management_policies(&self) -> Option<&Value> {
        self.data.get("spec")?.get("managementPolicies")
    }

    fn claim(&self, kind: &MrKind, config: &Config) -> Option<IndexedMr> {
        let mut obj = self.data.clone();
        obj.as_object_mut()?.insert(
            "metadata".into(),
            serde_json::to_value(&self.metadata).ok()?,
        );
        entry_of(&obj, &kind.group, &kind.kind, config)
    }
}

/// Whether `kind`'s MRs are watched whole ([`DynamicObject`]) rather than
/// as the small [`IdentityView`]: its identity is in `identityFields`.
pub(crate) fn watched_whole(kind: &MrKind, config: &Config) -> bool {
    !config
        .resource(&kind.group, &kind.kind)
        .identity_fields
        .is_empty()
}

/// Keeps `cluster`'s identity index from watches; runs on every replica
/// until the task is aborted.
pub(crate) async fn run(
    client: kube::Client,
    crds: CrdStore,
    config: Arc<ConfigStore>,
    cluster: Arc<Cluster>,
    states: MrStates,
    metrics: Arc<ControllerMetrics>,
) {
    let index = cluster.identities();
    let mut crd_changes = crds.subscribe();
    let mut current = Coverage::default();
    let mut configs: BTreeMap<String, MrKind> = BTreeMap::new();
    let mut crds_synced = false;
    // Kinds whose first list is still outstanding, while not yet synced.
    let mut waiting: Option<HashSet<String>> = None;
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
    let mut tasks = tokio::task::JoinSet::new();
    let mut running: HashMap<String, (MrKind, tokio::task::AbortHandle)> = HashMap::new();
    let mut applied = config.load();
    let mut poll = tokio::time::interval(CONFIG_POLL);
    loop {
        let mut changed = false;
        tokio::select! {
            c = crd_changes.next() => {
                if c.is_none() {
                    return;
                }
                // Only kinds the API server serves: a watch started on a
                // new CRD met 404s until it was established and backed off
                // up to 30 s after that.
                let served = crds.served();
                current = Coverage::from_crds(served.iter().map(|c| &c.summary));
                configs = provider_config_kinds(served.iter().map(|c| &c.summary));
                crds_synced = true;
                changed = true;
            }
            Some(key) = done_rx.recv() => {
                if let Some(w) = waiting.as_mut() {
                    w.remove(&key);
                }
            }
            _ = poll.tick() => {
                let now = config.load();
                if !Arc::ptr_eq(&now, &applied) {
                    // A kind's claims depend on part of the configuration:
                    // a kind whose part changed is listed again, by a new
                    // watch. Any change did relist every kind, and at 5,000
                    // kinds each edit of a rule sent every replica's 5,000
                    // watchers to relist at once, and the audit's pass over
                    // every kind that follows an edit waited behind them:
                    // 35-38 s a pass, 19-21 s without. The others keep
                    // their watch and the configuration it started with,
                    // which claims the same.
                    let before = running.len();
                    running.retain(|key, (kind, handle)| {
                        let keep = key.starts_with("pc:")
                            || now.same_claims_for(&applied, &kind.group, &kind.kind);
                        if !keep {
                            handle.abort();
                        }
                        keep
                    });
                    changed = crds_synced && running.len() < before;
                    applied = now;
                }
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
        if changed {
            // Which Provider serves which kinds is `replica`'s: it knows
            // the revisions.
            index.set_provider_config_kinds(
                configs
                    .values()
                    .map(|k| (k.group.clone(), k.kind.clone()))
                    .collect(),
            );
            // MR kinds by CRD name; provider config kinds as "pc:" + name.
            let mut wanted: BTreeMap<String, (&MrKind, bool)> =
                current.kinds().map(|k| (k.key(), (k, false))).collect();
            wanted.extend(
                configs
                    .values()
                    .map(|k| (format!("pc:{}", k.key()), (k, true))),
            );
            running.retain(|key, (kind, handle)| {
                let keep = wanted.get(key).is_some_and(|(w, _)| *w == kind);
                if !keep {
                    handle.abort();
                    if !key.starts_with("pc:") {
                        index.drop_kind(&kind.group, &kind.kind);
                        states.drop_kind(kind);
                    }
                }
                keep
            });
            for (key, (kind, is_config)) in wanted {
                if running.contains_key(&key) {
                    continue;
                }
                let handle = if is_config {
                    tasks.spawn(watch_provider_configs(
                        client.clone(),
                        kind.clone(),
                        key.clone(),
                        cluster.clone(),
                        states.changes().clone(),
                        done_tx.clone(),
                        metrics.clone(),
                    ))
                } else {
                    tasks.spawn(watch_kind(
                        client.clone(),
                        kind.clone(),
                        applied.clone(),
                        cluster.clone(),
                        states.clone(),
                        done_tx.clone(),
                        metrics.clone(),
                    ))
                };
                running.insert(key, (kind.clone(), handle));
            }
            if !index.is_synced() && waiting.is_none() {
                waiting = Some(running.keys().cloned().collect());
            }
        }
        if let Some(w) = &waiting {
            if w.is_empty() {
                waiting = None;
                index.set_synced(true);
                tracing::info!(
                    kinds = running.len(),
                    provider_config_kinds = configs.len(),
                    claims = index.len(),
                    "identity index synced"
                );
            }
        }
    }
}

/// A watcher's list of one page (kube-runtime's 500): a kind the index has
/// listed and knows to fit in it is listed from the API server's watch
/// cache (`resourceVersion=0`), as client-go's reflectors list; any other
/// from etcd, in pages. After an API-server restart every watcher lists
/// again, and from etcd a 100-object list cost kube-apiserver 1.24 about 40
/// ms of CPU against 7 ms from its cache, which ignores `limit` (so a kind
/// of unknown size is never listed from it). BENCHMARKS.md.
const CACHE_LIST_MAX: usize = 500;

fn lists_from_cache(
    index: &mrguard_policy::cluster::identity::IdentityIndex,
    kind: &MrKind,
) -> bool {
    index
        .listed_len(&kind.group, &kind.kind)
        .is_some_and(|n| n <= CACHE_LIST_MAX)
}

/// A watcher whose list source is chosen again before each relist (from
/// the watch cache when `from_cache` says so, else from etcd in pages):
/// kube-runtime fixes its config when the watcher starts, and relists only
/// after an error that leaves it no resource version to resume from. A
/// watch that resumes keeps its watcher.
fn sized_watcher<K>(
    api: Api<K>,
    from_cache: impl Fn() -> bool + Send + Sync + 'static,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    fn config(from_cache: bool) -> watcher::Config {
        if from_cache {
            // Without a page size: kube leaves out resourceVersion=0 when
            // a limit is set, and the list would go to etcd after all.
            watcher::Config {
                page_size: None,
                ..watch_config().any_semantic()
            }
        } else {
            watch_config()
        }
    }
    fn relists(e: &watcher::Error) -> bool {
        match e {
            watcher::Error::InitialListFailed(_) | watcher::Error::NoResourceVersion => true,
            watcher::Error::WatchError(s) => s.code == 410,
            _ => false,
        }
    }
    let cached = from_cache();
    let inner = watcher(api.clone(), config(cached)).boxed();
    futures::stream::unfold(
        (inner, cached, api, from_cache),
        |(mut inner, cached, api, from_cache)| async move {
            let item = inner.next().await?;
            let now = match &item {
                Err(e) if relists(e) => from_cache(),
                _ => cached,
            };
            if now != cached {
                inner = watcher(api.clone(), config(now)).boxed();
            }
            Some((item, (inner, now, api, from_cache)))
        },
    )
}

/// One kind's watch, decoding its MRs as the identity needs them: whole
/// for a kind named by `identityFields`, else the small view.
async fn watch_kind(
    client: kube::Client,
    kind: MrKind,
    config: Arc<Config>,
    cluster: Arc<Cluster>,
    states: MrStates,
    done: mpsc::UnboundedSender<String>,
    metrics: Arc<ControllerMetrics>,
) {
    if watched_whole(&kind, &config) {
        watch_kind_as::<DynamicObject>(client, kind, config, cluster, states, done, metrics).await
    } else {
        watch_kind_as::<IdentityView>(client, kind, config, cluster, states, done, metrics).await
    }
}

/// One kind's watch: a fresh list replaces the kind's claims and states,
/// events update them.
async fn watch_kind_as<V: MrView>(
    client: kube::Client,
    kind: MrKind,
    config: Arc<Config>,
    cluster: Arc<Cluster>,
    states: MrStates,
    done: mpsc::UnboundedSender<String>,
    metrics: Arc<ControllerMetrics>,
) {
    let index = cluster.identities();
    let api: Api<V> = Api::all_with(client, &kind.api_resource());
    let from_cache = {
        let cluster = cluster.clone();
        let kind = kind.clone();
        move || lists_from_cache(cluster.identities(), &kind)
    };
    let mut stream = backoff_watcher(sized_watcher(api, from_cache)).boxed();
    type Listing = (Vec<IndexedMr>, Vec<(String, ObjState)>);
    // Without a rule that reads them, status updates change no finding and
    // do not make the kind due for the audit.
    let every_change = config.judges_every_update();
    let indexed = |o: &V| {
        o.claim(&kind, &config)
            .map(|mr| mr.with_judged(o.judged(every_change)))
    };
    let mut listing: Option<Listing> = None;
    let mut watch_error = ErrorOnce::default();
    let mut not_found = 0;
    let what = format!("watch of {}", kind.key());
    let key = kind.key();
    while let Some(ev) = stream.next().await {
        if watcher_progress(&ev) {
            watch_error.ok(&what);
            not_found = 0;
            states.set_forbidden(&kind, false);
        }
        match ev {
            Ok(watcher::Event::Init) => listing = Some(Default::default()),
            Ok(watcher::Event::InitApply(o)) => {
                if let Some((mrs, objs)) = listing.as_mut() {
                    mrs.extend(indexed(&o));
                    objs.extend(o.state(&kind));
                }
            }
            Ok(watcher::Event::InitDone) => {
                let (mrs, objs) = listing.take().unwrap_or_default();
                index.replace_kind(&kind.group, &kind.kind, mrs);
                states.replace_kind(&kind, objs);
                states.changes().kind(&kind.group, &kind.kind);
                let _ = done.send(key.clone());
            }
            Ok(watcher::Event::Apply(o)) => {
                let changed = indexed(&o).is_none_or(|mr| index.upsert(mr));
                if let Some((uid, s)) = o.state(&kind) {
                    states.upsert(&kind, &uid, s);
                }
                if changed {
                    states.changes().kind(&kind.group, &kind.kind);
                }
            }
            Ok(watcher::Event::Delete(o)) => {
                if let Some(mr) = o.claim(&kind, &config) {
                    index.remove(&mr.key);
                }
                if let Some(uid) = o.meta().uid.as_deref() {
                    states.remove(&kind, uid);
                }
                states.changes().kind(&kind.group, &kind.kind);
            }
            Err(e) => {
                let e = KubeError::watch("managed resources", kind.key(), e);
                // A kind this replica may not list, or not yet served, must
                // not keep the replica unready: it counts as listed (with
                // nothing) and is retried. A forbidden kind is reported in
                // mrguard_controller_forbidden_kinds (the chart's RBAC lists
                // groups; a provider outside them).
                match e.status_code() {
                    Some(403) => {
                        states.set_forbidden(&kind, true);
                        let _ = done.send(key.clone());
                    }
                    Some(404) => {
                        let _ = done.send(key.clone());
                    }
                    _ => {}
                }
                // A CRD is not served for a moment after it is created (or
                // before its deletion reaches the coverage): a 404 on the
                // first tries is expected, and installing a provider family
                // logged a warning (and a "recovered") per kind, 1,000 of
                // each. One that lasts is logged.
                if e.is_not_found() && not_found < QUIET_NOT_FOUND {
                    not_found += 1;
                    e.count(Some(&metrics));
                    tracing::debug!(error = %e, "{what}: not served yet; retrying with backoff");
                    continue;
                }
                watch_error.failed(
                    &e,
                    Some(&metrics),
                    "failed to watch MRs; retrying with backoff",
                );
            }
        }
    }
}

/// One provider config kind's watch, like [`watch_kind`]; `key` is what
/// it reports when listed.
async fn watch_provider_configs(
    client: kube::Client,
    kind: MrKind,
    key: String,
    cluster: Arc<Cluster>,
    changes: Changes,
    done: mpsc::UnboundedSender<String>,
    metrics: Arc<ControllerMetrics>,
) {
    let index = cluster.identities();
    let api: Api<ProviderConfigView> = Api::all_with(client, &kind.api_resource());
    let mut stream = backoff_watcher(watcher(api, watch_config())).boxed();
    let mut listing: Option<Vec<(MrKey, ProviderConfigFacts)>> = None;
    let mut watch_error = ErrorOnce::default();
    let what = format!("provider config watch of {}", kind.key());
    while let Some(ev) = stream.next().await {
        if watcher_progress(&ev) {
            watch_error.ok(&what);
        }
        match ev {
            Ok(watcher::Event::Init) => listing = Some(Vec::new()),
            Ok(watcher::Event::InitApply(o)) => {
                if let (Some(l), Some(f)) = (listing.as_mut(), o.facts(&kind)) {
                    l.push(f);
                }
            }
            Ok(watcher::Event::InitDone) => {
                index.replace_provider_configs(
                    &kind.group,
                    &kind.kind,
                    listing.take().unwrap_or_default(),
                );
                changes.everything();
                let _ = done.send(key.clone());
            }
            // Whether two claims reach one account depends on every
            // provider config, so a change may move any kind's findings.
            Ok(watcher::Event::Apply(o)) => {
                if let Some((k, f)) = o.facts(&kind) {
                    if index.upsert_provider_config(k, f) {
                        changes.everything();
                    }
                }
            }
            Ok(watcher::Event::Delete(o)) => {
                if let Some((k, _)) = o.facts(&kind) {
                    if index.remove_provider_config(&k) {
                        changes.everything();
                    }
                }
            }
            Err(e) => {
                let e = KubeError::watch("provider configs", kind.key(), e);
                if matches!(e.status_code(), Some(403 | 404)) {
                    let _ = done.send(key.clone());
                }
                watch_error.failed(
                    &e,
                    Some(&metrics),
                    "failed to watch provider configs; retrying with backoff",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An MR or ProviderConfig without `spec` (or with `spec: null`) still
    /// decodes, so it cannot fail its kind's list.
    #[test]
    fn views_decode_without_a_spec() {
        for obj in [
            json!({"apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC", "metadata": {"name": "a"}}),
            json!({"apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC", "metadata": {"name": "a"}, "spec": null}),
        ] {
            let mr: IdentityView = serde_json::from_value(obj.clone()).unwrap();
            assert!(mr.spec.for_provider.region.is_none());
            let pc: ProviderConfigView = serde_json::from_value(obj).unwrap();
            assert!(pc.spec.credentials.is_none());
        }
        let mr: IdentityView = serde_json::from_value(json!({
            "apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC", "metadata": {"name": "a"},
            "spec": {"forProvider": {"region": "eu-west-1"}}
        }))
        .unwrap();
        assert_eq!(mr.spec.for_provider.region, Some(json!("eu-west-1")));
    }

    fn kind(group: &str, k: &str, namespaced: bool) -> MrKind {
        MrKind {
            group: group.into(),
            kind: k.into(),
            plural: format!("{}s", k.to_lowercase()),
            versions: vec!["v1beta1".into()],
            read_version: "v1beta1".into(),
            namespaced,
        }
    }

    #[test]
    fn provider_config_crds_and_their_credentials() {
        let crd = |kind: &str, scope: &str, categories: Value| -> CrdSummary {
            serde_json::from_value(json!({
                "metadata": {"name": format!("{}s.aws.m.upbound.io", kind.to_lowercase())},
                "spec": {"group": "aws.m.upbound.io", "scope": scope,
                         "names": {"kind": kind, "plural": format!("{}s", kind.to_lowercase()),
                                   "categories": categories},
                         "versions": [{"name": "v1beta1", "served": true, "storage": true}]}
            }))
            .unwrap()
        };
        let cats = json!(["crossplane", "providerconfig", "aws"]);
        let k = provider_config_kind(&crd("ProviderConfig", "Namespaced", cats.clone())).unwrap();
        assert!(k.namespaced);
        assert!(
            provider_config_kind(&crd("ClusterProviderConfig", "Cluster", cats.clone())).is_some()
        );
        assert!(provider_config_kind(&crd("ProviderConfigUsage", "Namespaced", cats)).is_none());
        assert!(
            provider_config_kind(&crd("ProviderConfig", "Namespaced", json!(["managed"])))
                .is_none()
        );

        let view: ProviderConfigView = serde_json::from_value(json!({
            "metadata": {"name": "team", "namespace": "team-a"},
            "spec": {"credentials": {"source": "Secret", "secretRef": {"name": "creds", "key": "k"}}},
            "status": {"users": 2}
        }))
        .unwrap();
        let (key, facts) = view.facts(&k).unwrap();
        assert_eq!(
            key,
            MrKey::new("aws.m.upbound.io", "ProviderConfig", "team-a", "team")
        );
        assert_eq!(facts.secret, Some(("team-a".into(), "creds".into())));
        assert!(facts.in_use);
        let irsa: ProviderConfigView = serde_json::from_value(json!({
            "metadata": {"name": "irsa"}, "spec": {"credentials": {"source": "IRSA"}}
        }))
        .unwrap();
        let (_, facts) = irsa.facts(&k).unwrap();
        assert_eq!(facts.secret, None);
        assert!(!facts.in_use);
    }

    #[test]
    fn the_view_reads_only_what_the_identity_needs() {
        let obj = json!({
            "apiVersion": "s3.aws.m.upbound.io/v1beta1", "kind": "Bucket",
            "metadata": {"name": "data", "namespace": "team-a",
                         "annotations": {"crossplane.io/external-name": "data", "other": "x"},
                         "deletionTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"forProvider": {"region": "eu-west-1", "tags": {"a": "b"}},
                     "providerConfigRef": {"kind": "ClusterProviderConfig", "name": "default"}},
            "status": {"atProvider": {"arn": "arn:aws:s3:::data"}}
        });
        let view: IdentityView = serde_json::from_value(obj.clone()).unwrap();
        let k = kind("s3.aws.m.upbound.io", "Bucket", true);
        let cfg = Config::builtin();
        let mr = view.claim(&k, &cfg).unwrap();
        assert!(mr.deletes, "the default policies delete");
        assert_eq!(
            mr.key,
            MrKey::new("s3.aws.m.upbound.io", "Bucket", "team-a", "data")
        );
        let id = mrguard_policy::cluster::identity::Identity::of(
            &obj,
            &k.group,
            &k.kind,
            "team-a",
            cfg.resource(&k.group, &k.kind),
            &cfg.provider_config,
        )
        .unwrap();
        assert_eq!(mr.claim, Some(id.claim(true)));
        // A VPC without an external name has no identity yet.
        let vpc: IdentityView = serde_json::from_value(
            json!({"metadata": {"name": "net"}, "spec": {"forProvider": {}}}),
        )
        .unwrap();
        let mr = vpc
            .claim(&kind("ec2.aws.upbound.io", "VPC", false), &cfg)
            .unwrap();
        assert_eq!(mr.claim, None);
        // Observe-only orphans.
        let observed: IdentityView = serde_json::from_value(
            json!({"metadata": {"name": "net"}, "spec": {"forProvider": {}, "managementPolicies": ["Observe"]}}),
        )
        .unwrap();
        let mr = observed
            .claim(&kind("ec2.aws.upbound.io", "VPC", false), &cfg)
            .unwrap();
        assert!(!mr.deletes);
    }

    /// A kind named by `identityFields` (provider-kubernetes' Object, built
    /// in) is watched whole, and two Objects of any name and either scope
    /// on one ConfigMap claim alike, as admission computes it; the small
    /// view would have no identity for them.
    #[test]
    fn a_kind_named_by_its_fields_is_watched_whole_and_claims_its_target() {
        let cfg = Config::builtin();
        let object = |group: &str, name: &str, ns: Option<&str>| {
            let mut o = json!({
                "apiVersion": format!("{group}/v1alpha1"), "kind": "Object",
                "metadata": {"name": name, "uid": name},
                "spec": {"forProvider": {"manifest": {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "shared", "namespace": "apps"}}},
                    "providerConfigRef": {"kind": "ClusterProviderConfig", "name": "default"}},
            });
            if let Some(ns) = ns {
                o["metadata"]["namespace"] = json!(ns);
            }
            o
        };
        let cluster = kind("kubernetes.crossplane.io", "Object", false);
        let namespaced = kind("kubernetes.m.crossplane.io", "Object", true);
        assert!(watched_whole(&cluster, &cfg) && watched_whole(&namespaced, &cfg));
        assert!(!watched_whole(
            &kind("ec2.aws.upbound.io", "VPC", false),
            &cfg
        ));

        let first = object("kubernetes.crossplane.io", "owner", None);
        let a: DynamicObject = serde_json::from_value(first.clone()).unwrap();
        let a = a.claim(&cluster, &cfg).unwrap();
        let b: DynamicObject = serde_json::from_value(object(
            "kubernetes.m.crossplane.io",
            "intruder",
            Some("team"),
        ))
        .unwrap();
        let b = b.claim(&namespaced, &cfg).unwrap();
        let (ca, cb) = (a.claim.unwrap(), b.claim.unwrap());
        assert!(ca.same_identity(&cb), "{ca:?} {cb:?}");
        let id = mrguard_policy::cluster::identity::Identity::of(
            &first,
            &cluster.group,
            &cluster.kind,
            "",
            cfg.resource(&cluster.group, &cluster.kind),
            &cfg.provider_config,
        )
        .unwrap();
        assert_eq!(ca, id.claim(false));
        assert_eq!(id.external_name, "v1/ConfigMap/apps/shared");
        // The small view keeps no manifest: it would claim nothing.
        let view: IdentityView = serde_json::from_value(first).unwrap();
        assert_eq!(view.claim(&cluster, &cfg).unwrap().claim, None);
    }

    /// A kind is listed only once its CRD is established; until then it
    /// does not hold readiness back. A watch started with the CRD meets
    /// 404s (then backs off up to 30 s once it is served).
    #[tokio::test]
    async fn a_kind_is_watched_once_its_crd_is_established() {
        use crate::controller::replica::coverage::tests::fixture_crds;
        use crate::kube::mock::{self, list, Reply};
        let vpc_crd = fixture_crds()
            .into_iter()
            .find(|c| c["spec"]["names"]["kind"] == "VPC")
            .unwrap();
        let crds = [vpc_crd.clone()];
        let (client, api) = mock::client(move |r| {
            if let Some(reply) = mock::crds_reply(r, &crds) {
                return reply;
            }
            if r.query.contains("watch=true") {
                return Reply::Hang;
            }
            Reply::Json(200, list("VPCList", "ec2.aws.upbound.io/v1beta1", vec![]))
        });
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let (crds, crd_watch) = CrdStore::watch(client.clone(), metrics.clone());
        let crd_task = tokio::spawn(crd_watch);
        let cluster = Arc::new(Cluster::default());
        let config = ConfigStore::new(Config::builtin(), None);
        let task = tokio::spawn(run(
            client,
            crds,
            config.clone(),
            cluster.clone(),
            MrStates::new(metrics.clone()),
            metrics,
        ));
        let vpc_requests = || {
            api.requests()
                .iter()
                .filter(|r| r.path.ends_with("/vpcs"))
                .count()
        };
        // Synced with the CRD not established: no MR of it can exist.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !cluster.identities().is_synced() {
            assert!(tokio::time::Instant::now() < deadline, "never synced");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(vpc_requests(), 0, "listed before it was served");
        let mut established = crate::controller::replica::coverage::tests::established(vpc_crd);
        established["metadata"]["resourceVersion"] = json!("2");
        api.wait_watch("customresourcedefinitions").await;
        assert_eq!(
            api.push("customresourcedefinitions", "MODIFIED", established),
            1
        );
        let vpc_lists = |r: &[mock::Recorded]| {
            r.iter()
                .filter(|r| r.path.ends_with("/vpcs") && !r.query.contains("watch=true"))
                .count()
        };
        api.wait_for("the VPC list", |r| vpc_lists(r) == 1).await;
        // A new rule action leaves every claim: no relist.
        let builtin = mrguard_policy::admission::config::BUILTIN_YAML;
        config.replace(
            Config::from_yaml(&format!(
                "{builtin}\nrules:\n  reference: {{action: Warn}}\n"
            ))
            .unwrap(),
        );
        tokio::time::sleep(CONFIG_POLL * 2).await;
        assert_eq!(vpc_lists(&api.requests()), 1, "relisted for a rule change");
        // An entry in front for another kind leaves VPC's claims: no relist.
        let in_front = |entry: &str| {
            let yaml = builtin.replacen("resources:\n", &format!("resources:\n{entry}"), 1);
            Config::from_yaml(&yaml).unwrap()
        };
        config.replace(in_front(
            "  - apiGroups: ['s3.aws.upbound.io']\n    kinds: [Bucket]\n    deletionProtection: true\n",
        ));
        tokio::time::sleep(CONFIG_POLL * 2).await;
        assert_eq!(
            vpc_lists(&api.requests()),
            1,
            "relisted for another kind's entry"
        );
        // One that gives VPC another strategy changes its claims: a relist.
        config.replace(in_front(
            "  - apiGroups: ['ec2.aws.m.upbound.io']\n    kinds: [VPC]\n    externalName: NameAsIdentifier\n",
        ));
        api.wait_for("the VPC relist", |r| vpc_lists(r) == 2).await;
        // Another default provider config changes claims: a relist.
        config.replace(Config::from_yaml("providerConfig:\n  defaultName: other\n").unwrap());
        api.wait_for("the VPC relist", |r| vpc_lists(r) == 3).await;
        task.abort();
        crd_task.abort();
    }

    /// The VPC kind's watch on its own task: the task, the kinds it
    /// reports listed, and the cluster whose index it fills.
    fn spawn_vpc_watch(
        client: kube::Client,
        states: MrStates,
        metrics: Arc<ControllerMetrics>,
    ) -> (
        tokio::task::JoinHandle<()>,
        mpsc::UnboundedReceiver<String>,
        Arc<Cluster>,
    ) {
        spawn_vpc_watch_with(client, states, metrics, Config::builtin())
    }

    fn spawn_vpc_watch_with(
        client: kube::Client,
        states: MrStates,
        metrics: Arc<ControllerMetrics>,
        config: Config,
    ) -> (
        tokio::task::JoinHandle<()>,
        mpsc::UnboundedReceiver<String>,
        Arc<Cluster>,
    ) {
        let cluster = Arc::new(Cluster::default());
        let (done, done_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(watch_kind_as::<IdentityView>(
            client,
            crate::controller::replica::mr_states::tests::vpc_kind(),
            Arc::new(config),
            cluster.clone(),
            states,
            done,
            metrics,
        ));
        (task, done_rx, cluster)
    }

    /// A kind's first list is from etcd; once the index knows the kind
    /// fits in a page, the relist after an expired watch (a restarted API
    /// server's cache answers the old resource version with a 410 event)
    /// comes from the watch cache. A failed watch request does not relist,
    /// so it keeps its watcher and resumes.
    #[tokio::test]
    async fn a_relist_comes_from_the_cache_once_the_kind_is_known_small() {
        use crate::controller::replica::mr_states::tests::{objects, vpc_kind};
        use crate::kube::mock::{self, list, status, Reply};
        let watches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (client, api) = mock::client({
            let watches = watches.clone();
            move |r| {
                if r.query.contains("watch=true") {
                    // The first watch request fails outright; the next is
                    // expired, as after a restart.
                    return match watches.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                        0 => Reply::Json(500, status(500, "InternalError", "etcd leader changed")),
                        _ => Reply::Watch(vec![json!({"type": "ERROR",
                            "object": status(410, "Expired", "too old resource version: 100 (200)")})]),
                    };
                }
                Reply::Json(
                    200,
                    list("VPCList", "ec2.aws.upbound.io/v1beta1", objects()),
                )
            }
        });
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let (task, mut done_rx, _) =
            spawn_vpc_watch(client, MrStates::new(metrics.clone()), metrics);
        done_rx.recv().await.unwrap();
        done_rx.recv().await.unwrap();
        task.abort();
        let requests: Vec<String> = api
            .requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/vpcs"))
            .map(|r| r.query)
            .collect();
        // list (etcd), watch (500), watch again from the same version
        // (expired), list (cache).
        assert!(requests.len() >= 4, "{requests:?}");
        assert!(
            requests[0].contains("limit=500") && !requests[0].contains("resourceVersion=0"),
            "{requests:?}"
        );
        assert!(
            requests[1].contains("watch=true") && requests[2].contains("watch=true"),
            "a failed watch request is retried, not relisted: {requests:?}"
        );
        assert!(
            requests[1].contains("resourceVersion=100")
                && requests[2].contains("resourceVersion=100"),
            "{requests:?}"
        );
        assert!(
            requests[3].contains("resourceVersion=0")
                && !requests[3].contains("limit=")
                && !requests[3].contains("watch=true"),
            "{requests:?}"
        );
        // The choice follows the kind's size in the index.
        let kind = vpc_kind();
        let index = mrguard_policy::cluster::identity::IdentityIndex::default();
        assert!(!lists_from_cache(&index, &kind));
        let keys = |n: usize| -> Vec<_> {
            (0..n)
                .map(|i| {
                    IndexedMr::new(
                        MrKey::new(&kind.group, &kind.kind, "", &format!("v{i}")),
                        None,
                        true,
                    )
                })
                .collect()
        };
        index.replace_kind(&kind.group, &kind.kind, keys(CACHE_LIST_MAX));
        assert!(lists_from_cache(&index, &kind));
        index.replace_kind(&kind.group, &kind.kind, keys(CACHE_LIST_MAX + 1));
        assert!(!lists_from_cache(&index, &kind));
    }

    /// The one watch per kind feeds the identity index and the MR states
    /// (a follower's, unpublished, then the leader's gauges), and a kind
    /// RBAC forbids counts in mrguard_controller_forbidden_kinds until its
    /// list works.
    #[tokio::test]
    async fn one_watch_feeds_the_index_and_the_states() {
        use crate::controller::replica::mr_states::tests::objects;
        use crate::kube::mock::{self, list, status, Reply};
        use std::sync::atomic::{AtomicBool, Ordering};
        let allowed = Arc::new(AtomicBool::new(false));
        let a = allowed.clone();
        let (client, api) = mock::client(move |r| {
            if r.query.contains("watch=true") {
                return Reply::Hang;
            }
            if a.load(Ordering::SeqCst) {
                Reply::Json(
                    200,
                    list("VPCList", "ec2.aws.upbound.io/v1beta1", objects()),
                )
            } else {
                Reply::Json(
                    403,
                    status(403, "Forbidden", "vpcs.ec2.aws.upbound.io is forbidden"),
                )
            }
        });
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let states = MrStates::new(metrics.clone());
        states.publish(true);
        let (task, mut done_rx, cluster) = spawn_vpc_watch(client, states.clone(), metrics.clone());
        // A forbidden kind counts as listed, and as forbidden.
        assert_eq!(done_rx.recv().await.unwrap(), "vpcs.ec2.aws.upbound.io");
        assert_eq!(metrics.forbidden_kinds.get(), 1);
        allowed.store(true, Ordering::SeqCst);
        // The next relist (after the first backoff step) succeeds.
        assert_eq!(done_rx.recv().await.unwrap(), "vpcs.ec2.aws.upbound.io");
        assert_eq!(metrics.forbidden_kinds.get(), 0);
        let g = |state: &str| {
            metrics
                .managed_resources
                .with_label_values(&["ec2.aws.upbound.io", "VPC", state])
                .get()
        };
        assert_eq!((g("paused"), g("creation_incomplete")), (2, 1));
        // Five MRs, named by their external names (NameAsIdentifier VPCs
        // claim nothing without one), all in the index.
        assert_eq!(cluster.identities().len(), 5);
        // One request per list and per watch: nothing else watches VPCs.
        let lists = api
            .requests()
            .iter()
            .filter(|r| r.path.contains("/vpcs") && !r.query.contains("watch=true"))
            .count();
        assert_eq!(lists, 2);
        task.abort();
    }

    /// A provider rewriting an MR's status (a new resourceVersion, status
    /// and managedFields; the same generation and metadata) does not make
    /// the kind due for the audit; a spec change (a new generation) does.
    /// With a CEL rule that reads status, every update does.
    #[tokio::test]
    async fn only_what_the_audit_judges_moves_the_kinds_stamp() {
        use crate::controller::replica::mr_states::tests::vpc;
        use crate::kube::mock::{self, list, Reply};
        let status_rule = Config::from_yaml(
            "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    celRules:\n      - {name: ready, expression: 'has(self.status)', message: m}\n",
        )
        .unwrap();
        for (config, moves) in [(Config::builtin(), 1), (status_rule, 2)] {
            let mut first = vpc(
                "net",
                "u1",
                json!({}),
                json!({"forProvider": {"region": "us-east-1"}}),
            );
            first["metadata"]["generation"] = json!(1);
            let mut status_only = first.clone();
            status_only["metadata"]["resourceVersion"] = json!("11");
            status_only["metadata"]["managedFields"] =
                json!([{"manager": "provider", "operation": "Update", "subresource": "status"}]);
            status_only["status"] = json!({"atProvider": {"id": "vpc-1"}});
            let mut spec_change = status_only.clone();
            spec_change["metadata"]["resourceVersion"] = json!("12");
            spec_change["metadata"]["generation"] = json!(2);
            spec_change["spec"]["forProvider"]["cidrBlock"] = json!("10.0.0.0/16");
            let mut watched = false;
            let (client, _api) = mock::client(move |r| {
                if !r.query.contains("watch=true") {
                    return Reply::Json(
                        200,
                        list("VPCList", "ec2.aws.upbound.io/v1beta1", vec![first.clone()]),
                    );
                }
                // The first watch sends the two updates; later ones wait.
                if std::mem::replace(&mut watched, true) {
                    return Reply::Hang;
                }
                Reply::Watch(vec![
                    json!({"type": "MODIFIED", "object": status_only.clone()}),
                    json!({"type": "MODIFIED", "object": spec_change.clone()}),
                ])
            });
            let metrics =
                Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
            let states = MrStates::new(metrics.clone());
            let (task, mut done_rx, _cluster) =
                spawn_vpc_watch_with(client, states.clone(), metrics, config);
            done_rx.recv().await.unwrap();
            // Beyond the list's move. The events come in order: once the
            // spec change moved it, the status update had its turn.
            let moved = || states.changes().stamp("ec2.aws.upbound.io", "VPC").own() - 1;
            tokio::time::timeout(Duration::from_secs(5), async {
                while moved() < moves {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(moved(), moves);
            task.abort();
        }
    }
}
