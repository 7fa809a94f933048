//! `mrguard plan`, the pure part: 200 MRs of 20 kinds planned against
//! their live objects (each an update in place of one field, judged by the
//! admission chain of `check --live`, with managed fields and drift read),
//! and the rendering of the plan as text and markdown. What `plan --live`
//! adds to its API reads (BENCHMARKS.md, "mrguard plan").
//!
//! `cargo bench -p mrguard-policy --bench plan`

use divan::{black_box, Bencher};
use mrguard_policy::admission::config::Config;
use mrguard_policy::commands::manifest::{self, Manifest};
use mrguard_policy::commands::merge::with_last_applied;
use mrguard_policy::commands::plan::{render_markdown, render_text, Plan, Planner};
use serde_json::{json, Value};

const KINDS: usize = 20;
const MRS: usize = 200;

/// The manifests and their live objects: kind `i % 20`, every other one
/// namespaced, each changing its instance class.
fn inputs() -> Vec<(Manifest, Value)> {
    (0..MRS)
        .map(|i| {
            let k = i % KINDS;
            let (group, ns) = if i % 2 == 0 {
                (format!("kind{k}.aws.upbound.io"), None)
            } else {
                (format!("kind{k}.aws.m.upbound.io"), Some("team-a"))
            };
            let mut old = json!({"apiVersion": format!("{group}/v1beta1"), "kind": format!("Kind{k}"),
                "metadata": {"name": format!("mr-{i}")},
                "spec": {"forProvider": {"region": "eu-west-1", "instanceClass": "db.t3.micro",
                    "tags": {"team": "data", "env": "prod"}}}});
            if let Some(ns) = ns {
                old["metadata"]["namespace"] = json!(ns);
            }
            let mut live = with_last_applied(&old);
            live["metadata"]["annotations"]["crossplane.io/external-create-succeeded"] =
                json!("2024-01-01T00:00:00Z");
            live["metadata"]["managedFields"] = json!([{"manager": "provider", "operation": "Apply",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:forProvider": {"f:engineVersion": {}}}}}]);
            live["status"] = json!({"atProvider": {"region": "eu-west-1", "instanceClass": "db.t3.micro"}});
            let mut new = old.clone();
            new["spec"]["forProvider"]["instanceClass"] = json!("db.t3.small");
            let text = serde_saphyr::to_string(&new).unwrap();
            let m = manifest::parse("mrs.yaml", &text, 10).unwrap().remove(0);
            (m, live)
        })
        .collect()
}

fn plan(config: &Config, inputs: &[(Manifest, Value)]) -> Plan {
    let planner = Planner::new(config, jiff::Timestamp::now());
    Plan::new(
        inputs
            .iter()
            .map(|(m, live)| planner.apply(m, Some(live)).unwrap())
            .collect(),
    )
}

#[divan::bench(sample_count = 20)]
fn plan_200_mrs_of_20_kinds(bencher: Bencher<'_, '_>) {
    let config = Config::builtin();
    let inputs = inputs();
    bencher.bench(|| black_box(plan(&config, black_box(&inputs))));
}

#[divan::bench(sample_count = 20)]
fn render_200(bencher: Bencher<'_, '_>) {
    let config = Config::builtin();
    let p = plan(&config, &inputs());
    assert_eq!(p.summary.update, MRS);
    bencher.bench(|| {
        black_box(render_text(&p, false));
        black_box(render_markdown(&p));
        black_box(serde_json::to_string(&p).unwrap())
    });
}

fn main() {
    divan::main();
}
