//! Load benchmark: mrguard against a no-op baseline on the same stack, in
//! the same run, over verified HTTPS with HTTP/1.1 keep-alive and HTTP/2.
//!
//! ```text
//! cargo run --release --example loadgen -- [--duration 10s] [--concurrency 32] [--out FILE]
//! ```
//!
//! It builds the release `mrguard` binary, generates a CA and a serving
//! certificate, and for each protocol alternates closed-loop runs of the
//! baseline (this program with `--serve-baseline`, a child process) and
//! `mrguard serve` (a child process), each server fresh, so the ratios come
//! from back-to-back runs on the same machine. Then it alternates open-loop
//! runs of both at half of mrguard's saturation throughput. It reports throughput,
//! latency percentiles (HDR histogram), server CPU per request and the
//! server's peak RSS (VmHWM). See BENCHMARKS.md.

mod baseline;
mod client;
mod identity;
mod mix;

// The baseline server is this program (`--serve-baseline`): it must use the
// allocator `mrguard serve` uses (src/main.rs), or the comparison measures
// allocators. Until this was here, the baseline ran on glibc malloc and
// mrguard on jemalloc, which flattered mrguard's ratios.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use client::{Plan, Proto, RunResult};
use hdrhistogram::Histogram;

#[derive(Debug, Parser)]
#[command(about = "Load benchmark: mrguard vs a no-op baseline on the same stack")]
pub(crate) struct Args {
    /// Measured time of each run.
    #[arg(long, default_value = "10s", value_parser = mrguard::cli::parse_duration)]
    duration: Duration,
    /// Unmeasured time at the start of each run.
    #[arg(long, default_value = "2s", value_parser = mrguard::cli::parse_duration)]
    warmup: Duration,
    /// Requests in flight at once (HTTP/1.1: one connection each).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// HTTP/2 connections the concurrent streams are spread over.
    #[arg(long, default_value_t = 2)]
    h2_conns: usize,
    /// Alternating baseline/mrguard closed-loop rounds per protocol.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Protocols to run: h1, h2 or both.
    #[arg(long, value_delimiter = ',', default_value = "h1,h2")]
    protos: Vec<String>,
    /// Open-loop rate as a fraction of mrguard's saturation throughput (0 skips).
    #[arg(long, default_value_t = 0.5)]
    open_fraction: f64,
    /// Alternating baseline/mrguard open-loop rounds per protocol; the p99
    /// target is judged on each server's median p99 over them. One 4 s run
    /// is decided by a single stall of the VM: on 2026-11-27 single runs put
    /// the baseline's p99 at 46 ms once and mrguard's at 18 ms once, where
    /// both usually read 1-3 ms.
    #[arg(long, default_value_t = 3)]
    open_rounds: usize,
    /// mrguard config for the server ("builtin" for the built-in one;
    /// examples/loadgen/cel10-config.yaml adds ten CEL rules for VPCs).
    #[arg(long)]
    config: Option<String>,
    /// The throughput target, as a fraction of the baseline's.
    #[arg(long, default_value_t = 0.95)]
    target_ratio: f64,
    /// How far mrguard's p99 at half saturation may be above the
    /// baseline's, in milliseconds (issue 22: 0.3).
    #[arg(long, default_value_t = 0.3)]
    p99_margin_ms: f64,
    /// Only the reviews sent to this endpoint: validate, mutate or all.
    #[arg(long, default_value = "all")]
    endpoint: String,
    /// Only the reviews whose label contains this (e.g. a fixture's name,
    /// `016_validate_UPDATE_VPC`); repeat for several.
    #[arg(long)]
    only: Vec<String>,
    /// The mrguard binary [default: build and use target/release/mrguard].
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// The third-party fixtures folder (tests/fixtures/PROVENANCE.md): its
    /// recorded reviews and provider examples make the mix.
    #[arg(long, env = "MRGUARD_FIXTURES")]
    fixtures: Option<PathBuf>,
    /// Also write the Markdown report here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Instead of load: run every review of the mix N times through the
    /// routers in-process (no TLS, no HTTP) and print the time per request;
    /// for profiling, e.g. under valgrind --tool=callgrind.
    #[arg(long)]
    inproc: Option<usize>,
    /// With --inproc: only this router (mrguard or baseline).
    #[arg(long)]
    inproc_only: Option<String>,
    /// Compare mrguard with the external-identity rule on (as "mrguard")
    /// against the same with the rule Off (as "baseline"), both with this
    /// many live MRs' identities in the index; both served by this program
    /// (mrguard's router and HTTPS stack, the index filled as the watches
    /// fill it). Use with --endpoint validate.
    #[arg(long)]
    identities: Option<usize>,
    /// Cores for the server and for the load, as SERVER,CLIENT (the
    /// issue's method: server on core 0, load on core 1), or "none". Each
    /// server, baseline and mrguard alike, then runs one worker thread on
    /// its own core, and the client cannot take CPU from it. Ignored with
    /// fewer than two CPUs.
    #[arg(long, default_value = "0,1", value_parser = parse_pin)]
    pin: Pin,
    /// Internal: serve the baseline on this address.
    #[arg(long, hide = true)]
    serve_baseline: Option<SocketAddr>,
    /// Internal: serve mrguard with --identities filled on this address.
    #[arg(long, hide = true)]
    serve_mrguard: Option<SocketAddr>,
    #[arg(long, hide = true)]
    cert: Option<PathBuf>,
    #[arg(long, hide = true)]
    key: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(addr) = args.serve_baseline {
        let (Some(cert), Some(key)) = (&args.cert, &args.key) else {
            bail!("--serve-baseline needs --cert and --key");
        };
        return baseline::serve(addr, cert, key);
    }
    if let Some(addr) = args.serve_mrguard {
        let (Some(cert), Some(key)) = (&args.cert, &args.key) else {
            bail!("--serve-mrguard needs --cert and --key");
        };
        let config = config_path(&args);
        return identity::serve(
            addr,
            cert,
            key,
            config.as_deref(),
            args.identities.unwrap_or(0),
        );
    }
    if let Some(n) = args.inproc {
        return inproc(&args, n);
    }
    // Before the runtime: its threads inherit the main thread's affinity.
    if let Some((_, client)) = args.pin.cores() {
        pin_self(client)?;
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench(args))
}

pub(crate) fn config_path(args: &Args) -> Option<PathBuf> {
    match args.config.as_deref() {
        Some("builtin") => None,
        Some(p) => Some(PathBuf::from(p)),
        None => Some(Path::new(MANIFEST).join("examples/loadgen/bench-config.yaml")),
    }
}

/// `--pin`: (server core, client core), or none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pin(Option<(usize, usize)>);

impl Pin {
    /// The cores to pin to; none with fewer than two CPUs.
    fn cores(self) -> Option<(usize, usize)> {
        self.0.filter(|_| cpus() >= 2)
    }
}

fn parse_pin(s: &str) -> Result<Pin, String> {
    if s == "none" {
        return Ok(Pin(None));
    }
    let parsed = s
        .split_once(',')
        .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
    match parsed {
        Some((a, b)) if a != b => Ok(Pin(Some((a, b)))),
        _ => Err("expected two different cores as SERVER,CLIENT (e.g. 0,1) or none".into()),
    }
}

/// Pins this process's main thread (and so every thread it starts) to one core.
fn pin_self(core: usize) -> anyhow::Result<()> {
    let status = Command::new("taskset")
        .args([
            "-p",
            "-c",
            &core.to_string(),
            &std::process::id().to_string(),
        ])
        .stdout(Stdio::null())
        .status()
        .context("failed to run taskset (util-linux) for --pin; use --pin none without it")?;
    anyhow::ensure!(
        status.success(),
        "taskset could not pin the load to core {core}"
    );
    Ok(())
}

/// `cmd` run by taskset on one core.
fn pinned(cmd: &Command, core: usize) -> Command {
    let mut c = Command::new("taskset");
    c.arg("-c")
        .arg(core.to_string())
        .arg(cmd.get_program())
        .args(cmd.get_args());
    c
}

/// Online CPUs, whatever this process's affinity.
fn cpus() -> usize {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count()
        .max(1)
}

fn fixtures(args: &Args) -> anyhow::Result<PathBuf> {
    args.fixtures.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "the mix is built from the provider examples the repository does not hold: \
             pass --fixtures or set MRGUARD_FIXTURES to the shared fixtures folder \
             (tests/fixtures/PROVENANCE.md)"
        )
    })
}

/// mrguard's router as `serve` builds it, with metrics, minus TLS and HTTP.
pub(crate) fn mrguard_router(
    config: Option<&Path>,
    cluster: Arc<mrguard_policy::cluster::Cluster>,
) -> anyhow::Result<axum::Router> {
    use std::sync::atomic::AtomicBool;
    let registry = mrguard::metrics::registry();
    let config = match config {
        Some(p) => mrguard::live_config::load_file(p)?.0,
        None => mrguard_policy::admission::config::Config::builtin(),
    };
    let state = mrguard::server::AppState {
        config: mrguard::live_config::ConfigStore::new(config, None),
        cluster,
        metrics: Some(Arc::new(mrguard::metrics::AdmissionMetrics::register(
            &registry,
        )?)),
        ready: Arc::new(AtomicBool::new(true)),
    };
    // `serve`'s defaults.
    let limits = mrguard::server::RouteLimits {
        max_body_bytes: mrguard::server::MAX_BODY_BYTES,
        request_timeout: Duration::from_millis(1500),
        max_concurrent_requests: 512,
        max_inflight_body_bytes: mrguard::server::MAX_BODY_BYTES,
        max_inflight_wait: Duration::from_secs(30),
    };
    Ok(mrguard::server::router(state, &limits))
}

/// The measured loop of --inproc, separate so that callgrind can count
/// just it: --toggle-collect='*drive_inproc*'.
#[inline(never)]
pub(crate) fn drive_inproc(
    rt: &tokio::runtime::Runtime,
    router: &axum::Router,
    items: &[mix::Item],
    n: usize,
) -> anyhow::Result<()> {
    use tower::ServiceExt;
    rt.block_on(async {
        for _ in 0..n {
            for item in items {
                let req = hyper::Request::post(item.path)
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from(item.body.clone()))?;
                let resp = router.clone().oneshot(req).await?;
                anyhow::ensure!(
                    resp.status() == 200,
                    "{} answered {}",
                    item.label,
                    resp.status()
                );
                let _ = http_body_util::BodyExt::collect(resp.into_body()).await?;
            }
        }
        Ok(())
    })
}

fn inproc(args: &Args, n: usize) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let items = selected(args, mix::build(&fixtures(args)?)?)?;
    let bytes: usize = items.iter().map(|i| i.body.len()).sum();
    if let Some(ids) = args.identities {
        return identity::inproc(args, &rt, &items, n, ids);
    }
    for (name, router) in [
        ("baseline", baseline::router()),
        (
            "mrguard",
            mrguard_router(config_path(args).as_deref(), Default::default())?,
        ),
    ] {
        if args.inproc_only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let started = Instant::now();
        drive_inproc(&rt, &router, &items, n)?;
        let per = started.elapsed() / (n * items.len()) as u32;
        println!(
            "{name}: {:.1} µs per request in-process ({} requests, mean body {} B)",
            per.as_secs_f64() * 1e6,
            n * items.len(),
            bytes / items.len()
        );
    }
    Ok(())
}

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

/// The mix narrowed by --endpoint and --only.
fn selected(args: &Args, items: Vec<mix::Item>) -> anyhow::Result<Vec<mix::Item>> {
    let path = match args.endpoint.as_str() {
        "all" => None,
        "validate" => Some("/validate"),
        "mutate" => Some("/mutate"),
        other => bail!("unknown --endpoint {other:?}; use validate, mutate or all"),
    };
    let items: Vec<mix::Item> = items
        .into_iter()
        .filter(|i| path.is_none_or(|p| i.path == p))
        .filter(|i| args.only.is_empty() || args.only.iter().any(|o| i.label.contains(o)))
        .collect();
    anyhow::ensure!(
        !items.is_empty(),
        "no review of the mix is left after --endpoint {} --only {:?}",
        args.endpoint,
        args.only
    );
    Ok(items)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    Baseline,
    Mrguard,
}

impl Server {
    fn name(self) -> &'static str {
        match self {
            Server::Baseline => "baseline",
            Server::Mrguard => "mrguard",
        }
    }
}

struct Env {
    dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
    mrguard: PathBuf,
    config: Option<PathBuf>,
    /// With --identities: N, and the configuration with the rule Off.
    identities: Option<(usize, PathBuf)>,
    /// --pin's server core.
    server_core: Option<usize>,
}

struct Spawned {
    child: Child,
    addr: SocketAddr,
}

impl Spawned {
    fn status_kib(&self, field: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        s.lines()
            .find_map(|l| {
                l.strip_prefix(field)?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    }
    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// utime + stime of a process, from /proc/<pid>/stat (clock ticks of 10 ms).
fn cpu_of(stat: &str) -> Duration {
    let s = std::fs::read_to_string(stat).unwrap_or_default();
    let fields: Vec<&str> = s
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

async fn spawn(env: &Env, server: Server, ca: &[u8]) -> anyhow::Result<Spawned> {
    let addr = free_port()?;
    let log = std::fs::File::create(env.dir.path().join(format!("{}.log", server.name())))?;
    let mut cmd = match (server, &env.identities) {
        (_, Some((n, off))) => {
            let config = match server {
                Server::Baseline => Some(off),
                Server::Mrguard => env.config.as_ref(),
            };
            let mut c = Command::new(std::env::current_exe()?);
            c.arg("--serve-mrguard")
                .arg(addr.to_string())
                .arg("--cert")
                .arg(&env.cert)
                .arg("--key")
                .arg(&env.key)
                .arg("--identities")
                .arg(n.to_string())
                .arg("--config")
                .arg(config.map_or("builtin".into(), |p| p.display().to_string()));
            c
        }
        (Server::Baseline, None) => {
            let mut c = Command::new(std::env::current_exe()?);
            c.arg("--serve-baseline")
                .arg(addr.to_string())
                .arg("--cert")
                .arg(&env.cert)
                .arg("--key")
                .arg(&env.key);
            c
        }
        (Server::Mrguard, None) => {
            let mut c = Command::new(&env.mrguard);
            c.args([
                "serve",
                "--listen",
                &addr.to_string(),
                "--metrics-listen",
                "127.0.0.1:0",
            ])
            .arg("--tls-cert-file")
            .arg(&env.cert)
            .arg("--tls-key-file")
            .arg(&env.key);
            if let Some(config) = &env.config {
                c.arg("--config").arg(config);
            }
            c
        }
    };
    if let Some(core) = env.server_core {
        cmd = pinned(&cmd, core);
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    let spawned = Spawned { child, addr };
    let tls = client::tls_config(ca, Proto::H1)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(client::Sender::H1(s)) = client::connect(addr, &tls, Proto::H1).await {
            let mut s = s.lock().await;
            let req = hyper::Request::get("/healthz")
                .header("host", "localhost")
                .body(http_body_util::Full::new(hyper::body::Bytes::new()))?;
            if s.send_request(req).await.is_ok_and(|r| r.status() == 200) {
                return Ok(spawned);
            }
        }
        if Instant::now() > deadline {
            spawned.stop();
            bail!("{} did not become healthy on {addr}", server.name());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct Measured {
    run: RunResult,
    server_cpu: Duration,
    client_cpu: Duration,
    hwm_kib: u64,
}

async fn measure(
    env: &Env,
    server: Server,
    ca: &[u8],
    plan: &Plan,
    items: &Arc<Vec<mix::Item>>,
) -> anyhow::Result<Measured> {
    let spawned = spawn(env, server, ca).await?;
    let plan = Plan {
        addr: spawned.addr,
        ..*plan
    };
    let tls = client::tls_config(ca, plan.proto)?;
    let pid = spawned.child.id();
    // Sample CPU exactly over the measured window.
    let sampler = {
        let (warmup, duration) = (plan.warmup, plan.duration);
        tokio::spawn(async move {
            tokio::time::sleep(warmup).await;
            let (s0, c0) = (
                cpu_of(&format!("/proc/{pid}/stat")),
                cpu_of("/proc/self/stat"),
            );
            tokio::time::sleep(duration).await;
            let (s1, c1) = (
                cpu_of(&format!("/proc/{pid}/stat")),
                cpu_of("/proc/self/stat"),
            );
            (s1.saturating_sub(s0), c1.saturating_sub(c0))
        })
    };
    let run = client::run(&plan, &tls, items.clone()).await;
    let (server_cpu, client_cpu) = sampler.await?;
    let hwm_kib = spawned.status_kib("VmHWM:");
    spawned.stop();
    let run = run?;
    if let Some(e) = &run.first_error {
        eprintln!(
            "  {} had {} failed requests; first: {e}",
            server.name(),
            run.counts.errors
        );
    }
    Ok(Measured {
        run,
        server_cpu,
        client_cpu,
        hwm_kib,
    })
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn merged(ms: &[&Measured]) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new_with_bounds(1_000, 60_000_000_000, 3).expect("bounds");
    for m in ms {
        let _ = h.add(&m.run.hist);
    }
    h
}

fn pct(h: &Histogram<u64>, q: f64) -> String {
    ms(Duration::from_nanos(h.value_at_quantile(q)))
}

fn cpu_per_req(m: &Measured) -> f64 {
    m.server_cpu.as_secs_f64() * 1e6 / (m.run.requests.max(1) as f64)
}

fn client_per_req(m: &Measured) -> f64 {
    m.client_cpu.as_secs_f64() * 1e6 / (m.run.requests.max(1) as f64)
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let mem = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: u64 = mem
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0);
    let cpus = cpus();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpus} CPUs ({model}), {:.1} GiB RAM, Linux {}",
        mem_kib as f64 / 1024.0 / 1024.0,
        kernel.trim()
    )
}

fn build_mrguard() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--bin", "mrguard"])
        .current_dir(MANIFEST)
        .status()
        .context("failed to run cargo build")?;
    anyhow::ensure!(
        status.success(),
        "cargo build --release --bin mrguard failed"
    );
    // target/release/examples/loadgen -> target/release/mrguard
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("mrguard"))
        .context("cannot locate target/release")?;
    anyhow::ensure!(bin.exists(), "{} is missing", bin.display());
    Ok(bin)
}

async fn bench(args: Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (pair, ca) = mrguard::pki::self_signed(&mrguard::pki::local_names())?;
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    std::fs::write(&cert, &pair.cert)?;
    std::fs::write(&key, &pair.key)?;
    let ca = ca.cert.into_bytes();
    let config = config_path(&args);
    // --identities runs mrguard's router in this program: no binary.
    let (mrguard, identities) = match (args.identities, &args.server_bin) {
        (Some(n), _) => (
            std::env::current_exe()?,
            Some((n, identity::config_off(config.as_deref(), dir.path())?)),
        ),
        (None, Some(b)) => (b.clone(), None),
        (None, None) => (build_mrguard()?, None),
    };
    let env = Env {
        dir,
        cert,
        key,
        mrguard,
        config,
        identities,
        server_core: args.pin.cores().map(|(s, _)| s),
    };
    let fixtures = fixtures(&args)?;
    let items = Arc::new(selected(
        &args,
        mix::build(&fixtures)
            .with_context(|| format!("failed to build the mix from {}", fixtures.display()))?,
    )?);

    let mut report = String::new();
    let mut say = |s: String| {
        println!("{s}");
        report.push_str(&s);
        report.push('\n');
    };
    say(format!("machine: {}", machine()));
    say(match args.pin.cores() {
        Some((s, c)) => format!("pinned: servers on core {s}, load on core {c}"),
        None => "pinned: no (servers and load share the cores)".into(),
    });
    if let Some((n, off)) = &env.identities {
        say(format!(
            "identity index: {n} live MRs in both servers; \"baseline\" is mrguard with external-identity Off ({}), \"mrguard\" with it on",
            off.display()
        ));
    }
    say(format!(
        "server: {} (config: {})",
        env.mrguard.display(),
        env.config
            .as_ref()
            .map_or("built-in".into(), |p| p.display().to_string())
    ));
    say(format!(
        "mix: {} (endpoint: {}{})",
        mix::summary(&items),
        args.endpoint,
        if args.only.is_empty() {
            String::new()
        } else {
            format!(", only {:?}", args.only)
        }
    ));

    // One pass over the mix, to show what mrguard answers.
    {
        let s = spawn(&env, Server::Mrguard, &ca).await?;
        let tls = client::tls_config(&ca, Proto::H1)?;
        let sender = client::connect(s.addr, &tls, Proto::H1).await?;
        let mut counts = client::Counts::default();
        for item in items.iter() {
            match client::send(&sender, item).await {
                Ok(client::Answer::Allowed) => counts.allowed += 1,
                Ok(client::Answer::Patched) => counts.patched += 1,
                Ok(client::Answer::Denied) => counts.denied += 1,
                Err(e) => {
                    counts.errors += 1;
                    eprintln!("  {}: {e:#}", item.label);
                }
            }
        }
        s.stop();
        say(format!(
            "mrguard's answers to one pass: {} allowed unchanged, {} patched, {} denied, {} failed",
            counts.allowed, counts.patched, counts.denied, counts.errors
        ));
        anyhow::ensure!(counts.errors == 0, "mrguard failed requests of the mix");
    }
    say(format!(
        "runs: concurrency {}, HTTP/2 over {} connections, {} warmup + {} measured per run, {} alternating rounds\n",
        args.concurrency,
        args.h2_conns,
        humantime(args.warmup),
        humantime(args.duration),
        args.rounds
    ));

    let mut summary = Vec::new();
    for p in &args.protos {
        let proto = match p.as_str() {
            "h1" => Proto::H1,
            "h2" => Proto::H2,
            other => bail!("unknown protocol {other:?}; use h1 or h2"),
        };
        let plan = Plan {
            addr: "127.0.0.1:0".parse()?,
            proto,
            concurrency: args.concurrency,
            h2_conns: args.h2_conns,
            warmup: args.warmup,
            duration: args.duration,
            rate: None,
        };
        let mut base = Vec::new();
        let mut mrg = Vec::new();
        for round in 0..args.rounds.max(1) {
            let b = measure(&env, Server::Baseline, &ca, &plan, &items).await?;
            let m = measure(&env, Server::Mrguard, &ca, &plan, &items).await?;
            eprintln!(
                "  {} round {}: baseline {:.0} req/s, mrguard {:.0} req/s, ratio {:.3} (load average {})",
                proto.name(),
                round + 1,
                b.run.rps(),
                m.run.rps(),
                m.run.rps() / b.run.rps(),
                std::fs::read_to_string("/proc/loadavg")
                    .unwrap_or_default()
                    .split_whitespace()
                    .next()
                    .unwrap_or("?")
            );
            base.push(b);
            mrg.push(m);
        }
        let b_rps = median(base.iter().map(|m| m.run.rps()).collect());
        let m_rps = median(mrg.iter().map(|m| m.run.rps()).collect());
        let ratios: Vec<f64> = base
            .iter()
            .zip(&mrg)
            .map(|(b, m)| m.run.rps() / b.run.rps())
            .collect();
        let bh = merged(&base.iter().collect::<Vec<_>>());
        let mh = merged(&mrg.iter().collect::<Vec<_>>());
        let errors: u64 = base.iter().chain(&mrg).map(|m| m.run.counts.errors).sum();
        let m_hwm = mrg.iter().map(|m| m.hwm_kib).max().unwrap_or(0);
        let b_hwm = base.iter().map(|m| m.hwm_kib).max().unwrap_or(0);
        let b_cpu = median(base.iter().map(cpu_per_req).collect());
        let m_cpu = median(mrg.iter().map(cpu_per_req).collect());
        let b_ccpu = median(base.iter().map(client_per_req).collect());
        let m_ccpu = median(mrg.iter().map(client_per_req).collect());
        let denied: u64 = mrg.iter().map(|m| m.run.counts.denied).sum();
        let patched: u64 = mrg.iter().map(|m| m.run.counts.patched).sum();
        let total: u64 = mrg.iter().map(|m| m.run.requests).sum();
        say(format!(
            "### {} — saturation (closed loop, {} in flight)\n",
            proto.name(),
            args.concurrency
        ));
        say("| server | req/s (median) | p50 ms | p90 ms | p99 ms | p99.9 ms | server CPU µs/req | client CPU µs/req | peak RSS MiB | failed |".into());
        say("|---|---|---|---|---|---|---|---|---|---|".into());
        for (name, rps, h, cpu, ccpu, hwm, runs) in [
            ("baseline", b_rps, &bh, b_cpu, b_ccpu, b_hwm, &base),
            ("mrguard", m_rps, &mh, m_cpu, m_ccpu, m_hwm, &mrg),
        ] {
            say(format!(
                "| {name} | {rps:.0} | {} | {} | {} | {} | {cpu:.1} | {ccpu:.1} | {:.1} | {} |",
                pct(h, 0.5),
                pct(h, 0.9),
                pct(h, 0.99),
                pct(h, 0.999),
                hwm as f64 / 1024.0,
                runs.iter().map(|m| m.run.counts.errors).sum::<u64>()
            ));
        }
        say(format!(
            "\nthroughput ratio mrguard/baseline: **{:.3}** (median of rounds; each round: {}); server CPU per request ratio: {:.2}; \
             mrguard answers in these runs: {:.1}% denied, {:.1}% patched\n",
            median(ratios.clone()),
            ratios.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>().join(", "),
            m_cpu / b_cpu,
            100.0 * denied as f64 / total.max(1) as f64,
            100.0 * patched as f64 / total.max(1) as f64,
        ));
        anyhow::ensure!(
            errors == 0,
            "{errors} requests failed in the {} saturation runs",
            proto.name()
        );

        let mut open = None;
        if args.open_fraction > 0.0 {
            let rate = m_rps * args.open_fraction;
            let plan = Plan {
                rate: Some(rate),
                ..plan
            };
            let mut runs = Vec::new();
            for _ in 0..args.open_rounds.max(1) {
                let b = measure(&env, Server::Baseline, &ca, &plan, &items).await?;
                let m = measure(&env, Server::Mrguard, &ca, &plan, &items).await?;
                runs.push((b, m));
            }
            say(format!(
                "### {} — open loop at {:.0} req/s ({:.0}% of mrguard's saturation; latency counted from each request's scheduled start), {} alternating rounds\n",
                proto.name(),
                rate,
                args.open_fraction * 100.0,
                runs.len()
            ));
            say("| round | server | achieved req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | peak RSS MiB | failed |".into());
            say("|---|---|---|---|---|---|---|---|---|---|".into());
            for (i, (b, m)) in runs.iter().enumerate() {
                for (name, x) in [("baseline", b), ("mrguard", m)] {
                    say(format!(
                        "| {} | {name} | {:.0} | {} | {} | {} | {} | {} | {:.1} | {} |",
                        i + 1,
                        x.run.rps(),
                        ms(x.run.p(0.5)),
                        ms(x.run.p(0.9)),
                        ms(x.run.p(0.99)),
                        ms(x.run.p(0.999)),
                        ms(Duration::from_nanos(x.run.hist.max())),
                        x.hwm_kib as f64 / 1024.0,
                        x.run.counts.errors
                    ));
                }
            }
            let p99s = |pick: fn(&(Measured, Measured)) -> &Measured| {
                Duration::from_secs_f64(median(
                    runs.iter()
                        .map(|r| pick(r).run.p(0.99).as_secs_f64())
                        .collect(),
                ))
            };
            let (b99, m99) = (p99s(|r| &r.0), p99s(|r| &r.1));
            say(format!(
                "\nmedian p99 over the rounds: baseline {} ms, mrguard {} ms\n",
                ms(b99),
                ms(m99)
            ));
            let failed: u64 = runs
                .iter()
                .map(|(b, m)| b.run.counts.errors + m.run.counts.errors)
                .sum();
            anyhow::ensure!(
                failed == 0,
                "{failed} requests failed in the open-loop runs"
            );
            let hwm = runs.iter().map(|(_, m)| m.hwm_kib).max().unwrap_or(0);
            open = Some((rate, b99, m99, hwm.max(m_hwm)));
        }
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(0.0, f64::max);
        summary.push(Summary {
            proto,
            ratio: median(ratios),
            spread: (lo, hi),
            cpu_ratio: m_cpu / b_cpu,
            hwm_kib: m_hwm,
            open,
        });
    }

    say("### Against the targets\n".into());
    say(format!(
        "| protocol | throughput vs baseline (≥ {:.2}; spread of rounds) | server CPU/req vs baseline (≤ 1.10) | p99 at half saturation, median of rounds (≤ baseline + {} ms) | peak RSS (≤ 40 MiB) |",
        args.target_ratio, args.p99_margin_ms
    ));
    let margin = Duration::from_secs_f64(args.p99_margin_ms.max(0.0) / 1000.0);
    say("|---|---|---|---|---|".into());
    for x in &summary {
        let (p99, rss) = match x.open {
            Some((rate, base, p99, rss)) => (
                format!(
                    "{} ms (baseline {} ms) at {rate:.0} req/s {}",
                    ms(p99),
                    ms(base),
                    verdict(p99 <= base + margin)
                ),
                rss,
            ),
            None => ("not run".into(), x.hwm_kib),
        };
        say(format!(
            "| {} | {:.3} ({:.3}–{:.3}) {} | {:.2} {} | {p99} | {:.1} MiB {} |",
            x.proto.name(),
            x.ratio,
            x.spread.0,
            x.spread.1,
            verdict(x.ratio >= args.target_ratio),
            x.cpu_ratio,
            verdict(x.cpu_ratio <= 1.10),
            rss as f64 / 1024.0,
            verdict(rss as f64 / 1024.0 <= 40.0)
        ));
    }
    if let Some(out) = &args.out {
        std::fs::write(out, &report)
            .with_context(|| format!("failed to write {}", out.display()))?;
    }
    Ok(())
}

/// One protocol's results, for the targets table.
struct Summary {
    proto: Proto,
    ratio: f64,
    spread: (f64, f64),
    cpu_ratio: f64,
    hwm_kib: u64,
    /// Rate, the baseline's and mrguard's median p99, and peak RSS, open loop.
    open: Option<(f64, Duration, Duration, u64)>,
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "(met)"
    } else {
        "(MISSED)"
    }
}

fn humantime(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}
