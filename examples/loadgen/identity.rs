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

use mrguard::server::{ConnLimits, HttpsServer};
use mrguard::tls::{CertStore, PemPair};
use mrguard_policy::cluster::Cluster;
use mrguard_policy::config::Config;
use mrguard_policy::identity::report::record;
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
            Some(p) => mrguard::config::load_file(p)?.0,
            None => Config::builtin(),
        };
        let cluster = filled(n, &loaded);
        anyhow::ensure!(
            cluster.identities().len() == n,
            "the index holds {} MRs",
            cluster.identities().len()
        );
        let app = super::mrguard_router(config, cluster)?;
        let pair = PemPair::read(cert, key)?;
        let store = CertStore::new(pair.certified_key()?, None);
        let listener = tokio::net::TcpListener::bind(listen).await?;
        // `serve`'s defaults.
        let server = HttpsServer::new(
            listener,
            store.server_config(),
            app,
            ConnLimits {
                header_read_timeout: Duration::from_secs(1),
                idle_timeout: Duration::from_secs(120),
                drain_timeout: Duration::from_secs(10),
                max_connections: None,
            },
        );
        let (_trigger, signal) = mrguard::shutdown::channel();
        server.run(signal).await;
        Ok(())
    })
}
