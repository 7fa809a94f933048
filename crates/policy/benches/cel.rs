//! Cost of one CEL evaluation, against a trivial baseline in the same run.
//!
//! The object is a real AlternateContact as a kube-apiserver sent it to the
//! webhook (with managedFields), labelled with a team.
//!
//! `cargo bench --bench cel`

use divan::{black_box, Bencher};
use mrguard_policy::admission::validate;
use mrguard_policy::cel::{CelProgram, Scope, CRD_VARS};
use mrguard_policy::config::Config;
use mrguard_policy::review::RequestBuilder;
use serde_json::Value;

fn main() {
    divan::main();
}

fn object() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/reviews/010_validate_CREATE_AlternateContact_operations.json"
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

fn run(bencher: Bencher<'_, '_>, source: &str, bind_spec: bool) {
    let obj = object();
    let vars = if bind_spec {
        CRD_VARS
    } else {
        mrguard_policy::cel::CONFIG_VARS
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
fn baseline_true(bencher: Bencher<'_, '_>) {
    run(bencher, "true", false);
}

/// The example rule of docs/configuration.md.
#[divan::bench]
fn team_label(bencher: Bencher<'_, '_>) {
    run(bencher, TEAM, false);
}

/// An upjet required-parameter rule, `self` bound at `spec`.
#[divan::bench]
fn upjet_required_parameter(bencher: Bencher<'_, '_>) {
    run(bencher, UPJET, true);
}

/// A whole validation with the built-in configuration: no CEL rule, so no
/// CEL scope is bound. The floor for the next bench.
#[divan::bench]
fn validate_without_cel(bencher: Bencher<'_, '_>) {
    let req = RequestBuilder::create(object()).username("alice").build();
    let config = Config::builtin();
    bencher.bench_local(|| black_box(validate(black_box(&req), &config)));
}

/// The same with one CEL rule, `true`: the difference from
/// `validate_without_cel` is what binding `self`, `oldSelf` and `request`
/// costs a request.
#[divan::bench]
fn validate_with_one_trivial_cel_rule(bencher: Bencher<'_, '_>) {
    let req = RequestBuilder::create(object()).username("alice").build();
    let config = Config::from_yaml(
        "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    celRules:\n      - {name: t, expression: 'true'}\n",
    )
    .expect("config");
    bencher.bench_local(|| black_box(validate(black_box(&req), &config)));
}
