//! The audit: the validation rules over every existing MR, for example ones
//! created before a rule existed or while the webhook was off. Each object
//! is judged as a CREATE, so rules about transitions (immutable fields,
//! external-name changes) are skipped. Used by the controller on an
//! interval and by `mrguard audit`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{DynamicObject, ListParams};
use kube::Api;
use serde::Serialize;
use serde_json::Value;

use crate::controller::changes::Stamp;
use crate::controller::metrics::ControllerMetrics;
use crate::controller::replica::coverage::{Coverage, MrKind, CRD_PAGE_SIZE};
use crate::controller::replica::crds::{CrdStore, ServedCrd};
use crate::controller::replica::identity::{watched_whole, IdentityView, MrView};
use crate::controller::replica::mr_states::MrStates;
use crate::kube::api::{api_err, list_pages, list_values, KubeError};
use crate::live_config::ConfigStore;
use mrguard_policy::admission::config::Config;
use mrguard_policy::admission::model::Action;
use mrguard_policy::admission::review::RequestBuilder;
use mrguard_policy::cluster::Cluster;
use mrguard_policy::commands::reports::{PassInput, ReportFinding, ReportedMr};

/// Objects per list page.
const PAGE_SIZE: u32 = 250;

/// How a kind is listed: a kind the replica's identity index follows and
/// knows to fit in one page is read from the API server's watch cache
/// (`resourceVersion=0`, whole, as the cache ignores `limit`); any other
/// is paged from etcd. kube-apiserver 1.24 spent 40 ms of CPU on a
/// 100-object list from etcd and 6.7 ms from its cache, and at 100,000
/// MRs over 1,000 kinds a pass was bound by it (BENCHMARKS.md). The cache
/// may be a moment behind etcd; an audit tolerates that, and a kind whose
/// size is unknown is never read whole.
fn list_params(kind: &MrKind, cluster: &Cluster) -> ListParams {
    match cluster.identities().listed_len(&kind.group, &kind.kind) {
        // `resourceVersion=0` alone means any version, as `match_any` does;
        // without its `resourceVersionMatch`, the controller_scale bench
        // tells the audit's lists from the watchers' in the audit log.
        Some(n) if n <= PAGE_SIZE as usize => ListParams::default().at("0"),
        _ => ListParams::default().limit(PAGE_SIZE),
    }
}

/// One rule finding on one existing MR.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct AuditFinding {
    pub(crate) group: String,
    pub(crate) kind: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    #[serde(skip)]
    pub(crate) uid: String,
    pub(crate) rule: String,
    pub(crate) action: String,
    pub(crate) message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fix: Option<String>,
    /// The exception that waived it, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) exception: Option<String>,
}

impl AuditFinding {
    /// Identifies the finding across passes, for logging it once.
    fn key(&self) -> String {
        format!("{}|{}|{}", self.uid, self.rule, self.message)
    }
}

/// Judges one object as a CREATE by nobody in particular, at `now`.
pub(crate) fn audit_object(
    kind: &MrKind,
    object: Value,
    config: &Config,
    cluster: &Cluster,
    now: jiff::Timestamp,
) -> Vec<AuditFinding> {
    if !mrguard_policy::admission::mr::is_managed(&object) {
        return Vec::new();
    }
    let meta = |k: &str| {
        object
            .pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (name, namespace, uid) = (meta("name"), meta("namespace"), meta("uid"));
    // Judged as a CREATE by nobody in particular: what a new object of
    // this shape would meet today.
    // With the replica's identity index, an MR claiming what another
    // holds (both created while mrguard was down) is a finding.
    let req = RequestBuilder::create(object).build();
    mrguard_policy::admission::decider::Decider::new(config, cluster, now)
        .validate(&req)
        .findings
        .into_iter()
        .map(|f| AuditFinding {
            group: kind.group.clone(),
            kind: kind.kind.clone(),
            namespace: namespace.clone(),
            name: name.clone(),
            uid: uid.clone(),
            exception: f.exception().map(str::to_string),
            rule: f.rule.into_owned(),
            action: f.action.as_str().to_string(),
            message: f.message,
            fix: f.fix,
        })
        .collect()
}

/// What one kind's pass found.
#[derive(Debug, Default)]
pub(crate) struct KindReport {
    pub(crate) objects: usize,
    pub(crate) findings: Vec<AuditFinding>,
    /// Namespaces holding MRs of the kind (`""` for cluster scope), for
    /// one policy report per namespace.
    pub(crate) namespaces: BTreeSet<String>,
    /// Per namespace: MRs with no finding at all (`summary.pass`).
    pub(crate) passed: std::collections::BTreeMap<String, usize>,
}

/// Lists every object of `kind` page by page and judges each, knowing
/// nothing of the cluster beyond.
#[cfg(test)]
pub(crate) async fn audit_kind(
    client: &kube::Client,
    kind: &MrKind,
    config: &Config,
) -> Result<KindReport, KubeError> {
    audit_kind_in(
        client,
        kind,
        config,
        Cluster::empty(),
        jiff::Timestamp::now(),
    )
    .await
}

/// As [`audit_kind`], with what the replica knows of the cluster, judged
/// at `now`.
pub(crate) async fn audit_kind_in(
    client: &kube::Client,
    kind: &MrKind,
    config: &Config,
    cluster: &Cluster,
    now: jiff::Timestamp,
) -> Result<KindReport, KubeError> {
    let mut report = KindReport::default();
    let pages = list_values(
        client.clone(),
        &kind.api_resource(),
        list_params(kind, cluster),
    );
    let mut pages = std::pin::pin!(pages);
    while let Some(items) =
        pages
            .try_next()
            .await
            .map_err(api_err("list", "managed resources", kind.key()))?
    {
        for value in items {
            report.objects += 1;
            if !mrguard_policy::admission::mr::is_managed(&value) {
                continue;
            }
            let namespace = value
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let found = audit_object(kind, value, config, cluster, now);
            if found.is_empty() {
                *report.passed.entry(namespace.clone()).or_default() += 1;
            }
            report.namespaces.insert(namespace);
            report.findings.extend(found);
        }
    }
    Ok(report)
}

/// What the audit loop reports, kind by kind.
pub(crate) enum PassEvent<'a> {
    /// `kind`'s turn: its report follows.
    Listing(&'a MrKind),
    /// `kind`'s report, or why its MRs could not be listed.
    Done(&'a MrKind, Result<KindReport, KubeError>),
}

/// Kinds an audit pass lists at once: the process's collection-read
/// places (`list_limit`), which the audit takes only while no other read
/// waits. One at a time, a pass over 1,008 kinds took 30 s, nearly all of
/// it waiting for one small list after another; each kind's pages still
/// come one at a time, so at most this many pages are in memory.
const KINDS_IN_FLIGHT: usize = crate::kube::list_limit::COLLECTION_READS;

/// The one audit loop, shared by the controller's passes and `mrguard
/// audit`: each of `kinds`, listed page by page and judged against
/// `cluster` at `now` (one instant for the whole pass),
/// [`KINDS_IN_FLIGHT`] at a time; `each` hears of each kind as its listing
/// ends. A kind whose list is slow holds its own place only: the next kind
/// starts whenever any listing ends.
pub(crate) async fn pass<'k>(
    client: &kube::Client,
    kinds: impl IntoIterator<Item = &'k MrKind>,
    config: &Config,
    cluster: &Cluster,
    now: jiff::Timestamp,
    mut each: impl FnMut(PassEvent<'_>),
) {
    async fn one<'a>(
        client: &'a kube::Client,
        kind: &'a MrKind,
        config: &'a Config,
        cluster: &'a Cluster,
        now: jiff::Timestamp,
    ) -> (&'a MrKind, Result<KindReport, KubeError>) {
        (
            kind,
            audit_kind_in(client, kind, config, cluster, now).await,
        )
    }
    let mut kinds = kinds.into_iter();
    let mut in_flight = futures::stream::FuturesUnordered::new();
    loop {
        while in_flight.len() < KINDS_IN_FLIGHT {
            let Some(kind) = kinds.next() else { break };
            in_flight.push(one(client, kind, config, cluster, now));
        }
        let Some((kind, result)) = in_flight.next().await else {
            return;
        };
        each(PassEvent::Listing(kind));
        each(PassEvent::Done(kind, result));
    }
}

/// For a command without the replica's identity watches (`mrguard audit`):
/// the claims of every MR of `coverage`, from one listing, into `cluster`'s
/// identity index, so that the pass finds duplicate claimants as the
/// controller's does. A kind that cannot be listed is left out; the pass
/// reports it.
pub(crate) async fn index_identities(
    client: &kube::Client,
    coverage: &Coverage,
    config: &Config,
    cluster: &Cluster,
) {
    for kind in coverage.kinds() {
        let mrs = if watched_whole(kind, config) {
            claims::<DynamicObject>(client, kind, config).await
        } else {
            claims::<IdentityView>(client, kind, config).await
        };
        if let Some(mrs) = mrs {
            cluster
                .identities()
                .replace_kind(&kind.group, &kind.kind, mrs);
        }
    }
}

/// The claims of every MR of `kind`, listed as `V`; `None` when the kind
/// cannot be listed.
async fn claims<V: MrView>(
    client: &kube::Client,
    kind: &MrKind,
    config: &Config,
) -> Option<Vec<mrguard_policy::cluster::identity::IndexedMr>> {
    let api: Api<V> = Api::all_with(client.clone(), &kind.api_resource());
    let listed: Vec<V> = list_pages(api, ListParams::default().limit(PAGE_SIZE))
        .try_concat()
        .await
        .ok()?;
    Some(
        listed
            .iter()
            .filter_map(|v| v.claim(kind, config))
            .collect(),
    )
}

/// The MR kinds the cluster serves now: those whose CRDs are
/// `Established`. Another CRD's kind answers 404 (a name conflict keeps it
/// so for good), which would fail the command.
pub(crate) async fn discover(client: &kube::Client) -> Result<Coverage, KubeError> {
    let crds: Vec<ServedCrd> = list_pages(
        Api::all(client.clone()),
        ListParams::default().limit(CRD_PAGE_SIZE),
    )
    .try_concat()
    .await
    .map_err(api_err(
        "list",
        "customresourcedefinitions.apiextensions.k8s.io",
        "",
    ))?;
    Ok(Coverage::from_crds(
        crds.iter().filter(|c| c.established).map(|c| &c.summary),
    ))
}

/// Collects one audit pass into the input of [`mrguard_policy::commands::reports::plan`].
#[derive(Debug, Default)]
pub(crate) struct PassCollector {
    input: PassInput,
}

impl PassCollector {
    /// Records one kind's findings and the namespaces its MRs live in.
    pub(crate) fn kind(&mut self, kind: &MrKind, report: &KindReport) {
        let (findings, namespaces) = (&report.findings, &report.namespaces);
        self.input.scopes.extend(namespaces.iter().cloned());
        for (ns, n) in &report.passed {
            *self.input.passed.entry(ns.clone()).or_default() += n;
        }
        let api_version = format!("{}/{}", kind.group, kind.read_version);
        for f in findings {
            self.input.findings.push(ReportFinding {
                subject: ReportedMr {
                    api_version: api_version.clone(),
                    kind: f.kind.clone(),
                    namespace: f.namespace.clone(),
                    name: f.name.clone(),
                    uid: f.uid.clone(),
                },
                rule: f.rule.clone(),
                action: match f.action.as_str() {
                    "Deny" => Action::Deny,
                    "Audit" => Action::Audit,
                    _ => Action::Warn,
                },
                message: f.message.clone(),
                fix: f.fix.clone(),
                exception: f.exception.clone(),
            });
        }
    }

    /// Records a kind whose MRs could not be listed: its results stay.
    pub(crate) fn failed(&mut self, kind: &MrKind) {
        self.input
            .incomplete_kinds
            .insert((kind.group.clone(), kind.kind.clone()));
    }

    /// The pass, ready to plan.
    pub(crate) fn finish(self) -> PassInput {
        self.input
    }
}

/// Findings a pass summary names as examples.
const SUMMARY_EXAMPLES: usize = 5;
/// Kinds a pass summary counts by name; the others are summed. At 400
/// kinds with findings, naming each makes a line of about 20 KB.
const SUMMARY_KINDS: usize = 10;

/// What a pass found, for its one log line: findings counted by rule and
/// by kind, how many are new since the last pass, and the first new ones.
/// A WARN line per finding, where 4,000 MRs name a ProviderConfig not
/// created yet, is 4,000 lines from each leader (8,004 WARN and ERROR
/// lines over a leader change in the e2e test `quiet::`, against 4).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct FindingsSummary {
    by_rule: BTreeMap<String, usize>,
    /// By `Kind.group`.
    by_kind: BTreeMap<String, usize>,
    new: usize,
    /// `Kind.group/namespace/name rule` (no namespace for a cluster-scoped
    /// MR), the first [`SUMMARY_EXAMPLES`] new findings.
    examples: Vec<String>,
}

impl FindingsSummary {
    /// Counts one of the pass's findings, listed now or kept.
    fn count(&mut self, f: &AuditFinding) {
        *self.by_rule.entry(f.rule.clone()).or_default() += 1;
        *self
            .by_kind
            .entry(format!("{}.{}", f.kind, f.group))
            .or_default() += 1;
    }

    /// Notes a finding not seen in the last pass.
    fn new_finding(&mut self, f: &AuditFinding) {
        self.new += 1;
        if self.examples.len() < SUMMARY_EXAMPLES {
            let at = if f.namespace.is_empty() {
                f.name.clone()
            } else {
                format!("{}/{}", f.namespace, f.name)
            };
            self.examples
                .push(format!("{}.{}/{at} {}", f.kind, f.group, f.rule));
        }
    }

    /// `rule=n` for every rule, most findings first.
    fn by_rule(&self) -> String {
        most_first(&self.by_rule, usize::MAX)
    }

    /// `Kind.group=n` for the [`SUMMARY_KINDS`] kinds with most findings,
    /// then how many more kinds and findings there are.
    fn by_kind(&self) -> String {
        let mut s = most_first(&self.by_kind, SUMMARY_KINDS);
        if self.by_kind.len() > SUMMARY_KINDS {
            let mut counts: Vec<usize> = self.by_kind.values().copied().collect();
            counts.sort_unstable_by(|a, b| b.cmp(a));
            let rest: usize = counts[SUMMARY_KINDS..].iter().sum();
            s.push_str(&format!(
                ",{} more kinds={rest}",
                self.by_kind.len() - SUMMARY_KINDS
            ));
        }
        s
    }

    fn examples(&self) -> String {
        self.examples.join(", ")
    }
}

/// `key=n,…` for the `limit` keys of `counts` with the highest counts,
/// highest first; ties by key.
fn most_first(counts: &BTreeMap<String, usize>, limit: usize) -> String {
    let mut v: Vec<(&String, &usize)> = counts.iter().collect();
    // Stable: ties keep the map's (the keys') order.
    v.sort_by(|a, b| b.1.cmp(a.1));
    v.iter()
        .take(limit)
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The target of the per-finding debug lines, the same wherever the
/// module lives: `MRGUARD_LOG=info,mrguard::audit=debug` shows them.
const FINDING_TARGET: &str = "mrguard::audit";

/// Keeps the violation gauges and which findings are new across passes.
pub(crate) struct AuditState {
    metrics: Arc<ControllerMetrics>,
    /// Per kind: the gauge label sets last exported and the keys of the
    /// findings it had.
    kinds: HashMap<String, (Vec<[String; 3]>, HashSet<String>)>,
    /// The new findings of the pass under way, for its summary.
    news: FindingsSummary,
}

impl AuditState {
    pub(crate) fn new(metrics: Arc<ControllerMetrics>) -> Self {
        Self {
            metrics,
            kinds: HashMap::new(),
            news: FindingsSummary::default(),
        }
    }

    /// The new findings recorded since the last call, for a pass summary.
    fn take_news(&mut self) -> FindingsSummary {
        std::mem::take(&mut self.news)
    }

    /// Records one kind's pass: sets its gauges, drops series that no
    /// longer apply, and notes findings its last pass did not have (each
    /// at debug, and in the pass summary). Returns how many were new.
    pub(crate) fn record(&mut self, kind: &MrKind, findings: &[AuditFinding]) -> usize {
        let mut counts: BTreeMap<[String; 3], i64> = BTreeMap::new();
        for f in findings {
            *counts
                .entry([f.rule.clone(), kind.group.clone(), kind.kind.clone()])
                .or_default() += 1;
        }
        let (labels, seen) = self.kinds.entry(kind.key()).or_default();
        for old in labels.iter().filter(|l| !counts.contains_key(*l)) {
            let _ = self
                .metrics
                .audit_violations
                .remove_label_values(&[&old[0], &old[1], &old[2]]);
        }
        for (l, n) in &counts {
            self.metrics
                .audit_violations
                .with_label_values(&[&l[0], &l[1], &l[2]])
                .set(*n);
        }
        *labels = counts.into_keys().collect();
        let mut now_seen = HashSet::new();
        let mut new = 0;
        for f in findings {
            let key = f.key();
            if !seen.contains(&key) {
                new += 1;
                self.news.new_finding(f);
                tracing::debug!(
                    target: FINDING_TARGET,
                    group = %f.group,
                    kind = %f.kind,
                    namespace = %f.namespace,
                    name = %f.name,
                    rule = %f.rule,
                    action = %f.action,
                    message = %f.message,
                    "audit: existing MR violates a rule"
                );
            }
            now_seen.insert(key);
        }
        // A finding that went away and comes back is new again.
        *seen = now_seen;
        new
    }

    /// The kind is gone: drop its series.
    pub(crate) fn forget(&mut self, key: &str) {
        if let Some((labels, _)) = self.kinds.remove(key) {
            for l in labels {
                let _ = self
                    .metrics
                    .audit_violations
                    .remove_label_values(&[&l[0], &l[1], &l[2]]);
            }
        }
    }
}

/// Passes a kind's findings may be kept for while its watch sees no
/// change, before it is listed again anyway: the watches are what a pass
/// trusts, and this bounds what trusting them wrongly could hide (a lost
/// event, a rule reading what no watch follows). At 5,000 kinds a pass
/// that listed every kind took 42 to 53 s, one list every 8 to 11 ms with
/// kube-apiserver's CPU the limit (BENCHMARKS.md).
const REFRESH_PASSES: u64 = 10;

/// A kind's last listing, kept while nothing its findings depend on changes.
struct Listed {
    stamp: Stamp,
    /// The pass that listed it.
    pass: u64,
    /// `None`: RBAC forbade the list. Kept like findings: a kind's watch
    /// is refused as well, until a grant lets it list, which moves the stamp.
    report: Option<KindReport>,
}

/// The kinds a pass is to judge again: changed ones and refreshes.
#[derive(Debug, Default)]
struct Due<'a> {
    /// Never listed, or changed since (by their stamp).
    changed: Vec<&'a MrKind>,
    /// Kept, and listed now because they were kept longest: these check
    /// what the watches said.
    refresh: Vec<&'a MrKind>,
}

#[cfg(test)]
impl<'a> Due<'a> {
    fn kinds(self) -> Vec<&'a MrKind> {
        self.changed.into_iter().chain(self.refresh).collect()
    }
}

/// The kinds pass number `pass` judges again, of `kinds` with their stamps
/// now: those never listed or changed since (by their stamp), those listed
/// [`REFRESH_PASSES`] passes ago, and the longest-kept share of the rest,
/// so that the refreshes are spread over the passes instead of all falling
/// on one.
fn to_list<'a>(
    kinds: &[(&'a MrKind, Stamp)],
    listed: &HashMap<String, Listed>,
    pass: u64,
) -> Due<'a> {
    let mut due = Due::default();
    let mut kept = Vec::new();
    for (kind, stamp) in kinds {
        match listed.get(&kind.key()) {
            Some(l) if l.stamp == *stamp && pass - l.pass < REFRESH_PASSES => {
                kept.push((l.pass, *kind));
            }
            Some(l) if l.stamp == *stamp => due.refresh.push(*kind),
            _ => due.changed.push(*kind),
        }
    }
    let share = kept.len().div_ceil(REFRESH_PASSES as usize);
    // Stable: among equals, the coverage's order.
    kept.sort_by_key(|(pass, _)| *pass);
    due.refresh
        .extend(kept.into_iter().take(share).map(|(_, k)| k));
    due
}

/// What one controller pass did, as its log line says.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct PassSummary {
    pub(crate) kinds: usize,
    /// Kinds listed in this pass; the others' findings were kept.
    pub(crate) listed: usize,
    /// MRs the pass's findings cover, listed now or kept.
    pub(crate) objects: usize,
    /// MRs listed in this pass.
    pub(crate) read: usize,
    /// Kinds judged again without a list: their watch holds no MR.
    pub(crate) empty: usize,
    pub(crate) findings: usize,
    /// Every kind has current results (a forbidden kind counts).
    pub(crate) complete: bool,
    pub(crate) forbidden: Vec<String>,
}

/// The controller's audit across passes. A pass lists only the kinds whose
/// MRs the replica's watches saw change (or that are due a refresh) and
/// keeps the others' findings; a new configuration, or a moment at which
/// its verdicts change by themselves, makes it list every kind.
pub(crate) struct Auditor {
    client: kube::Client,
    config: Arc<ConfigStore>,
    states: MrStates,
    metrics: Arc<ControllerMetrics>,
    reports: Option<super::reports::ReportWriter>,
    cluster: Arc<Cluster>,
    state: AuditState,
    listed: HashMap<String, Listed>,
    /// The configuration the kept findings were judged with, and when its
    /// verdicts change by themselves ([`Config::next_change_after`]).
    judged_with: Option<Arc<Config>>,
    judged_until: Option<jiff::Timestamp>,
    passes: u64,
}

impl Auditor {
    pub(crate) fn new(
        client: kube::Client,
        config: Arc<ConfigStore>,
        states: MrStates,
        metrics: Arc<ControllerMetrics>,
        reports: Option<super::reports::ReportWriter>,
        cluster: Arc<Cluster>,
    ) -> Self {
        Self {
            client,
            config,
            states,
            state: AuditState::new(metrics.clone()),
            metrics,
            reports,
            cluster,
            listed: HashMap::new(),
            judged_with: None,
            judged_until: None,
            passes: 0,
        }
    }

    /// One pass over the kinds of `cov`: sets the gauges, logs new
    /// findings and the pass, and writes the policy reports.
    pub(crate) async fn pass(&mut self, cov: &Coverage) -> PassSummary {
        self.pass_at(cov, jiff::Timestamp::now()).await
    }

    /// [`Auditor::pass`] as if it were `now`, for what depends on the time.
    async fn pass_at(&mut self, cov: &Coverage, now: jiff::Timestamp) -> PassSummary {
        let config = self.config.load();
        let same = self
            .judged_with
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, &config));
        // A new configuration, or a staged Deny or an exception's expiry
        // reached since the findings were judged: every kind again.
        if !same || self.judged_until.is_some_and(|t| now >= t) {
            self.listed.clear();
            self.judged_with = Some(config.clone());
            self.judged_until = config.next_change_after(now);
        }
        let keys: HashSet<String> = cov.kinds().map(MrKind::key).collect();
        let gone: Vec<String> = self
            .state
            .kinds
            .keys()
            .filter(|k| !keys.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            self.state.forget(&k);
        }
        self.listed.retain(|k, _| keys.contains(k));
        self.passes += 1;
        let this_pass = self.passes;
        // Stamped before any list starts: a change seen during the pass
        // makes the next one list the kind again.
        let changes = self.states.changes();
        let stamped: Vec<(&MrKind, Stamp)> = cov
            .kinds()
            .map(|k| (k, changes.stamp(&k.group, &k.kind)))
            .collect();
        let stamps: HashMap<String, Stamp> = stamped.iter().map(|(k, s)| (k.key(), *s)).collect();
        let due = to_list(&stamped, &self.listed, this_pass);
        // A changed or new kind whose MRs the replica's watch has listed
        // and holds none of has nothing to judge: no list. At 5,000 kinds a
        // new leader's first pass, or a new configuration's, was one list a
        // kind (45 s), most of them empty in a cluster with whole provider
        // families installed. Its refresh still lists it: that checks the
        // watch.
        let (empty, changed): (Vec<&MrKind>, Vec<&MrKind>) = due
            .changed
            .into_iter()
            .partition(|k| self.cluster.identities().listed_len(&k.group, &k.kind) == Some(0));
        let listing: Vec<&MrKind> = changed.into_iter().chain(due.refresh).collect();
        let started = std::time::Instant::now();
        let mut summary = PassSummary {
            kinds: cov.len(),
            listed: listing.len(),
            empty: empty.len(),
            complete: true,
            ..PassSummary::default()
        };
        let mut collected = PassCollector::default();
        let Self {
            client,
            states,
            metrics,
            cluster,
            state,
            listed,
            ..
        } = self;
        // Each kind's outcome: a listing's, or an empty kind's report.
        let mut done = |kind: &MrKind, result: Result<KindReport, KubeError>| {
            let key = kind.key();
            // What is kept until the kind's stamp moves or its refresh
            // comes: its report, or `None` when RBAC forbade the list.
            let kept = match result {
                Ok(report) => {
                    summary.read += report.objects;
                    state.record(kind, &report.findings);
                    states.set_forbidden(kind, false);
                    Some(report)
                }
                // RBAC does not let mrguard read this kind (the chart lists
                // API groups; a provider outside them). That is the
                // operator's choice, not a failed pass: the kind is reported
                // in mrguard_controller_forbidden_kinds and the pass still
                // counts, so a staleness alert on the success timestamp
                // means the audit is really stuck.
                Err(e) if e.status_code() == Some(403) => {
                    if states.set_forbidden(kind, true) {
                        e.log(Some(metrics), "audit: skipping a kind RBAC forbids");
                    } else {
                        e.count(Some(metrics));
                    }
                    state.forget(&key);
                    None
                }
                Err(e) => {
                    summary.complete = false;
                    if e.is_not_found() {
                        // Established, but the API server's handler lags
                        // its own condition for a moment (or the CRD was
                        // just deleted): the next pass reads it.
                        e.count(Some(metrics));
                        tracing::debug!(error = %e, "audit: a kind is not served yet; keeping its last results");
                    } else {
                        e.log(
                            Some(metrics),
                            "audit: failed to list MRs of a kind; keeping its last results",
                        );
                    }
                    // Its last results stay in the gauges and the reports;
                    // the next pass lists it again.
                    listed.remove(&key);
                    collected.failed(kind);
                    return;
                }
            };
            let stamp = stamps.get(&key).copied().unwrap_or_default();
            listed.insert(
                key,
                Listed {
                    stamp,
                    pass: this_pass,
                    report: kept,
                },
            );
        };
        for kind in empty {
            done(kind, Ok(KindReport::default()));
        }
        pass(client, listing, &config, cluster, now, |event| {
            if let PassEvent::Done(kind, result) = event {
                done(kind, result);
            }
        })
        .await;
        let mut found = self.state.take_news();
        for kind in cov.kinds() {
            let key = kind.key();
            match self.listed.get(&key).map(|l| &l.report) {
                Some(Some(report)) => {
                    summary.objects += report.objects;
                    summary.findings += report.findings.len();
                    report.findings.iter().for_each(|f| found.count(f));
                    collected.kind(kind, report);
                }
                Some(None) => {
                    summary.forbidden.push(key);
                    collected.failed(kind);
                }
                // Failed in this pass: already marked.
                None => {}
            }
        }
        if summary.complete {
            self.metrics
                .audit_last_success
                .set(jiff::Timestamp::now().as_second());
        }
        // One line a pass. WARN when it found something its last pass did
        // not: a steady state of known findings is in the gauges and the
        // reports, not worth a WARN every interval. A new leader's first
        // pass finds everything new, and says so once.
        macro_rules! pass_done {
            ($level:expr) => {
                tracing::event!(
                    $level,
                    kinds = summary.kinds,
                    listed = summary.listed,
                    empty = summary.empty,
                    objects = summary.objects,
                    read = summary.read,
                    findings = summary.findings,
                    new_findings = found.new,
                    by_rule = %found.by_rule(),
                    by_kind = %found.by_kind(),
                    new_examples = %found.examples(),
                    complete = summary.complete,
                    forbidden = summary.forbidden.len(),
                    forbidden_kinds = %summary.forbidden.join(","),
                    seconds = started.elapsed().as_secs_f64(),
                    "audit pass done"
                )
            };
        }
        if found.new > 0 {
            pass_done!(tracing::Level::WARN);
        } else {
            pass_done!(tracing::Level::INFO);
        }
        if let Some(w) = &self.reports {
            super::reports::sync_logged(w, &collected.finish(), &self.metrics).await;
        }
        summary
    }
}

impl Auditor {
    /// Audits every MR kind the API server serves on `interval`, starting
    /// once the CRDs are listed. Runs only on the Lease holder.
    ///
    /// Kinds whose CRDs are not `Established` yet are left for a later pass:
    /// listing them was a 404 that marked the pass incomplete (installing
    /// 1,000 CRDs: 293 such lists, and no successful pass for minutes).
    pub(crate) async fn run(mut self, crds: CrdStore, interval: Duration) {
        if crds.subscribe().next().await.is_none() {
            return;
        }
        loop {
            let cov = Coverage::from_crds(crds.served().iter().map(|c| &c.summary));
            self.pass(&cov).await;
            tokio::time::sleep(interval).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::replica::coverage::tests::{fixture_crds, summaries};
    use crate::kube::mock::{self, list, status, Reply};
    use serde_json::json;

    fn bucket_kind() -> MrKind {
        Coverage::from_crds(&summaries(&fixture_crds()))
            .kinds()
            .find(|k| k.kind == "Bucket")
            .unwrap()
            .clone()
    }

    /// A kind the identity index follows and knows to fit in a page is
    /// read whole from the API server's watch cache; a bigger one, or one
    /// it does not follow, is paged from etcd.
    #[tokio::test]
    async fn only_a_small_kind_the_index_follows_is_read_from_the_cache() {
        use mrguard_policy::cluster::identity::{IndexedMr, MrKey};
        let kind = bucket_kind();
        let keys = |n: usize| -> Vec<_> {
            (0..n)
                .map(|i| {
                    IndexedMr::new(
                        MrKey::new(&kind.group, &kind.kind, "", &format!("b{i}")),
                        None,
                        true,
                    )
                })
                .collect()
        };
        for (listed, cache) in [
            (None, false),
            (Some(0), true),
            (Some(250), true),
            (Some(251), false),
        ] {
            let cluster = Cluster::default();
            if let Some(n) = listed {
                cluster
                    .identities()
                    .replace_kind(&kind.group, &kind.kind, keys(n));
            }
            let (client, api) = mock::client(|_| {
                Reply::Json(
                    200,
                    page(vec![bucket("b", "u1", json!({"forProvider": {}}))], ""),
                )
            });
            let r = audit_kind_in(
                &client,
                &kind,
                &Config::builtin(),
                &cluster,
                jiff::Timestamp::now(),
            )
            .await
            .unwrap();
            assert_eq!(r.objects, 1);
            let q = &api.requests()[0].query;
            assert_eq!(q.contains("resourceVersion=0"), cache, "{listed:?}: {q}");
            assert_eq!(q.contains("limit=250"), !cache, "{listed:?}: {q}");
        }
    }

    fn bucket(name: &str, uid: &str, spec: Value) -> Value {
        json!({"metadata": {"name": name, "uid": uid, "resourceVersion": "1",
                            "annotations": {"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"}},
               "spec": spec})
    }

    fn page(items: Vec<Value>, cont: &str) -> Value {
        let mut l = list("BucketList", "s3.aws.upbound.io/v1beta2", items);
        l["metadata"]["continue"] = json!(cont);
        l
    }

    #[tokio::test]
    async fn audits_every_page_as_a_create() {
        let (client, api) = mock::client(|r| {
            if r.query.contains("continue=next") {
                return Reply::Json(
                    200,
                    page(
                        vec![bucket(
                            "paused",
                            "u3",
                            json!({"forProvider": {}, "managementPolicies": []}),
                        )],
                        "",
                    ),
                );
            }
            Reply::Json(
                200,
                page(
                    vec![
                        // An unsupported policy set and a bad deletion policy.
                        bucket(
                            "bad",
                            "u1",
                            json!({"forProvider": {"region": "us-east-1"},
                            "managementPolicies": ["Observe", "Create", "Observe"], "deletionPolicy": "delete"}),
                        ),
                        bucket(
                            "good",
                            "u2",
                            json!({"forProvider": {"region": "us-east-1"},
                            "deletionPolicy": "Delete", "managementPolicies": ["*"]}),
                        ),
                        // Not an MR at all.
                        json!({"metadata": {"name": "odd", "uid": "u4"}, "spec": {}}),
                        // Not even an object: skipped, not a panic.
                        json!("not an object"),
                        json!(null),
                    ],
                    "next",
                ),
            )
        });
        let r = audit_kind(&client, &bucket_kind(), &Config::builtin())
            .await
            .unwrap();
        assert_eq!(r.objects, 4);
        let rules: Vec<(&str, &str)> = r
            .findings
            .iter()
            .map(|f| (f.name.as_str(), f.rule.as_str()))
            .collect();
        assert_eq!(
            rules,
            vec![("bad", "deletion-policy"), ("bad", "management-policies")]
        );
        assert!(r
            .findings
            .iter()
            .all(|f| f.action == "Deny" && f.group == "s3.aws.upbound.io"));
        let reqs = api.requests();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].path, "/apis/s3.aws.upbound.io/v1beta2/buckets");
        assert!(reqs[0].query.contains("limit=250"));
    }

    /// Two MRs claiming one external resource, created while no webhook
    /// ran: with the replica's identity index each is a finding naming the
    /// other.
    #[test]
    fn duplicate_claimants_are_findings() {
        let kind = MrKind {
            group: "ec2.aws.upbound.io".into(),
            kind: "VPC".into(),
            plural: "vpcs".into(),
            versions: vec!["v1beta1".into()],
            read_version: "v1beta1".into(),
            namespaced: false,
        };
        let vpc = |name: &str| {
            json!({"apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC",
                   "metadata": {"name": name, "uid": name,
                                "annotations": {"crossplane.io/external-name": "vpc-1"}},
                   "spec": {"forProvider": {"region": "us-east-1"}}})
        };
        let config = Config::builtin();
        let cluster = Cluster::default();
        for name in ["a", "b"] {
            let view: crate::controller::replica::identity::IdentityView =
                serde_json::from_value(vpc(name)).unwrap();
            cluster
                .identities()
                .upsert(view.claim(&kind, &config).unwrap());
        }
        let rules = |name: &str, cluster: &Cluster| {
            audit_object(&kind, vpc(name), &config, cluster, jiff::Timestamp::now())
                .into_iter()
                .filter(|f| f.rule == "external-identity")
                .map(|f| f.message)
                .collect::<Vec<_>>()
        };
        let a = rules("a", &cluster);
        assert_eq!(a.len(), 1);
        assert!(a[0].contains("VPC.ec2.aws.upbound.io b"), "{a:?}");
        assert!(rules("b", &cluster)[0].contains("VPC.ec2.aws.upbound.io a"));
        assert!(rules("a", Cluster::empty()).is_empty());
    }

    /// `mrguard audit` has no identity watches: the pass over an index
    /// built from one listing finds both claimants, as the controller's
    /// audit does, and each kind is announced before it is listed.
    #[tokio::test]
    async fn a_command_indexes_identities_from_the_listing_and_finds_duplicates() {
        let dup = |name: &str| {
            let mut b = bucket(name, name, json!({"forProvider": {"region": "us-east-1"}}));
            b["metadata"]["annotations"]["crossplane.io/external-name"] = json!("shared");
            b
        };
        let (client, api) =
            mock::client(move |_| Reply::Json(200, page(vec![dup("a"), dup("b")], "")));
        let kind = bucket_kind();
        let coverage = Coverage::from_crds(&summaries(&fixture_crds()));
        let config = Config::builtin();
        let cluster = Cluster::default();
        index_identities(&client, &coverage, &config, &cluster).await;
        let mut events = Vec::new();
        let mut claimants = Vec::new();
        pass(
            &client,
            coverage.kinds(),
            &config,
            &cluster,
            jiff::Timestamp::now(),
            |e| match e {
                PassEvent::Listing(k) => events.push(format!("listing {}", k.kind)),
                PassEvent::Done(k, r) if k.key() == kind.key() => {
                    events.push(format!("done {}", k.kind));
                    for f in r.unwrap().findings {
                        if f.rule == "external-identity" {
                            claimants.push((f.name, f.message));
                        }
                    }
                }
                PassEvent::Done(k, _) => events.push(format!("done {}", k.kind)),
            },
        )
        .await;
        assert_eq!(claimants.len(), 2, "{claimants:?}");
        assert_eq!(claimants[0].0, "a");
        assert!(
            claimants[0].1.contains("Bucket.s3.aws.upbound.io b"),
            "{claimants:?}"
        );
        assert!(
            claimants[1].1.contains("Bucket.s3.aws.upbound.io a"),
            "{claimants:?}"
        );
        assert_eq!(events.len(), 2 * coverage.len(), "{events:?}");
        assert!(events[0].starts_with("listing ") && events[1].starts_with("done "));
        // Without the index, the same pass finds no claimant.
        let mut without = 0;
        pass(
            &client,
            coverage.kinds(),
            &config,
            Cluster::empty(),
            jiff::Timestamp::now(),
            |e| {
                if let PassEvent::Done(_, Ok(r)) = e {
                    without += r
                        .findings
                        .iter()
                        .filter(|f| f.rule == "external-identity")
                        .count();
                }
            },
        )
        .await;
        assert_eq!(without, 0);
        assert!(api.requests().len() >= 3 * coverage.len());
    }

    #[test]
    fn transition_rules_are_skipped() {
        // A region change can only be seen on UPDATE; the audit judges a
        // CREATE, so even a created MR with configured immutable fields
        // yields nothing from immutable-field or external-name-change.
        let obj = bucket("b", "u", json!({"forProvider": {"region": "eu-west-1"}}));
        let f = audit_object(
            &bucket_kind(),
            obj,
            &Config::builtin(),
            Cluster::empty(),
            jiff::Timestamp::now(),
        );
        assert!(
            f.iter()
                .all(|f| f.rule != "immutable-field" && f.rule != "external-name-change"),
            "{f:?}"
        );
        assert!(f.is_empty(), "{f:?}");
    }

    fn finding(kind: &str, namespace: &str, name: &str, rule: &str) -> AuditFinding {
        AuditFinding {
            group: "ec2.aws.upbound.io".into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            uid: format!("{namespace}/{name}"),
            rule: rule.into(),
            action: "Warn".into(),
            message: "m".into(),
            fix: None,
            exception: None,
        }
    }

    /// A pass's line counts every finding by rule and by kind (the ten
    /// kinds with most, then the rest summed) and names the first five
    /// new ones.
    #[test]
    fn a_pass_summary_counts_by_rule_and_kind_and_names_the_first_new_findings() {
        let mut s = FindingsSummary::default();
        let db = finding("K0", "team", "db", "deletion-policy");
        s.count(&db);
        s.new_finding(&db);
        // Kind K<i> has i + 1 findings.
        for i in 0..12 {
            for j in 0..=i {
                let f = finding(
                    &format!("K{i}"),
                    "",
                    &format!("mr-{j}"),
                    "provider-config-exists",
                );
                s.count(&f);
                s.new_finding(&f);
            }
        }
        assert_eq!(s.new, 79);
        assert_eq!(s.by_rule(), "provider-config-exists=78,deletion-policy=1");
        let kinds: Vec<String> = (2..12)
            .rev()
            .map(|i| format!("K{i}.ec2.aws.upbound.io={}", i + 1))
            .collect();
        assert_eq!(s.by_kind(), format!("{},2 more kinds=4", kinds.join(",")));
        assert_eq!(
            s.examples(),
            "K0.ec2.aws.upbound.io/team/db deletion-policy, \
             K0.ec2.aws.upbound.io/mr-0 provider-config-exists, \
             K1.ec2.aws.upbound.io/mr-0 provider-config-exists, \
             K1.ec2.aws.upbound.io/mr-1 provider-config-exists, \
             K2.ec2.aws.upbound.io/mr-0 provider-config-exists"
        );
        // Kept findings are counted, not new.
        let mut kept = FindingsSummary::default();
        kept.count(&db);
        assert_eq!((kept.new, kept.examples()), (0, String::new()));
        assert_eq!(kept.by_kind(), "K0.ec2.aws.upbound.io=1");
    }

    #[test]
    fn gauges_follow_passes_and_each_finding_is_new_once() {
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let mut s = AuditState::new(metrics.clone());
        let kind = bucket_kind();
        let bad = bucket(
            "bad",
            "u1",
            json!({"forProvider": {}, "deletionPolicy": "delete"}),
        );
        let findings = audit_object(
            &kind,
            bad,
            &Config::builtin(),
            Cluster::empty(),
            jiff::Timestamp::now(),
        );
        assert_eq!(findings.len(), 1);
        assert_eq!(s.record(&kind, &findings), 1);
        let news = s.take_news();
        assert_eq!(news.new, 1);
        assert_eq!(
            news.examples(),
            "Bucket.s3.aws.upbound.io/bad deletion-policy"
        );
        let g = || {
            metrics
                .audit_violations
                .with_label_values(&["deletion-policy", "s3.aws.upbound.io", "Bucket"])
                .get()
        };
        assert_eq!(g(), 1);
        // The same finding on the next pass is not new.
        assert_eq!(s.record(&kind, &findings), 0);
        assert_eq!(s.take_news(), FindingsSummary::default());
        // Fixed: the series goes away.
        assert_eq!(s.record(&kind, &[]), 0);
        let families = prometheus::core::Collector::collect(&metrics.audit_violations);
        assert!(
            families.iter().all(|f| f.get_metric().is_empty()),
            "{families:?}"
        );
        // Broken again: new again.
        assert_eq!(s.record(&kind, &findings), 1);
        assert_eq!(g(), 1);
    }

    /// With one kind RBAC forbids (the chart's
    /// default `groups` mode and a provider outside it), a pass still
    /// counts as successful, and the kind is reported as forbidden. A kind
    /// whose CRD is not established yet is not listed (it was a 404 that
    /// made the pass incomplete).
    #[tokio::test]
    async fn a_forbidden_kind_does_not_fail_the_pass() {
        use crate::controller::replica::coverage::tests::established;
        let crds: Vec<Value> = fixture_crds()
            .into_iter()
            .filter_map(|c| match c["metadata"]["name"].as_str() {
                Some("vpcs.ec2.aws.upbound.io" | "buckets.s3.aws.upbound.io") => {
                    Some(established(c))
                }
                Some("subnets.ec2.aws.upbound.io") => Some(c),
                _ => None,
            })
            .collect();
        let (client, api) = mock::client(move |r| {
            if let Some(reply) = mock::crds_reply(r, &crds) {
                return reply;
            }
            if r.path.contains("/vpcs") {
                return Reply::Json(
                    403,
                    status(403, "Forbidden", "vpcs.ec2.aws.upbound.io is forbidden"),
                );
            }
            if r.path.contains("/subnets") {
                return Reply::Json(404, status(404, "NotFound", "not served yet"));
            }
            Reply::Json(
                200,
                page(vec![bucket("b", "u1", json!({"forProvider": {}}))], ""),
            )
        });
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let (crds, crd_watch) = CrdStore::watch(client.clone(), metrics.clone());
        let crd_task = tokio::spawn(crd_watch);
        let states = MrStates::new(metrics.clone());
        // As the leader does.
        states.publish(true);
        let auditor = Auditor::new(
            client,
            ConfigStore::new(Config::builtin(), None),
            states.clone(),
            metrics.clone(),
            None,
            Default::default(),
        );
        let task = tokio::spawn(auditor.run(crds, Duration::from_secs(600)));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while metrics.audit_last_success.get() == 0 {
            assert!(tokio::time::Instant::now() < deadline, "no successful pass");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(metrics.forbidden_kinds.get(), 1);
        assert_eq!(
            states.forbidden(),
            vec!["vpcs.ec2.aws.upbound.io".to_string()]
        );
        assert_eq!(
            metrics
                .api_errors
                .with_label_values(&["list", "managed resources", "403"])
                .get(),
            1
        );
        assert!(
            !api.requests().iter().any(|r| r.path.contains("/subnets")),
            "listed a kind whose CRD is not established"
        );
        task.abort();
        crd_task.abort();
    }

    fn kind_n(i: usize) -> MrKind {
        MrKind {
            group: format!("g{i}.example.org"),
            kind: "Thing".into(),
            plural: "things".into(),
            versions: vec!["v1".into()],
            read_version: "v1".into(),
            namespaced: false,
        }
    }

    fn listed_at(pass: u64, stamp: Stamp) -> Listed {
        Listed {
            stamp,
            pass,
            report: Some(KindReport::default()),
        }
    }

    /// A mock API server listing one Bucket that breaks deletion-policy,
    /// and nothing of any other kind.
    fn one_bad_bucket() -> (kube::Client, mock::MockApi) {
        mock::client(|r| {
            if r.path.contains("/buckets") {
                return Reply::Json(
                    200,
                    page(
                        vec![bucket(
                            "bad",
                            "u1",
                            json!({"forProvider": {}, "deletionPolicy": "delete"}),
                        )],
                        "",
                    ),
                );
            }
            Reply::Json(200, page(vec![], ""))
        })
    }

    /// The legacy Bucket kind's deletion-policy findings, as gauged.
    fn bucket_violations(metrics: &ControllerMetrics) -> i64 {
        metrics
            .audit_violations
            .with_label_values(&["deletion-policy", "s3.aws.upbound.io", "Bucket"])
            .get()
    }

    /// Never listed or changed: listed. Unchanged: kept, but the
    /// longest-kept tenth is listed each pass, and none is kept for
    /// REFRESH_PASSES passes.
    #[test]
    fn a_pass_lists_changed_kinds_and_spreads_the_refreshes() {
        let changes = crate::controller::changes::Changes::default();
        let kinds: Vec<MrKind> = (0..25).map(kind_n).collect();
        let stamped = |kinds: &[MrKind]| -> Vec<(MrKind, Stamp)> {
            kinds
                .iter()
                .map(|k| (k.clone(), changes.stamp(&k.group, &k.kind)))
                .collect()
        };
        let names = |l: Vec<&MrKind>| l.iter().map(|k| k.group.clone()).collect::<Vec<_>>();
        let mut listed: HashMap<String, Listed> = HashMap::new();
        // Pass 1: nothing known, every kind.
        let s = stamped(&kinds);
        let refs: Vec<(&MrKind, Stamp)> = s.iter().map(|(k, st)| (k, *st)).collect();
        assert_eq!(to_list(&refs, &listed, 1).kinds().len(), 25);
        for (k, st) in &refs {
            listed.insert(k.key(), listed_at(1, *st));
        }
        // Pass 2: one change; it and the first 3 of the 25 kept (a tenth,
        // rounded up) in the coverage's order.
        changes.kind("g7.example.org", "Thing");
        let s = stamped(&kinds);
        let refs: Vec<(&MrKind, Stamp)> = s.iter().map(|(k, st)| (k, *st)).collect();
        assert_eq!(
            names(to_list(&refs, &listed, 2).kinds()),
            [
                "g7.example.org",
                "g0.example.org",
                "g1.example.org",
                "g2.example.org"
            ]
        );
        // Simulate passes that list what they are told: every kind is
        // listed within REFRESH_PASSES passes, none twice in a row unless
        // it changed, and no pass lists more than a tenth plus the changed.
        let mut last: HashMap<String, u64> = HashMap::new();
        for pass in 2..=30 {
            let l: Vec<MrKind> = to_list(&refs, &listed, pass)
                .kinds()
                .into_iter()
                .cloned()
                .collect();
            // Pass 2 also lists the changed kind.
            let most = 3 + usize::from(pass == 2);
            assert!(l.len() <= most, "pass {pass} listed {}", l.len());
            for k in &l {
                let st = s.iter().find(|(x, _)| x == k).unwrap().1;
                listed.insert(k.key(), listed_at(pass, st));
                last.insert(k.key(), pass);
            }
            if pass > REFRESH_PASSES {
                for k in &kinds {
                    let age = pass - last.get(&k.key()).copied().unwrap_or(1);
                    assert!(age < REFRESH_PASSES, "{} kept {age} passes", k.group);
                }
            }
        }
    }

    /// The controller's passes against a mock API server: the first lists
    /// every kind; the next keeps the findings of kinds nothing changed
    /// and lists only the one whose watch saw an event (and a tenth due a
    /// refresh); a new configuration lists every kind again. Kept findings
    /// are still counted, in the gauges and the reports.
    #[tokio::test]
    async fn a_pass_lists_only_what_changed_and_keeps_the_rest() {
        use crate::controller::replica::coverage::tests::established;
        let crds: Vec<Value> = fixture_crds().into_iter().map(established).collect();
        let cov = Coverage::from_crds(&summaries(&crds));
        assert!(cov.len() >= 5, "{}", cov.len());
        let (client, api) = one_bad_bucket();
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let states = MrStates::new(metrics.clone());
        let config = ConfigStore::new(Config::builtin(), None);
        let mut auditor = Auditor::new(
            client,
            config.clone(),
            states.clone(),
            metrics.clone(),
            None,
            Default::default(),
        );
        let lists = || api.requests().len();
        let first = auditor.pass(&cov).await;
        assert_eq!((first.listed, lists()), (cov.len(), cov.len()));
        assert_eq!((first.objects, first.read, first.findings), (1, 1, 1));
        assert!(first.complete);
        let gauge = || bucket_violations(&metrics);
        assert_eq!(gauge(), 1);

        // A VPC event: that kind, its namespaced twin (their MRs share
        // identities) and the longest-kept tenth (one kind).
        states.changes().kind("ec2.aws.upbound.io", "VPC");
        let second = auditor.pass(&cov).await;
        let new: Vec<String> = api.requests()[cov.len()..]
            .iter()
            .map(|r| r.path.clone())
            .collect();
        assert_eq!(second.listed, 3, "{new:?}");
        assert_eq!(new.len(), 3);
        for vpcs in [
            "/apis/ec2.aws.upbound.io/v1beta1/vpcs",
            "/apis/ec2.aws.m.upbound.io/v1beta1/vpcs",
        ] {
            assert!(new.iter().any(|p| p == vpcs), "{new:?}");
        }
        // The bucket's finding is kept, not lost, whether or not it was
        // among the refreshed.
        assert_eq!((second.objects, second.findings), (1, 1));
        assert_eq!(gauge(), 1);

        // A Bucket event in the namespaced twin group moves the legacy
        // kind too: their MRs share identities.
        let before = lists();
        states.changes().kind("s3.aws.m.upbound.io", "Bucket");
        auditor.pass(&cov).await;
        assert!(
            api.requests()[before..]
                .iter()
                .any(|r| r.path == "/apis/s3.aws.upbound.io/v1beta2/buckets"),
            "{:?}",
            &api.requests()[before..]
        );

        // A new configuration: every kind again.
        let before = lists();
        config.replace(Config::builtin());
        let again = auditor.pass(&cov).await;
        assert_eq!((again.listed, lists() - before), (cov.len(), cov.len()));
        assert_eq!((again.objects, again.findings), (1, 1));

        // An exception that expires: kept until then, every kind after.
        config.replace(
            Config::from_yaml(
                "exceptions:\n  - {name: x, rules: [deletion-policy], reason: r, expires: '2030-01-01T00:00:00Z'}\n",
            )
            .unwrap(),
        );
        let at = |t: &str| t.parse::<jiff::Timestamp>().unwrap();
        let listed = |s: PassSummary| s.listed;
        assert_eq!(
            listed(auditor.pass_at(&cov, at("2029-12-31T00:00:00Z")).await),
            cov.len()
        );
        assert!(listed(auditor.pass_at(&cov, at("2029-12-31T12:00:00Z")).await) < cov.len());
        assert_eq!(
            listed(auditor.pass_at(&cov, at("2030-01-01T00:00:00Z")).await),
            cov.len()
        );
        assert!(listed(auditor.pass_at(&cov, at("2030-01-01T00:00:01Z")).await) < cov.len());
    }

    /// A kind whose list does not answer holds its own place in the pass,
    /// not the others': every other kind is listed and heard of. In
    /// coverage order, the first kind's hang held back every result and
    /// every kind after the first few.
    #[tokio::test]
    async fn a_slow_kind_does_not_hold_up_the_others() {
        let kinds: Vec<MrKind> = (0..KINDS_IN_FLIGHT * 2).map(kind_n).collect();
        let slow = kinds[0].clone();
        let group = format!("/apis/{}/", slow.group);
        let (client, api) = mock::client(move |r| {
            if r.path.starts_with(&group) {
                return Reply::Hang;
            }
            Reply::Json(200, page(vec![], ""))
        });
        let config = Config::builtin();
        let mut done = Vec::new();
        let run = pass(
            &client,
            &kinds,
            &config,
            Cluster::empty(),
            jiff::Timestamp::now(),
            |e| {
                if let PassEvent::Done(kind, result) = e {
                    assert!(result.is_ok(), "{result:?}");
                    done.push(kind.key());
                }
            },
        );
        assert!(
            tokio::time::timeout(Duration::from_secs(2), run)
                .await
                .is_err(),
            "the pass ended without the slow kind"
        );
        assert_eq!(api.requests().len(), kinds.len());
        assert_eq!(done.len(), kinds.len() - 1, "{done:?}");
        assert!(!done.contains(&slow.key()));
    }

    /// A changed or new kind whose watch holds no MR is judged empty
    /// without a list; a kind the watch does not know is listed; the
    /// refreshes list the empty kinds too, as they check the watches.
    #[tokio::test]
    async fn a_kind_its_watch_holds_empty_is_judged_without_a_list() {
        use crate::controller::replica::coverage::tests::established;
        let crds: Vec<Value> = fixture_crds().into_iter().map(established).collect();
        let cov = Coverage::from_crds(&summaries(&crds));
        let (client, api) = one_bad_bucket();
        let cluster: Arc<Cluster> = Default::default();
        // The watches listed every kind but the legacy Bucket, and found
        // nothing.
        for k in cov
            .kinds()
            .filter(|k| k.key() != "buckets.s3.aws.upbound.io")
        {
            cluster.identities().replace_kind(&k.group, &k.kind, vec![]);
        }
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let states = MrStates::new(metrics.clone());
        let config = ConfigStore::new(Config::builtin(), None);
        let mut auditor = Auditor::new(
            client,
            config.clone(),
            states.clone(),
            metrics.clone(),
            None,
            cluster.clone(),
        );
        let paths = |from: usize| -> Vec<String> {
            api.requests()[from..]
                .iter()
                .map(|r| r.path.clone())
                .collect()
        };
        let first = auditor.pass(&cov).await;
        assert_eq!(paths(0), ["/apis/s3.aws.upbound.io/v1beta2/buckets"]);
        assert_eq!((first.listed, first.empty), (1, cov.len() - 1));
        assert_eq!((first.objects, first.findings), (1, 1));
        assert!(first.complete);
        let gauge = || bucket_violations(&metrics);
        assert_eq!(gauge(), 1);

        // The watch lists the Bucket kind empty (the MR was deleted) and
        // moves its stamp: its finding goes without a list of it.
        cluster
            .identities()
            .replace_kind("s3.aws.upbound.io", "Bucket", vec![]);
        states.changes().kind("s3.aws.upbound.io", "Bucket");
        let before = api.requests().len();
        let second = auditor.pass(&cov).await;
        assert_eq!(second.empty, 1, "{second:?}");
        assert!(
            !paths(before).iter().any(|p| p.ends_with("/buckets")),
            "{:?}",
            paths(before)
        );
        assert_eq!((second.objects, second.findings), (0, 0));
        assert_eq!(gauge(), 0);

        // Within REFRESH_PASSES passes every kind is listed once anyway.
        let before = api.requests().len();
        for _ in 0..REFRESH_PASSES {
            auditor.pass(&cov).await;
        }
        let refreshed: HashSet<String> = paths(before).into_iter().collect();
        assert_eq!(refreshed.len(), cov.len(), "{refreshed:?}");
    }

    /// A kind RBAC forbids is kept like findings: reported as forbidden in
    /// every pass, listed again only when its refresh comes round (it was a
    /// 403 on every pass, which at hundreds of forbidden kinds would be
    /// most of an incremental pass's lists).
    #[tokio::test]
    async fn a_forbidden_kind_is_kept_between_refreshes() {
        use crate::controller::replica::coverage::tests::established;
        let crds: Vec<Value> = fixture_crds().into_iter().map(established).collect();
        let cov = Coverage::from_crds(&summaries(&crds));
        const VPCS: &str = "/apis/ec2.aws.upbound.io/v1beta1/vpcs";
        let (client, api) = mock::client(|r| {
            if r.path == VPCS {
                return Reply::Json(403, status(403, "Forbidden", "vpcs is forbidden"));
            }
            Reply::Json(200, page(vec![], ""))
        });
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let states = MrStates::new(metrics.clone());
        states.publish(true);
        let mut auditor = Auditor::new(
            client,
            ConfigStore::new(Config::builtin(), None),
            states,
            metrics.clone(),
            None,
            Default::default(),
        );
        let vpc_lists = || api.requests().iter().filter(|r| r.path == VPCS).count();
        let first = auditor.pass(&cov).await;
        assert_eq!(first.forbidden, vec!["vpcs.ec2.aws.upbound.io".to_string()]);
        assert!(first.complete);
        assert_eq!(vpc_lists(), 1);
        for _ in 0..3 {
            let p = auditor.pass(&cov).await;
            assert_eq!(p.forbidden, first.forbidden);
            assert!(p.complete && p.listed < cov.len(), "{p:?}");
        }
        // One refresh at most in those 3 passes (a tenth of 8 kinds each).
        assert!(vpc_lists() <= 2, "{}", vpc_lists());
        assert_eq!(metrics.forbidden_kinds.get(), 1);
    }

    #[tokio::test]
    async fn rbac_denial_is_reported_with_verb_and_resource() {
        let (client, _api) = mock::client(|_| {
            Reply::Json(
                403,
                status(403, "Forbidden", "buckets.s3.aws.upbound.io is forbidden"),
            )
        });
        let e = audit_kind(&client, &bucket_kind(), &Config::builtin())
            .await
            .unwrap_err();
        assert_eq!(e.status_code(), Some(403));
        assert!(
            e.to_string()
                .starts_with("failed to list managed resources buckets.s3.aws.upbound.io"),
            "{e}"
        );
    }
}
