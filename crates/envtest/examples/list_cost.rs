//! What one list of a kind costs kube-apiserver, paged from etcd
//! (`limit=250`, as the audit pages a kind it knows nothing of) against
//! whole from its watch cache (`resourceVersion=0`, as the audit reads a
//! small kind the identity index follows): wall time and the API server's
//! CPU per list (BENCHMARKS.md, "The controller at 100,000 MRs").
//!
//! `KUBEBUILDER_ASSETS=… cargo run --release -p mrguard-envtest --example
//! list_cost -- [OBJECTS [LISTS]]` (defaults 100 and 300).

use std::time::Instant;

use mrguard_envtest::cluster::{create_crd, ClusterOptions};
use mrguard_envtest::scale::{kinds, mr, VERSION};
use mrguard_envtest::{procfs, Cluster};

#[tokio::main]
async fn main() -> Result<(), String> {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let (objects, lists) = (arg(1, 100), arg(2, 300).max(1));
    let cluster = Cluster::start(&ClusterOptions::default()).await?;
    let client = cluster.admin().await?;
    let kind = kinds(1, &["ec2.aws.upbound.io".to_string()]).remove(0);
    let crd =
        mrguard_envtest::managed_crd(&kind.group, VERSION, &kind.kind, &kind.plural, "Cluster");
    create_crd(
        &client,
        &serde_json::from_value(crd).map_err(|e| e.to_string())?,
    )
    .await?;
    for j in 0..objects {
        let r =
            mrguard_envtest::api::create(&client, &kind.collection(), &mr(&kind, j), false).await?;
        if r.status != 201 {
            return Err(format!("creating an object: {} {}", r.status, r.message()));
        }
    }
    let pid = cluster.apiserver_pid();
    // Twice each, alternating, so that a drift of the machine shows.
    for (how, query) in [
        ("etcd, limit=250", "?limit=250"),
        ("watch cache, resourceVersion=0", "?resourceVersion=0"),
        ("etcd, limit=250", "?limit=250"),
        ("watch cache, resourceVersion=0", "?resourceVersion=0"),
    ] {
        let cpu = procfs::cpu_seconds(pid).unwrap_or_default();
        let t = Instant::now();
        for _ in 0..lists {
            let req = hyper::Request::get(format!("{}{query}", kind.collection()))
                .body(Vec::new())
                .map_err(|e| e.to_string())?;
            let list: serde_json::Value = client.request(req).await.map_err(|e| e.to_string())?;
            let n = list["items"].as_array().map_or(0, Vec::len);
            if n != objects {
                return Err(format!("{how}: {n} items listed, {objects} expected"));
            }
        }
        let cpu = procfs::cpu_seconds(pid).unwrap_or_default() - cpu;
        println!(
            "{how}: {objects} objects, {lists} lists: {:.2} ms a list, kube-apiserver CPU {:.2} ms a list",
            t.elapsed().as_secs_f64() * 1000.0 / lists as f64,
            cpu * 1000.0 / lists as f64
        );
    }
    Ok(())
}
