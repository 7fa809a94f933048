//! Cost of one CEL evaluation, against a trivial baseline in the same run.
//!
//! The object is a real AlternateContact as a kube-apiserver sent it to the
//! webhook (with managedFields), labelled with a team.
//!
//! `cargo bench --bench cel`

use divan::{black_box, Bencher};
use mrguard::cel::{CelProgram, Scope, CRD_VARS};
use mrguard::config::{Config, Operation};
use mrguard::rules::RuleContext;
use serde_json::Value;

fn main() {
    divan::main();
}

fn object() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/fixtures/reviews/010_validate_CREATE_AlternateContact_operations.json"
    );
    let review: Value =
        serde_json::from_slice(&std::fs::read(path).expect("fixture")).expect("JSON");
    let mut obj = review["request"]["object"].clone();
    obj["metadata"]["labels"]["team"] = Value::from("platform");
    obj
}

const TEAM: &str = "has(self.metadata.labels) && 'team' in self.metadata.labels";
const UPJET: &str = "!('*' in self.managementPolicies || 'Create' in self.managementPolicies \
    || 'Update' in self.managementPolicies) || has(self.forProvider.emailAddress) \
    || (has(self.initProvider) && has(self.initProvider.emailAddress))";

fn run(bencher: Bencher, source: &str, bind_spec: bool) {
    let obj = object();
    let vars = if bind_spec {
        CRD_VARS
    } else {
        mrguard::cel::CONFIG_VARS
    };
    let program = CelProgram::compile_with(source, vars).expect("compiles");
    let mut scope = Scope::new();
    scope.bind("self", Some(if bind_spec { &obj["spec"] } else { &obj }));
    scope.bind("oldSelf", None);
    assert_eq!(program.eval_bool(&scope), Ok(true));
    bencher.bench_local(|| black_box(&program).eval_bool(black_box(&scope)));
}

/// The floor: the interpreter and the budget guard around `true`.
#[divan::bench]
fn baseline_true(bencher: Bencher) {
    run(bencher, "true", false);
}

/// SPEC §5's example rule.
#[divan::bench]
fn team_label(bencher: Bencher) {
    run(bencher, TEAM, false);
}

/// An upjet required-parameter rule, `self` bound at `spec`.
#[divan::bench]
fn upjet_required_parameter(bencher: Bencher) {
    run(bencher, UPJET, true);
}

/// What a request pays before any rule: binding `self`, `oldSelf` and
/// `request` (the JSON is converted, strings borrowed).
#[divan::bench]
fn bind_request_scope(bencher: Bencher) {
    let obj = object();
    let config = Config::builtin();
    let groups = vec!["system:authenticated".to_string()];
    bencher.bench_local(|| {
        let ctx = RuleContext {
            operation: Operation::Create,
            group: "account.aws.upbound.io",
            kind: "AlternateContact",
            name: "operations",
            namespace: "",
            username: "alice",
            groups: &groups,
            dry_run: false,
            object: black_box(&obj),
            old_object: None,
            config: &config,
            resource: config.resource("account.aws.upbound.io", "AlternateContact"),
        };
        black_box(Scope::for_request(&ctx));
    });
}
