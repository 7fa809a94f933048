//! Cost of CEL, against baselines measured in the same run.
//!
//! - `validate_update/N`: a whole validation of a ~10 KB VPC UPDATE (as a
//!   kube-apiserver sent it, grown with managedFields, status and tags)
//!   with N configured CEL rules. N = 0 is the baseline: the same
//!   configuration without CEL rules.
//! - `scope/*`: what binding `self` and `oldSelf` for the ten rules costs,
//!   converting the whole objects or only what the rules read.
//! - single expressions against `true`.
//! - `rule_interpreted/i` and `rule_compiled/i`: rule i of the ten, on the
//!   interpreter (its scope built once, outside the loop) and on the
//!   compiled path (no scope at all).
//!
//! After divan's table, the run prints the per-rule cost and the ratios to
//! the baseline, from rounds that alternate the configurations (so a busy
//! machine slows them alike).
//!
//! `cargo bench -p mrguard-policy --bench cel`

use std::time::{Duration, Instant};

use divan::{black_box, Bencher};
use mrguard_policy::admission::cel::{CelProgram, Inputs, Reads, Scope, CONFIG_VARS, CRD_VARS};
use mrguard_policy::admission::config::Config;
use mrguard_policy::admission::decider::Decider;
use mrguard_policy::admission::review::{Request, RequestBuilder};
use serde_json::{json, Value};

fn main() {
    divan::main();
    // Only under `cargo bench` (which passes --bench); `cargo test` runs
    // each bench once as a test, and the summary would only slow it down.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--list") {
        ratios();
    }
}

fn review(name: &str) -> Value {
    let path = format!(
        "{}/../../tests/fixtures/reviews/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_slice(&std::fs::read(path).expect("fixture")).expect("JSON")
}

/// A VPC UPDATE as the API server sent it, both objects grown to about
/// 10 KB the way objects grow in a cluster: managedFields of several
/// managers, a provider-written status, tags.
fn vpc_update() -> (Value, Value) {
    let r = review("026_validate_UPDATE_VPC_sample-vpc.json");
    let grow = |mut o: Value| {
        for i in 0..12 {
            o["spec"]["forProvider"]["tags"][format!("team-tag-{i}")] = json!(format!("v{i}"));
        }
        let fields = o["metadata"]["managedFields"].clone();
        let extra: Vec<Value> = (0..6)
            .map(|i| {
                json!({"manager": format!("controller-{i}"), "operation": "Update",
                       "apiVersion": "ec2.aws.upbound.io/v1beta1", "time": "2026-01-01T00:00:00Z",
                       "fieldsType": "FieldsV1", "subresource": "status",
                       "fieldsV1": {"f:status": {"f:atProvider": {"f:arn": {}, "f:id": {}, "f:ownerId": {},
                                    "f:cidrBlock": {}, "f:tagsAll": {"f:Name": {}}}}}})
            })
            .collect();
        let mut all = fields.as_array().cloned().unwrap_or_default();
        all.extend(extra);
        o["metadata"]["managedFields"] = Value::Array(all);
        o["status"]["atProvider"] = json!({
            "arn": "arn:aws:ec2:us-east-2:123456789012:vpc/vpc-0123456789abcdef0",
            "id": "vpc-0123456789abcdef0", "ownerId": "123456789012", "cidrBlock": "172.16.0.0/16",
            "defaultNetworkAclId": "acl-0123456789abcdef0", "defaultRouteTableId": "rtb-0123456789abcdef0",
            "defaultSecurityGroupId": "sg-0123456789abcdef0", "dhcpOptionsId": "dopt-0123456789abcdef0",
            "enableDnsSupport": true, "enableDnsHostnames": false, "instanceTenancy": "default",
            "mainRouteTableId": "rtb-0123456789abcdef0",
            "tagsAll": o["spec"]["forProvider"]["tags"].clone(),
        });
        o
    };
    let old = grow(r["request"]["oldObject"].clone());
    let mut new = grow(r["request"]["object"].clone());
    new["spec"]["forProvider"]["tags"]["cost-center"] = json!("cc-1");
    (old, new)
}

/// Ten rules of the kinds a platform team writes, each instantiated with
/// the index `i` so that 50 rules are 50 different programs.
fn rule(i: usize) -> String {
    let body = match i % 10 {
        0 => format!("has(self.spec.forProvider.tags) && 'Name' in self.spec.forProvider.tags && {i} >= 0"),
        1 => format!("self.spec.forProvider.region.startsWith('us-') || self.spec.forProvider.region.startsWith('eu-{i}')"),
        2 => format!("!has(self.spec.forProvider.cidrBlock) || self.spec.forProvider.cidrBlock.startsWith('172.') || self.spec.forProvider.cidrBlock.startsWith('10.{i}')"),
        3 => format!("!has(self.spec.forProvider.cidrBlock) || int(self.spec.forProvider.cidrBlock.split('/')[1]) >= 16 - {i} % 2"),
        4 => format!("self.metadata.name.matches('^[a-z0-9-]{{3,63}}$') || self.metadata.name == 'x{i}'"),
        5 => format!("self.spec.providerConfigRef.name in ['default', 'aws-{i}']"),
        6 => format!("self.spec.managementPolicies.all(p, p in ['*', 'Observe', 'Create', 'Update', 'Delete', 'LateInitialize', 'p{i}'])"),
        7 => format!("!has(self.spec.deletionPolicy) || self.spec.deletionPolicy in ['Delete', 'Orphan', 'd{i}']"),
        8 => format!("!has(self.spec.forProvider.tags) || size(self.spec.forProvider.tags) <= 50 + {i}"),
        // A transition rule: UPDATE only, so oldSelf is never null.
        _ => format!("self.spec.forProvider.region == oldSelf.spec.forProvider.region || {i} < 0"),
    };
    let ops = if i % 10 == 9 {
        "        operations: [UPDATE]\n"
    } else {
        ""
    };
    format!("      - name: r{i}\n        expression: {body:?}\n{ops}")
}

fn config(rules: usize) -> Config {
    let mut yaml = String::from(
        "resources:\n  - apiGroups: ['ec2.aws.upbound.io']\n    kinds: [VPC]\n    immutableFields: [spec.forProvider.region]\n    tagsField: spec.forProvider.tags\n",
    );
    if rules > 0 {
        yaml.push_str("    celRules:\n");
        for i in 0..rules {
            yaml.push_str(&rule(i));
        }
    }
    Config::from_yaml(&yaml).expect("config")
}

fn update_request() -> Request {
    let (old, new) = vpc_update();
    RequestBuilder::update(old, new).username("alice").build()
}

/// A whole validation with N CEL rules; N = 0 is the baseline.
#[divan::bench(args = [0, 1, 10, 50])]
fn validate_update(bencher: Bencher<'_, '_>, rules: usize) {
    let req = update_request();
    let config = config(rules);
    let d = Decider::offline(&config, jiff::Timestamp::now()).validate(&req);
    assert!(d.response.allowed, "{}", d.response.result.message);
    bencher.bench_local(|| {
        black_box(Decider::offline(&config, jiff::Timestamp::now()).validate(black_box(&req)))
    });
}

fn ten_programs() -> Vec<CelProgram> {
    (0..10)
        .map(|i| {
            let r = rule(i);
            let quoted = r.split_once("expression: ").expect("expression").1;
            let src: String =
                serde_json::from_str(quoted.lines().next().expect("a line")).expect("quoted");
            CelProgram::compile(&src).expect("compiles")
        })
        .collect()
}

/// The objects of `req`: (new, old).
fn objects(req: &Request) -> (&Value, Option<&Value>) {
    let new = &req.object.as_ref().expect("object").value;
    (new, req.old_object.as_ref().map(|o| &o.value))
}

/// Rule `i` of the ten, interpreted, on a scope built once.
#[divan::bench(args = 0..10)]
fn rule_interpreted(bencher: Bencher<'_, '_>, i: usize) {
    let req = update_request();
    let (new, old) = objects(&req);
    let p = &ten_programs()[i];
    let scope = Scope::for_request(&req, new, old, p.reads());
    assert_eq!(p.eval_bool(&scope), Ok(true), "rule {i}");
    bencher.bench_local(|| black_box(p).eval_bool(black_box(&scope)));
}

/// Rule `i` of the ten on the compiled path (`None`: not compiled).
#[divan::bench(args = 0..10)]
fn rule_compiled(bencher: Bencher<'_, '_>, i: usize) {
    let req = update_request();
    let (new, old) = objects(&req);
    let p = &ten_programs()[i];
    let inputs = Inputs {
        request: &req,
        object: new,
        old,
    };
    bencher.bench_local(|| black_box(p).eval_compiled(black_box(inputs)));
}

/// Binding `self` and `oldSelf` converted whole: what every request paid
/// before the conversion became lazy.
#[divan::bench]
fn scope_whole(bencher: Bencher<'_, '_>) {
    let (old, new) = vpc_update();
    let all = Reads::whole(CONFIG_VARS);
    bencher.bench_local(|| {
        let mut scope = Scope::reading(&all);
        scope.bind("self", Some(black_box(&new)));
        scope.bind("oldSelf", Some(black_box(&old)));
        scope
    });
}

/// The same for the ten rules, converting only what they read.
#[divan::bench]
fn scope_lazy(bencher: Bencher<'_, '_>) {
    let (old, new) = vpc_update();
    let mut reads = Reads::default();
    for p in ten_programs() {
        reads.union(p.reads());
    }
    bencher.bench_local(|| {
        let mut scope = Scope::reading(&reads);
        scope.bind("self", Some(black_box(&new)));
        scope.bind("oldSelf", Some(black_box(&old)));
        scope
    });
}

const TEAM: &str = "has(self.metadata.labels) && 'team' in self.metadata.labels";
const UPJET: &str = "!('*' in self.managementPolicies || 'Create' in self.managementPolicies \
    || 'Update' in self.managementPolicies) || has(self.forProvider.emailAddress) \
    || (has(self.initProvider) && has(self.initProvider.emailAddress))";

fn expression(bencher: Bencher<'_, '_>, source: &str, bind_spec: bool) {
    let r = review("010_validate_CREATE_AlternateContact_operations.json");
    let mut obj = r["request"]["object"].clone();
    obj["metadata"]["labels"]["team"] = Value::from("platform");
    let vars = if bind_spec { CRD_VARS } else { CONFIG_VARS };
    let program = CelProgram::compile_with(source, vars).expect("compiles");
    let mut scope = Scope::reading(program.reads());
    scope.bind("self", Some(if bind_spec { &obj["spec"] } else { &obj }));
    scope.bind("oldSelf", None);
    assert_eq!(program.eval_bool(&scope), Ok(true));
    bencher.bench_local(|| black_box(&program).eval_bool(black_box(&scope)));
}

/// The floor: the interpreter and the budget guard around `true`.
#[divan::bench]
fn expression_true(bencher: Bencher<'_, '_>) {
    expression(bencher, "true", false);
}

/// The example rule of docs/configuration.md.
#[divan::bench]
fn expression_team_label(bencher: Bencher<'_, '_>) {
    expression(bencher, TEAM, false);
}

/// An upjet required-parameter rule, `self` bound at `spec`.
#[divan::bench]
fn expression_upjet_required_parameter(bencher: Bencher<'_, '_>) {
    expression(bencher, UPJET, true);
}

/// Mean time of `f` over `iters` calls.
fn time(iters: u32, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    start.elapsed() / iters
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Each of the ten rules interpreted and compiled, from alternating rounds.
fn per_rule() {
    const ROUNDS: usize = 9;
    let req = update_request();
    let (new, old) = objects(&req);
    let inputs = Inputs {
        request: &req,
        object: new,
        old,
    };
    let programs = ten_programs();
    let mut reads = Reads::default();
    for p in &programs {
        reads.union(p.reads());
    }
    let scope = Scope::for_request(&req, new, old, &reads);
    let (mut interpreted, mut compiled) = (vec![Vec::new(); 10], vec![Vec::new(); 10]);
    let mut binding = Vec::new();
    for _ in 0..ROUNDS {
        binding.push(
            time(2_000, || {
                black_box(Scope::for_request(&req, new, old, &reads));
            })
            .as_secs_f64()
                * 1e9,
        );
        for (i, p) in programs.iter().enumerate() {
            interpreted[i].push(
                time(5_000, || {
                    black_box(p.eval_bool(black_box(&scope))).ok();
                })
                .as_secs_f64()
                    * 1e9,
            );
            compiled[i].push(
                time(5_000, || {
                    black_box(p.eval_compiled(black_box(inputs)));
                })
                .as_secs_f64()
                    * 1e9,
            );
        }
    }
    println!("\nEach rule, interpreted and compiled (ns, median of {ROUNDS} alternating rounds)");
    println!("| rule | interpreted | compiled | speed-up |");
    println!("|---|---|---|---|");
    let (mut ti, mut tc) = (0.0, 0.0);
    for (i, p) in programs.iter().enumerate() {
        let a = median(interpreted[i].clone());
        ti += a;
        match p.mode() {
            Ok(()) => {
                let b = median(compiled[i].clone());
                tc += b;
                println!("| r{i} | {a:.0} | {b:.0} | {:.1}x |", a / b);
            }
            Err(why) => {
                tc += a;
                println!("| r{i} | {a:.0} | interpreted: {why} | 1.0x |");
            }
        }
    }
    let bind = median(binding);
    println!(
        "| all ten | {ti:.0} + {bind:.0} binding the scope | {tc:.0} + binding for the interpreted ones | {:.1}x |",
        (ti + bind) / tc
    );
}

/// Per-rule cost and ratios to the baseline, from alternating rounds.
fn ratios() {
    per_rule();
    const ROUNDS: usize = 15;
    let req = update_request();
    let counts = [0usize, 1, 10, 50];
    let configs: Vec<Config> = counts.iter().map(|&n| config(n)).collect();
    let mut times = vec![Vec::new(); counts.len()];
    for _ in 0..ROUNDS {
        for (i, c) in configs.iter().enumerate() {
            let t = time(2_000 / (1 + counts[i] as u32 / 10), || {
                black_box(Decider::offline(c, jiff::Timestamp::now()).validate(black_box(&req)));
            });
            times[i].push(t.as_secs_f64() * 1e6);
        }
    }
    let base = median(times[0].clone());
    println!("\nCEL per rule: a ~10 KB VPC UPDATE, median of {ROUNDS} alternating rounds");
    println!("| CEL rules | validate µs | ratio to 0 rules | µs per rule | spread of the ratio |");
    println!("|---|---|---|---|---|");
    for (i, &n) in counts.iter().enumerate() {
        let t = median(times[i].clone());
        let rs: Vec<f64> = times[i].iter().zip(&times[0]).map(|(a, b)| a / b).collect();
        let lo = rs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = rs.iter().copied().fold(0.0, f64::max);
        let per = if n == 0 {
            "—".to_string()
        } else {
            format!("{:.2}", (t - base) / n as f64)
        };
        println!(
            "| {n} | {t:.2} | {:.2} | {per} | {lo:.2}–{hi:.2} |",
            t / base
        );
    }
}
