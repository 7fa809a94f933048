//! Documented immutable fields (docs/documented-immutables.md): what the
//! derivation costs over a whole provider family, and what the
//! `documented-immutable-field` rule adds to a validation.
//!
//! The CRDs come from the folder in `MRGUARD_BENCH_CRDS` (e.g. a checkout's
//! `package/crds`; BENCHMARKS.md says how to get provider-upjet-azure's),
//! else from `crds-documented` in the third-party fixtures that
//! `MRGUARD_FIXTURES` names (one CRD, so that `cargo test` runs this
//! quickly); without either it says so and measures nothing.
//!
//! - `derive_all`: the derivation over every CRD, already parsed (YAML
//!   parsing is reported apart, once, after divan's table).
//! - `validate/{on,off}`: a whole validation of a created Azure Account's
//!   UPDATE that changes only tags (the common case: the rule looks at every
//!   documented field and finds nothing), with every CRD's facts loaded; off
//!   is the same configuration with the rule set to `Off`.
//!
//! - `decode_and_validate/{on,off}`: the same from the AdmissionReview
//!   body, as `/validate` does short of HTTP.
//!
//! After the table, the run prints the heap the facts take and the ratio
//! on/off from alternating rounds (so a busy machine slows both alike).
//!
//! `MRGUARD_BENCH_CRDS=/path/to/crds cargo bench -p mrguard-policy --bench documented`

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use divan::{black_box, Bencher};
use mrguard_policy::admission::config::{Config, BUILTIN_YAML};
use mrguard_policy::admission::decider::Decider;
use mrguard_policy::admission::review::{Request, RequestBuilder};
use mrguard_policy::cluster::documented::derive;
use mrguard_policy::cluster::Cluster;
use serde_json::{json, Value};

/// Resident memory in bytes (Linux), for the size of the derived facts.
fn resident() -> f64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |pages| pages * 4096.0)
}

/// The bytes of the facts' text (a lower bound of their heap).
fn text_bytes(crds: &[Value]) -> usize {
    crds.iter()
        .filter_map(derive)
        .map(|k| {
            k.crd.len()
                + k.group.len()
                + k.kind.len()
                + k.fields
                    .iter()
                    .map(|f| {
                        // The path is kept raw and as segments.
                        2 * f.path.as_str().len()
                            + f.source.sentence.len()
                            + f.source.condition.as_ref().map_or(0, String::len)
                            + f.versions.iter().map(String::len).sum::<usize>()
                    })
                    .sum::<usize>()
        })
        .sum()
}

fn main() {
    if dir().is_none() {
        // Not a test: scripts/test.sh counts no skip for it.
        eprintln!(
            "documented bench: nothing to measure: set MRGUARD_BENCH_CRDS, or MRGUARD_FIXTURES \
             to the shared fixtures folder (tests/fixtures/PROVENANCE.md)"
        );
        return;
    }
    divan::main();
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--list") {
        summary();
    }
}

fn dir() -> Option<PathBuf> {
    std::env::var_os("MRGUARD_BENCH_CRDS")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("MRGUARD_FIXTURES")
                .filter(|d| !d.is_empty())
                .map(|d| PathBuf::from(d).join("crds-documented"))
        })
}

/// Every CRD of the folder, parsed; and how long parsing took.
fn parse_all() -> (Vec<Value>, Duration) {
    let started = Instant::now();
    let mut out = Vec::new();
    let dir = dir().expect("main returned without the CRDs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("MRGUARD_BENCH_CRDS is a folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
        out.extend(
            docs.into_iter()
                .filter(|d| d["kind"] == "CustomResourceDefinition"),
        );
    }
    (out, started.elapsed())
}

fn crds() -> &'static Vec<Value> {
    static C: OnceLock<Vec<Value>> = OnceLock::new();
    C.get_or_init(|| parse_all().0)
}

fn cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        let c = Cluster::default();
        c.documented().replace_all(crds().iter());
        c
    })
}

fn config(on: bool) -> Config {
    let extra = if on {
        ""
    } else {
        "rules: {documented-immutable-field: 'Off'}\n"
    };
    Config::from_yaml(&format!("{BUILTIN_YAML}\n{extra}")).expect("config")
}

/// A created Account whose tags change, as the API server sends it.
fn request() -> Request {
    let account = |env: &str| {
        json!({
            "apiVersion": "storage.azure.upbound.io/v1beta1",
            "kind": "Account",
            "metadata": {"name": "example", "annotations": {
                "crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z",
                "crossplane.io/external-name": "example"}},
            "spec": {"deletionPolicy": "Delete", "managementPolicies": ["*"],
                "providerConfigRef": {"name": "default"},
                "forProvider": {
                "accountKind": "StorageV2", "accountReplicationType": "LRS",
                "accountTier": "Standard", "location": "West Europe",
                "resourceGroupName": "example", "isHnsEnabled": false,
                "minTlsVersion": "TLS1_2", "networkRules": [{"defaultAction": "Deny",
                    "ipRules": ["10.0.0.0/8"]}],
                "tags": {"environment": env}}},
        })
    };
    RequestBuilder::update(account("staging"), account("prod")).build()
}

#[divan::bench(sample_count = 10)]
fn derive_all(b: Bencher<'_, '_>) {
    let crds = crds();
    b.bench(|| {
        for c in crds {
            black_box(derive(black_box(c)));
        }
    });
}

/// The AdmissionReview body the API server POSTs for [`request`].
fn body() -> Vec<u8> {
    let r = request();
    let old = r.old_object.as_ref().map(|o| o.value.clone());
    let new = r.object.as_ref().map(|o| o.value.clone());
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "5d6b4c3a-0000-4000-8000-000000000001",
            "kind": {"group": "storage.azure.upbound.io", "version": "v1beta1", "kind": "Account"},
            "resource": {"group": "storage.azure.upbound.io", "version": "v1beta1", "resource": "accounts"},
            "requestKind": {"group": "storage.azure.upbound.io", "version": "v1beta1", "kind": "Account"},
            "requestResource": {"group": "storage.azure.upbound.io", "version": "v1beta1", "resource": "accounts"},
            "name": "example", "operation": "UPDATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": new, "oldObject": old, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"},
        },
    }))
    .expect("JSON")
}

/// What `/validate` does with a body, short of HTTP: decode, then judge.
#[divan::bench(args = [true, false])]
fn decode_and_validate(b: Bencher<'_, '_>, on: bool) {
    let (body, cfg, cluster) = (body(), config(on), cluster());
    b.bench(|| {
        let req = Decider::offline(&cfg, jiff::Timestamp::now())
            .decode(black_box(&body))
            .expect("a valid review");
        black_box(Decider::new(&cfg, cluster, jiff::Timestamp::now()).validate(&req))
    });
}

#[divan::bench(args = [true, false])]
fn validate(b: Bencher<'_, '_>, on: bool) {
    let (req, cfg, cluster) = (request(), config(on), cluster());
    b.bench(|| {
        black_box(Decider::new(&cfg, cluster, jiff::Timestamp::now()).validate(black_box(&req)))
    });
}

fn time(n: u32, mut f: impl FnMut()) -> Duration {
    let started = Instant::now();
    for _ in 0..n {
        f();
    }
    started.elapsed() / n
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn summary() {
    let (parsed, parse) = parse_all();
    let before = resident();
    let started = Instant::now();
    let c = Cluster::default();
    c.documented().replace_all(parsed.iter());
    let derived = started.elapsed();
    let heap = resident() - before;
    let (kinds, fields) = c.documented().counts();
    println!(
        "\ndocumented immutables over {} CRDs in {}: parse {:.2} s, derive {:.0} ms, \
         {kinds} kinds with {fields} fields, {:.2} MiB more resident memory (the facts; text alone {:.2} MiB)",
        parsed.len(),
        dir().unwrap_or_default().display(),
        parse.as_secs_f64(),
        derived.as_secs_f64() * 1e3,
        heap / (1024.0 * 1024.0),
        text_bytes(&parsed) as f64 / (1024.0 * 1024.0)
    );
    drop(parsed);
    const ROUNDS: usize = 15;
    let req = request();
    let (on, off) = (config(true), config(false));
    let cluster = cluster();
    let (mut t_on, mut t_off) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        t_on.push(
            time(2_000, || {
                black_box(
                    Decider::new(&on, cluster, jiff::Timestamp::now()).validate(black_box(&req)),
                );
            })
            .as_secs_f64()
                * 1e6,
        );
        t_off.push(
            time(2_000, || {
                black_box(
                    Decider::new(&off, cluster, jiff::Timestamp::now()).validate(black_box(&req)),
                );
            })
            .as_secs_f64()
                * 1e6,
        );
    }
    let body = body();
    let (mut d_on, mut d_off) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        for (cfg, out) in [(&on, &mut d_on), (&off, &mut d_off)] {
            out.push(
                time(2_000, || {
                    let req = Decider::offline(cfg, jiff::Timestamp::now())
                        .decode(black_box(&body))
                        .expect("a valid review");
                    black_box(Decider::new(cfg, cluster, jiff::Timestamp::now()).validate(&req));
                })
                .as_secs_f64()
                    * 1e6,
            );
        }
    }
    let ds: Vec<f64> = d_on.iter().zip(&d_off).map(|(a, b)| a / b).collect();
    println!(
        "decode + validate (the /validate work short of HTTP), median of {ROUNDS} alternating rounds: \
         on {:.2} µs, off {:.2} µs, ratio {:.3} (rounds {:.3}–{:.3})",
        median(d_on.clone()),
        median(d_off.clone()),
        median(ds.clone()),
        ds.iter().copied().fold(f64::INFINITY, f64::min),
        ds.iter().copied().fold(0.0, f64::max),
    );
    let rs: Vec<f64> = t_on.iter().zip(&t_off).map(|(a, b)| a / b).collect();
    println!(
        "validate (Account UPDATE, tags only), median of {ROUNDS} alternating rounds: \
         on {:.2} µs, off {:.2} µs, ratio {:.3} (rounds {:.3}–{:.3})",
        median(t_on.clone()),
        median(t_off.clone()),
        median(rs.clone()),
        rs.iter().copied().fold(f64::INFINITY, f64::min),
        rs.iter().copied().fold(0.0, f64::max),
    );
}
