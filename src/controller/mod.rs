//! The companion controller (docs/controller.md), run inside `mrguard serve`.
//!
//! In layers whose imports point down (`tests/it/architecture.rs`): this
//! module → `leader` → `replica` → the runtime's Kubernetes layer
//! (`crate::kube`), and `changes` beside this module serves them all. The
//! metrics they count in are `crate::metrics::controller`.
//! docs/architecture.md maps the files.
//!
//! Every replica (`replica`):
//! - watches the TLS Secret and swaps the server's certificate
//!   (`secret::run_loader`); `/readyz` turns true once one is loaded;
//! - keeps one CRD watch in one reflector store (`crds`) that the readers
//!   below, and the leader's coverage, share;
//! - derives which provider's service account serves which MR kind, for
//!   the exemptions, and which Provider serves which kinds, for the
//!   teardown guard (`replica` itself); `/readyz` waits for that too;
//! - derives the documented immutable fields of the MR CRDs into the shared
//!   `Cluster` (`documented`), for the `documented-immutable-field` rule;
//! - keeps the external-identity index admission reads (`identity`);
//!   `/readyz` waits for its first full list;
//! - competes for a `coordination.k8s.io` Lease (`crate::kube::lease`).
//!
//! Only the Lease holder writes to the cluster. While it leads it runs:
//! - `leader::certs`: the CA and serving certificate in the Secret, with a
//!   two-CA caBundle while the CA rotates;
//! - `leader::coverage`: reads the CRD store; the `managed` category names
//!   the MRs (`replica::coverage`);
//! - `leader::webhooks`: `caBundle` and `rules` of both webhook
//!   configurations, repaired from a watch, never recreated once deleted;
//! - `leader::leak_events`: one `PossiblyLeaked` Event per
//!   creation-incomplete MR, from the states every replica's identity
//!   watches keep (`replica::mr_states`, which also feed the gauges it
//!   publishes);
//! - `leader::audit`: the validation rules over every existing MR.
//!
//! Losing the Lease stops those tasks; serving admission never stops. The
//! tasks are supervised: when one ends or panics, the leader logs it once at
//! ERROR, counts it, stops the others, releases the Lease and campaigns
//! again after a backoff, so a leader never holds the Lease doing nothing.
//!
//! This module only wires the tasks together; what they share to talk to
//! the API server is in `crate::kube`. The command line resolves its flags into
//! `Settings`.

mod changes;
pub mod leader;
pub mod replica;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use ::kube::runtime::utils::Backoff as _;
use futures::FutureExt;
use mrguard_policy::cluster::Cluster;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;

use crate::kube::api::Clock;
use crate::live_config::ConfigStore;
pub use crate::metrics::controller::ControllerMetrics;
use crate::shutdown::Signal;
use crate::tls::CertStore;

/// Where Kubernetes mounts the service account's namespace in a pod.
const SA_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Resolves the namespace: the flag, $POD_NAMESPACE, the service account's
/// namespace file, then crossplane-system.
pub(crate) fn resolve_namespace(flag: Option<&str>) -> String {
    if let Some(ns) = flag.filter(|s| !s.is_empty()) {
        return ns.to_string();
    }
    if let Some(ns) = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty())
    {
        return ns;
    }
    if let Ok(ns) = std::fs::read_to_string(SA_NAMESPACE_FILE) {
        let ns = ns.trim();
        if !ns.is_empty() {
            return ns.to_string();
        }
    }
    "crossplane-system".to_string()
}

/// This replica's holder identity in the Lease: the pod name plus a random
/// suffix, so a restarted pod never mistakes its predecessor's lease for
/// its own.
pub(crate) fn lease_holder_id() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "mrguard".into());
    format!("{host}_{:08x}", fastrand::u32(..))
}

/// Everything the controller needs to know, resolved from the flags by
/// the command line.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Of the Service, the Secret and the Lease.
    pub(crate) namespace: String,
    pub(crate) service: String,
    pub(crate) secret: String,
    pub(crate) webhooks: leader::webhooks::WebhookNames,
    pub(crate) lease: String,
    pub(crate) lease_duration: Duration,
    pub(crate) audit_interval: Duration,
    /// The report API the audit writes to, if any.
    pub(crate) policy_reports: Option<mrguard_policy::commands::reports::Flavor>,
    /// Whether the leader keeps the admission policies in the API server
    /// (`--in-process auto`), and how.
    pub(crate) in_process: Option<InProcessSettings>,
    /// This replica's Lease holder identity ([`lease_holder_id`]).
    pub(crate) identity: String,
    pub(crate) certs: crate::pki::rotation::CertSettings,
    /// The port every replica serves admission on, for the rotation probe.
    pub(crate) serving_port: u16,
    /// Where Crossplane runs the providers' pods (their ServiceAccounts).
    pub(crate) crossplane_namespace: String,
}

/// `--in-process auto`'s settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InProcessSettings {
    /// The ClusterRole the written policies name as their owner.
    pub(crate) owner_role: Option<String>,
    /// The webhooks' selectors, which the policies match too.
    pub(crate) namespace_selector: Option<serde_json::Value>,
    pub(crate) object_selector: Option<serde_json::Value>,
}

impl InProcessSettings {
    /// The release as the plan names it: `owner` labels what is written.
    pub(crate) fn owner(&self, owner: &str) -> mrguard_policy::commands::export::in_process::Owner {
        mrguard_policy::commands::export::in_process::Owner {
            name: owner.to_string(),
            reference: None,
            namespace_selector: self.namespace_selector.clone(),
            object_selector: self.object_selector.clone(),
        }
    }
}

/// The running controller's shared pieces.
pub(crate) struct Controller {
    pub(crate) client: ::kube::Client,
    pub(crate) settings: Settings,
    pub(crate) certs: Arc<CertStore>,
    pub(crate) config: Arc<ConfigStore>,
    pub(crate) ready: Arc<AtomicBool>,
    pub(crate) metrics: Arc<ControllerMetrics>,
    pub(crate) clock: Arc<dyn Clock>,
    /// What admission reads of the cluster; every replica's watches fill it.
    pub(crate) cluster: Arc<Cluster>,
}

impl Controller {
    /// Runs until `shutdown` fires; releases the Lease on the way out.
    pub(crate) async fn run(self, shutdown: Signal) {
        tracing::info!(
            namespace = %self.settings.namespace,
            identity = %self.settings.identity,
            secret = %self.settings.secret,
            "controller starting"
        );
        let mut replica_tasks = JoinSet::new();
        let replica = ReplicaState::start(&self, &mut replica_tasks, &shutdown);
        let mut election = Election::start(&self, &shutdown);
        let leader = LeaderContext::new(self, replica);
        leader.lead_while_elected(&mut election, &shutdown).await;
        election.release().await;
        // Aborts the replica's watches and waits for them to stop.
        replica_tasks.shutdown().await;
    }
}

/// What every replica's watches keep for the leader's tasks.
struct ReplicaState {
    secret: watch::Receiver<replica::secret::SecretView>,
    crds: replica::crds::CrdStore,
    states: replica::mr_states::MrStates,
    /// The in-process policies this release's leader wrote, as last seen.
    in_process: watch::Receiver<replica::in_process::LivePolicies>,
}

impl ReplicaState {
    /// Spawns the watches every replica runs (it answers admission) into
    /// `tasks`: the TLS Secret, the CRDs, the providers' accounts, the
    /// XRDs, the MRDs and MRAPs, the documented immutable fields and the
    /// identity index.
    fn start(ctl: &Controller, tasks: &mut JoinSet<()>, shutdown: &Signal) -> Self {
        let Controller {
            client,
            settings,
            metrics,
            cluster,
            ..
        } = ctl;
        let gate = replica::ReadyGate::new(ctl.ready.clone());
        let (secret_tx, secret) = watch::channel(replica::secret::SecretView::default());
        tasks.spawn(
            replica::secret::run_loader(
                ::kube::Api::namespaced(client.clone(), &settings.namespace),
                settings.secret.clone(),
                ctl.certs.clone(),
                gate.clone(),
                secret_tx,
                shutdown.clone(),
                Some(metrics.clone()),
            )
            .instrument(tracing::info_span!("secret_loader")),
        );
        // One CRD watch and store for every reader below (and the leader's
        // coverage).
        let (crds, crd_watch) = replica::crds::CrdStore::watch(client.clone(), metrics.clone());
        tasks.spawn(crd_watch);
        tasks.spawn(
            replica::run_provider_watch(
                client.clone(),
                crds.clone(),
                settings.crossplane_namespace.clone(),
                cluster.clone(),
                gate,
                metrics.clone(),
                shutdown.clone(),
            )
            .instrument(tracing::info_span!("provider_accounts")),
        );
        tasks.spawn(
            replica::xrds::run(client.clone(), cluster.clone())
                .instrument(tracing::info_span!("xrd_watch")),
        );
        let (mrds_changed, mrd_changes) = watch::channel(0);
        tasks.spawn(
            replica::mrds::run(
                client.clone(),
                cluster.clone(),
                metrics.clone(),
                mrds_changed,
            )
            .instrument(tracing::info_span!("mrd_watch")),
        );
        tasks.spawn(
            replica::documented::run(crds.clone(), cluster.clone(), mrd_changes)
                .instrument(tracing::info_span!("documented_immutables")),
        );
        // Not ready until the identity watches have listed once. The same
        // watches keep the MR states behind the leader's gauges and Events.
        cluster.identities().set_synced(false);
        let states = replica::mr_states::MrStates::new(metrics.clone());
        tasks.spawn(
            replica::identity::run(
                client.clone(),
                crds.clone(),
                ctl.config.clone(),
                cluster.clone(),
                states.clone(),
                metrics.clone(),
            )
            .instrument(tracing::info_span!("identity_index")),
        );
        let (seen_tx, in_process) = watch::channel(Default::default());
        if let Some(in_process) = &settings.in_process {
            let (client, config, metrics) = (client.clone(), ctl.config.clone(), metrics.clone());
            let owner = in_process.owner(&settings.webhooks.validating);
            tasks.spawn(
                async move {
                    let server = server_version(&client).await;
                    replica::in_process::run(client, server, owner, config, metrics, seen_tx).await
                }
                .instrument(tracing::info_span!("in_process_policies")),
            );
        }
        Self {
            secret,
            crds,
            states,
            in_process,
        }
    }
}

/// The API server's version, asked until it answers.
pub(crate) async fn server_version(
    client: &::kube::Client,
) -> mrguard_policy::admission::kube_version::KubeVersion {
    let mut delay = Duration::from_millis(200);
    loop {
        match client.apiserver_version().await {
            Ok(info) => {
                use mrguard_policy::admission::kube_version::KubeVersion;
                match KubeVersion::of_server(&info.major, &info.minor) {
                    Ok(v) => return v,
                    // The error names the text it was given.
                    Err(e) => tracing::warn!("failed to read the API server's version: {e}"),
                }
            }
            Err(e) => tracing::warn!("failed to read the API server's version: {e}"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// This replica's campaign for the Lease.
struct Election {
    /// True while this replica holds the Lease.
    leading: watch::Receiver<bool>,
    /// Asks the elector to release the Lease and sit out this long.
    step_down: mpsc::UnboundedSender<Duration>,
    task: JoinHandle<()>,
}

impl Election {
    fn start(ctl: &Controller, shutdown: &Signal) -> Self {
        let settings = &ctl.settings;
        let (leading_tx, leading) = watch::channel(false);
        let elector = crate::kube::lease::LeaderElector::new(
            ::kube::Api::namespaced(ctl.client.clone(), &settings.namespace),
            &settings.lease,
            &settings.identity,
            settings.lease_duration,
            ctl.clock.clone(),
        )
        .with_metrics(ctl.metrics.clone());
        let (step_down, step_down_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(
            elector
                .run(leading_tx, shutdown.clone(), step_down_rx)
                .instrument(tracing::info_span!("leader_election")),
        );
        Self {
            leading,
            step_down,
            task,
        }
    }

    /// True once this replica leads; false when shutdown fires first (or
    /// the elector is gone).
    async fn elected(&mut self, shutdown: &Signal) -> bool {
        tokio::select! {
            r = self.leading.wait_for(|l| *l) => r.is_ok(),
            _ = shutdown.wait() => false,
        }
    }

    /// Returns once this replica no longer leads, or shutdown fires.
    async fn deposed(&mut self, shutdown: &Signal) {
        tokio::select! {
            r = self.leading.wait_for(|l| !*l) => { let _ = r; }
            _ = shutdown.wait() => {}
        }
    }

    /// Releases the Lease on the way out (the elector does when shutdown
    /// fires); an API server that does not answer must not hold the
    /// shutdown up.
    async fn release(self) {
        let abort = self.task.abort_handle();
        if tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .is_err()
        {
            abort.abort();
            tracing::warn!("gave up releasing the lease; it expires on its own");
        }
    }
}

/// A leader task that ended or panicked: its name and how.
struct Died {
    task: &'static str,
    how: String,
}

impl Died {
    fn of(
        ended: Result<(tokio::task::Id, ()), tokio::task::JoinError>,
        names: &HashMap<tokio::task::Id, &'static str>,
    ) -> Self {
        let name = |id| names.get(&id).copied().unwrap_or("unknown");
        let (task, how) = match ended {
            Ok((id, ())) => (name(id), "ended".to_string()),
            Err(e) if e.is_panic() => {
                let task = name(e.id());
                let payload = e.into_panic();
                let msg = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                (task, format!("panicked ({msg})"))
            }
            Err(e) => (name(e.id()), e.to_string()),
        };
        Self { task, how }
    }
}

/// A task set that ran this long before a task died was healthy: the next
/// death sits out the shortest time again.
const RAN_LONG_ENOUGH: Duration = Duration::from_secs(600);

/// Test-only: `MRGUARD_TEST_PANIC_TASK=<task>` makes that leader task panic
/// once, two seconds after it first starts, so the end-to-end tests can
/// show the supervision. Compiled with the `test-hooks` feature only, which
/// test builds enable and release builds do not.
#[cfg(feature = "test-hooks")]
struct TestHook {
    task: Option<String>,
    fired: Arc<AtomicBool>,
}

#[cfg(feature = "test-hooks")]
impl TestHook {
    const ENV: &'static str = "MRGUARD_TEST_PANIC_TASK";

    fn from_env() -> Self {
        Self {
            task: std::env::var(Self::ENV).ok().filter(|t| !t.is_empty()),
            fired: Arc::default(),
        }
    }

    /// `task`, or `task` made to panic once when the hook names it.
    fn wrap(
        &self,
        name: &'static str,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let armed = self.task.as_deref() == Some(name)
            && !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst);
        async move {
            if !armed {
                return task.await;
            }
            tokio::select! {
                () = task => {}
                () = tokio::time::sleep(Duration::from_secs(2)) => {
                    panic!("{}={name}: the test hook makes this task panic once", TestHook::ENV)
                }
            }
        }
    }
}

/// Without the `test-hooks` feature: every task runs as it is.
#[cfg(not(feature = "test-hooks"))]
struct TestHook;

#[cfg(not(feature = "test-hooks"))]
impl TestHook {
    fn from_env() -> Self {
        Self
    }

    fn wrap<F>(&self, _name: &'static str, task: F) -> F {
        task
    }
}

/// What every leader-only task shares.
#[derive(Clone)]
pub(crate) struct LeaderContext {
    pub(crate) client: ::kube::Client,
    pub(crate) settings: Arc<Settings>,
    pub(crate) certs: Arc<CertStore>,
    pub(crate) config: Arc<ConfigStore>,
    pub(crate) metrics: Arc<ControllerMetrics>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) secret: watch::Receiver<replica::secret::SecretView>,
    /// Every replica's MR states (fed by the identity watches).
    pub(crate) states: replica::mr_states::MrStates,
    /// Shared with admission; the audit reads the identity index.
    pub(crate) cluster: Arc<Cluster>,
    /// The replica's CRD store, which the coverage reads.
    pub(crate) crds: replica::crds::CrdStore,
    /// The in-process policies as the replica's watch last saw them.
    pub(crate) in_process: watch::Receiver<replica::in_process::LivePolicies>,
}

impl LeaderContext {
    fn new(ctl: Controller, replica: ReplicaState) -> Self {
        Self {
            client: ctl.client,
            settings: Arc::new(ctl.settings),
            certs: ctl.certs,
            config: ctl.config,
            metrics: ctl.metrics,
            clock: ctl.clock,
            secret: replica.secret,
            states: replica.states,
            cluster: ctl.cluster,
            crds: replica.crds,
            in_process: replica.in_process,
        }
    }

    /// Runs the leader tasks whenever this replica holds the Lease, until
    /// shutdown fires. A task that ends or panics makes the leader step
    /// down and sit out (1-2 s, doubling to 1-2 min): the wait grows while
    /// tasks keep dying, and resets once a task set ran for a while.
    async fn lead_while_elected(&self, election: &mut Election, shutdown: &Signal) {
        let hook = TestHook::from_env();
        let mut sit_out =
            crate::kube::api::Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        while election.elected(shutdown).await {
            let started = tokio::time::Instant::now();
            match self.lead_once(election, shutdown, &hook).await {
                Some(died) => {
                    self.metrics
                        .task_restarts
                        .with_label_values(&[died.task])
                        .inc();
                    if started.elapsed() > RAN_LONG_ENOUGH {
                        sit_out.reset();
                    }
                    let wait = sit_out.next_delay();
                    tracing::error!(
                        task = died.task,
                        sit_out = ?wait,
                        "leader task {} {}; stepped down, releasing the lease, and will restart the leader tasks",
                        died.task,
                        died.how,
                    );
                    let _ = election.step_down.send(wait);
                    // Until the elector has let go, `leading` still says true.
                    election.deposed(shutdown).await;
                }
                None => tracing::info!("no longer leading: stopped writing"),
            }
            if shutdown.is_fired() {
                break;
            }
        }
    }

    /// One term: runs every leader task until the Lease is lost, shutdown
    /// fires or a task dies (returned), then stops them all.
    async fn lead_once(
        &self,
        election: &mut Election,
        shutdown: &Signal,
        hook: &TestHook,
    ) -> Option<Died> {
        self.metrics.leader.set(1);
        tracing::info!(
            "leading: managing certificates, webhook configurations, MR gauges and events"
        );
        let mut tasks = JoinSet::new();
        let names = self.clone().spawn_all(&mut tasks, hook);
        self.states.publish(true);
        let died = tokio::select! {
            () = election.deposed(shutdown) => None,
            Some(ended) = tasks.join_next_with_id() => Some(Died::of(ended, &names)),
        };
        tasks.shutdown().await;
        self.states.publish(false);
        self.metrics.clear_leader_state();
        died
    }

    /// Spawns every leader task; returns their names by task id.
    fn spawn_all(
        self,
        tasks: &mut JoinSet<()>,
        hook: &TestHook,
    ) -> HashMap<tokio::task::Id, &'static str> {
        let mut names = HashMap::new();
        let mut spawn = |name: &'static str, task: futures::future::BoxFuture<'static, ()>| {
            let id = tasks.spawn(hook.wrap(name, task)).id();
            names.insert(id, name);
        };
        let (coverage_tx, coverage_rx) = watch::channel(None);
        let s = &self.settings;

        let reconciler = leader::certs::CertReconciler {
            secrets: ::kube::Api::namespaced(self.client.clone(), &s.namespace),
            name: s.secret.clone(),
            settings: s.certs.clone(),
            clock: self.clock.clone(),
            webhooks: leader::webhooks::WebhookApi::new(self.client.clone(), s.webhooks.clone()),
            probe: Arc::new(leader::certs::EndpointProbe {
                slices: ::kube::Api::namespaced(self.client.clone(), &s.namespace),
                service: s.service.clone(),
                port: s.serving_port,
                server_name: crate::pki::service_host(&s.service, &s.namespace),
                local: self.certs.clone(),
            }),
        };
        spawn(
            "certificates",
            reconciler
                .run(self.secret.clone(), self.metrics.clone())
                .instrument(tracing::info_span!("certificates"))
                .boxed(),
        );
        spawn(
            "coverage",
            leader::coverage::run(self.crds.clone(), coverage_tx, self.metrics.clone())
                .instrument(tracing::info_span!("coverage"))
                .boxed(),
        );
        spawn(
            "webhooks",
            leader::webhooks::run(
                leader::webhooks::WebhookApi::new(self.client.clone(), s.webhooks.clone()),
                self.secret.clone(),
                coverage_rx,
                self.in_process.clone(),
                self.metrics.clone(),
            )
            .instrument(tracing::info_span!("webhooks"))
            .boxed(),
        );
        let recorder = leader::leak_events::EventRecorder::new(
            self.client.clone(),
            s.identity.clone(),
            self.states.dedup(),
        );
        spawn(
            "leak_events",
            leader::leak_events::report_leaks(self.states.clone(), recorder, self.metrics.clone())
                .instrument(tracing::info_span!("leak_events"))
                .boxed(),
        );
        let owner = s.webhooks.validating.clone();
        match s.in_process.clone() {
            Some(settings) => {
                let keeper = leader::in_process::Keeper {
                    client: self.client.clone(),
                    server: Default::default(),
                    owner: settings.owner(&owner),
                    owner_role: settings.owner_role,
                    config: self.config.clone(),
                    recorder: kube::runtime::events::Recorder::new(
                        self.client.clone(),
                        leader::in_process::reporter(&s.identity),
                    ),
                };
                let (client, seen) = (self.client.clone(), self.in_process.clone());
                spawn(
                    "in_process",
                    async move {
                        let server = server_version(&client).await;
                        leader::in_process::Keeper { server, ..keeper }
                            .run(seen)
                            .await
                    }
                    .instrument(tracing::info_span!("in_process"))
                    .boxed(),
                );
            }
            None => {
                let client = self.client.clone();
                spawn(
                    "in_process",
                    async move {
                        let server =
                            tokio::time::timeout(Duration::from_secs(10), server_version(&client))
                                .await
                                .unwrap_or(mrguard_policy::commands::export::in_process::MAP_SINCE);
                        leader::in_process::remove_all(client, server, owner).await;
                        // Done; a leader task that ends counts as died.
                        futures::future::pending::<()>().await
                    }
                    .instrument(tracing::info_span!("in_process"))
                    .boxed(),
                );
            }
        }
        // Its reads, and the policy reports', in the background class:
        // the watchers' reads go first (after an API-server restart, their
        // relists).
        spawn(
            "audit",
            crate::kube::list_limit::in_background(
                leader::audit::Auditor::new(
                    self.client.clone(),
                    self.config.clone(),
                    self.states.clone(),
                    self.metrics.clone(),
                    s.policy_reports
                        .map(|f| leader::reports::ReportWriter::new(self.client.clone(), f)),
                    self.cluster.clone(),
                )
                .run(self.crds.clone(), s.audit_interval),
            )
            .instrument(tracing::info_span!("audit"))
            .boxed(),
        );
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_flag_wins() {
        assert_eq!(resolve_namespace(Some("team")), "team");
    }

    /// The whole controller against a small in-memory API server: it takes
    /// the Lease, creates the Secret, loads it (readiness), and writes the
    /// Secret's CA and the fixture CRDs' rules into both configurations;
    /// on shutdown it releases the Lease.
    #[tokio::test]
    async fn a_leader_bootstraps_certificates_and_webhooks() {
        use crate::controller::leader::webhooks::{tests_support::config_json, ConfigKind};
        use crate::controller::replica::coverage::tests::fixture_crds;
        use crate::controller::replica::coverage::{
            Coverage, MUTATE_OPERATIONS, VALIDATE_OPERATIONS,
        };
        use crate::kube::mock::{self, list, status, Reply};
        use serde_json::{json, Value};
        use std::collections::BTreeMap;
        use std::sync::atomic::Ordering;
        use std::sync::Mutex;

        #[derive(Default)]
        struct Cluster {
            lease: Option<Value>,
            secret: Option<Value>,
            configs: BTreeMap<&'static str, Value>,
        }
        let cluster = Arc::new(Mutex::new(Cluster::default()));
        for (res, kind) in [
            ("mutatingwebhookconfigurations", ConfigKind::Mutating),
            ("validatingwebhookconfigurations", ConfigKind::Validating),
        ] {
            cluster
                .lock()
                .unwrap()
                .configs
                .insert(res, config_json(kind, "mrguard", b"", json!([]), "1"));
        }
        // The chart creates the Secret empty; the controller never creates one.
        cluster.lock().unwrap().secret = Some(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "mrguard-tls", "namespace": "crossplane-system", "resourceVersion": "1"},
            "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}
        }));
        let crds = fixture_crds();
        let c = cluster.clone();
        let (client, api) = mock::client(move |r| {
            let mut c = c.lock().unwrap();
            let watch = r.query.contains("watch=true");
            let path = r.path.as_str();
            if path.contains("/leases/") || path.ends_with("/leases") {
                return match r.method.as_str() {
                    "GET" => match &c.lease {
                        Some(l) => Reply::Json(200, l.clone()),
                        None => Reply::Json(404, status(404, "NotFound", "not found")),
                    },
                    _ => {
                        let mut l = r.body.clone();
                        l["metadata"]["resourceVersion"] = json!("2");
                        c.lease = Some(l.clone());
                        Reply::Json(200, l)
                    }
                };
            }
            if path.contains("/secrets") {
                return match (r.method.as_str(), watch) {
                    ("GET", true) => Reply::Watch(vec![]),
                    ("GET", false) if path.ends_with("/secrets") => Reply::Json(
                        200,
                        list("SecretList", "v1", c.secret.iter().cloned().collect()),
                    ),
                    ("GET", false) => match &c.secret {
                        Some(s) => Reply::Json(200, s.clone()),
                        None => Reply::Json(404, status(404, "NotFound", "not found")),
                    },
                    _ => {
                        let mut s = r.body.clone();
                        s["metadata"]["resourceVersion"] = json!("7");
                        s["metadata"]["namespace"] = json!("crossplane-system");
                        c.secret = Some(s.clone());
                        Reply::Json(201, s)
                    }
                };
            }
            for res in [
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
            ] {
                if !path.contains(res) {
                    continue;
                }
                let cur = c.configs[res].clone();
                return match (r.method.as_str(), watch) {
                    ("GET", true) => Reply::Watch(vec![]),
                    ("GET", false) if path.ends_with(res) => Reply::Json(
                        200,
                        list("List", "admissionregistration.k8s.io/v1", vec![cur]),
                    ),
                    ("GET", false) => Reply::Json(200, cur),
                    _ => {
                        let mut obj = cur;
                        let w = &r.body["webhooks"][0];
                        obj["webhooks"][0]["clientConfig"]["caBundle"] =
                            w["clientConfig"]["caBundle"].clone();
                        obj["webhooks"][0]["rules"] = w["rules"].clone();
                        obj["metadata"]["resourceVersion"] = json!("2");
                        c.configs.insert(res, obj.clone());
                        Reply::Json(200, obj)
                    }
                };
            }
            if let Some(reply) = mock::crds_reply(r, &crds) {
                return reply;
            }
            if path.contains("endpointslices") {
                return Reply::Json(
                    200,
                    list("EndpointSliceList", "discovery.k8s.io/v1", vec![]),
                );
            }
            if path.contains("/events") {
                return Reply::Json(200, list("EventList", "events.k8s.io/v1", vec![]));
            }
            // Every MR kind: none exist.
            if watch {
                Reply::Watch(vec![])
            } else {
                Reply::Json(200, list("List", "v1", vec![]))
            }
        });

        let settings = Settings {
            namespace: "crossplane-system".into(),
            service: "mrguard".into(),
            secret: "mrguard-tls".into(),
            webhooks: leader::webhooks::WebhookNames {
                mutating: "mrguard".into(),
                validating: "mrguard".into(),
            },
            lease: "mrguard-leader".into(),
            lease_duration: Duration::from_secs(15),
            audit_interval: Duration::from_secs(600),
            policy_reports: None,
            in_process: None,
            identity: lease_holder_id(),
            certs: crate::pki::rotation::CertSettings {
                names: crate::pki::serving_names(
                    false,
                    Some(("mrguard", "crossplane-system")),
                    &[],
                ),
                ca_lifetime: Duration::from_secs(365 * 86400),
                cert_lifetime: Duration::from_secs(90 * 86400),
                renew_fraction: 1.0 / 3.0,
                settle: crate::pki::rotation::BUNDLE_SETTLE,
            },
            serving_port: 9443,
            crossplane_namespace: "crossplane-system".into(),
        };
        let (pair, _) = crate::pki::self_signed(&crate::pki::local_names()).unwrap();
        let certs = CertStore::new(pair.certified_key().unwrap(), None);
        let ready = Arc::new(AtomicBool::new(false));
        let metrics = Arc::new(ControllerMetrics::register(&prometheus::Registry::new()).unwrap());
        let controller = Controller {
            client,
            settings,
            certs: certs.clone(),
            config: ConfigStore::new(mrguard_policy::admission::config::Config::builtin(), None),
            ready: ready.clone(),
            metrics: metrics.clone(),
            clock: Arc::new(crate::kube::api::SystemClock),
            cluster: Default::default(),
        };
        let (trigger, signal) = crate::shutdown::channel();
        let task = tokio::spawn(controller.run(signal));

        // The leader fills the Secret; the API server tells every replica.
        api.wait_for("the Secret", |r| {
            r.iter()
                .any(|r| r.method == "PUT" && r.path.ends_with("/secrets/mrguard-tls"))
        })
        .await;
        assert!(
            !api.requests()
                .iter()
                .any(|r| r.method == "POST" && r.path.contains("/secrets")),
            "the controller created a Secret"
        );
        assert!(
            !ready.load(Ordering::Acquire),
            "ready before a certificate was loaded"
        );
        api.wait_watch("/secrets").await;
        let secret = cluster.lock().unwrap().secret.clone().unwrap();
        assert_eq!(api.push("/secrets", "MODIFIED", secret.clone()), 1);

        // Both configurations get the Secret's ca.crt and the exact rules.
        let ca = secret["data"]["ca.crt"].clone();
        let cov = Coverage::from_crds(&crate::controller::replica::coverage::tests::summaries(
            &fixture_crds(),
        ));
        api.wait_for("both configurations", |_| {
            let c = cluster.lock().unwrap();
            c.configs
                .values()
                .all(|v| v["webhooks"][0]["clientConfig"]["caBundle"] == ca)
        })
        .await;
        {
            let c = cluster.lock().unwrap();
            assert_eq!(
                c.configs["mutatingwebhookconfigurations"]["webhooks"][0]["rules"],
                json!(cov.rules(MUTATE_OPERATIONS))
            );
            assert_eq!(
                c.configs["validatingwebhookconfigurations"]["webhooks"][0]["rules"],
                json!(cov.rules(VALIDATE_OPERATIONS))
            );
        }
        assert!(ready.load(Ordering::Acquire));
        assert_eq!(metrics.leader.get(), 1);
        assert_eq!(metrics.covered_kinds.get(), 7);
        // One CRD watch serves the provider accounts, the documented fields,
        // the identity index and the leader's coverage (there were four).
        let crd_calls = |watch: bool| {
            api.requests()
                .iter()
                .filter(|r| {
                    r.path.ends_with("/customresourcedefinitions")
                        && r.query.contains("watch=true") == watch
                })
                .count()
        };
        assert_eq!(crd_calls(true), 1, "CRD watches");
        // The audit pass lists CRDs by itself, apart from the watch's list.
        assert!(crd_calls(false) <= 2, "CRD lists: {}", crd_calls(false));
        // The server now serves the Secret's certificate.
        let served = certs.current();
        let leaf = leader::certs::secret_contents(&serde_json::from_value(secret).unwrap())
            .leaf
            .unwrap();
        assert_eq!(
            served.cert[0],
            crate::pki::parse_certs(&leaf.cert, "leaf").unwrap()[0]
        );

        trigger.fire();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .unwrap()
            .unwrap();
        let lease = cluster.lock().unwrap().lease.clone().unwrap();
        assert!(lease["spec"]["holderIdentity"].is_null(), "{lease}");
        assert_eq!(metrics.leader.get(), 0);
    }
}
