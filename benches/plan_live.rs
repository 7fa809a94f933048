//! `mrguard plan --live` on 200 MRs of 20 kinds against a real API server:
//! the wall time of the whole command, the time the same API reads take
//! alone (discovery, one list per kind, one CRD get per kind), and the
//! requests the API server's audit log records for the plan (one list per
//! kind, no get of an MR).
//!
//! ```text
//! KUBEBUILDER_ASSETS=... MRGUARD_BIN=target/release/mrguard \
//!   cargo bench --profile dev --bench plan_live -- [--rounds 5]
//! ```
//!
//! `MRGUARD_BIN` names the binary measured (a release build, for numbers
//! to compare); without it, the binary cargo built with this bench. Under
//! `cargo test` (no `--bench`) it does nothing.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use mrguard_envtest::cluster::{create_crd, ClusterOptions};
use mrguard_envtest::{managed_crd, resource, Cluster};
use serde_json::{json, Value};

const KINDS: usize = 20;
const PER_KIND: usize = 10;
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn group(k: usize) -> String {
    format!("kind{k}.bench.upbound.io")
}

fn manifest(k: usize, i: usize, class: &str) -> Value {
    json!({"apiVersion": format!("{}/v1beta1", group(k)), "kind": format!("Bench{k}"),
        "metadata": {"name": format!("mr-{i}")},
        "spec": {"forProvider": {"region": "eu-west-1", "instanceClass": class,
            "tags": {"team": "data"}}}})
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        return Ok(());
    }
    let rounds: usize = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(5);
    let bin: PathBuf = std::env::var_os("MRGUARD_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_mrguard").into());
    let cluster = Cluster::start(&ClusterOptions {
        audit_policy: Some(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [ResponseStarted, ResponseComplete]\nrules:\n- level: Metadata\n"
                .into(),
        ),
        fixture_crds: false,
        ..ClusterOptions::default()
    })
    .await
    .map_err(anyhow::Error::msg)?;
    let admin = cluster.admin().await.map_err(anyhow::Error::msg)?;
    let mut docs = Vec::new();
    for k in 0..KINDS {
        let plural = format!("bench{k}s");
        let crd: CustomResourceDefinition = serde_json::from_value(managed_crd(
            &group(k),
            "v1beta1",
            &format!("Bench{k}"),
            &plural,
            "Cluster",
        ))?;
        create_crd(&admin, &crd).await.map_err(anyhow::Error::msg)?;
        let api: Api<DynamicObject> = Api::all_with(
            admin.clone(),
            &resource(&group(k), "v1beta1", &format!("Bench{k}"), &plural),
        );
        for i in 0..PER_KIND {
            let m = manifest(k, i, "db.t3.micro");
            let mut live = m.clone();
            live["metadata"]["annotations"] = json!({
                LAST_APPLIED: m.to_string(),
                "crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"});
            api.create(&PostParams::default(), &serde_json::from_value(live)?)
                .await?;
            docs.push(serde_saphyr::to_string(&manifest(k, i, "db.t3.small"))?);
        }
    }
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("mrs.yaml");
    std::fs::write(&file, docs.join("---\n"))?;

    let mut plan_times = Vec::new();
    // The audit log's lines of the first run: the bench makes no request
    // while the plan runs, and an event is written when received.
    let mut first_run = (0, 0);
    for round in 0..rounds {
        let before = std::fs::read_to_string(cluster.audit_log())?.len();
        let t = Instant::now();
        let out = Command::new(&bin)
            .arg("plan")
            .arg("--live")
            .arg("-f")
            .arg(&file)
            .arg("--kubeconfig")
            .arg(cluster.admin_kubeconfig())
            .args(["-o", "json"])
            .output()?;
        plan_times.push(t.elapsed());
        if round == 0 {
            first_run = (before, std::fs::read_to_string(cluster.audit_log())?.len());
        }
        if out.status.code() != Some(0) {
            bail!(
                "plan exited {:?}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let plan: Value = serde_json::from_slice(&out.stdout).context("plan JSON")?;
        if plan["summary"]["update"] != json!(KINDS * PER_KIND) {
            bail!("expected {} updates: {}", KINDS * PER_KIND, plan["summary"]);
        }
    }
    let log = std::fs::read_to_string(cluster.audit_log())?;
    let (mut lists, mut mr_gets, mut others) = (0, 0, 0);
    for v in log[first_run.0..first_run.1]
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let uri = v["requestURI"].as_str().unwrap_or_default();
        let mr = uri.contains("/v1beta1/bench");
        match v["verb"].as_str().unwrap_or_default() {
            "list" if mr => lists += 1,
            "get" if mr => mr_gets += 1,
            _ => others += 1,
        }
    }

    // The same reads alone, as the plan makes them.
    let mut read_times = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
        for k in 0..KINDS {
            let gvk = kube::core::GroupVersionKind::gvk(&group(k), "v1beta1", &format!("Bench{k}"));
            let (ar, _) = kube::discovery::pinned_kind(&admin, &gvk).await?;
            let api: Api<DynamicObject> = Api::all_with(admin.clone(), &ar);
            let l = api.list(&ListParams::default().limit(500)).await?;
            assert_eq!(l.items.len(), PER_KIND);
            crds.get(&format!("bench{k}s.{}", group(k))).await?;
        }
        read_times.push(t.elapsed());
    }
    let (p, r) = (median(plan_times.clone()), median(read_times.clone()));
    println!(
        "plan --live, {} MRs of {KINDS} kinds, {rounds} rounds ({}):",
        KINDS * PER_KIND,
        bin.display()
    );
    println!("  whole command (process start to exit), median: {p:.2?}  all: {plan_times:.2?}");
    println!("  the same API reads alone, median: {r:.2?}  all: {read_times:.2?}");
    println!(
        "  requests of the first plan run (audit log): {lists} lists of the {KINDS} MR kinds, {mr_gets} gets of MRs, {others} other (discovery, CRD gets)"
    );
    Ok(())
}
