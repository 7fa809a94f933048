//! `--identities N`: `/validate` with the `external-identity` rule on
//! against the same server with the rule `Off`, both with N live MRs'
//! identities in the index (BENCHMARKS.md).
//!
//! In a cluster the index is filled by every replica's watches; here the
//! server is mrguard's own (`server::router` behind `HttpsServer`, rustls,
//! the limits `serve` uses) run by this program as a child process, with
//! the index filled through the same `IdentityIndex` calls the watches
//! make. Nothing in `mrguard serve` can be preloaded from outside.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mrguard_policy::admission::config::Config;
use mrguard_policy::cluster::identity::report::record;
use mrguard_policy::cluster::Cluster;
use serde_json::json;

/// A cluster view whose index holds `n` live MRs: namespaced Buckets in
/// 200 namespaces and VPCs with recorded IDs, half each (as the
/// `identity_index` example), none of them claimed by the mix's objects:
/// the common case, where the rule looks up and finds nobody.
pub(crate) fn filled(n: usize, config: &Config) -> Arc<Cluster> {
    let cluster = Arc::new(Cluster::default());
    let index = cluster.identities();
    for i in 0..n {
        let (group, kind, obj) = if i % 2 == 0 {
            (
                "s3.aws.m.upbound.io",
                "Bucket",
                json!({"metadata": {"name": format!("bench-bucket-{i}"),
                        "namespace": format!("team-{}", i % 200)},
                       "spec": {"forProvider": {"region": "eu-west-1"}}}),
            )
        } else {
            (
                "ec2.aws.upbound.io",
                "VPC",
                json!({"metadata": {"name": format!("bench-vpc-{i}"),
                        "annotations": {"crossplane.io/external-name": format!("vpc-{i:017x}")}},
                       "spec": {"forProvider": {"region": "eu-west-1"}}}),
            )
        };
        record(index, &obj, group, kind, config);
    }
    cluster
}

/// The configuration at `on` with `external-identity` turned `Off`,
/// written next to it in `dir`.
pub(crate) fn config_off(on: Option<&Path>, dir: &Path) -> anyhow::Result<PathBuf> {
    let mut v: serde_json::Value = match on {
        Some(p) => serde_saphyr::from_str(&std::fs::read_to_string(p)?)?,
        None => json!({}),
    };
    v["rules"]["external-identity"] = json!("Off");
    let path = dir.join("identity-off.yaml");
    std::fs::write(&path, serde_json::to_string_pretty(&v)?)?;
    Ok(path)
}

/// Serves mrguard's router with a filled index until killed.
pub(crate) fn serve(
    listen: SocketAddr,
    cert: &Path,
    key: &Path,
    config: Option<&Path>,
    n: usize,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let loaded = match config {
            Some(p) => mrguard::live_config::load_file(p)?.0,
            None => Config::builtin(),
        };
        let cluster = filled(n, &loaded);
        anyhow::ensure!(
            cluster.identities().len() == n,
            "the index holds {} MRs",
            cluster.identities().len()
        );
        let app = super::mrguard_router(config, cluster)?;
        // `serve`'s drain timeout.
        super::baseline::serve_https(listen, cert, key, app, Duration::from_secs(10)).await
    })
}

/// `--inproc N --identities M`: the mix through the router with the rule
/// Off and on, both with M identities, alternating for `--rounds`; no
/// network, one thread: the rule's CPU cost with the least noise.
pub(crate) fn inproc(
    args: &super::Args,
    rt: &tokio::runtime::Runtime,
    items: &[super::mix::Item],
    n: usize,
    ids: usize,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let on = super::config_path(args);
    let off = config_off(on.as_deref(), dir.path())?;
    let router = |config: Option<&Path>| -> anyhow::Result<axum::Router> {
        let loaded = match config {
            Some(p) => mrguard::live_config::load_file(p)?.0,
            None => Config::builtin(),
        };
        super::mrguard_router(config, filled(ids, &loaded))
    };
    let (off, on) = (router(Some(&off))?, router(on.as_deref())?);
    let mut ratios = Vec::new();
    for round in 0..args.rounds.max(1) {
        let mut per = [0.0; 2];
        for (i, r) in [&off, &on].into_iter().enumerate() {
            let started = std::time::Instant::now();
            super::drive_inproc(rt, r, items, n)?;
            per[i] = started.elapsed().as_secs_f64() * 1e6 / (n * items.len()) as f64;
        }
        ratios.push(per[1] / per[0]);
        println!(
            "round {}: identity Off {:.2} µs, on {:.2} µs per request in-process, on/off {:.3}",
            round + 1,
            per[0],
            per[1],
            per[1] / per[0]
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "median on/off over {} rounds of {} requests each: {:.3} ({} identities in the index)",
        ratios.len(),
        n * items.len(),
        ratios[ratios.len() / 2],
        ids
    );
    Ok(())
}
