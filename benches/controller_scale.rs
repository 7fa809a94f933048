//! The controller at platform scale, against a real API server: many MR
//! CRDs and many MRs, one mrguard installed from its chart.
//!
//! ```text
//! KUBEBUILDER_ASSETS=... cargo bench --bench controller_scale -- [--crds 1000] [--mrs 20000] [--out FILE]
//! ```
//!
//! Phases, each reported:
//!
//! 1. `--crds` generated CRDs in category `managed`, in the API groups of
//!    the chart's default RBAC (the provider-upjet-aws services), created
//!    in parallel: the time until both webhook configurations cover every
//!    kind, and until the leader watches every kind;
//! 2. `--mrs` MRs spread over those kinds (1 in 50 paused, 1 in 100 with an
//!    incomplete creation), created in parallel: the time until the
//!    leader's gauges count them;
//! 3. audit passes (`--audit-interval`): the duration of each, against the
//!    number of MRs it read; then the configuration file rewritten twice,
//!    and the first pass after each reload (it judges every kind), with the
//!    leader's and kube-apiserver's CPU over it;
//! 4. a quiet minute: the requests mrguard sends; then every replica's
//!    memory once 300 s have passed since the last MR create (every watch
//!    that carried the creations renewed since);
//! 5. kube-apiserver restarted: the relists, and the time until every
//!    watch is back (with `--restart-floor`, then restarted again with
//!    every replica stopped, the bench reading each kind once: the API
//!    server's own share of that time);
//! 6. a cold start: mrguard stopped, both configurations' rules emptied, a
//!    new replica started: the time until the rules cover every kind again.
//!
//! Throughout, the leader's TCP connections to the API server (its sockets
//! matched against /proc's TCP table), its RSS (peak: VmHWM) and CPU are
//! sampled. Requests are counted from the API server's side: its audit log
//! records every request of mrguard's service account (and nothing else).
//! Under `cargo test` (no `--bench`) it does nothing.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Parser;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use mrguard_envtest::cluster::ClusterOptions;
use mrguard_envtest::scale::{kinds, mr, rbac_groups, Kind, PLURAL_PREFIX, VERSION};
use mrguard_envtest::{procfs, Cluster, Metrics, Options, Release};
use serde_json::{json, Value};

#[derive(Debug, Parser)]
#[command(about = "The controller at platform scale against a real API server")]
struct Args {
    /// Generated MR CRDs.
    #[arg(long, default_value_t = 1000)]
    crds: usize,
    /// MRs, spread over the generated kinds.
    #[arg(long, default_value_t = 20000)]
    mrs: usize,
    /// Requests in flight while creating CRDs and MRs.
    #[arg(long, default_value_t = 32)]
    create_concurrency: usize,
    /// The chart's controller.auditInterval.
    #[arg(long, default_value = "30s")]
    audit_interval: String,
    /// More `extraArgs` for mrguard (e.g. --api-streams-per-connection=0).
    #[arg(long)]
    mrguard_arg: Vec<String>,
    /// More environment variables for every mrguard process, as NAME=VALUE
    /// (e.g. _RJEM_MALLOC_CONF=narenas:1 for jemalloc's options).
    #[arg(long, value_parser = parse_env)]
    mrguard_env: Vec<(String, String)>,
    /// Skip the API server restart and the cold start.
    #[arg(long)]
    no_restarts: bool,
    /// mrguard replicas from the start: the leader and followers (every
    /// replica keeps the identity index).
    #[arg(long, default_value_t = 2)]
    replicas: usize,
    /// After the restart, restart kube-apiserver again with every replica
    /// stopped (SIGSTOP) and read each generated kind once from its watch
    /// cache: the API server's own share of a recovery.
    #[arg(long)]
    restart_floor: bool,
    /// Full audit passes to wait for.
    #[arg(long, default_value_t = 2)]
    audit_passes: usize,
    /// Install the wgpolicyk8s report CRDs and set
    /// `controller.policyReports: wgpolicyk8s`.
    #[arg(long)]
    policy_reports: bool,
    /// Also write the Markdown report here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Passed by `cargo bench`; without it (under `cargo test`) nothing runs.
    #[arg(long)]
    bench: bool,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?}: expected NAME=VALUE"))
}

const RELEASE: &str = "scale";

/// mrguard's collection reads in flight per replica
/// (`src/kube/list_limit.rs`, `COLLECTION_READS`).
const COLLECTION_READS: usize = 8;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.bench {
        println!(
            "controller_scale bench: skipped (run it with `cargo bench --bench controller_scale`)"
        );
        return Ok(());
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}

/// The leader process, sampled every 500 ms.
#[derive(Default, Clone, Copy)]
struct Sample {
    rss: u64,
    hwm: u64,
    cpu: f64,
    conns: usize,
}

#[derive(Clone)]
struct Sampler {
    pid: Arc<Mutex<u32>>,
    port: u16,
    last: Arc<Mutex<Sample>>,
    /// Highest connection count since the last reset.
    max_conns: Arc<Mutex<usize>>,
}

impl Sampler {
    fn start(pid: u32, port: u16) -> Self {
        let s = Self {
            pid: Arc::new(Mutex::new(pid)),
            port,
            last: Arc::default(),
            max_conns: Arc::default(),
        };
        let bg = s.clone();
        tokio::spawn(async move {
            loop {
                bg.sample();
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        s
    }

    fn sample(&self) -> Sample {
        let pid = *self.pid.lock().unwrap();
        let (rss, hwm) = procfs::rss(pid).unwrap_or_default();
        let s = Sample {
            rss,
            hwm,
            cpu: procfs::cpu_seconds(pid).unwrap_or_default(),
            conns: procfs::tcp_connections_to(pid, self.port).unwrap_or_default(),
        };
        if hwm > 0 {
            *self.last.lock().unwrap() = s;
            let mut m = self.max_conns.lock().unwrap();
            *m = (*m).max(s.conns);
        }
        s
    }

    fn take_max_conns(&self) -> usize {
        std::mem::take(&mut *self.max_conns.lock().unwrap())
    }

    fn follow(&self, pid: u32) {
        *self.pid.lock().unwrap() = pid;
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// A list by a watcher (kube-runtime's pages of 500 from etcd, or a kind
/// whole from the watch cache with its `resourceVersionMatch`), not by the
/// audit (pages of 250, or `resourceVersion=0` alone).
fn by_watcher(a: &Audited) -> bool {
    a.uri.contains("limit=500") || a.uri.contains("resourceVersionMatch=NotOlderThan")
}

/// One request of mrguard's, from the API server's audit log.
struct Audited {
    at: jiff::Timestamp,
    verb: String,
    uri: String,
    /// The response code, on `ResponseComplete` records (None on
    /// `RequestReceived`, which every request has once).
    code: Option<u64>,
}

impl Audited {
    /// The generated kind's plural a request is about.
    fn plural(&self) -> Option<&str> {
        let path = self.uri.split('?').next()?;
        let last = path.rsplit('/').next()?;
        last.starts_with(PLURAL_PREFIX).then_some(last)
    }
}

fn audit_log(cluster: &Cluster) -> Vec<Audited> {
    let text = std::fs::read_to_string(cluster.audit_log()).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            Some(Audited {
                at: v["requestReceivedTimestamp"].as_str()?.parse().ok()?,
                verb: v["verb"].as_str()?.to_string(),
                uri: v["requestURI"].as_str()?.to_string(),
                code: (v["stage"] == "ResponseComplete")
                    .then(|| v["responseStatus"]["code"].as_u64().unwrap_or(0)),
            })
        })
        .collect()
}

/// Each request once (its `RequestReceived` record).
fn received(log: &[Audited]) -> impl Iterator<Item = &Audited> {
    log.iter().filter(|a| a.code.is_none())
}

/// Responses counted by code.
fn by_code<'a>(answered: impl Iterator<Item = &'a Audited>) -> BTreeMap<u64, usize> {
    let mut codes = BTreeMap::new();
    for c in answered.filter_map(|a| a.code) {
        *codes.entry(c).or_default() += 1;
    }
    codes
}

/// One "audit pass done" line.
struct AuditPass {
    kinds: u64,
    /// Kinds listed; the others' findings were kept.
    listed: u64,
    /// MRs the pass's findings cover.
    objects: u64,
    /// MRs listed.
    read: u64,
    /// Kinds judged empty from their watch, without a list.
    empty: u64,
    seconds: f64,
}

/// How many of `seconds` (negative ones left out) fall in each 10 s.
fn per_10s(seconds: &[f64]) -> Vec<usize> {
    let mut v = Vec::new();
    for &t in seconds.iter().filter(|t| **t >= 0.0) {
        let i = (t / 10.0) as usize;
        if v.len() <= i {
            v.resize(i + 1, 0);
        }
        v[i] += 1;
    }
    v
}

struct Bench {
    args: Args,
    cluster: &'static Cluster,
    client: kube::Client,
    release: Release,
    kinds: Vec<Kind>,
    sampler: Sampler,
    /// The index of the Lease holder in `release.replicas`.
    leader: usize,
    /// Audit passes done when the last MR was created: the next to end was
    /// under way meanwhile, so only those after it count as full passes.
    passes_before_quiet: usize,
    /// When the last MR was created.
    created: Option<Instant>,
    report: String,
}

async fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let groups = rbac_groups().map_err(|e| anyhow!(e))?;
    eprintln!("controller_scale: starting etcd and kube-apiserver");
    // Every request of mrguard's service accounts, once, when received.
    let policy = format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [ResponseStarted]\n\
         rules:\n- level: Metadata\n  userGroups: [\"system:serviceaccounts:{RELEASE}-system\"]\n- level: None\n"
    );
    let cluster: &'static Cluster = Box::leak(Box::new(
        Cluster::start(&ClusterOptions {
            audit_policy: Some(policy),
            ..ClusterOptions::default()
        })
        .await
        .map_err(|e| anyhow!(e))?,
    ));
    let client = cluster.admin().await.map_err(|e| anyhow!(e))?;
    if args.policy_reports {
        for file in [
            "wgpolicyk8s.io_policyreports.yaml",
            "wgpolicyk8s.io_clusterpolicyreports.yaml",
        ] {
            let dir = std::env::var_os(mrguard_envtest::FIXTURES_ENV).ok_or_else(|| {
                anyhow!(
                    "--policy-reports installs the upstream report CRDs: set {} to a folder \
                     laid out as the shared fixtures folder (tests/fixtures/PROVENANCE.md)",
                    mrguard_envtest::FIXTURES_ENV
                )
            })?;
            let path = std::path::Path::new(&dir).join("policy-reports").join(file);
            let v: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path)?)
                .map_err(|e| anyhow!("{}: {e}", path.display()))?;
            let crd: CustomResourceDefinition = serde_json::from_value(v)?;
            mrguard_envtest::cluster::create_crd(&client, &crd)
                .await
                .map_err(|e| anyhow!(e))?;
        }
    }
    eprintln!("controller_scale: installing mrguard from the chart");
    let release = Release::install(
        cluster,
        RELEASE,
        Options {
            binary: Some(env!("CARGO_BIN_EXE_mrguard").into()),
            audit_interval: args.audit_interval.clone(),
            log_level: "info".into(),
            extra_args: args.mrguard_arg.clone(),
            env: args.mrguard_env.clone(),
            replicas: args.replicas.max(1),
            values: args
                .policy_reports
                .then(|| "controller:\n  policyReports: wgpolicyk8s\n".to_string()),
            ..Options::default()
        },
    )
    .await
    .map_err(|e| anyhow!(e))?;
    let t = Instant::now();
    let leader = loop {
        if let Some(i) = release.leader().await {
            break i;
        }
        if t.elapsed() > Duration::from_secs(120) {
            bail!("no replica took the Lease within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let sampler = Sampler::start(release.replicas[leader].process.pid(), cluster.port());
    let kinds = kinds(args.crds, &groups);
    let mut bench = Bench {
        args,
        cluster,
        client,
        release,
        kinds,
        sampler,
        leader,
        passes_before_quiet: usize::MAX,
        created: None,
        report: String::new(),
    };
    bench.header(&groups);
    let r = bench.phases().await;
    bench.leases();
    let _ = writeln!(
        bench.report,
        "\nThe whole run took {:.1} minutes. mrguard's log: {}",
        started.elapsed().as_secs_f64() / 60.0,
        bench.release.replicas[bench.leader]
            .process
            .log_path()
            .display()
    );
    println!("{}", bench.report);
    if let Some(out) = &bench.args.out {
        std::fs::write(out, &bench.report)?;
    }
    r
}

impl Bench {
    /// Over the whole run, from one read of the audit log: the Lease
    /// requests by response code, each replica's "lost the lease", and the
    /// policy-report writes.
    fn leases(&mut self) {
        let log = audit_log(self.cluster);
        let mut codes: BTreeMap<u64, usize> = BTreeMap::new();
        for a in &log {
            if let (true, Some(c)) = (a.uri.contains("/leases/"), a.code) {
                *codes.entry(c).or_default() += 1;
            }
        }
        let lost: Vec<usize> = self
            .release
            .replicas
            .iter()
            .map(|r| r.log().matches("\"lost the lease\"").count())
            .collect();
        let _ = writeln!(
            self.report,
            "\nLease requests over the run by response code: {codes:?}; \"lost the lease\" per replica: {lost:?}."
        );
        // Policy-report writes (`--policy-reports`), by verb and code.
        let mut writes: BTreeMap<(String, u64), usize> = BTreeMap::new();
        for a in &log {
            let report =
                a.uri.contains("/policyreports") || a.uri.contains("/clusterpolicyreports");
            let read = matches!(a.verb.as_str(), "get" | "list" | "watch");
            if let (true, Some(c)) = (report && !read, a.code) {
                *writes.entry((a.verb.clone(), c)).or_default() += 1;
            }
        }
        let passes = self.audit_passes().len();
        let _ = writeln!(
            self.report,
            "Policy-report writes over the run, by verb and code: {writes:?} \
             ({passes} audit passes in the leader's log)."
        );
    }

    fn header(&mut self, groups: &[String]) {
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let cpus = std::fs::read_to_string("/proc/cpuinfo")
            .map(|s| s.lines().filter(|l| l.starts_with("processor")).count())
            .unwrap_or(0);
        let _ = writeln!(
            self.report,
            "# The controller at scale\n\n- {cpus} CPUs; load average at the start: {}\n\
             - {} generated MR CRDs in {} API groups (plus the 8 fixture kinds), {} MRs; \
             mrguard's extra args: {:?}, extra environment: {:?}; audit interval {}\n",
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
            self.args.crds,
            groups.len().min(self.args.crds),
            self.args.mrs,
            self.args.mrguard_arg,
            self.args.mrguard_env,
            self.args.audit_interval,
        );
        let _ = writeln!(
            self.report,
            "| moment | leader RSS MiB | peak RSS MiB | connections to the API server (now / highest since the last row) | leader CPU s (cumulative) | watches of generated kinds | followers' RSS (peak) MiB | kube-apiserver RSS (peak) MiB |"
        );
        let _ = writeln!(self.report, "|---|---|---|---|---|---|---|---|");
    }

    async fn row(&mut self, moment: &str) {
        let s = self.sampler.sample();
        let max = self.sampler.take_max_conns().max(s.conns);
        let watches = self.watches().await.unwrap_or(0);
        let followers = self
            .release
            .replicas
            .iter()
            .enumerate()
            .filter(|(i, r)| *i != self.leader && !r.killed)
            .filter_map(|(_, r)| procfs::rss(r.process.pid()))
            .map(|(rss, hwm)| format!("{:.1} ({:.1})", mib(rss), mib(hwm)))
            .collect::<Vec<_>>()
            .join(", ");
        let (a, ahwm) = procfs::rss(self.cluster.apiserver_pid()).unwrap_or_default();
        let _ = writeln!(
            self.report,
            "| {moment} | {:.1} | {:.1} | {} / {} | {:.1} | {} | {followers} | {:.0} ({:.0}) |",
            mib(s.rss),
            mib(s.hwm),
            s.conns,
            max,
            s.cpu,
            watches,
            mib(a),
            mib(ahwm),
        );
        eprintln!(
            "controller_scale: {moment}: RSS {:.1} MiB (peak {:.1}), {} connections (max {max}), CPU {:.1} s, {watches} watches; followers {followers}; kube-apiserver {:.0} MiB (peak {:.0})",
            mib(s.rss),
            mib(s.hwm),
            s.conns,
            s.cpu,
            mib(a),
            mib(ahwm),
        );
    }

    /// Watches of the generated kinds when every replica watches them
    /// all: one per kind per replica (the identity index's, which also
    /// feeds the leader's gauges and Events).
    fn expected_watches(&self) -> usize {
        let live = self.release.replicas.iter().filter(|r| !r.killed).count();
        self.kinds.len() * live
    }

    /// Whether every live replica watches every generated kind.
    async fn every_kind_watched(&self) -> bool {
        self.watches().await.unwrap_or(0) >= self.expected_watches()
    }

    /// Sets `leader` to the replica holding the Lease.
    async fn find_leader(&mut self) -> anyhow::Result<()> {
        let t = Instant::now();
        loop {
            if let Some(i) = self.release.leader().await {
                if !self.release.replicas[i].killed {
                    self.leader = i;
                    self.sampler.follow(self.release.replicas[i].process.pid());
                    return Ok(());
                }
            }
            if t.elapsed() > Duration::from_secs(120) {
                bail!("no live replica took the Lease within 120 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn apiserver_metrics(&self) -> anyhow::Result<Metrics> {
        let req = hyper::Request::get("/metrics").body(Vec::new())?;
        Ok(Metrics::parse(&self.client.request_text(req).await?))
    }

    /// Watches the API server serves on the generated kinds now
    /// (`apiserver_longrunning_requests{verb="WATCH"}`; only mrguard
    /// watches them).
    async fn watches(&self) -> anyhow::Result<usize> {
        let m = self.apiserver_metrics().await?;
        let mut n = 0.0;
        for line in m.text.lines() {
            if line.starts_with("apiserver_longrunning_requests{")
                && line.contains("verb=\"WATCH\"")
                && line.contains(&format!("resource=\"{PLURAL_PREFIX}"))
            {
                n += line
                    .rsplit(' ')
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0);
            }
        }
        Ok(n as usize)
    }

    /// How many generated kinds both configurations cover.
    async fn covered(&self) -> usize {
        let Some((m, v)) = self.release.configurations().await else {
            return 0;
        };
        let set = |c: &Value| -> HashSet<(String, String)> {
            let mut s = HashSet::new();
            for r in c["webhooks"][0]["rules"].as_array().into_iter().flatten() {
                for g in r["apiGroups"].as_array().into_iter().flatten() {
                    for p in r["resources"].as_array().into_iter().flatten() {
                        s.insert((
                            g.as_str().unwrap_or_default().to_string(),
                            p.as_str().unwrap_or_default().to_string(),
                        ));
                    }
                }
            }
            s
        };
        let (m, v) = (set(&m), set(&v));
        self.kinds
            .iter()
            .filter(|k| {
                let key = (k.group.clone(), k.plural.clone());
                m.contains(&key) && v.contains(&key)
            })
            .count()
    }

    async fn wait_until<F, Fut>(
        &self,
        what: &str,
        limit: Duration,
        mut f: F,
    ) -> anyhow::Result<Duration>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let t = Instant::now();
        loop {
            if f().await {
                return Ok(t.elapsed());
            }
            if t.elapsed() > limit {
                bail!("{what}: not within {limit:?}");
            }
            self.release.check_alive().map_err(|e| anyhow!(e))?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn phases(&mut self) -> anyhow::Result<()> {
        self.row("installed, 8 fixture kinds").await;
        self.phase_crds().await?;
        self.phase_mrs().await?;
        self.phase_new_replica().await?;
        self.phase_audit().await?;
        self.phase_new_config().await?;
        self.phase_quiet().await?;
        self.phase_watches_renewed().await;
        if !self.args.no_restarts {
            self.phase_apiserver_restart().await?;
            if self.args.restart_floor {
                self.phase_restart_floor().await?;
            }
            self.phase_cold_start().await?;
        }
        Ok(())
    }

    /// Creates the CRDs (in parallel), then waits for coverage and watches.
    async fn phase_crds(&mut self) -> anyhow::Result<()> {
        let n = self.kinds.len();
        eprintln!("controller_scale: creating {n} CRDs");
        let t0 = Instant::now();
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let sem = Arc::new(tokio::sync::Semaphore::new(self.args.create_concurrency));
        let mut tasks = tokio::task::JoinSet::new();
        for k in self.kinds.clone() {
            let (api, sem) = (api.clone(), sem.clone());
            tasks.spawn(async move {
                let _p = sem.acquire_owned().await;
                let crd =
                    mrguard_envtest::managed_crd(&k.group, VERSION, &k.kind, &k.plural, "Cluster");
                let crd: CustomResourceDefinition = serde_json::from_value(crd)?;
                api.create(&PostParams::default(), &crd)
                    .await
                    .with_context(|| format!("creating CRD {}", k.plural))?;
                anyhow::Ok(())
            });
        }
        while let Some(r) = tasks.join_next().await {
            r??;
        }
        let created = t0.elapsed();
        eprintln!("controller_scale: {n} CRDs created in {created:.1?}; waiting for coverage");
        let covered = self
            .wait_until(
                "coverage of every generated kind",
                Duration::from_secs(600),
                || async { self.covered().await == n },
            )
            .await?;
        // kube-apiserver 1.24 takes its time to serve new CRDs: 121 s for
        // 1,000, and at 5,000 only about a third was served after 600 s.
        let api_cpu = procfs::cpu_seconds(self.cluster.apiserver_pid()).unwrap_or_default();
        let watched = self
            .wait_until(
                "a watch on every generated kind",
                Duration::from_secs((n as u64 * 3 / 5).max(600)),
                || self.every_kind_watched(),
            )
            .await?;
        // Whether kube-apiserver was the bound: the cores it used meanwhile.
        let api_cores = (procfs::cpu_seconds(self.cluster.apiserver_pid()).unwrap_or_default()
            - api_cpu)
            / watched.as_secs_f64().max(0.001);
        let _ = writeln!(
            self.report,
            "| (CRDs: {n} created in {:.1} s; both configurations covered all {:.1} s after the last \
             create ({:.1} s after the first); every kind watched by every replica {:.1} s after that, \
             kube-apiserver using {api_cores:.2} cores meanwhile) | | | | | | | |",
            created.as_secs_f64(),
            covered.as_secs_f64(),
            (created + covered).as_secs_f64(),
            watched.as_secs_f64()
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        self.row(&format!("{n} CRDs covered and watched")).await;
        Ok(())
    }

    async fn gauge_sum(&self, state: &str) -> f64 {
        let Ok(m) = self.release.replicas[self.leader].metrics().await else {
            return -1.0;
        };
        let mut total = 0.0;
        for k in &self.kinds {
            total += m.get(
                "mrguard_managed_resources",
                &[
                    ("group", k.group.as_str()),
                    ("kind", k.kind.as_str()),
                    ("state", state),
                ],
            );
        }
        total
    }

    /// Creates the MRs (in parallel), then waits for the gauges.
    async fn phase_mrs(&mut self) -> anyhow::Result<()> {
        let (n, k) = (self.args.mrs, self.kinds.len());
        eprintln!("controller_scale: creating {n} MRs");
        let t0 = Instant::now();
        let sem = Arc::new(tokio::sync::Semaphore::new(self.args.create_concurrency));
        let mut tasks = tokio::task::JoinSet::new();
        let (mut paused, mut incomplete) = (0, 0);
        for j in 0..n {
            let kind = self.kinds[j % k].clone();
            let obj = mr(&kind, j);
            paused += usize::from(
                obj["metadata"]["annotations"]
                    .get("crossplane.io/paused")
                    .is_some(),
            );
            incomplete += usize::from(
                obj["metadata"]["annotations"]
                    .get("crossplane.io/external-create-succeeded")
                    .is_none(),
            );
            let (client, sem) = (self.client.clone(), sem.clone());
            tasks.spawn(async move {
                let _p = sem.acquire_owned().await;
                let r = mrguard_envtest::api::create(&client, &kind.collection(), &obj, false)
                    .await
                    .map_err(|e| anyhow!(e))?;
                if r.status != 201 {
                    bail!("creating {}: {} {}", kind.plural, r.status, r.message());
                }
                anyhow::Ok(())
            });
            // Keep the task set small.
            while tasks.len() > 4 * self.args.create_concurrency {
                tasks.join_next().await.expect("a task")??;
            }
        }
        while let Some(r) = tasks.join_next().await {
            r??;
        }
        let created = t0.elapsed();
        self.created = Some(Instant::now());
        self.passes_before_quiet = self.audit_passes().len() + 1;
        eprintln!(
            "controller_scale: {n} MRs created in {created:.1?} ({:.0}/s)",
            n as f64 / created.as_secs_f64()
        );
        let (p, i) = (paused as f64, incomplete as f64);
        let followed = self
            .wait_until(
                "the gauges to count every MR",
                Duration::from_secs(600),
                || async {
                    self.gauge_sum("paused").await == p
                        && self.gauge_sum("creation_incomplete").await == i
                },
            )
            .await?;
        let _ = writeln!(
            self.report,
            "| (MRs: {n} created in {:.1} s, {:.0}/s; the gauges counted all {paused} paused and {incomplete} \
             creation-incomplete {:.1} s after the last create) | | | | | | | |",
            created.as_secs_f64(),
            n as f64 / created.as_secs_f64(),
            followed.as_secs_f64()
        );
        self.row(&format!("{n} MRs created and counted")).await;
        Ok(())
    }

    /// One more replica, started with every CRD and MR in place: the time
    /// until its identity index is synced (what `/readyz` waits for), and
    /// its RSS then. It is stopped afterwards.
    async fn phase_new_replica(&mut self) -> anyhow::Result<()> {
        eprintln!("controller_scale: one more replica (a follower) from cold");
        let t = Instant::now();
        let i = {
            self.release.start_replica().await.map_err(|e| anyhow!(e))?;
            self.release.replicas.len() - 1
        };
        let pid = self.release.replicas[i].process.pid();
        let synced = || {
            self.release.replicas[i].log().lines().find_map(|l| {
                let v: Value = serde_json::from_str(l).ok()?;
                let f = &v["fields"];
                (f["message"] == "identity index synced").then(|| {
                    (
                        f["kinds"].as_u64().unwrap_or(0),
                        f["claims"].as_u64().unwrap_or(0),
                    )
                })
            })
        };
        let ready = self
            .wait_until(
                "the new replica's identity index",
                Duration::from_secs(600),
                || async { synced().is_some() },
            )
            .await?;
        let (kinds, claims) = synced().unwrap_or_default();
        let (rss0, _) = procfs::rss(pid).unwrap_or_default();
        let cpu0 = procfs::cpu_seconds(pid).unwrap_or_default();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (rss, hwm) = procfs::rss(pid).unwrap_or_default();
        let _ = writeln!(
            self.report,
            "| (a new follower, started with all {} MRs in place: identity index synced, so /readyz ready, \
             {:.1} s after its start ({kinds} kinds, {claims} claims; {:.1} s CPU); RSS then {:.1} MiB, \
             10 s later {:.1} MiB, peak {:.1} MiB) | | | | | | | |",
            self.args.mrs,
            ready.as_secs_f64(),
            cpu0,
            mib(rss0),
            mib(rss),
            mib(hwm)
        );
        eprintln!(
            "controller_scale: new follower synced in {:.1} s; RSS {:.1} MiB, peak {:.1}",
            (t.elapsed() - Duration::from_secs(10)).as_secs_f64(),
            mib(rss),
            mib(hwm)
        );
        let r = &mut self.release.replicas[i];
        r.process.signal("TERM");
        r.killed = true;
        let port = r.port;
        self.release.remove_endpoint(port);
        Ok(())
    }

    /// The "audit pass done" lines of the current leader's log.
    fn audit_passes(&self) -> Vec<AuditPass> {
        let log = self.release.replicas[self.leader].log();
        log.lines()
            .filter_map(|l| {
                let v: Value = serde_json::from_str(l).ok()?;
                let f = &v["fields"];
                let n = |k: &str| f[k].as_u64().unwrap_or(0);
                (f["message"] == "audit pass done").then(|| AuditPass {
                    kinds: n("kinds"),
                    listed: n("listed"),
                    objects: n("objects"),
                    read: n("read"),
                    empty: n("empty"),
                    seconds: f["seconds"].as_f64().unwrap_or(f64::NAN),
                })
            })
            .collect()
    }

    /// Waits for `--audit-passes` passes that began after the last MR create
    /// and cover every MR (listed then or kept); reports every pass so far.
    async fn phase_audit(&mut self) -> anyhow::Result<()> {
        let n = self.args.mrs as u64;
        eprintln!("controller_scale: waiting for full audit passes over every MR");
        let t = Instant::now();
        self.sampler.take_max_conns();
        let cpu0 = self.sampler.sample().cpu;
        self.wait_until(
            "full audit passes begun after the last MR create",
            Duration::from_secs(900),
            || async {
                self.audit_passes()
                    .iter()
                    .skip(self.passes_before_quiet)
                    .filter(|p| p.objects >= n)
                    .count()
                    >= self.args.audit_passes
            },
        )
        .await?;
        let cpu = self.sampler.sample().cpu - cpu0;
        let _ = writeln!(self.report, "\n### Audit passes (the leader's log)\n");
        let _ = writeln!(
            self.report,
            "| pass | kinds | kinds listed | MRs covered | MRs read | seconds | MRs read/s | started after the last MR create |"
        );
        let _ = writeln!(self.report, "|---|---|---|---|---|---|---|---|");
        for (i, p) in self.audit_passes().iter().enumerate() {
            let _ = writeln!(
                self.report,
                "| {} | {} | {} | {} | {} | {:.1} | {:.0} | {} |",
                i + 1,
                p.kinds,
                p.listed,
                p.objects,
                p.read,
                p.seconds,
                p.read as f64 / p.seconds,
                if i >= self.passes_before_quiet {
                    "yes"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(
            self.report,
            "\nLeader CPU while waiting for them ({:.0} s, passes and idle): {:.1} s.\n",
            t.elapsed().as_secs_f64(),
            cpu
        );
        Ok(())
    }

    /// A new configuration (the same rules, the file changed), twice: the
    /// first pass that starts after each reload must judge every kind.
    async fn phase_new_config(&mut self) -> anyhow::Result<()> {
        eprintln!("controller_scale: a new configuration, twice");
        let _ = writeln!(
            self.report,
            "### A new configuration: a pass that judges every kind\n\n\
             The configuration file rewritten (a comment added), and the first pass \
             that began after the reload, twice.\n\n\
             | reload | kinds | kinds listed | judged empty without a list | MRs read | seconds | from the write to its end, s | leader CPU, s | kube-apiserver CPU, s |\n\
             |---|---|---|---|---|---|---|---|---|"
        );
        let path = self.release.config_file();
        for i in 1..=2 {
            let yaml = std::fs::read_to_string(&path)?;
            let before = self.audit_passes().len();
            self.release
                .write_config(&format!("{yaml}\n# controller_scale: reload {i}\n"))
                .map_err(|e| anyhow!(e))?;
            let t = Instant::now();
            let leader = self.release.replicas[self.leader].process.pid();
            let api = self.cluster.apiserver_pid();
            let cpu = |pid| procfs::cpu_seconds(pid).unwrap_or_default();
            let (leader_cpu, api_cpu) = (cpu(leader), cpu(api));
            // Passes under way at the reload end first and list little; the
            // one after judges every kind.
            let full = |p: &AuditPass| p.listed + p.empty >= p.kinds;
            self.wait_until(
                "a pass that judges every kind after the reload",
                Duration::from_secs(600),
                || async { self.audit_passes().iter().skip(before).any(full) },
            )
            .await?;
            let took = t.elapsed();
            let passes = self.audit_passes();
            let p = passes
                .iter()
                .skip(before)
                .find(|p| full(p))
                .expect("waited for");
            let _ = writeln!(
                self.report,
                "| {i} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
                p.kinds,
                p.listed,
                p.empty,
                p.read,
                p.seconds,
                took.as_secs_f64(),
                cpu(leader) - leader_cpu,
                cpu(api) - api_cpu,
            );
        }
        let _ = writeln!(self.report);
        Ok(())
    }

    /// A minute with nothing changing: what mrguard asks of the API server.
    async fn phase_quiet(&mut self) -> anyhow::Result<()> {
        eprintln!("controller_scale: one quiet minute");
        let from = jiff::Timestamp::now();
        let cpu0 = self.sampler.sample().cpu;
        tokio::time::sleep(Duration::from_secs(60)).await;
        let to = jiff::Timestamp::now();
        let cpu = self.sampler.sample().cpu - cpu0;
        let log = audit_log(self.cluster);
        let mut by_verb: BTreeMap<String, usize> = BTreeMap::new();
        let mut mr = 0;
        let mut examples: BTreeMap<String, String> = BTreeMap::new();
        for a in received(&log).filter(|a| a.at >= from && a.at < to) {
            *by_verb.entry(a.verb.clone()).or_default() += 1;
            mr += usize::from(a.plural().is_some());
            examples
                .entry(a.verb.clone())
                .or_insert_with(|| a.uri.clone());
        }
        let total: usize = by_verb.values().sum();
        let _ = writeln!(
            self.report,
            "### A quiet minute (the API server's audit log of mrguard's service accounts)\n\n\
             {total} requests in 60 s ({:.2}/s), {mr} of them on the generated kinds; by verb: {}. \
             Leader CPU: {:.2} s ({:.1} % of a core); audit passes run in this minute too.\n",
            total as f64 / 60.0,
            by_verb
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            cpu,
            cpu / 60.0 * 100.0
        );
        for (verb, uri) in &examples {
            let _ = writeln!(self.report, "- e.g. {verb} `{uri}`");
        }
        let _ = writeln!(self.report);
        self.row("after the quiet minute").await;
        Ok(())
    }

    /// Memory once every watch that took the creations has ended and been
    /// started again (each lasts at most 290 s): a watch's line buffer in
    /// kube-client, written through by a burst, is only freed with it.
    async fn phase_watches_renewed(&mut self) {
        const RENEWED: Duration = Duration::from_secs(300);
        let Some(created) = self.created else { return };
        eprintln!("controller_scale: waiting for every watch to be renewed");
        tokio::time::sleep(RENEWED.saturating_sub(created.elapsed())).await;
        self.row(&format!(
            "{:.0} s after the last create: every watch renewed since",
            created.elapsed().as_secs_f64()
        ))
        .await;
    }

    /// Restarts kube-apiserver; counts mrguard's lists and watches of the
    /// generated kinds from then on.
    async fn phase_apiserver_restart(&mut self) -> anyhow::Result<()> {
        eprintln!("controller_scale: restarting kube-apiserver");
        let n = self.kinds.len();
        let from = jiff::Timestamp::now();
        let (down, api_pid, api_cpu) = self.restart_apiserver().await?;
        let ready = jiff::Timestamp::now();
        let back = self
            .wait_until("every watch back", Duration::from_secs(600), || {
                self.every_kind_watched()
            })
            .await?;
        let api_cores = (procfs::cpu_seconds(api_pid).unwrap_or_default() - api_cpu)
            / back.as_secs_f64().max(0.001);
        // Settle: anything more would be a storm.
        tokio::time::sleep(Duration::from_secs(30)).await;
        let log = audit_log(self.cluster);
        let after: Vec<&Audited> = received(&log)
            .filter(|a| a.at >= from && a.plural().is_some())
            .collect();
        // Responses on the generated kinds since the restart (open watches
        // have none yet).
        let answered: Vec<&Audited> = log
            .iter()
            .filter(|a| a.at >= from && a.code.is_some() && a.plural().is_some())
            .collect();
        // The watchers' lists by response code.
        let codes = by_code(
            answered
                .iter()
                .copied()
                .filter(|a| a.verb == "list" && by_watcher(a)),
        );
        // Watch requests that ended, by code: an expired resume, a kind not
        // served yet, a refusal.
        let ended: Vec<&Audited> = answered.into_iter().filter(|a| a.verb == "watch").collect();
        let watch_codes = by_code(ended.iter().copied());
        // Where the time to recover goes, in seconds after ready.
        let since_ready =
            |t: &jiff::Timestamp| (*t - ready).total(jiff::Unit::Second).unwrap_or(0.0);
        let watch_times: Vec<f64> = after
            .iter()
            .filter(|a| a.verb == "watch")
            .map(|a| since_ready(&a.at))
            .collect();
        let watches_received = per_10s(&watch_times);
        let last_watch = watch_times.iter().copied().fold(f64::NAN, f64::max);
        let watches_ended = per_10s(&ended.iter().map(|a| since_ready(&a.at)).collect::<Vec<_>>());
        // The watchers' relists ([`by_watcher`]) and the audit's lists are
        // counted apart.
        let mut relists: BTreeMap<&str, usize> = BTreeMap::new();
        let mut watches: BTreeMap<&str, usize> = BTreeMap::new();
        let (mut audit_times, mut list_times, mut from_cache) = (Vec::new(), Vec::new(), 0);
        for a in &after {
            let p = a.plural().unwrap_or_default();
            match a.verb.as_str() {
                "list" if !by_watcher(a) => audit_times.push(since_ready(&a.at)),
                "list" => {
                    *relists.entry(p).or_default() += 1;
                    list_times.push(a.at);
                    from_cache += usize::from(!a.uri.contains("limit=500"));
                }
                "watch" => *watches.entry(p).or_default() += 1,
                _ => {}
            }
        }
        list_times.sort();
        let relists_per_10s = per_10s(&list_times.iter().map(since_ready).collect::<Vec<_>>());
        let audit_lists = audit_times.len();
        let audit_per_10s = per_10s(&audit_times);
        let spread = match (list_times.first(), list_times.last()) {
            (Some(a), Some(b)) => (*b - *a).total(jiff::Unit::Second).unwrap_or(0.0),
            _ => 0.0,
        };
        let _ = writeln!(
            self.report,
            "### kube-apiserver restarted\n\n\
             SIGTERM until it was ready again: {:.1} s (it drains for up to a minute); every generated kind \
             watched again {:.1} s after it was ready (kube-apiserver using {api_cores:.2} cores meanwhile). From the restart to 30 s after that, on the {n} \
             generated kinds: {} relists by the watchers over {} kinds (at most {} for one kind; \
             {from_cache} from the watch cache), spread over {spread:.1} s (their responses by code: {codes:?}); {} watch requests (at most {} for one kind); \
             {audit_lists} audit lists. Watchers per kind: one per replica ({} replicas). After the server was ready: \
             the first relist at {:.1} s, the last at {:.1} s, the last watch request at {last_watch:.1} s; \
             watch requests that ended, by code: {watch_codes:?}. Per 10 s after ready: watch requests \
             received {watches_received:?}, ended {watches_ended:?}; relists {relists_per_10s:?}; audit lists {audit_per_10s:?}.\n",
            down.as_secs_f64(),
            back.as_secs_f64(),
            relists.values().sum::<usize>(),
            relists.len(),
            relists.values().max().copied().unwrap_or(0),
            watches.values().sum::<usize>(),
            watches.values().max().copied().unwrap_or(0),
            self.release.replicas.iter().filter(|r| !r.killed).count(),
            list_times.first().map(since_ready).unwrap_or(f64::NAN),
            list_times.last().map(since_ready).unwrap_or(f64::NAN),
        );
        self.row("after the API server restart").await;
        Ok(())
    }

    /// The API server's own share of a recovery: every replica stopped
    /// (SIGSTOP), kube-apiserver restarted, and the bench reads every
    /// generated kind once from the watch cache (as the watchers relist),
    /// with as many reads in flight as the replicas' collection-read limits
    /// together ([`COLLECTION_READS`] each). The time until every kind has answered is the
    /// least a watcher of each could take; then the replicas go on.
    async fn phase_restart_floor(&mut self) -> anyhow::Result<()> {
        eprintln!("controller_scale: kube-apiserver restarted with mrguard stopped");
        let live: Vec<usize> = (0..self.release.replicas.len())
            .filter(|&i| !self.release.replicas[i].killed)
            .collect();
        for &i in &live {
            self.release.replicas[i].process.signal("STOP");
        }
        let in_flight = COLLECTION_READS * live.len().max(1);
        let floor = self.restart_floor(in_flight).await;
        for &i in &live {
            self.release.replicas[i].process.signal("CONT");
        }
        let (down, served, retries, api_cores) = floor?;
        let back = self
            .wait_until(
                "every watch back after the floor",
                Duration::from_secs(600),
                || self.every_kind_watched(),
            )
            .await?;
        self.find_leader().await?;
        let _ = writeln!(
            self.report,
            "### kube-apiserver restarted with mrguard stopped (its own share)\n\n\
             SIGTERM until it was ready again: {:.1} s. Every generated kind read once from its watch cache \
             ({} in flight, as admin) {:.1} s after it was ready ({retries} retries after an error; \
             kube-apiserver using {api_cores:.2} cores meanwhile). mrguard, let go then, watched every kind \
             again {:.1} s later.\n",
            down.as_secs_f64(),
            in_flight,
            served.as_secs_f64(),
            back.as_secs_f64(),
        );
        Ok(())
    }

    /// Restarts kube-apiserver: how long it was down until ready, and the
    /// new process's pid and CPU seconds so far.
    async fn restart_apiserver(&self) -> anyhow::Result<(Duration, u32, f64)> {
        let t = Instant::now();
        self.cluster
            .restart_apiserver()
            .await
            .map_err(|e| anyhow!(e))?;
        let down = t.elapsed();
        let pid = self.cluster.apiserver_pid();
        Ok((down, pid, procfs::cpu_seconds(pid).unwrap_or_default()))
    }

    /// Restarts kube-apiserver and reads every generated kind once,
    /// `in_flight` at a time: (down, every kind served after ready,
    /// retries, kube-apiserver cores).
    async fn restart_floor(
        &self,
        in_flight: usize,
    ) -> anyhow::Result<(Duration, Duration, usize, f64)> {
        let (down, api_pid, api_cpu) = self.restart_apiserver().await?;
        let t = Instant::now();
        let retries = std::sync::atomic::AtomicUsize::new(0);
        let read_all = futures::StreamExt::for_each_concurrent(
            futures::stream::iter(&self.kinds),
            in_flight,
            |k| {
                let retries = &retries;
                async move {
                    let path = format!("{}?resourceVersion=0", k.collection());
                    loop {
                        let req = hyper::Request::get(&path)
                            .body(Vec::new())
                            .expect("a request");
                        if self.client.request_text(req).await.is_ok() {
                            return;
                        }
                        retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            },
        );
        tokio::time::timeout(Duration::from_secs(600), read_all)
            .await
            .context("every generated kind read once: not within 600 s")?;
        let served = t.elapsed();
        let api_cores = (procfs::cpu_seconds(api_pid).unwrap_or_default() - api_cpu)
            / served.as_secs_f64().max(0.001);
        Ok((down, served, retries.into_inner(), api_cores))
    }

    /// Stops mrguard, empties both configurations' rules, starts a new
    /// replica: the time until the rules cover every kind again.
    async fn phase_cold_start(&mut self) -> anyhow::Result<()> {
        eprintln!("controller_scale: cold start");
        let n = self.kinds.len();
        let leader = self.leader;
        {
            let old = &mut self.release.replicas[leader];
            // SIGTERM releases the Lease, so the next replica leads at once.
            old.process.signal("TERM");
            let port = old.port;
            old.killed = true;
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.release.replicas[leader].process.alive() {
                if Instant::now() > deadline {
                    bail!("mrguard did not stop on SIGTERM");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            self.release.remove_endpoint(port);
        }
        let empty = Patch::Json::<()>(serde_json::from_value(json!([
            {"op": "replace", "path": "/webhooks/0/rules", "value": []}
        ]))?);
        let pp = PatchParams::default();
        self.release
            .mutating()
            .patch(&self.release.fullname, &pp, &empty)
            .await?;
        self.release
            .validating()
            .patch(&self.release.fullname, &pp, &empty)
            .await?;
        // With a follower running, it takes over (a failover); alone, a
        // new replica starts (a cold start).
        let failover = self.release.replicas.iter().any(|r| !r.killed);
        let t = Instant::now();
        if !failover {
            self.release.start_replica().await.map_err(|e| anyhow!(e))?;
        }
        self.find_leader().await?;
        let covered = self
            .wait_until(
                "coverage after a cold start",
                Duration::from_secs(600),
                || async { self.covered().await == n },
            )
            .await?;
        let counted = self
            .wait_until(
                "the gauges after a cold start",
                Duration::from_secs(600),
                || async {
                    self.gauge_sum("paused").await > 0.0 && self.every_kind_watched().await
                },
            )
            .await?;
        let what = if failover {
            "The leader stopped (SIGTERM), both configurations' rules emptied, a follower took over"
        } else {
            "A new replica, with every CRD and MR in place and both configurations' rules emptied"
        };
        let _ = writeln!(
            self.report,
            "### {}\n\n{what}: rules covering all {n} kinds {:.1} s after {}; every kind watched {:.1} s after that.\n",
            if failover { "Failover" } else { "Cold start" },
            (t.elapsed() - counted).as_secs_f64(),
            if failover { "the rules were emptied" } else { "the process started" },
            counted.as_secs_f64()
        );
        let _ = covered;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let _ = writeln!(
            self.report,
            "| moment | leader RSS MiB | peak RSS MiB | connections (now / highest) | leader CPU s | watches | followers' RSS (peak) MiB | kube-apiserver RSS (peak) MiB |\n|---|---|---|---|---|---|---|---|"
        );
        self.row("the new leader, 10 s after its coverage").await;
        Ok(())
    }
}
