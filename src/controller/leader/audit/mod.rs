//! The controller's audit: the validation rules over every existing MR,
//! for example ones created before a rule existed or while the webhook was
//! off, on an interval, on the Lease holder only.
//!
//! - `listing`: listing a kind and judging its MRs, shared with `mrguard
//!   audit`;
//! - `findings`: the violation gauges and which findings are new;
//! - this module: the passes. Which kinds a pass lists again and the line
//!   that sums it up are pure, beside the reports' input, in
//!   `mrguard_policy::commands::audit_pass`.

pub(crate) mod findings;
pub(crate) mod listing;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::controller::changes::Stamp;
use crate::controller::replica::coverage::{Coverage, MrKind};
use crate::controller::replica::crds::CrdStore;
use crate::controller::replica::mr_states::MrStates;
use crate::kube::api::KubeError;
use crate::live_config::ConfigStore;
use crate::metrics::controller::ControllerMetrics;
use findings::AuditState;
use listing::{KindReport, PassEvent};
use mrguard_policy::admission::config::Config;
use mrguard_policy::admission::model::Action;
use mrguard_policy::cluster::Cluster;
use mrguard_policy::commands::audit_pass::{self, FindingsSummary, KindNow, LastListing};
use mrguard_policy::commands::reports::{PassInput, ReportFinding, ReportedMr};

/// A kind's last listing, kept while nothing its findings depend on changes.
struct Listed {
    /// Its stamp then, and the pass: what the schedule
    /// ([`audit_pass::due`]) reads.
    at: LastListing<Stamp>,
    /// `None`: RBAC forbade the list. Kept like findings: a kind's watch
    /// is refused as well, until a grant lets it list, which moves the stamp.
    report: Option<KindReport>,
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

/// What a pass is to do, decided before any list starts.
struct Plan<'c> {
    /// Judged empty without a list: their watch holds no MR.
    empty: Vec<&'c MrKind>,
    /// Listed, changed kinds first, then the refreshes.
    listing: Vec<&'c MrKind>,
    /// Every kind's stamp as the pass started, by CRD name.
    stamps: HashMap<String, Stamp>,
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
        self.start_over_if_stale(&config, now);
        self.forget_gone_kinds(cov);
        self.passes += 1;
        let plan = self.plan(cov);
        let started = std::time::Instant::now();
        let mut outcomes = Outcomes {
            pass: self.passes,
            stamps: &plan.stamps,
            summary: PassSummary {
                kinds: cov.len(),
                listed: plan.listing.len(),
                empty: plan.empty.len(),
                complete: true,
                ..PassSummary::default()
            },
            collected: PassCollector::default(),
            state: &mut self.state,
            listed: &mut self.listed,
            states: &self.states,
            metrics: &self.metrics,
        };
        for kind in plan.empty {
            outcomes.done(kind, Ok(KindReport::default()));
        }
        listing::pass(
            &self.client,
            plan.listing,
            &config,
            &self.cluster,
            now,
            |event| {
                if let PassEvent::Done(kind, result) = event {
                    outcomes.done(kind, result);
                }
            },
        )
        .await;
        let Outcomes {
            mut summary,
            mut collected,
            ..
        } = outcomes;
        let found = self.tally(cov, &mut summary, &mut collected);
        if summary.complete {
            self.metrics
                .audit_last_success
                .set(jiff::Timestamp::now().as_second());
        }
        log_pass(&summary, &found, started.elapsed());
        if let Some(w) = &self.reports {
            super::reports::sync_logged(w, &collected.finish(), &self.metrics).await;
        }
        summary
    }

    /// A new configuration, or a staged Deny or an exception's expiry
    /// reached since the findings were judged: nothing kept counts, every
    /// kind is judged again.
    fn start_over_if_stale(&mut self, config: &Arc<Config>, now: jiff::Timestamp) {
        let same = self
            .judged_with
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, config));
        if audit_pass::starts_over(same, self.judged_until, now) {
            self.listed.clear();
            self.judged_with = Some(config.clone());
            self.judged_until = config.next_change_after(now);
        }
    }

    /// Kinds no longer covered: their series and their kept results go.
    fn forget_gone_kinds(&mut self, cov: &Coverage) {
        let keys: HashSet<String> = cov.kinds().map(MrKind::key).collect();
        self.state.forget_all_but(&keys);
        self.listed.retain(|k, _| keys.contains(k));
    }

    /// The kinds of `cov` this pass judges again ([`audit_pass::due`]),
    /// with the stamps they are kept under. Stamped before any list
    /// starts: a change seen during the pass makes the next one list the
    /// kind again.
    fn plan<'c>(&self, cov: &'c Coverage) -> Plan<'c> {
        let changes = self.states.changes();
        let kinds: Vec<KindNow<&MrKind, Stamp>> = cov
            .kinds()
            .map(|k| KindNow {
                kind: k,
                stamp: changes.stamp(&k.group, &k.kind),
                last: self.listed.get(&k.key()).map(|l| l.at),
            })
            .collect();
        let stamps = kinds.iter().map(|k| (k.kind.key(), k.stamp)).collect();
        let identities = self.cluster.identities();
        let (empty, listing) = audit_pass::due(kinds, self.passes, |k| {
            identities.listed_len(&k.group, &k.kind) == Some(0)
        })
        .listing();
        Plan {
            empty,
            listing,
            stamps,
        }
    }

    /// Counts every kind's results, listed now or kept, into the pass's
    /// summary and reports; returns what it found, for the pass's line.
    fn tally(
        &mut self,
        cov: &Coverage,
        summary: &mut PassSummary,
        collected: &mut PassCollector,
    ) -> FindingsSummary {
        let mut found = self.state.take_news();
        for kind in cov.kinds() {
            let key = kind.key();
            match self.listed.get(&key).map(|l| &l.report) {
                Some(Some(report)) => {
                    summary.objects += report.objects;
                    summary.findings += report.findings.len();
                    report.findings.iter().for_each(|f| found.count(f.at()));
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
        found
    }
}

/// What one pass makes of each kind's outcome as it comes in: a listing's,
/// or an empty kind's report. It holds what the outcomes change, borrowed
/// from the [`Auditor`] while the listings run.
struct Outcomes<'a> {
    pass: u64,
    stamps: &'a HashMap<String, Stamp>,
    summary: PassSummary,
    collected: PassCollector,
    state: &'a mut AuditState,
    listed: &'a mut HashMap<String, Listed>,
    states: &'a MrStates,
    metrics: &'a ControllerMetrics,
}

impl Outcomes<'_> {
    /// Keeps `kind`'s report, or `None` when RBAC forbade the list, until
    /// its stamp moves or its refresh comes; a failed list keeps nothing
    /// new and leaves the last results in the gauges and the reports.
    fn done(&mut self, kind: &MrKind, result: Result<KindReport, KubeError>) {
        let key = kind.key();
        let kept = match result {
            Ok(report) => {
                self.summary.read += report.objects;
                self.state.record(kind, &report.findings);
                self.states.set_forbidden(kind, false);
                Some(report)
            }
            Err(e) if e.status_code() == Some(403) => {
                self.forbidden(kind, &e);
                None
            }
            Err(e) => {
                self.failed(kind, &e);
                return;
            }
        };
        let stamp = self.stamps.get(&key).copied().unwrap_or_default();
        self.listed.insert(
            key,
            Listed {
                at: LastListing {
                    stamp,
                    pass: self.pass,
                },
                report: kept,
            },
        );
    }

    /// RBAC does not let mrguard read this kind (the chart lists API
    /// groups; a provider outside them). That is the operator's choice,
    /// not a failed pass: the kind is reported in
    /// mrguard_controller_forbidden_kinds and the pass still counts, so a
    /// staleness alert on the success timestamp means the audit is really
    /// stuck.
    fn forbidden(&mut self, kind: &MrKind, e: &KubeError) {
        if self.states.set_forbidden(kind, true) {
            e.log(Some(self.metrics), "audit: skipping a kind RBAC forbids");
        } else {
            e.count(Some(self.metrics));
        }
        self.state.forget(&kind.key());
    }

    /// The kind could not be listed: the pass is incomplete, its last
    /// results stay in the gauges and the reports, and the next pass
    /// lists it again.
    fn failed(&mut self, kind: &MrKind, e: &KubeError) {
        self.summary.complete = false;
        if e.is_not_found() {
            // Established, but the API server's handler lags its own
            // condition for a moment (or the CRD was just deleted): the
            // next pass reads it.
            e.count(Some(self.metrics));
            tracing::debug!(error = %e, "audit: a kind is not served yet; keeping its last results");
        } else {
            e.log(
                Some(self.metrics),
                "audit: failed to list MRs of a kind; keeping its last results",
            );
        }
        self.listed.remove(&kind.key());
        self.collected.failed(kind);
    }
}

/// One line a pass. WARN when it found something its last pass did not: a
/// steady state of known findings is in the gauges and the reports, not
/// worth a WARN every interval. A new leader's first pass finds everything
/// new, and says so once.
fn log_pass(summary: &PassSummary, found: &FindingsSummary, took: Duration) {
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
                new_findings = found.new_findings(),
                by_rule = %found.by_rule(),
                by_kind = %found.by_kind(),
                new_examples = %found.examples(),
                complete = summary.complete,
                forbidden = summary.forbidden.len(),
                forbidden_kinds = %summary.forbidden.join(","),
                seconds = took.as_secs_f64(),
                "audit pass done"
            )
        };
    }
    if found.new_findings() > 0 {
        pass_done!(tracing::Level::WARN);
    } else {
        pass_done!(tracing::Level::INFO);
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
    use crate::controller::replica::coverage::tests::{established, fixture_crds, summaries};
    use crate::kube::mock::{self, status, Reply};
    use listing::tests::{bucket, page};
    use mrguard_policy::commands::audit_pass::REFRESH_PASSES;
    use serde_json::{json, Value};

    /// With one kind RBAC forbids (the chart's
    /// default `groups` mode and a provider outside it), a pass still
    /// counts as successful, and the kind is reported as forbidden. A kind
    /// whose CRD is not established yet is not listed (it was a 404 that
    /// made the pass incomplete).
    #[tokio::test]
    async fn a_forbidden_kind_does_not_fail_the_pass() {
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

    /// The controller's passes against a mock API server: the first lists
    /// every kind; the next keeps the findings of kinds nothing changed
    /// and lists only the one whose watch saw an event (and a tenth due a
    /// refresh); a new configuration lists every kind again. Kept findings
    /// are still counted, in the gauges and the reports.
    #[tokio::test]
    async fn a_pass_lists_only_what_changed_and_keeps_the_rest() {
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

    /// A changed or new kind whose watch holds no MR is judged empty
    /// without a list; a kind the watch does not know is listed; the
    /// refreshes list the empty kinds too, as they check the watches.
    #[tokio::test]
    async fn a_kind_its_watch_holds_empty_is_judged_without_a_list() {
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
}
