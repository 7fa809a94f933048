//! Structured reviews: managed-resource-shaped objects built from a
//! vocabulary of the keys and values the rules look at, so the fuzzer
//! spends its time inside mutate/validate rather than in the JSON parser.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{json, Map, Value};

const WORDS: &[&str] = &[
    "",
    "default",
    "Delete",
    "Orphan",
    "delete",
    "*",
    "Create",
    "Update",
    "Observe",
    "LateInitialize",
    "true",
    "false",
    "True",
    "yes",
    "Always",
    "IfNotPresent",
    "Required",
    "Optional",
    "ProviderConfig",
    "ClusterProviderConfig",
    "us-east-1",
    "eu-west-1",
    "team-a",
    "name",
    "2026-11-22T03:50:00Z",
    "2026-11-22T03:52:00Z",
    "not-a-time",
    "Ready",
    "Synced",
];
const KEYS: &[&str] = &[
    "name",
    "namespace",
    "kind",
    "policy",
    "resolve",
    "resolution",
    "matchLabels",
    "matchControllerRef",
    "region",
    "location",
    "tags",
    "labels",
    "vpcIdRef",
    "vpcIdSelector",
    "subnetIdRefs",
    "nodeSelector",
    "subnets",
    "availabilityZone",
    "forProvider",
    "initProvider",
    "spec",
    "metadata",
    "team",
];
const ANNOTATIONS: &[&str] = &[
    "crossplane.io/external-name",
    "crossplane.io/external-create-pending",
    "crossplane.io/external-create-succeeded",
    "crossplane.io/external-create-failed",
    "crossplane.io/paused",
    "mrguard.io/deletion-protection",
];
const KINDS: &[(&str, &str, &str)] = &[
    ("ec2.aws.upbound.io", "v1beta1", "VPC"),
    ("ec2.aws.m.upbound.io", "v1beta1", "Subnet"),
    ("s3.aws.upbound.io", "v1beta1", "Bucket"),
    ("nop.crossplane.io", "v1alpha1", "NopResource"),
    ("aws.upbound.io", "v1beta1", "ProviderConfig"),
];
const USERS: &[&str] = &[
    "alice",
    "system:serviceaccount:crossplane-system:provider-aws",
    "",
];

fn word(u: &mut Unstructured) -> arbitrary::Result<Value> {
    Ok(match u.int_in_range(0..=9u8)? {
        0 => Value::String(String::arbitrary(u)?),
        1 => json!(i64::arbitrary(u)?),
        2 => json!(bool::arbitrary(u)?),
        3 => Value::Null,
        _ => json!(u.choose(WORDS)?),
    })
}

fn key(u: &mut Unstructured) -> arbitrary::Result<String> {
    Ok(if u.ratio(1, 6)? {
        String::arbitrary(u)?
    } else {
        u.choose(KEYS)?.to_string()
    })
}

fn value(u: &mut Unstructured, depth: u32) -> arbitrary::Result<Value> {
    if depth == 0 {
        return word(u);
    }
    Ok(match u.int_in_range(0..=5u8)? {
        0 | 1 => word(u)?,
        2 => Value::Array(
            (0..u.int_in_range(0..=3u8)?)
                .map(|_| value(u, depth - 1))
                .collect::<Result<_, _>>()?,
        ),
        _ => object(u, depth - 1)?,
    })
}

fn object(u: &mut Unstructured, depth: u32) -> arbitrary::Result<Value> {
    let mut m = Map::new();
    for _ in 0..u.int_in_range(0..=4u8)? {
        m.insert(key(u)?, value(u, depth)?);
    }
    Ok(Value::Object(m))
}

fn maybe(
    u: &mut Unstructured,
    f: impl FnOnce(&mut Unstructured) -> arbitrary::Result<Value>,
) -> arbitrary::Result<Option<Value>> {
    Ok(if bool::arbitrary(u)? {
        Some(f(u)?)
    } else {
        None
    })
}

fn mr(
    u: &mut Unstructured,
    (group, version, kind): (&str, &str, &str),
    namespace: Option<&str>,
) -> arbitrary::Result<Value> {
    let mut annotations = Map::new();
    for _ in 0..u.int_in_range(0..=4u8)? {
        annotations.insert(u.choose(ANNOTATIONS)?.to_string(), word(u)?);
    }
    let mut meta = json!({"annotations": annotations, "labels": object(u, 0)?});
    if !u.ratio(1, 5)? {
        meta["name"] = json!("sample");
    }
    if let Some(ns) = namespace {
        meta["namespace"] = json!(ns);
    }
    if bool::arbitrary(u)? {
        meta["finalizers"] = json!(["finalizer.managedresource.crossplane.io"]);
    }
    let mut spec = Map::new();
    if !u.ratio(1, 8)? {
        spec.insert("forProvider".into(), object(u, 3)?);
    }
    let fields: [(&str, Option<Value>); 6] = [
        ("initProvider", maybe(u, |u| object(u, 2))?),
        (
            "managementPolicies",
            maybe(u, |u| {
                Ok(Value::Array(
                    (0..u.int_in_range(0..=5u8)?)
                        .map(|_| word(u))
                        .collect::<Result<_, _>>()?,
                ))
            })?,
        ),
        ("deletionPolicy", maybe(u, word)?),
        ("providerConfigRef", maybe(u, |u| value(u, 1))?),
        ("writeConnectionSecretToRef", maybe(u, |u| value(u, 1))?),
        ("publishConnectionDetailsTo", maybe(u, |u| value(u, 1))?),
    ];
    for (k, v) in fields {
        if let Some(v) = v {
            spec.insert(k.into(), v);
        }
    }
    let mut obj = json!({"apiVersion": format!("{group}/{version}"), "kind": kind, "metadata": meta, "spec": spec});
    if bool::arbitrary(u)? {
        obj["status"] =
            json!({"conditions": [{"type": u.choose(WORDS)?, "status": u.choose(WORDS)?}]});
    }
    Ok(obj)
}

/// A small edit of `v`: replace one value somewhere with another.
fn edit(u: &mut Unstructured, v: &mut Value, depth: u32) -> arbitrary::Result<()> {
    match v {
        Value::Object(m) if !m.is_empty() && depth > 0 && bool::arbitrary(u)? => {
            let i = u.choose_index(m.len())?;
            let k = m.keys().nth(i).cloned().unwrap_or_default();
            match u.int_in_range(0..=3u8)? {
                0 => {
                    m.remove(&k);
                }
                1 => {
                    m.insert(k, value(u, 1)?);
                }
                _ => edit(u, m.get_mut(&k).expect("key exists"), depth - 1)?,
            }
        }
        _ => *v = value(u, 1)?,
    }
    Ok(())
}

fn review(u: &mut Unstructured) -> arbitrary::Result<Value> {
    let k = *u.choose(KINDS)?;
    let namespaced = k.0.contains(".m.") || u.ratio(1, 4)?;
    let team_a = bool::arbitrary(u)?;
    let namespace = namespaced.then_some(if team_a { "team-a" } else { "team-b" });
    let op = *u.choose(&["CREATE", "UPDATE", "DELETE", "CONNECT"])?;
    let object = mr(u, k, namespace)?;
    let old = if bool::arbitrary(u)? {
        let mut o = object.clone();
        for _ in 0..u.int_in_range(1..=3u8)? {
            edit(u, &mut o, 5)?;
        }
        o
    } else {
        mr(u, k, namespace)?
    };
    let (object, old) = match op {
        "CREATE" => (object, Value::Null),
        "DELETE" => (Value::Null, old),
        _ => (object, old),
    };
    let mut req = json!({
        "uid": "fuzz-uid",
        "kind": {"group": k.0, "version": k.1, "kind": k.2},
        "resource": {"group": k.0, "version": k.1, "resource": "things"},
        "name": if bool::arbitrary(u)? { "sample" } else { "" },
        "operation": op,
        "userInfo": {"username": u.choose(USERS)?, "groups": ["system:authenticated"]},
        "object": object,
        "oldObject": old,
        "dryRun": bool::arbitrary(u)?,
    });
    if let Some(ns) = namespace {
        req["namespace"] = json!(ns);
    }
    if u.ratio(1, 10)? {
        req["subResource"] = json!("status");
    }
    Ok(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}))
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(review) = review(&mut u) else {
        return;
    };
    let body = serde_json::to_vec(&review).expect("serialises");
    let request = mrguard_policy::admission::review::decode(&body).expect("a well-formed review decodes");
    mrguard_fuzz::review_request(&request);
});
