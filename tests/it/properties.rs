//! Properties over arbitrary objects: mutating twice equals mutating once,
//! and no input makes the decision functions or the decoder panic (with
//! generated reviews that mostly decode, so that the decisions run).

use mrguard_policy::admission::config::Config;
use mrguard_policy::admission::decider;
use mrguard_policy::admission::model::Operation;
use mrguard_policy::admission::review::{self, RequestBuilder};
use proptest::prelude::*;
use serde_json::{json, Value};

use crate::support::IntoReview;

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-zA-Z*]{0,8}".prop_map(Value::from),
        prop::sample::select(vec![
            "Delete",
            "Orphan",
            "*",
            "Observe",
            "Create",
            "true",
            "True",
            "default",
            "2024-01-01T00:00:00Z",
            "2024-01-02T00:00:00+02:00",
        ])
        .prop_map(Value::from),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "forProvider",
        "initProvider",
        "providerConfigRef",
        "deletionPolicy",
        "managementPolicies",
        "name",
        "kind",
        "tags",
        "vpcIdRef",
        "subnetIdRefs",
        "vpcIdSelector",
        "matchLabels",
        "matchControllerRef",
        "policy",
        "resolve",
        "writeConnectionSecretToRef",
        "namespace",
        "region",
    ]);
    leaf().prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys.clone(), inner, 0..5).prop_map(|m| Value::Object(
                m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}

fn annotations() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "crossplane.io/external-name",
        "crossplane.io/external-create-pending",
        "crossplane.io/external-create-succeeded",
        "crossplane.io/external-create-failed",
        "crossplane.io/paused",
        "mrguard.io/deletion-protection",
    ]);
    prop::collection::btree_map(keys, leaf(), 0..4)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
}

fn object() -> impl Strategy<Value = Value> {
    (value(), value(), annotations(), prop::option::of("[a-z]{1,6}")).prop_map(|(mut spec, fp, ann, name)| {
        if !spec.is_object() {
            spec = json!({});
        }
        spec["forProvider"] = if fp.is_object() { fp } else { json!({}) };
        let mut meta = json!({"annotations": ann});
        if let Some(n) = name {
            meta["name"] = json!(n);
        }
        json!({"apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC", "metadata": meta, "spec": spec})
    })
}

/// The request as it comes off the wire: built, sent as a review, decoded.
/// A namespaced object carries its namespace, which names the request's.
fn request(
    op: Operation,
    object: &Value,
    old: Option<&Value>,
    ns: Option<&str>,
) -> review::Request {
    let mut object = object.clone();
    if let Some(ns) = ns {
        object["metadata"]["namespace"] = json!(ns);
    }
    let mut b = RequestBuilder::new(op)
        .object(object)
        .uid("p")
        .username("u");
    if let Some(old) = old {
        b = b.old_object(old.clone());
    }
    review::decode(&serde_json::to_vec(&b.review()).unwrap()).unwrap()
}

fn config() -> Config {
    Config::from_yaml(
        "providerConfig: {defaultName: prod, namespaceProviderConfigs: {a: team-a}}\nresources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    tagsField: spec.forProvider.tags\n    immutableFields: [spec.forProvider.region, 'spec.forProvider.subnetIdRefs[*].name']\n",
    )
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn mutating_twice_is_mutating_once(obj in object(), ns in prop::option::of(prop::sample::select(vec!["a", "b"]))) {
        let cfg = config();
        let first = decider::Decider::offline(&cfg, jiff::Timestamp::now()).mutate(&request(Operation::Create, &obj, None, ns));
        let once = first.mutated.clone().unwrap_or(obj.clone());
        let second = decider::Decider::offline(&cfg, jiff::Timestamp::now()).mutate(&request(Operation::Create, &once, None, ns));
        prop_assert!(second.response.patch.is_none(), "second pass patched {:?}", second.mutated);
        let again = decider::Decider::offline(&cfg, jiff::Timestamp::now()).mutate(&request(Operation::Update, &once, Some(&once), ns));
        prop_assert!(again.response.patch.is_none());
    }

    #[test]
    fn decisions_never_panic(new in object(), old in object(), op in prop::sample::select(vec![Operation::Create, Operation::Update, Operation::Delete])) {
        let cfg = config();
        let req = request(op, &new, Some(&old), None);
        let _ = decider::Decider::offline(&cfg, jiff::Timestamp::now()).mutate(&req);
        let d = decider::Decider::offline(&cfg, jiff::Timestamp::now()).validate(&req);
        // A denial always carries 403 and a message naming mrguard.
        if !d.response.allowed {
            prop_assert_eq!(d.response.result.code, 403);
            prop_assert!(d.response.result.message.starts_with("mrguard denied"));
        }
        let _ = review::encode(d.response);
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = review::decode(&bytes);
    }

    /// Compositions of any shape, built from their own vocabulary: the
    /// validating webhook never panics on them and, with the rule's
    /// default action, always allows.
    #[test]
    fn any_composition_is_allowed_without_panic(spec in composition_value(), mode in prop::sample::select(vec!["Pipeline", "Resources", ""])) {
        let mut spec = if spec.is_object() { spec } else { json!({"pipeline": spec}) };
        if !mode.is_empty() {
            spec["mode"] = json!(mode);
        }
        let obj = json!({"apiVersion": "apiextensions.crossplane.io/v1", "kind": "Composition",
            "metadata": {"name": "c"}, "spec": spec});
        let req = request(Operation::Create, &obj, None, None);
        let d = decider::Decider::offline(&Config::builtin(), jiff::Timestamp::now()).validate(&req);
        prop_assert!(d.response.allowed);
        let _ = review::encode(d.response);
    }
}

/// A field of a generated request: well formed 15 times in 16, otherwise
/// any value, for the decoder's refusals (so that, over eight fields, most
/// requests are well formed).
fn field(good: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Value> {
    prop_oneof![15 => good, 1 => value()].boxed()
}

/// An AdmissionReview's `request` as the API server sends one (uid, kind,
/// resource, operation, user, objects), each field sometimes replaced by
/// any value, plus any extra fields.
fn review_request() -> impl Strategy<Value = Value> {
    let kind_and_resource = prop::sample::select(vec![
        ("ec2.aws.upbound.io", "v1beta1", "VPC", "vpcs"),
        ("s3.aws.upbound.io", "v1beta1", "Bucket", "buckets"),
        (
            "apiextensions.crossplane.io",
            "v1",
            "Composition",
            "compositions",
        ),
    ])
    .prop_flat_map(|(g, v, k, r)| {
        (
            field(Just(json!({"group": g, "version": v, "kind": k}))),
            field(Just(json!({"group": g, "version": v, "resource": r}))),
        )
    });
    (
        field("[a-z0-9-]{1,12}".prop_map(Value::from)),
        kind_and_resource,
        field(
            prop::sample::select(vec!["CREATE", "UPDATE", "DELETE", "CONNECT"])
                .prop_map(Value::from),
        ),
        field(
            prop::sample::select(vec![
                "system:serviceaccount:crossplane-system:provider-aws",
                "alice",
                "",
            ])
            .prop_map(|u| json!({"username": u, "groups": ["system:authenticated"]})),
        ),
        field(object()),
        prop::option::of(field(object())),
        prop::option::of(field(
            prop::sample::select(vec!["a", "b"]).prop_map(Value::from),
        )),
        prop::collection::btree_map("[a-zA-Z]{1,8}", value(), 0..3),
    )
        .prop_map(
            |(uid, (kind, resource), op, user, object, old, ns, extra)| {
                let mut r = json!({"uid": uid, "kind": kind, "resource": resource,
                "operation": op, "userInfo": user, "object": object});
                if let Some(old) = old {
                    r["oldObject"] = old;
                }
                if let Some(ns) = ns {
                    r["namespace"] = ns;
                }
                for (k, v) in extra {
                    r.as_object_mut().unwrap().entry(k).or_insert(v);
                }
                r
            },
        )
}

/// Generated reviews, most well formed and some not, never make decoding
/// or a decision panic; and most do reach a decision, so the decision half
/// runs on them (a generator whose requests never decode tests only the
/// decoder).
#[test]
fn decoding_arbitrary_json_reviews_never_panics() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(400));
    let (generated, decided) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    let cfg = Config::builtin();
    runner
        .run(&review_request(), |request| {
            generated.set(generated.get() + 1);
            let review =
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
            if let Ok(req) = review::decode(&serde_json::to_vec(&review).unwrap()) {
                let _ = decider::Decider::offline(&cfg, jiff::Timestamp::now()).mutate(&req);
                let d = decider::Decider::offline(&cfg, jiff::Timestamp::now()).validate(&req);
                if !d.response.allowed {
                    prop_assert_eq!(d.response.result.code, 403);
                }
                let _ = review::encode(d.response);
                decided.set(decided.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    let (generated, decided) = (generated.get(), decided.get());
    assert!(
        decided * 2 >= generated,
        "only {decided} of {generated} generated reviews decoded and reached a decision"
    );
    eprintln!("{decided} of {generated} generated reviews reached a decision");
}

fn composition_value() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "pipeline",
        "step",
        "functionRef",
        "input",
        "apiVersion",
        "kind",
        "resources",
        "patchSets",
        "patches",
        "name",
        "base",
        "type",
        "patchSetName",
        "fromFieldPath",
        "toFieldPath",
        "combine",
        "variables",
        "spec",
        "forProvider",
        "compositeTypeRef",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec![
            "pt.fn.crossplane.io/v1beta1",
            "Resources",
            "PatchSet",
            "FromCompositeFieldPath",
            "CombineFromComposite",
            "FromEnvironmentFieldPath",
            "ToCompositeFieldPath",
            "ec2.aws.upbound.io/v1beta1",
            "VPC",
            "spec.forProvider.region",
            "spec.forProvider",
            "spec.parameters.region",
            "a[",
            "a..b",
            "[0]",
            "x['y']",
            "s",
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 96, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys.clone(), inner, 0..6).prop_map(|m| Value::Object(
                m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}
