//! The external-identity index at scale (BENCHMARKS.md): the heap it holds
//! and the time to fill it for N MRs, as a replica's first list does
//! (compute each identity from its object, insert it), then the lookup time
//! of the `external-identity` rule.
//!
//! Then the same N MRs spread over K kinds (default 1000), listed kind by
//! kind as a replica's watches do after a start and after an API-server
//! restart (`replace_kind`), against filling the index one MR at a time.
//!
//! `cargo run --release -p mrguard-policy --example identity_index [N [K]]`
//! (N defaults to 20000). The heap figure is `IdentityIndex::heap_bytes`
//! (capacities and key lengths); the process's RSS growth while filling is
//! printed next to it as a cross-check (Linux only).

use std::time::Instant;

use mrguard_policy::admission::config::Config;
use mrguard_policy::admission::decider::Decider;
use mrguard_policy::admission::review::RequestBuilder;
use mrguard_policy::cluster::identity::{Identity, IdentityIndex, IndexedMr, MrKey};
use mrguard_policy::cluster::Cluster;
use serde_json::json;

fn rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let kinds: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
        .max(1);
    let config = Config::builtin();
    // Namespaced Buckets in 200 namespaces and VPCs with provider-assigned
    // IDs, half each.
    let objects: Vec<(String, String, String, serde_json::Value)> = (0..n)
        .map(|i| {
            if i % 2 == 0 {
                let ns = format!("team-{:03}", i % 200);
                let name = format!("bucket-{i:06}-logs-archive");
                let obj = json!({"metadata": {"name": name, "namespace": ns,
                    "annotations": {"crossplane.io/external-name": name}},
                    "spec": {"forProvider": {"region": "eu-west-1"},
                             "providerConfigRef": {"kind": "ClusterProviderConfig", "name": "default"}}});
                ("s3.aws.m.upbound.io".into(), "Bucket".into(), ns, obj)
            } else {
                let name = format!("network-{i:06}");
                let obj = json!({"metadata": {"name": name,
                    "annotations": {"crossplane.io/external-name": format!("vpc-{i:017x}")}},
                    "spec": {"forProvider": {"region": "us-east-1"}}});
                ("ec2.aws.upbound.io".into(), "VPC".into(), String::new(), obj)
            }
        })
        .collect();
    let rss_before = rss_kib();
    let started = Instant::now();
    let index = IdentityIndex::default();
    for (group, kind, ns, obj) in &objects {
        let name = obj["metadata"]["name"].as_str().unwrap();
        let id = Identity::of(
            obj,
            group,
            kind,
            ns,
            config.resource(group, kind),
            &config.provider_config,
        );
        index.upsert(IndexedMr::new(
            MrKey::new(group, kind, ns, name),
            id.map(|i| i.claim(false)),
            true,
        ));
    }
    let fill = started.elapsed();
    let rss_growth = rss_kib().zip(rss_before).map(|(a, b)| a.saturating_sub(b));
    let probe: Vec<Identity> = objects
        .iter()
        .take(1000)
        .map(|(g, k, ns, o)| {
            Identity::of(o, g, k, ns, config.resource(g, k), &config.provider_config).unwrap()
        })
        .collect();
    let me = MrKey::new("s3.aws.m.upbound.io", "Bucket", "other", "x");
    let started = Instant::now();
    let mut found = 0;
    for _ in 0..100 {
        for id in &probe {
            found += index.claimants(&id.claim(false), &me).len();
        }
    }
    let lookup = started.elapsed() / (100 * probe.len() as u32);
    assert_eq!(found, 100 * probe.len());
    let bytes = index.heap_bytes();

    // A whole /validate decision (no HTTP) of a namespaced Bucket CREATE,
    // with the 20,000-MR index filled and with it empty, alternating.
    let full = Cluster::default();
    for (group, kind, ns, obj) in &objects {
        let name = obj["metadata"]["name"].as_str().unwrap();
        let id = Identity::of(
            obj,
            group,
            kind,
            ns,
            config.resource(group, kind),
            &config.provider_config,
        );
        full.identities().upsert(IndexedMr::new(
            MrKey::new(group, kind, ns, name),
            id.map(|i| i.claim(false)),
            true,
        ));
    }
    let req = RequestBuilder::create(json!({
        "apiVersion": "s3.aws.m.upbound.io/v1beta1", "kind": "Bucket",
        "metadata": {"name": "fresh-bucket", "namespace": "team-x",
                     "annotations": {"crossplane.io/external-name": "fresh-bucket"}},
        "spec": {"forProvider": {"region": "eu-west-1", "tags": {"a": "b"}},
                 "providerConfigRef": {"kind": "ClusterProviderConfig", "name": "default"},
                 "managementPolicies": ["*"]}
    }))
    .build();
    let (mut on, mut off) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
    const ROUNDS: u32 = 10;
    const PER_ROUND: u32 = 2_000;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            assert!(
                Decider::new(&config, &full, jiff::Timestamp::now())
                    .validate(&req)
                    .response
                    .allowed
            );
        }
        on += t.elapsed();
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            assert!(
                Decider::new(&config, Cluster::empty(), jiff::Timestamp::now())
                    .validate(&req)
                    .response
                    .allowed
            );
        }
        off += t.elapsed();
    }
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / f64::from(ROUNDS * PER_ROUND);
    println!(
        "validate: {:.2} µs with the index, {:.2} µs without ({:.3}x)",
        per(on),
        per(off),
        per(on) / per(off)
    );
    println!(
        "{n} MRs: index heap {:.2} MiB ({} bytes/MR; RSS grew {} KiB), filled in {:.1} ms, lookup {:.2} µs",
        bytes as f64 / (1024.0 * 1024.0),
        bytes / n,
        rss_growth.map_or("?".into(), |k| k.to_string()),
        fill.as_secs_f64() * 1000.0,
        lookup.as_secs_f64() * 1e6
    );

    // The same claims over `kinds` kinds, as the watches list them: each
    // kind's list replaces what the index held of that kind.
    let group = "ec2.aws.upbound.io";
    let mut per_kind: Vec<Vec<_>> = vec![Vec::new(); kinds];
    for (i, (g, k, ns, obj)) in objects.iter().enumerate() {
        let name = obj["metadata"]["name"].as_str().unwrap();
        let id = Identity::of(
            obj,
            g,
            k,
            ns,
            config.resource(g, k),
            &config.provider_config,
        );
        per_kind[i % kinds].push(IndexedMr::new(
            MrKey::new(group, &format!("Kind{}", i % kinds), ns, name),
            id.map(|i| i.claim(false)),
            true,
        ));
    }
    let by_kind = IdentityIndex::default();
    let list_all = |index: &IdentityIndex| {
        let t = Instant::now();
        for (k, claims) in per_kind.iter().enumerate() {
            index.replace_kind(group, &format!("Kind{k}"), claims.clone());
        }
        t.elapsed()
    };
    let first = list_all(&by_kind);
    let relist = list_all(&by_kind);
    assert_eq!(by_kind.len(), n);
    let one_by_one = IdentityIndex::default();
    let t = Instant::now();
    for mr in per_kind.iter().flatten() {
        one_by_one.upsert(mr.clone());
    }
    let upserts = t.elapsed();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{n} MRs in {kinds} kinds: every kind listed {:.1} ms, then relisted {:.1} ms; one upsert per MR {:.1} ms ({:.2}x / {:.2}x of it)",
        ms(first),
        ms(relist),
        ms(upserts),
        ms(first) / ms(upserts),
        ms(relist) / ms(upserts)
    );
}
